package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.planner.RotatingSlots;
import dev.gatun.runtime.Elements;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The barrier-free all-reduce among simulated ranks, step for step as {@link RotatingSlots} describes it: push
 * into every member's slot of this call's round, reduce one's own round element by element as each arrives (the
 * element's own value, not a flag, says it has arrived), clear the round of the last call. Slot elements are read
 * with acquire and written with release semantics, the order a GPU's stores and loads across devices have, and
 * nothing else orders the ranks: no barrier, no lock. Results are combined in member order, as the one-shot
 * all-reduce combines them, so both give the same bits.
 */
final class BarrierFreeAllReduce {
    private BarrierFreeAllReduce() {}

    private static final VarHandle INT = ValueLayout.JAVA_INT.varHandle();
    private static final VarHandle SHORT = ValueLayout.JAVA_SHORT.varHandle();

    /** Called while a rank waits for member {@code member}'s element {@code element}: throws to give up. */
    interface Wait {
        void check(int member, long element);
    }

    /** Sets up a new region: the sentinel in every slot of every round, the call counter at zero. */
    static void initialize(MemorySegment region, RotatingSlots s) {
        region.set(ValueLayout.JAVA_LONG, 0, 0L);
        for (int k = 0; k < RotatingSlots.ROUNDS; k++) clear(region, s, k);
    }

    /**
     * One call on the member at index {@code me} of the group: {@code regions[k]} is member {@code k}'s region, {@code in}
     * and {@code out} this rank's input and output ({@code s.elements()} elements each). {@code delay} may pause between
     * the protocol's stores, to shake out orders a fast machine would rarely show.
     */
    static void run(RotatingSlots s, ReduceOp op, int me, MemorySegment[] regions, MemorySegment in, MemorySegment out, Wait wait, Runnable delay) {
        DType t = s.dtype();
        MemorySegment mine = regions[me];
        long call = mine.get(ValueLayout.JAVA_LONG, 0);
        mine.set(ValueLayout.JAVA_LONG, 0, call + 1);
        int round = (int) (call % RotatingSlots.ROUNDS);
        long n = s.elements();
        // push: this rank's slot of the round on every member, starting with the next one (members push in different orders)
        for (int j = 1; j <= regions.length; j++) {
            int to = (me + j) % regions.length;
            long at = s.slot(round, me);
            for (long i = 0; i < n; i++) {
                store(regions[to], t, at + i * t.byteSize(), RotatingSlots.pushed(t, bits(in, t, i)));
                if (i == n / 2) delay.run();
            }
            delay.run();
        }
        // reduce: each element once every member's has arrived, combined in member order
        long sentinel = RotatingSlots.sentinel(t);
        for (long i = 0; i < n; i++) {
            double acc = 0;
            for (int k = 0; k < regions.length; k++) {
                long at = s.slot(round, k) + i * t.byteSize();
                long b;
                for (int spins = 0; (b = load(mine, t, at)) == sentinel; spins++) {
                    wait.check(k, i);
                    // ranks are threads, often more of them than cores: spin briefly, then let the others run
                    if (spins < 64) Thread.onSpinWait();
                    else Thread.yield();
                }
                double v = value(t, b);
                acc = k == 0 ? v : HostCollectives.combine(op, acc, v);
            }
            Elements.set(out, t, i, HostCollectives.finish(op, acc, regions.length));
        }
        // the last call's round is used again two calls from now: no member pushes into it before this rank's next push
        clear(mine, s, (round + RotatingSlots.ROUNDS - 1) % RotatingSlots.ROUNDS);
    }

    private static void clear(MemorySegment region, RotatingSlots s, int round) {
        DType t = s.dtype();
        long sentinel = RotatingSlots.sentinel(t), at = s.round(round), count = s.roundDataBytes() / t.byteSize();
        for (long i = 0; i < count; i++) store(region, t, at + i * t.byteSize(), sentinel);
    }

    private static long bits(MemorySegment in, DType t, long i) {
        return t == DType.FLOAT32 ? in.getAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i) & 0xFFFF_FFFFL
                : in.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i) & 0xFFFFL;
    }

    private static void store(MemorySegment region, DType t, long offset, long bits) {
        if (t == DType.FLOAT32) INT.setRelease(region, offset, (int) bits);
        else SHORT.setRelease(region, offset, (short) bits);
    }

    private static long load(MemorySegment region, DType t, long offset) {
        return t == DType.FLOAT32 ? (int) INT.getAcquire(region, offset) & 0xFFFF_FFFFL : (short) SHORT.getAcquire(region, offset) & 0xFFFFL;
    }

    private static double value(DType t, long bits) {
        return switch (t) {
            case FLOAT32 -> Float.intBitsToFloat((int) bits);
            case FLOAT16 -> Float.float16ToFloat((short) bits);
            case BFLOAT16 -> Float.intBitsToFloat((int) (bits << 16));
            default -> throw new IllegalStateException("no barrier-free all-reduce of " + t);   // RotatingSlots admits f32, f16 and bf16 only
        };
    }
}
