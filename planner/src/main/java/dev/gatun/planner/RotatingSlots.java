package dev.gatun.planner;

import dev.gatun.ir.ByteSize;
import dev.gatun.ir.DType;

/**
 * The receive slots of a barrier-free all-reduce on one rank ({@code Algorithm.BARRIER_FREE}): a region of a
 * rotating pool, at the same offset on every rank of the group, laid out as a header (the rank's call
 * counters, see {@link #HEADER}) and then three <em>rounds</em>, each {@code ranks} slots of {@code elements} elements:
 * slot {@code p} of a round holds what group member {@code p} pushed.
 *
 * <p>The protocol, on every backend. Call {@code c} uses round {@code c mod 3}. A rank first pushes its input into
 * its own slot of that round on every member (itself included), each element as its bits, except that an element
 * whose bits are the dtype's {@link #sentinel} (a NaN) is pushed as the canonical NaN instead: so a slot element
 * holds the sentinel until its value has arrived, and every other value, negative zero and every other NaN
 * included, arrives exactly. It then reduces its own round: each element of each slot, in member order, once it is
 * no longer the sentinel (spinning on the data itself, with a bounded wait). Last it writes the sentinel over the
 * round of call {@code c - 1}, which is used again at call {@code c + 2}: no member can push into it before this
 * rank's push of call {@code c + 1}, which comes after the clearing, so no barrier is needed. A new region holds
 * the sentinel everywhere (all bits set: a memset) and zero counters.
 *
 * @param pool     the rotating pool
 * @param offset   the region's offset in it
 * @param ranks    the members of the group (slots a round)
 * @param elements the all-reduce's elements (a slot's length)
 * @param dtype    f32, f16 or bf16
 */
public record RotatingSlots(String pool, long offset, int ranks, long elements, DType dtype) {
    /**
     * Bytes before the first round: the call counters, a {@code u32} for each of up to 256 blocks of a GPU kernel
     * (each block runs the protocol on its own tile of the elements); the host backend keeps one {@code long} in the
     * first 8 bytes.
     */
    public static final long HEADER = 1024;
    public static final int ROUNDS = 3;

    /** The planner makes these for the all-reduces it gives a barrier-free path: a bad argument is a planner bug. */
    public RotatingSlots {
        if (dtype != DType.FLOAT32 && !dtype.isHalf()) throw new IllegalArgumentException("a barrier-free all-reduce has f32, f16 and bf16 slots, not " + dtype);
        if (ranks < 1 || elements < 0) throw new IllegalArgumentException("rotating slots of " + ranks + " ranks and " + elements + " elements");
    }

    /** The region's size: the header and three rounds. */
    public static long bytes(int ranks, long elements, DType dtype) {
        return HEADER + ROUNDS * roundBytes(ranks, elements, dtype);
    }

    public long bytes() { return bytes(ranks, elements, dtype); }

    /** One round's size, rounded up to 16 bytes so every round and slot group starts aligned. */
    static long roundBytes(int ranks, long elements, DType dtype) {
        return ByteSize.roundUp((long) ranks * elements * dtype.byteSize(), 16);
    }

    /** Offset, within the region, of member {@code member}'s slot in round {@code round}. */
    public long slot(int round, int member) {
        return HEADER + round * roundBytes(ranks, elements, dtype) + (long) member * elements * dtype.byteSize();
    }

    /** Offset, within the region, of round {@code round}. */
    public long round(int round) { return HEADER + round * roundBytes(ranks, elements, dtype); }

    /** Bytes of one round's slots (without the padding). */
    public long roundDataBytes() { return (long) ranks * elements * dtype.byteSize(); }

    /** The bits that mark a slot element as not yet arrived: a NaN with every bit set (all ones of the dtype's width). */
    public static long sentinel(DType dtype) { return dtype == DType.FLOAT32 ? 0xFFFF_FFFFL : 0xFFFFL; }

    /** What an element with the sentinel's bits is pushed as: the dtype's canonical quiet NaN. */
    public static long canonicalNaN(DType dtype) {
        return switch (dtype) {
            case FLOAT32 -> 0x7FC0_0000L;
            case FLOAT16 -> 0x7E00L;
            case BFLOAT16 -> 0x7FC0L;
            default -> throw new IllegalArgumentException("no rotating slots of " + dtype);   // a caller's bug: slots are f32, f16 or bf16
        };
    }

    /** The bits pushed for an element of bits {@code bits}: itself, unless it is the sentinel. */
    public static long pushed(DType dtype, long bits) { return bits == sentinel(dtype) ? canonicalNaN(dtype) : bits; }

    /** "pool3[0, +784 B): call counter, then 3 rounds x 2 ranks x 64 f32" */
    public String describe() {
        return pool + "[" + offset + ", +" + bytes() + " B): call counter, then " + ROUNDS + " rounds x " + ranks + " ranks x " + elements + " " + dtype;
    }
}
