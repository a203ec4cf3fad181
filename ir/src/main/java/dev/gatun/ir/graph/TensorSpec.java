package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;

import java.util.ArrayList;
import java.util.Map;

/**
 * The declared type of a user op's input or output. A null dtype accepts any; a null shape accepts any.
 * Symbols in a shape are pattern variables: the inputs bind them and the outputs reuse them, so
 * {@code x: f32[n,k] -> y: f32[n,k]} says "same shape as x".
 */
public record TensorSpec(String name, DType dtype, Shape shape) {

    public static TensorSpec of(String name, DType dtype, Object... dims) {
        return new TensorSpec(name, dtype, Shape.parse(dims));
    }

    public static TensorSpec any(String name) { return new TensorSpec(name, null, null); }

    /** Matches a concrete type, binding pattern symbols; returns a description of the mismatch or null. */
    String match(TensorType t, Map<String, Dim> bindings) {
        if (dtype != null && dtype != t.dtype()) return "dtype " + t.dtype() + " where " + dtype + " is declared";
        if (shape == null) return null;
        if (shape.rank() != t.rank()) return "rank " + t.rank() + " (shape " + t.shape() + ") where " + shape + " is declared";
        for (int i = 0; i < shape.rank(); i++) {
            Dim want = shape.dim(i), got = t.shape().dim(i);
            if (want.isStatic()) {
                if (!want.equals(got)) return "dimension " + i + " is " + got + " where " + want + " is declared";
            } else {
                String sym = ((Dim.Sym) want).name();
                Dim prev = bindings.putIfAbsent(sym, got);
                if (prev != null && !prev.equals(got))
                    return "dimension " + i + " is " + got + " but '" + sym + "' is already " + prev;
            }
        }
        return null;
    }

    /** The concrete output type this spec declares under the bindings, or null when it leaves something open. */
    TensorType instantiate(Map<String, Dim> bindings) {
        if (dtype == null || shape == null) return null;
        var dims = new ArrayList<Dim>();
        for (Dim d : shape.dims()) {
            if (d.isStatic()) dims.add(d);
            else {
                Dim b = bindings.get(((Dim.Sym) d).name());
                if (b == null) return null;
                dims.add(b);
            }
        }
        return new TensorType(dtype, new Shape(dims));
    }

    @Override public String toString() {
        return name + ": " + (dtype == null ? "any" : dtype.shortName()) + (shape == null ? "[*]" : shape.toString());
    }
}
