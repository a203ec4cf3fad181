package dev.gatun.planner;

import dev.gatun.ir.DType;
import dev.gatun.ir.Shape;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.TensorType;

import java.util.List;

/**
 * One buffer of a plan's buffer table: what a backend needs to address it, and nothing of the compiler's IR.
 * {@link #id()} is the buffer's index in {@link Plan#buffers()}; backends keep their per-rank memory in arrays
 * indexed by it, so running a step looks nothing up by name.
 *
 * <p>A buffer is a <em>storage</em> (it owns memory: in a pool at {@link #placement()}, allocated per call when
 * its size is symbolic, or the caller's array for an input the plan does not place) or a <em>view</em> of one
 * (its {@link #base()}, at an element {@link #offset()} with its own {@link #strides()}). A buffer written straight
 * into its slice of a concatenation is addressed as a view of the concatenation's storage, though a step writes it:
 * {@link #part()} says which slice. Built by the planner; a buffer of a finished plan never changes.
 */
public final class PlanBuffer {
    /** Where a buffer's elements come from. */
    public enum Kind {
        /** A graph input: the caller's array, or a persistent symmetric slot it is copied into (path 2). */
        INPUT,
        /**
         * A state of the graph: a slot of the plan's state pool, zeros when the session starts, set by {@code bind},
         * kept from call to call and written in place by {@code update_slice}; never passed to a call.
         */
        STATE,
        /** A constant tensor, written into the constant pool once per session. */
        CONSTANT,
        /** Written by a step of the plan (a kernel, a collective, a matrix product, a user op). */
        COMPUTED,
        /** A view of another buffer's storage (reshape, permute, slice, expand): no memory of its own. */
        VIEW
    }

    /** Where a storage lives: a pool and the offset in it; {@code bytes} is its size. */
    public record Placement(String pool, long offset, long bytes) {}

    /**
     * A part of a concatenation: elements {@code [start, end)} of dimension {@code dim} of the concatenation {@code cat}
     * (of rank {@code rank}), written by the step that writes {@code writer}; {@code copied} is null where the part's
     * producer writes its slice itself, else why a copy kernel writes it.
     */
    public record Part(String cat, String writer, int rank, int dim, long start, long end, String copied) {
        /** The slice as an index of the concatenation, as Python writes it: {@code buf9[4:12]}, {@code buf9[:, 4:12]}. */
        public String range() {
            var j = new java.util.StringJoiner(", ", cat + "[", "]");
            for (int k = 0; k < dim; k++) j.add(":");
            return j.add(start + ":" + end).toString();
        }

        /** How the part is written, for the plan's notes: "buf2 [0:4]" or "buf7 [4:8] (a copy: x is a graph input)". */
        String describe() { return writer + " [" + start + ":" + end + "]" + (copied == null ? "" : " (a copy: " + copied + ")"); }
    }

    private final int id;
    private final String name;
    private final TensorType type;
    private final Kind kind;
    private final PlanBuffer base;
    private final SymInt offset;
    private List<SymInt> strides;       // null until asked for, where the layout is contiguous by default
    private final String group;
    private final String input;
    private final Part part;
    private final List<Part> parts;
    private Placement placement;

    PlanBuffer(int id, String name, TensorType type, Kind kind, PlanBuffer base, SymInt offset, List<SymInt> strides, String group, String input) {
        this(id, name, type, kind, base, offset, strides, group, input, null, List.of());
    }

    PlanBuffer(int id, String name, TensorType type, Kind kind, PlanBuffer base, SymInt offset, List<SymInt> strides, String group, String input,
               Part part, List<Part> parts) {
        this.id = id;
        this.name = name;
        this.type = type;
        this.kind = kind;
        this.base = base;
        this.offset = offset;
        this.strides = strides == null ? null : List.copyOf(strides);
        this.group = group;
        this.input = input;
        this.part = part;
        this.parts = List.copyOf(parts);
    }

    /**
     * A contiguous buffer that belongs to no plan (id -1), for tools and tests that build kernels by hand; a backend
     * never runs one.
     */
    public static PlanBuffer standalone(String name, TensorType type) {
        return new PlanBuffer(-1, name, type, Kind.COMPUTED, null, dev.gatun.ir.SymInt.ZERO, null, null, null);
    }

    /** Index in the plan's buffer table. */
    public int id() { return id; }
    public String name() { return name; }
    public TensorType type() { return type; }
    public DType dtype() { return type.dtype(); }
    public Shape shape() { return type.shape(); }
    public Kind kind() { return kind; }

    /** The storage a view reads; the buffer itself for a storage. */
    public PlanBuffer storage() { return base != null ? base : this; }

    /** The viewed storage, or null for a storage. */
    public PlanBuffer base() { return base; }

    public boolean isView() { return base != null; }

    /** Element offset inside the storage (zero for a storage). */
    public SymInt offset() { return offset; }

    /** Element strides, one per dimension. */
    public List<SymInt> strides() {
        List<SymInt> s = strides;
        if (s == null) strides = s = type.shape().contiguousStrides(); // row-major: made on first use, most buffers never need it
        return s;
    }

    /** The process group whose symmetric memory holds this buffer's storage, or null when it is not symmetric. */
    public String group() { return group; }

    public boolean isSymmetric() { return group != null; }

    /** The graph input's name, for {@link Kind#INPUT} and {@link Kind#STATE}. */
    public String input() { return input; }

    /** The slice of a concatenation this buffer is written straight into, or null. */
    public Part part() { return part; }

    /** For the storage of a concatenation, its parts in order (empty for any other buffer). */
    public List<Part> parts() { return parts; }

    /** Whether the size depends on symbols: allocated for each call once they are bound. */
    public boolean isDynamic() { return !type.shape().isStatic(); }

    /** The pool slot of a storage; null for a view, a buffer of symbolic size, or an input the plan reads where the caller's array lies. */
    public Placement placement() { return placement; }

    void place(Placement p) {
        if (placement != null && !placement.equals(p)) throw new IllegalStateException(name + " is placed twice");
        placement = p;
    }

    /** A copy at another placement (for tests that check what a checker makes of a wrong plan). */
    PlanBuffer withPlacement(Placement p) {
        var b = new PlanBuffer(id, name, type, kind, base, offset, strides, group, input, part, parts);
        b.placement = p;
        return b;
    }

    /** Contiguous row-major with no offset. */
    public boolean isContiguous() { return offset.equals(SymInt.ZERO) && (strides == null || strides.equals(type.shape().contiguousStrides())); }

    @Override public String toString() { return name + " " + type; }
}
