package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.planner.RotatingSlots;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * The barrier-free all-reduce's protocol with ranks that never wait for each other between calls: each rank is a
 * thread running hundreds of calls back to back, with random pauses inside the push, so a fast rank pushes into a
 * round while a slow one still reduces the last, and rounds are cleared while peers push into the next. Inputs
 * change every call and include the sentinel's own bits, other NaNs, infinities and negative zeros. Expected
 * values are sums in member order computed here in double, rounded once to the dtype.
 */
class BarrierFreeAllReduceTest {

    static final int CALLS = 400;

    /** Input element {@code i} of member {@code m} at call {@code c}: bits, adversarial now and then. */
    static long inputBits(DType t, long seed, int m, int c, int i) {
        var r = new Random(seed * 1_000_003L + c * 7919L + m * 131L + i);
        int pick = r.nextInt(16);
        long sentinel = RotatingSlots.sentinel(t);
        return switch (pick) {
            case 0 -> sentinel;                                                   // a NaN with the sentinel's bits
            case 1 -> t == DType.FLOAT32 ? Float.floatToRawIntBits(-0.0f) & 0xFFFF_FFFFL : 0x8000L;   // negative zero
            case 2 -> t == DType.FLOAT32 ? 0x7F80_0001L : t == DType.FLOAT16 ? 0x7C01L : 0x7F81L;    // a signalling-looking NaN
            default -> encode(t, (float) (r.nextGaussian() * 8));
        };
    }

    static long encode(DType t, float v) {
        return switch (t) {
            case FLOAT32 -> Float.floatToRawIntBits(v) & 0xFFFF_FFFFL;
            case FLOAT16 -> Float.floatToFloat16(v) & 0xFFFFL;
            default -> bf16RoundBits(v);
        };
    }

    /** Round to nearest even to bfloat16 (NaN stays a NaN). */
    static long bf16RoundBits(float v) {
        if (Float.isNaN(v)) return 0x7FC0L;
        int b = Float.floatToRawIntBits(v);
        int rounded = b + 0x7FFF + ((b >>> 16) & 1);
        return (rounded >>> 16) & 0xFFFFL;
    }

    static double decode(DType t, long bits) {
        return switch (t) {
            case FLOAT32 -> Float.intBitsToFloat((int) bits);
            case FLOAT16 -> Float.float16ToFloat((short) bits);
            default -> Float.intBitsToFloat((int) (bits << 16));
        };
    }

    /** The expected bits: the members' values added in member order in double, rounded once to the dtype. */
    static long expected(DType t, long seed, int members, int c, int i) {
        double acc = decode(t, inputBits(t, seed, 0, c, i));
        for (int m = 1; m < members; m++) acc = acc + decode(t, inputBits(t, seed, m, c, i));
        return switch (t) {
            case FLOAT32 -> Float.floatToRawIntBits((float) acc) & 0xFFFF_FFFFL;
            case FLOAT16 -> Float.floatToFloat16((float) acc) & 0xFFFFL;
            default -> bf16RoundBits((float) acc);
        };
    }

    static boolean isNaN(DType t, long bits) { return Double.isNaN(decode(t, bits)); }

    /** Runs {@code CALLS} calls on {@code members} threads; returns out[call][member][element] bits. */
    static long[][][] run(DType t, int members, int n, long seed) throws Exception {
        var s = new RotatingSlots("rot", 0, members, n, t);
        long[][][] out = new long[CALLS][members][n];
        try (Arena arena = Arena.ofShared(); ExecutorService pool = Executors.newFixedThreadPool(members)) {
            var regions = new MemorySegment[members];
            for (int m = 0; m < members; m++) {
                regions[m] = arena.allocate(s.bytes(), 128);
                BarrierFreeAllReduce.initialize(regions[m], s);
            }
            var futures = new ArrayList<Future<?>>();
            for (int m = 0; m < members; m++) {
                int me = m;
                futures.add(pool.submit(() -> {
                    var random = new Random(seed + me);
                    MemorySegment in = arena.allocate((long) n * t.byteSize(), 16), res = arena.allocate((long) n * t.byteSize(), 16);
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    BarrierFreeAllReduce.Wait wait = (member, element) -> {
                        if (System.nanoTime() > deadline) throw new AssertionError("member " + me + " waited over 60 s for member " + member + "'s element " + element);
                    };
                    // member 0 never pauses: it runs ahead of the others as far as the protocol lets it
                    Runnable delay = () -> { if (me != 0 && random.nextInt(8) == 0) LockSupport.parkNanos(random.nextInt(200_000)); };
                    for (int c = 0; c < CALLS; c++) {
                        for (int i = 0; i < n; i++) {
                            long b = inputBits(t, seed, me, c, i);
                            if (t == DType.FLOAT32) in.setAtIndex(ValueLayout.JAVA_INT, i, (int) b);
                            else in.setAtIndex(ValueLayout.JAVA_SHORT, i, (short) b);
                        }
                        BarrierFreeAllReduce.run(s, ReduceOp.SUM, me, regions, in, res, wait, delay);
                        for (int i = 0; i < n; i++)
                            out[c][me][i] = t == DType.FLOAT32 ? res.getAtIndex(ValueLayout.JAVA_INT, i) & 0xFFFF_FFFFL
                                    : res.getAtIndex(ValueLayout.JAVA_SHORT, i) & 0xFFFFL;
                    }
                    return null;
                }));
            }
            for (Future<?> f : futures) f.get(120, TimeUnit.SECONDS);
        }
        return out;
    }

