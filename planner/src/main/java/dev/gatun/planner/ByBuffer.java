package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.LoweredGraph;

import java.util.function.Function;

/**
 * A table keyed by the buffers of one lowered graph, held in an array indexed by {@link Buffer#id()}. The planner's
 * passes look buffers up millions of times on a large graph; identity hash maps spent most of that time hashing,
 * probing and growing. A buffer of another lowered graph is an error ({@link Buffer#id()} is only its position in
 * its own), as it was for the {@link BufferTable}.
 */
final class ByBuffer<V> {
    private final Object[] values;

    ByBuffer(LoweredGraph graph) { this(graph.buffers().size()); }

    ByBuffer(int size) { values = new Object[size]; }

    @SuppressWarnings("unchecked")
    V get(Buffer b) { return (V) values[b.id()]; }

    V getOrDefault(Buffer b, V otherwise) {
        V v = get(b);
        return v != null ? v : otherwise;
    }

    boolean containsKey(Buffer b) { return values[b.id()] != null; }

    void put(Buffer b, V v) { values[b.id()] = v; }

    <K extends Buffer> V computeIfAbsent(K b, Function<? super K, ? extends V> make) {
        V v = get(b);
        if (v == null) put(b, v = make.apply(b));
        return v;
    }

    /** A set of buffers of one lowered graph, as flags by {@link Buffer#id()}. */
    static final class Set {
        private final boolean[] in;

        Set(LoweredGraph graph) { in = new boolean[graph.buffers().size()]; }

        boolean contains(Buffer b) { return in[b.id()]; }

        /** Adds {@code b}; true when it was not in yet. */
        boolean add(Buffer b) {
            boolean was = in[b.id()];
            in[b.id()] = true;
            return !was;
        }
    }
}
