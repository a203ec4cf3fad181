package dev.gatun.ir;

import java.util.List;
import java.util.StringJoiner;

/**
 * How a buffer's elements sit in memory. A {@link Flexible} layout lets the planner still choose strides;
 * a {@link Fixed} one has them decided; a {@link CommBuffer} layout places the buffer in a communication
 * pool of a process group. Every layout carries an {@link AllocatorType}; it survives {@link #fix()},
 * {@code with*} copies and takes part in equality.
 */
public sealed interface Layout {

    DType dtype();

    Shape shape();

    AllocatorType allocator();

    /** The same layout with strides decided (row-major for a flexible one); the allocator is kept. */
    Fixed fix();

    Layout withAllocator(AllocatorType allocator);

    default boolean isFlexible() { return this instanceof Flexible; }

    default TensorType type() { return new TensorType(dtype(), shape()); }

    static Flexible flexible(DType dtype, Shape shape) { return new Flexible(dtype, shape, AllocatorType.DEFAULT); }

    static Fixed contiguous(DType dtype, Shape shape) {
        return new Fixed(dtype, shape, shape.contiguousStrides(), SymInt.ZERO, AllocatorType.DEFAULT);
    }

    record Flexible(DType dtype, Shape shape, AllocatorType allocator) implements Layout {
        @Override public Fixed fix() { return new Fixed(dtype, shape, shape.contiguousStrides(), SymInt.ZERO, allocator); }
        @Override public Flexible withAllocator(AllocatorType a) { return new Flexible(dtype, shape, a); }
        @Override public String toString() { return "Flexible(" + dtype + shape + suffix(allocator) + ")"; }
    }

    record Fixed(DType dtype, Shape shape, List<SymInt> strides, SymInt offset, AllocatorType allocator) implements Layout {
        public Fixed {
            strides = List.copyOf(strides);
            if (strides.size() != shape.rank())
                throw new GraphException("strides " + strides + " do not match the rank of shape " + shape);
        }
        @Override public Fixed fix() { return this; }
        @Override public Fixed withAllocator(AllocatorType a) { return new Fixed(dtype, shape, strides, offset, a); }

        public boolean isContiguous() { return offset.equals(SymInt.ZERO) && strides.equals(shape.contiguousStrides()); }

        @Override public String toString() {
            var j = new StringJoiner(",", "[", "]");
            strides.forEach(s -> j.add(s.toString()));
            return "Fixed(" + dtype + shape + " strides " + j + (offset.equals(SymInt.ZERO) ? "" : " offset " + offset)
                    + suffix(allocator) + ")";
        }
    }

    /** A buffer placed in the communication pool of (type, group); its strides are fixed, row-major. */
    record CommBuffer(Fixed inner, CommBufferType commType, String group) implements Layout {
        public CommBuffer {
            if (group == null || group.isBlank()) throw new GraphException("a communication buffer needs a group");
            if (!inner.allocator().equals(AllocatorType.symmMem(group)))
                inner = inner.withAllocator(AllocatorType.symmMem(group));
        }

        public static CommBuffer of(Layout base, CommBufferType type, String group) {
            return new CommBuffer(base.fix(), type, group);
        }

        @Override public DType dtype() { return inner.dtype(); }
        @Override public Shape shape() { return inner.shape(); }
        @Override public AllocatorType allocator() { return inner.allocator(); }
        @Override public Fixed fix() { return inner; }
        @Override public CommBuffer withAllocator(AllocatorType a) {
            if (!a.equals(AllocatorType.symmMem(group)))
                throw new GraphException("a communication buffer of group '" + group + "' must use " + AllocatorType.symmMem(group));
            return this;
        }
        @Override public String toString() { return "CommBuffer(" + commType + ", \"" + group + "\", " + inner + ")"; }
    }

    private static String suffix(AllocatorType a) { return a.isSymmetric() ? ", allocator=" + a : ""; }
}
