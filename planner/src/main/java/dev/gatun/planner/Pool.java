package dev.gatun.planner;

import dev.gatun.ir.ByteSize;

/**
 * One allocation the plan places buffers in.
 *
 * @param bytes           the planned size (end of the highest slot)
 * @param maxLive         the lower bound for the chosen order: peak over time of the live slots' sizes
 * @param allocationBytes the size asked from the backend, rounded up to its allocation granularity
 */
public record Pool(String name, Kind kind, String group, long bytes, long maxLive, long allocationBytes) {
    public enum Kind {
        /** The per-rank arena for regular intermediates and outputs. */
        REGULAR,
        /** A communication pool of a group: symmetric memory, same offsets on every rank, released before the call returns. */
        COMM,
        /** Persistent symmetric buffers of path-2 graph inputs of a group. */
        SYMM_INPUTS,
        /** Constant tensors, written once per session. */
        CONSTANT,
        /** The graph's states, a slot each: zeros when the session starts, kept from call to call. */
        STATE,
        /**
         * Persistent symmetric memory of a group for its barrier-free all-reduces: a region each ({@link RotatingSlots}),
         * set up once per session, kept between calls.
         */
        ROTATING
    }

    public boolean isSymmetric() { return kind == Kind.COMM || kind == Kind.SYMM_INPUTS || kind == Kind.ROTATING; }

    String declaration() {
        String alloc = switch (kind) {
            case COMM -> "alloc_symmetric(" + ByteSize.format(bytes) + granularity() + ", type=SYMM_MEM, group=\"" + group + "\")";
            case SYMM_INPUTS -> "alloc_symmetric_persistent(" + ByteSize.format(bytes) + granularity() + ", inputs, group=\"" + group + "\")";
            case REGULAR -> "alloc(" + ByteSize.format(bytes) + granularity() + ")";
            case CONSTANT -> "alloc_constants(" + ByteSize.format(bytes) + ")";
            case STATE -> "alloc_states(" + ByteSize.format(bytes) + granularity() + ")";
            case ROTATING -> "alloc_symmetric_persistent(" + ByteSize.format(bytes) + granularity() + ", rotating slots, group=\"" + group + "\")";
        };
        return name + " = " + alloc;
    }

    private String granularity() { return allocationBytes != bytes ? " -> " + ByteSize.format(allocationBytes) : ""; }
}
