package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * scatter_add's CUDA kernel ({@code gs_scatter_add}: a thread owns a run of {@code chunk} targets of one column) run as
 * host C++ through {@code emulation/emulate.h} and {@link KernelEmulationTest}'s driver, with exactly the launches
 * {@link CudaGatherScatter#scatterAdd} makes (the index check, then the sums: its grid, its chunk), against plain Java
 * loops that add in the index's row-major order, each addition rounded to the dtype (f32 in float, f64 in double, f16
 * and bf16 through float then rounded to nearest even, integers wrapping), bit for bit. Random cases of ranks 1 to 4 and
 * every dim: an index smaller than x outside dim and a source larger than the index; an index empty along dim or
 * elsewhere; targets repeated, at 0, at the last one and at the runs' edges; shapes whose column counts (1 to over
 * {@link CudaGatherScatter#SCATTER_THREADS}) give runs of one target, runs of many with a short last one, and one run of
 * every target. The result slot starts as stale bytes, so every element must be written. Not covered: NaN and infinite
 * values (their payloads are the float unit's, not the order's), the device's memory model and speed
 * ({@link GatherScatterGpuTest}). Skipped where g++ or CUDA's headers are absent.
 */
class ScatterAddEmulationTest {
    @TempDir static Path dir;
    static Path emulator;

    @BeforeAll
    static void build() throws Exception {
        emulator = KernelEmulationTest.buildEmulator(dir);
    }

    static final List<DType> TYPES = List.of(DType.F32, DType.F64, DType.I32, DType.I64, DType.BF16, DType.F16, DType.I8);
    static final long X = 1, INDEX = 2, SRC = 3, OUT = 4, CLAIM = 90, RECORD = 91;

    /** One case: the dtype and index type, x's, the index's and the source's shapes, the dimension. */
    record Case(DType t, DType idType, long[] xs, int dim, long[] is, long[] ss) {
        @Override public String toString() {
            return "scatter_add " + t + " x" + Arrays.toString(xs) + " dim " + dim + " index " + idType + Arrays.toString(is) + " src" + Arrays.toString(ss);
        }
    }

    /** What the launches were cut into, for the coverage checks. */
    record Cut(long targets, long chunk, long runs) {}

    @Test
    void theKernelsSumsAreThePlainLoopsBitForBit() throws Exception {
        var rnd = new SplittableRandom(61);
        var cuts = new HashSet<String>();
        var types = EnumSet.noneOf(DType.class);
        var dims = new HashSet<String>();
        for (int trial = 0; trial < 84; trial++) {
            Case c = randomCase(trial, rnd);
            Cut cut = check(c, rnd);
            types.add(c.t());
            dims.add(c.xs().length + "/" + c.dim());
            if (cut.chunk() == 1 && cut.runs() > 1) cuts.add("runs of one target");
            if (cut.chunk() > 1 && cut.runs() > 1) cuts.add("runs of many targets");
            if (cut.runs() > 1 && cut.targets() % cut.chunk() != 0) cuts.add("a short last run");
            if (cut.runs() == 1 && cut.targets() > 1) cuts.add("one run of every target");
            if (c.is()[c.dim()] == 0) cuts.add("an index empty along dim");
            if (Arrays.stream(c.is()).anyMatch(s -> s == 0) && c.is()[c.dim()] > 0) cuts.add("an index empty elsewhere");
            for (int d = 0; d < c.xs().length; d++) if (d != c.dim() && c.is()[d] < c.xs()[d] && c.is()[d] > 0) cuts.add("an index smaller than x");
        }
        assertThat(cuts).as("the cases cover every kind of cut").containsExactlyInAnyOrder("runs of one target", "runs of many targets", "a short last run",
                "one run of every target", "an index empty along dim", "an index empty elsewhere", "an index smaller than x");
        assertThat(types).containsExactlyInAnyOrderElementsOf(TYPES);
        assertThat(dims).as("every rank and dim").hasSize(1 + 2 + 3 + 4);
    }

    /** Runs case {@code c} (random values) through the emulated launches and compares with the plain loops; returns the launch's cut. */
    static Cut check(Case c, SplittableRandom rnd) throws Exception {
        var launches = CudaGatherScatter.scatterAdd(X, c.t(), c.xs(), INDEX, c.idType(), c.is(), SRC, c.ss(), c.dim(), OUT,
                new DeviceFault.Site(CLAIM, RECORD, 5));
        KernelLaunch sums = launches.getLast();
        assertThat(sums.kernel()).as("%s", c).isEqualTo("scatter_add_" + c.t().shortName());
        assertThat(launches).as("%s: the check comes first where the index has elements", c).hasSize(numel(c.is()) > 0 ? 2 : 1);
        long targets = c.xs()[c.dim()], chunk = (long) sums.args().get(8), runs = Math.ceilDiv(targets, chunk);
        long[] x = values(c.t(), numel(c.xs()), rnd), src = values(c.t(), numel(c.ss()), rnd), ids = index(numel(c.is()), targets, chunk, rnd);
        long[] want = plainLoops(c, x, ids, src);
        byte[] stale = new byte[(int) (numel(c.xs()) * c.t().byteSize())];
        Arrays.fill(stale, (byte) 0x5A);
        var slots = Map.of(X, bytes(x, c.t().byteSize()), INDEX, bytes(ids, c.idType().byteSize()), SRC, bytes(src, c.t().byteSize()), OUT, stale,
                CLAIM, new byte[4], RECORD, new byte[(int) DeviceFault.RECORD_BYTES]);
        var r = KernelEmulationTest.emulate(emulator, launches, slots);
        String what = c + ", chunk " + chunk + " (" + runs + " runs), grid " + sums.grid() + " x " + sums.block();
        assertThat(r.trapped()).as(what).isFalse();
        assertThat(r.slots().get(RECORD)).as(what + ": the fault record stays clear").containsOnly(0);
        assertThat(r.slots().get(X)).as(what + ": x is not written").isEqualTo(slots.get(X));
        long[] got = elements(r.slots().get(OUT), c.t().byteSize());
        for (int e = 0; e < want.length; e++)
            if (got[e] != want[e])
                assertThat(show(c.t(), got[e])).as("%s: element %d %s (the first that differs)", what, e, Arrays.toString(GatherScatterGpuTest.unravel(e, c.xs())))
                        .isEqualTo(show(c.t(), want[e]));
        return new Cut(targets, chunk, runs);
    }

    // ------------------------------------------------------------------ the cases

    /** Trial {@code trial}'s case: its kind of shape by the trial's number, the rest random. */
    static Case randomCase(int trial, SplittableRandom rnd) {
        DType t = TYPES.get(trial % TYPES.size()), idType = trial % 3 == 0 ? DType.I32 : DType.I64;
        int kind = trial % 8, rank = kind == 2 ? 2 + rnd.nextInt(3) : 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
        long targets, columns;
        switch (kind) {
            case 1, 5 -> { targets = 20 + rnd.nextInt(280); columns = 65_536 / targets + 1 + rnd.nextInt(3000); }   // runs of many targets
            case 2 -> { targets = 2 + rnd.nextInt(3); columns = CudaGatherScatter.SCATTER_THREADS + rnd.nextInt(5000); }  // one run of every target
            case 3 -> { targets = rnd.nextInt(4) == 0 ? 65_536 + rnd.nextInt(10_000) : 50 + rnd.nextInt(3000); columns = 1 + rnd.nextInt(3); }  // one target a run
            default -> { targets = 1 + rnd.nextInt(rnd.nextBoolean() ? 40 : 5); columns = 1 + rnd.nextInt(60); }
        }
        if (rank == 1) columns = 1;
        long[] xs = spread(rank, dim, targets, columns, rnd);
        long[] is = new long[rank];
        for (int d = 0; d < rank; d++)
            is[d] = d == dim ? along(kind, targets, xs, rnd) : rnd.nextBoolean() ? xs[d] : 1 + rnd.nextLong(xs[d]);
        if (kind == 6 && rank > 1) is[(dim + 1 + rnd.nextInt(rank - 1)) % rank] = 0;   // an index empty outside dim
        if (kind == 7) is[dim] = 0;                                                      // an index empty along dim
        long[] ss = is.clone();
        for (int d = 0; d < rank; d++) if (rnd.nextInt(3) == 0) ss[d] += 1 + rnd.nextInt(3);
        return new Case(t, idType, xs, dim, is, ss);
    }

    /** x's shape: {@code targets} along dim, the others' product about {@code columns} (the last of them takes the rest). */
    static long[] spread(int rank, int dim, long targets, long columns, SplittableRandom rnd) {
        long[] xs = new long[rank];
        long left = columns;
        int last = dim == rank - 1 ? rank - 2 : rank - 1;
        for (int d = 0; d < rank; d++) {
            if (d == dim) xs[d] = targets;
            else if (d == last) xs[d] = left;
            else {
                xs[d] = 1 + rnd.nextInt(4);
                left = Math.ceilDiv(left, xs[d]);
            }
        }
        return xs;
    }

    /** The index's size along dim: small where the columns are many (each thread walks it), else up to twice the targets. */
    static long along(int kind, long targets, long[] xs, SplittableRandom rnd) {
        return switch (kind) {
            case 1, 5 -> 1 + rnd.nextInt(60);
            case 2 -> 1 + rnd.nextInt(6);
            case 3 -> 1 + rnd.nextLong(Math.min(2 * targets, targets > 65_536 ? 300 : 4000));   // the threads are many where the targets are
            default -> 1 + rnd.nextLong(2 * targets + 3);
        };
    }

    /** Index values: 0, the last target, the runs' first and last targets, a few hot ones repeated, and anywhere. */
    static long[] index(long n, long targets, long chunk, SplittableRandom rnd) {
        long[] hot = {rnd.nextLong(targets), rnd.nextLong(targets), rnd.nextLong(targets)};
        long[] ids = new long[(int) n];
        for (int i = 0; i < n; i++) {
            long edge = Math.min(targets - 1, rnd.nextLong(Math.ceilDiv(targets, chunk)) * chunk + (rnd.nextBoolean() ? 0 : chunk - 1));
            ids[i] = switch (rnd.nextInt(8)) {
                case 0 -> 0;
                case 1 -> targets - 1;
                case 2, 3 -> edge;
                case 4, 5 -> hot[rnd.nextInt(hot.length)];
                default -> rnd.nextLong(targets);
            };
        }
        return ids;
    }

    /** n random elements of dtype t as their bits: floats of widely different sizes (so the order of the sums shows), integers over their whole range. */
    static long[] values(DType t, long n, SplittableRandom rnd) {
        long[] v = new long[(int) n];
        for (int i = 0; i < n; i++) {
            // f16 stays small: a sum past 65504 would be infinite, and infinities of both signs a NaN
            double g = rnd.nextGaussian() * Math.pow(10, t == DType.F16 ? rnd.nextInt(4) - 3 : rnd.nextInt(12) - 4);
            v[i] = switch (t) {
                case FLOAT32 -> Float.floatToRawIntBits((float) g);
                case FLOAT64 -> Double.doubleToRawLongBits(g);
                case BFLOAT16 -> bf16((float) g);
                case FLOAT16 -> Float.floatToFloat16((float) g);
                case INT8 -> (byte) rnd.nextInt();
                case INT32 -> rnd.nextInt();
                case INT64 -> rnd.nextLong();
                default -> throw new AssertionError(t);
            };
        }
        return v;
    }

    // ------------------------------------------------------------------ the plain loops

    /** x copied, then for each index element in row-major order: src's element at its coordinates added at them with dim's replaced by its value. */
    static long[] plainLoops(Case c, long[] x, long[] ids, long[] src) {
        long[] out = x.clone();
        for (long k = 0; k < ids.length; k++) {
            long[] at = GatherScatterGpuTest.unravel(k, c.is());
            long from = GatherScatterGpuTest.ravel(at, c.ss());
            at[c.dim()] = ids[(int) k];
            int to = (int) GatherScatterGpuTest.ravel(at, c.xs());
            out[to] = add(c.t(), out[to], src[(int) from]);
        }
        return out;
    }

    /** a + b on elements' bits, rounded as the host rounds: in the dtype (floats), through float (halves), wrapping (integers). */
    static long add(DType t, long a, long b) {
        return switch (t) {
            case FLOAT32 -> Float.floatToRawIntBits(Float.intBitsToFloat((int) a) + Float.intBitsToFloat((int) b));
            case FLOAT64 -> Double.doubleToRawLongBits(Double.longBitsToDouble(a) + Double.longBitsToDouble(b));
            case BFLOAT16 -> bf16(Float.intBitsToFloat((int) a << 16) + Float.intBitsToFloat((int) b << 16));
            case FLOAT16 -> Float.floatToFloat16(Float.float16ToFloat((short) a) + Float.float16ToFloat((short) b));
            case INT8 -> (byte) (a + b);
            case INT32 -> (int) (a + b);
            case INT64 -> a + b;
            default -> throw new AssertionError(t);
        };
    }

    /** A finite float rounded to bfloat16's bits, to nearest, ties to even. */
    static long bf16(float f) {
        int bits = Float.floatToRawIntBits(f);
        assertThat(Float.isFinite(f)).as("the cases' sums stay finite").isTrue();
        return (short) ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16);
    }

    static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) n *= s;
        return n;
    }

    // ------------------------------------------------------------------ bytes

    /** Elements' low {@code size} bytes, little-endian. */
    static byte[] bytes(long[] v, int size) {
        var b = ByteBuffer.allocate(v.length * size).order(ByteOrder.LITTLE_ENDIAN);
        for (long e : v)
            switch (size) {
                case 1 -> b.put((byte) e);
                case 2 -> b.putShort((short) e);
                case 4 -> b.putInt((int) e);
                default -> b.putLong(e);
            }
        return b.array();
    }

    /** The elements of {@code size} bytes in {@code data}, sign-extended as {@link #values} makes them. */
    static long[] elements(byte[] data, int size) {
        var b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
        long[] v = new long[data.length / size];
        for (int i = 0; i < v.length; i++)
            v[i] = switch (size) {
                case 1 -> b.get();
                case 2 -> b.getShort();
                case 4 -> b.getInt();
                default -> b.getLong();
            };
        return v;
    }

    /** An element's bits and value, for a failure's message. */
    static String show(DType t, long bits) {
        String value = switch (t) {
            case FLOAT32 -> Float.toString(Float.intBitsToFloat((int) bits));
            case FLOAT64 -> Double.toString(Double.longBitsToDouble(bits));
            case BFLOAT16 -> Float.toString(Float.intBitsToFloat((int) bits << 16));
            case FLOAT16 -> Float.toString(Float.float16ToFloat((short) bits));
            default -> Long.toString(bits);
        };
        return value + " (0x" + Long.toHexString(t.byteSize() == 8 ? bits : bits & ((1L << 8 * t.byteSize()) - 1)) + ")";
    }

}
