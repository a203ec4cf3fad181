package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;

import java.util.Arrays;
import java.util.List;

/** What a graph node computes. Each op's result type is inferred by {@link TypeInference}. */
public sealed interface Op {

    /** The op's name as printed and serialized. */
    String opName();

    /** A graph input (placeholder) with the given name; its type is the node's type. */
    record Input(String name) implements Op {
        @Override public String opName() { return "input"; }
    }

    /** A constant tensor; {@code values} holds numel values in row-major order (one for a scalar). */
    record Constant(double[] values) implements Op {
        public Constant { values = values.clone(); }
        @Override public String opName() { return "constant"; }
        @Override public double[] values() { return values.clone(); }
        public double value(int i) { return values[i]; }
        public int length() { return values.length; }
        @Override public boolean equals(Object o) { return o instanceof Constant c && Arrays.equals(values, c.values); }
        @Override public int hashCode() { return Arrays.hashCode(values); }
        @Override public String toString() {
            return values.length == 1 ? "Constant[" + values[0] + "]" : "Constant[" + values.length + " values]";
        }
    }

    record Pointwise(PointwiseFn fn) implements Op {
        @Override public String opName() { return fn.opName(); }
    }

    record Cast(DType to) implements Op {
        @Override public String opName() { return "cast"; }
    }

    record Reduce(ReduceFn fn, List<Integer> dims, boolean keepdim) implements Op {
        public Reduce { dims = List.copyOf(dims); }
        @Override public String opName() { return fn.opName(); }
    }

    /** 2-D or batched matrix product (batch dims broadcast). */
    record Matmul() implements Op {
        @Override public String opName() { return "matmul"; }
    }

    /**
     * A collective over {@code group}. {@code reduceOp} is set for all_reduce and reduce_scatter; {@code root}
     * matters for broadcast. reduce_scatter splits and all_gather concatenates along dimension 0. all_to_all splits
     * dimension 0 into one part per member and sends part j to member j: evenly ({@code capacity} {@link #EVEN}, one
     * input), or uneven ({@code capacity} at least 0, two inputs: the data and the i64 row counts per destination, read
     * at run time) into a result of {@code capacity} rows, the received rows packed in member order, the rest zero.
     */
    record Collective(CollectiveKind kind, ReduceOp reduceOp, String group, int root, long capacity) implements Op {
        /** The capacity of every collective but an uneven all_to_all. */
        public static final long EVEN = -1;

        public Collective {
            if (capacity != EVEN && (kind != CollectiveKind.ALL_TO_ALL || capacity < 0))
                throw new GraphException(kind.opName() + ": a capacity (" + capacity + ") belongs to an uneven all_to_all only, and is at least 0");
        }

        public Collective(CollectiveKind kind, ReduceOp reduceOp, String group, int root) { this(kind, reduceOp, group, root, EVEN); }

        /** Whether this is an all_to_all with run-time row counts (two inputs, {@code capacity} rows out). */
        public boolean uneven() { return capacity != EVEN; }

        @Override public String opName() { return kind.opName(); }

        /** The attributes as a graph prints them after the inputs: {@code , sum}, {@code , root=1}, {@code , capacity=8}. */
        public String attributes() {
            return (reduceOp != null ? ", " + reduceOp.opName() : "") + (kind == CollectiveKind.BROADCAST ? ", root=" + root : "")
                    + (uneven() ? ", capacity=" + capacity : "");
        }
    }

    record Reshape(Shape shape) implements Op {
        @Override public String opName() { return "reshape"; }
    }

    record Permute(List<Integer> perm) implements Op {
        public Permute { perm = List.copyOf(perm); }
        @Override public String opName() { return "permute"; }
    }

    /** Elements start, start+step, ... below end of one dimension. */
    record Slice(int dim, long start, long end, long step) implements Op {
        @Override public String opName() { return "slice"; }
    }

    /**
     * Concatenation of its inputs (at least one, same dtype and rank, equal sizes outside {@code dim}, static sizes
     * along it) along {@code dim}, which may be negative (counted from the end).
     */
    record Cat(int dim) implements Op {
        @Override public String opName() { return "cat"; }
    }



    /** Broadcasts to a larger shape without copying (size-1 and missing leading dims stretch). */
    record Expand(Shape shape) implements Op {
        @Override public String opName() { return "expand"; }
    }

    /**
     * A call of a built-in op declared by an {@link OpSpec} ({@link OpRegistry}): argmax, topk, ...; the node's type is
     * its first output, the others are {@link CustomOutput} nodes of it. Equal when the op and the attributes are.
     */
    record Registered(OpSpec spec, OpAttrs attrs) implements Op {
        /** The registered op {@code name} with {@code attrs}, checked against its declaration. */
        public static Registered of(String name, java.util.Map<String, ? extends Number> attrs) {
            OpSpec spec = OpRegistry.get(name);
            return new Registered(spec, OpAttrs.of(spec, attrs));
        }

        @Override public String opName() { return spec.name(); }
    }

    /** A call of a registered user op; the node's type is its first output. */
    record Custom(String name) implements Op {
        @Override public String opName() { return name; }
    }

    /** Output {@code index} (1 and up) of the user-op call or {@link Registered} call that is this node's only input. */
    record CustomOutput(int index) implements Op {
        @Override public String opName() { return "output" + index; }
    }
}
