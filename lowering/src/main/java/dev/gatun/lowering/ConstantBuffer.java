package dev.gatun.lowering;

import dev.gatun.ir.Layout;

import java.util.List;

/** A constant tensor with more than one element (scalars are inlined into loop bodies). */
public final class ConstantBuffer extends Buffer {
    private final double[] values;

    ConstantBuffer(String name, double[] values, Layout layout, int origin) {
        super(name, layout, origin);
        this.values = values.clone();
    }

    public double[] values() { return values.clone(); }

    @Override public List<Buffer> reads() { return List.of(); }

    @Override public String format() { return head("ConstantBuffer") + " = constant(" + values.length + " values)"; }
}