    static void check(DType t, int members, int n, long seed) throws Exception {
        long[][][] out = run(t, members, n, seed);
        int nans = 0, negativeZeros = 0;
        for (int c = 0; c < CALLS; c++)
            for (int i = 0; i < n; i++) {
                long want = expected(t, seed, members, c, i);
                for (int m = 0; m < members; m++) {
                    long got = out[c][m][i];
                    if (got != out[c][0][i]) fail(t + " call " + c + " element " + i + ": member " + m + " has bits " + Long.toHexString(got) + ", member 0 " + Long.toHexString(out[c][0][i]));
                    if (isNaN(t, want)) {
                        if (!isNaN(t, got)) fail(t + " call " + c + " element " + i + ": expected a NaN, got " + decode(t, got));
                    } else if (got != want) {
                        fail(t + " " + members + " members, call " + c + " element " + i + ": expected bits " + Long.toHexString(want) + " (" + decode(t, want)
                                + "), got " + Long.toHexString(got) + " (" + decode(t, got) + ")");
                    }
                }
                if (isNaN(t, want)) nans++;
                if (want == (t == DType.FLOAT32 ? 0x8000_0000L : 0x8000L)) negativeZeros++;
            }
        // the adversarial cases did occur: NaNs (the sentinel's bits among them) and exact negative zeros
        assertThat(nans).isPositive();
        if (members == 2) assertThat(negativeZeros).isPositive();
    }

    @Test
    void twoThreeAndFourRanksAgreeExactlyOverHundredsOfCallsWithoutBarriers() throws Exception {
        for (int members = 2; members <= 4; members++) check(DType.FLOAT32, members, 37, 11 + members);
    }

    @Test
    void halfTypesToo() throws Exception {
        check(DType.BFLOAT16, 3, 29, 5);
        check(DType.FLOAT16, 2, 33, 6);
        check(DType.BFLOAT16, 4, 8, 7);
    }

    @Test
    void anInputWithTheSentinelsBitsArrivesAsANaNAndNothingWaitsForever() throws Exception {
        // every element of member 1 is the sentinel's bits: without the canonical NaN in its place the others would spin
        var s = new RotatingSlots("rot", 0, 2, 4, DType.FLOAT32);
        try (Arena arena = Arena.ofShared(); ExecutorService pool = Executors.newFixedThreadPool(2)) {
            var regions = new MemorySegment[]{arena.allocate(s.bytes(), 128), arena.allocate(s.bytes(), 128)};
            for (var r : regions) BarrierFreeAllReduce.initialize(r, s);
            var results = new ArrayList<Future<float[]>>();
            for (int m = 0; m < 2; m++) {
                int me = m;
                results.add(pool.submit(() -> {
                    MemorySegment in = arena.allocate(16, 16), res = arena.allocate(16, 16);
                    for (int i = 0; i < 4; i++) in.setAtIndex(ValueLayout.JAVA_INT, i, me == 1 ? -1 : Float.floatToRawIntBits(i));
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    BarrierFreeAllReduce.run(s, ReduceOp.SUM, me, regions, in, res, (k, e) -> {
                        if (System.nanoTime() > deadline) throw new AssertionError("waited for member " + k + "'s element " + e);
                    }, () -> { });
                    return res.toArray(ValueLayout.JAVA_FLOAT);
                }));
            }
            for (var f : results) for (float v : f.get(20, TimeUnit.SECONDS)) assertThat(v).isNaN();
        }
    }

    @Test
    void theRoundsRotateAndTheLastOneIsClearedAfterEachCall() {
        var s = new RotatingSlots("rot", 0, 1, 2, DType.FLOAT32);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment region = arena.allocate(s.bytes(), 128), in = arena.allocate(8, 8), out = arena.allocate(8, 8);
            BarrierFreeAllReduce.initialize(region, s);
            var seen = new ArrayList<List<Integer>>();
            for (int c = 0; c < 4; c++) {
                in.setAtIndex(ValueLayout.JAVA_FLOAT, 0, c + 0.5f);
                in.setAtIndex(ValueLayout.JAVA_FLOAT, 1, -c - 0.25f);
                BarrierFreeAllReduce.run(s, ReduceOp.SUM, 0, new MemorySegment[]{region}, in, out, (k, e) -> fail("a rank of one never waits"), () -> { });
                assertThat(out.toArray(ValueLayout.JAVA_FLOAT)).containsExactly(c + 0.5f, -c - 0.25f);
                // which rounds still hold data (not the sentinel) after call c
                var held = new ArrayList<Integer>();
                for (int k = 0; k < RotatingSlots.ROUNDS; k++) if (region.get(ValueLayout.JAVA_INT, s.slot(k, 0)) != -1) held.add(k);
                seen.add(held);
            }
            // call c leaves its own round (c mod 3) and has cleared the one before
            assertThat(seen).containsExactly(List.of(0), List.of(1), List.of(2), List.of(0));
            assertThat(region.get(ValueLayout.JAVA_LONG, 0)).isEqualTo(4);
        }
    }
}
