package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code argmax}: the position of the largest element along the last dimension {@code dim} (given as -1 or rank - 1),
 * as an i64 tensor of the other dimensions: greedy sampling. The first of equal largest elements wins, and a NaN
 * counts as larger than any number (so the first NaN wins), as PyTorch's argmax. The input is floating, its last
 * dimension static and not empty.
 */
public final class Argmax implements OpSpec {
    public static final Argmax SPEC = new Argmax();

    private Argmax() {}

    @Override public String name() { return "argmax"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("dim", Attribute.Kind.INT)); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 1) throw new GraphException("argmax takes one tensor, got " + inputs.size());
        Operand x = inputs.getFirst();
        long dim = attrs.integer("dim");
        int rank = x.type().rank();
        if (rank < 1) throw new GraphException("argmax(" + x.label() + "): a scalar has no dimension to search");
        if (dim != -1 && dim != rank - 1)
            throw new GraphException("argmax(" + x.label() + ", dim=" + dim + "): only the last dimension (-1 or " + (rank - 1) + ") is supported");
        if (!x.type().dtype().isFloating()) throw new GraphException("argmax(" + x.label() + "): the input is " + x.type().dtype() + "; it must be a floating dtype");
        if (!x.type().shape().dim(rank - 1).isStatic()) throw new GraphException("argmax(" + x.label() + "): the last dimension must be static");
        if (x.type().shape().dim(rank - 1).size() == 0) throw new GraphException("argmax(" + x.label() + "): the last dimension is empty; there is no largest element");
        return List.of(new TensorType(DType.INT64, new Shape(x.type().shape().dims().subList(0, rank - 1))));
    }

    /** Each row compared element by element against the best so far, which a NaN never leaves. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.getFirst(), out = outputs.getFirst();
        long cols = x.shape()[x.shape().length - 1], rows = out.numel();
        for (long r = 0; r < rows; r++) {
            long best = 0;
            for (long j = 1; j < cols; j++) {
                double v = x.get(r * cols + j), b = x.get(r * cols + best);
                if (!Double.isNaN(b) && (Double.isNaN(v) || v > b)) best = j;
            }
            out.setLong(r, best);
        }
    }

    /** One pass a row that stops at the first NaN. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.getFirst(), out = outputs.getFirst();
        long cols = x.shape()[x.shape().length - 1], rows = out.numel();
        for (long r = 0; r < rows; r++) {
            long best = 0;
            double most = x.get(r * cols);
            for (long j = 1; j < cols && !Double.isNaN(most); j++) {
                double v = x.get(r * cols + j);
                if (Double.isNaN(v) || v > most) { most = v; best = j; }
            }
            out.setLong(r, best);
        }
    }
}
