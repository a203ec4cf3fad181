package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.ops.Gather;
import dev.gatun.ir.ops.ScatterAdd;
import dev.gatun.ir.ops.TopK;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * topk, gather, scatter_add and expert_matmul's CUDA source run as host C++ (g++ and CUDA's own half-precision headers, through
 * {@code emulation/emulate.h}: a block's threads as threads, barriers and warp shuffles emulated) with exactly the
 * launches {@link CudaTopK#launches}, {@link CudaGatherScatter#gather}, {@link CudaGatherScatter#scatterAdd} and
 * {@link CudaExpertMatmul#launches} make, against the ops' host bodies, byte for byte (expert_matmul, which sums in
 * float32 as the GEMV does, against plain float64 loops within float32's sums and one rounding to the dtype): what the kernels compute (indexing, ties, NaN and -0, the order and
 * rounding of the sums, the traps' records) is checked without a GPU. Not checked here: the device's memory model and
 * speed (the GPU tests). Skipped where g++ or CUDA's headers are absent.
 */
class KernelEmulationTest {
    static final Path CUDA_INCLUDE = Path.of("/usr/local/cuda/include");

    @TempDir static Path dir;
    static Path emulator;

    @BeforeAll
    static void build() throws Exception {
        emulator = buildEmulator(dir);
    }

    /**
     * Builds the driver {@code emulation/emulate.cpp} over topk's, gather and scatter_add's and expert_matmul's sources in
     * {@code dir} (skipping the calling test class where g++ or CUDA's headers are absent); returns the program.
     */
    static Path buildEmulator(Path dir) throws Exception {
        Path gxx = HostCompiler.gxx();
        assumeTrue(gxx != null && Files.exists(CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent: skipping the emulation");
        HostCompiler.copy(dir, "/emulation/", "emulate.h", "emulate.cpp");
        // the one line a host cannot compile as it stands: the GEMV's dynamic shared memory, pointed at the emulation's array
        String routed = CudaExpertMatmul.SOURCE.replace("extern __shared__ float gv_part[];", "float* gv_part = emu_dynamic_shared;");
        assertThat(routed).isNotEqualTo(CudaExpertMatmul.SOURCE);
        // and the tensor cores' product, PTX, emulated (GV_MMA_EMULATED); the GEMV's entries after the device code routed holds
        int from = routed.indexOf("__device__ __forceinline__ void gv_mma("), to = routed.indexOf("__device__ __forceinline__ int ceil_div_gv(");
        assertThat(from).isPositive().isLessThan(to);
        routed = routed.substring(0, from) + GV_MMA_EMULATED + routed.substring(to);
        String gemvEntries = CudaGemv.SOURCE.substring(CudaGemv.DEVICE.length());
        Files.writeString(dir.resolve("kernels.inc"), CudaTopK.SOURCE + CudaGatherScatter.SOURCE + routed + gemvEntries);
        Process p = new ProcessBuilder(gxx.toString(), "-std=c++20", "-O1", "-pthread", "-I" + CUDA_INCLUDE, "-I" + dir, "emulate.cpp", "-o", "emulate")
                .directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(300, TimeUnit.SECONDS)).as("g++ finished").isTrue();
        assertThat(p.exitValue()).as(log).isZero();
        return dir.resolve("emulate");
    }

    /**
     * {@code mma.sync.aligned.m16n8k16.row.col.f32} of 16-bit inputs on a host: each lane posts its fragments (PTX's
     * layouts: a0 row g k 2t, 2t + 1; a1 row g + 8; a2 and a3 those rows at k + 8; b0 k 2t, 2t + 1 of column g, b1 at
     * k + 8; the lower half of a register the lower k), the warp meets, and each lane sums its four accumulators
     * (row g, g + 8; columns 2t, 2t + 1) in float32 over k in order. The tensor cores' own order and precision of that
     * sum are their own: the tests compare with tolerances. A warp's lanes meet at a barrier of their own, since a
     * block's warps may make different numbers of products (k-slices of different lengths).
     */
    static final String GV_MMA_EMULATED = """
            inline std::barrier<>* gv_emu_warp(unsigned w) {
                static std::barrier<>* all = [] {
                    auto* b = static_cast<std::barrier<>*>(::operator new(16 * sizeof(std::barrier<>)));
                    for (int i = 0; i < 16; i++) new (b + i) std::barrier<>(32);
                    return b;
                }();
                return all + w;
            }
            inline unsigned gv_emu_frag[512][6];
            inline float gv_emu_f(unsigned short u, const __half*) { __half h; std::memcpy(&h, &u, 2); return __half2float(h); }
            inline float gv_emu_f(unsigned short u, const __nv_bfloat16*) { __nv_bfloat16 h; std::memcpy(&h, &u, 2); return __bfloat162float(h); }
            template <typename H>
            void gv_mma(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1, const H* type) {
                const unsigned me = threadIdx.x, base = me & ~31u;
                unsigned* f = gv_emu_frag[me];
                f[0] = a0; f[1] = a1; f[2] = a2; f[3] = a3; f[4] = b0; f[5] = b1;
                gv_emu_warp(me >> 5)->arrive_and_wait();
                auto half = [&](unsigned reg, int kk) { return gv_emu_f((unsigned short) (kk & 1 ? reg >> 16 : reg & 0xffffu), type); };
                const int g = (me & 31) >> 2, t = me & 3;
                float out[4];
                for (int i = 0; i < 4; i++) {
                    const int r = g + (i >= 2 ? 8 : 0), c = 2 * t + (i & 1);
                    float s = d[i];
                    for (int kk = 0; kk < 16; kk++) {
                        const unsigned* qa = gv_emu_frag[base + (r & 7) * 4 + (kk & 7) / 2];
                        const unsigned* qb = gv_emu_frag[base + c * 4 + (kk & 7) / 2];
                        s += half(qa[(r >= 8 ? 1 : 0) + (kk >= 8 ? 2 : 0)], kk) * half(qb[4 + (kk >= 8 ? 1 : 0)], kk);
                    }
                    out[i] = s;
                }
                gv_emu_warp(me >> 5)->arrive_and_wait();
                for (int i = 0; i < 4; i++) d[i] = out[i];
            }
            """;

    /** What one emulated run left: each slot's bytes, and whether a kernel trapped. */
    record Result(Map<Long, byte[]> slots, boolean trapped) {}

    /** Runs {@code launches} on buffers in slots 1, 2, ... (the "addresses" the launches were made with). */
    static Result emulate(List<KernelLaunch> launches, Map<Long, byte[]> slots) throws IOException, InterruptedException {
        return emulate(emulator, launches, slots);
    }

    /** {@link #emulate(List, Map)} with the driver {@code emulator} ({@link #buildEmulator}), in a folder next to it. */
    static Result emulate(Path emulator, List<KernelLaunch> launches, Map<Long, byte[]> slots) throws IOException, InterruptedException {
        Path run = Files.createTempDirectory(emulator.getParent(), "run");
        for (var e : slots.entrySet()) Files.write(run.resolve("slot" + e.getKey() + ".bin"), e.getValue());
        var text = new StringBuilder("slots " + slots.keySet().stream().map(String::valueOf).collect(Collectors.joining(" ")) + "\n");
        for (KernelLaunch l : launches)
            text.append(l.kernel()).append(' ').append(l.grid()).append(l.gridY() > 1 ? "x" + l.gridY() : "").append(' ').append(l.block()).append(' ')
                    .append(l.args().stream().map(String::valueOf).collect(Collectors.joining(" "))).append('\n');
        Files.writeString(run.resolve("launches.txt"), text);
        Process p = new ProcessBuilder(emulator.toString()).directory(run.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("the emulation finished").isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        var back = new LinkedHashMap<Long, byte[]>();
        for (long s : slots.keySet()) back.put(s, Files.readAllBytes(run.resolve("slot" + s + ".bin")));
        return new Result(back, out.contains("TRAP"));
    }

    static byte[] bytes(NDArray a) { return a.segment().toArray(ValueLayout.JAVA_BYTE); }

    static NDArray array(DType t, byte[] data, long... shape) {
        var a = NDArray.zeros(t, shape);
        MemorySegment.copy(MemorySegment.ofArray(data), 0, a.segment(), 0, a.byteSize());
        return a;
    }

    static NDArray random(DType t, long[] shape, SplittableRandom rnd, boolean ties) {
        var x = NDArray.zeros(t, shape);
        double[] special = {-2, -1, -0.0, 0.0, 0.5, 1, 3, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY};
        for (long i = 0; i < x.numel(); i++)
            switch (t) {
                case BOOL -> x.setLong(i, rnd.nextInt(2));
                case INT8 -> x.setLong(i, ties ? rnd.nextInt(5) - 2 : rnd.nextInt(256) - 128);
                case INT32 -> x.setLong(i, ties ? rnd.nextInt(5) - 2 : rnd.nextInt());
                case INT64 -> x.setLong(i, ties ? (rnd.nextBoolean() ? Long.MIN_VALUE + rnd.nextInt(2) : Long.MAX_VALUE - rnd.nextInt(2)) : rnd.nextLong());
                default -> x.set(i, ties && rnd.nextBoolean() ? special[rnd.nextInt(special.length)]
                        : rnd.nextGaussian() * (rnd.nextInt(4) == 0 ? (t == DType.F16 ? 300 : 1e4) : 1) * (rnd.nextInt(8) == 0 ? 1e-3 : 1));
            }
        return x;
    }

    static final List<DType> NUMBERS = List.of(DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I32, DType.I64);

    /** Rows of ties, NaNs and both zeros, rows longer than a block (each thread several elements), k from 1 to the row. */
    @Test
    void topkPicksWhatTheHostBodyPicks() throws Exception {
        var rnd = new SplittableRandom(41);
        for (int trial = 0; trial < 42; trial++) {
            DType t = NUMBERS.get(trial % NUMBERS.size());
            long rows = 1 + rnd.nextInt(4), cols = switch (trial % 3) { case 0 -> 1 + rnd.nextInt(8); case 1 -> 30 + rnd.nextInt(100); default -> 257 + rnd.nextInt(300); };
            // the whole row as k (a stable sort, ranked by counting) for short and long rows; else k up to 9, which takes
            // the rounds on the longer rows and counting on the shortest (CudaTopK's tk_counts)
            int k = trial % 2 == 0 && trial % 3 != 1 ? (int) cols : 1 + rnd.nextInt((int) Math.min(cols, 9));
            NDArray x = random(t, new long[]{rows, cols}, rnd, true);
            NDArray values = NDArray.zeros(t, rows, k), indices = NDArray.zeros(DType.I64, rows, k);
            TopK.SPEC.host(List.<HostTensor>of(x), List.<HostTensor>of(values, indices), OpAttrs.of(TopK.SPEC, Map.of("k", k)));
            var r = emulate(CudaTopK.launches(1, t, 2, 3, rows, cols, k), Map.of(1L, bytes(x), 2L, new byte[(int) values.byteSize()], 3L,
                    new byte[(int) indices.byteSize()]));
            String what = t + " [" + rows + ", " + cols + "] k=" + k;
            assertThat(r.trapped()).isFalse();
            assertThat(array(DType.I64, r.slots().get(3L), rows, k).toDoubleArray()).as(what + ": indices").containsExactly(indices.toDoubleArray());
            assertThat(r.slots().get(2L)).as(what + ": values, byte for byte").isEqualTo(bytes(values));
        }
    }

    static long[] shape(int rank, SplittableRandom rnd) {
        long[] s = new long[rank];
        for (int d = 0; d < rank; d++) s[d] = 1 + rnd.nextInt(d == rank - 1 && rnd.nextBoolean() ? 40 : 5);
        return s;
    }

    static long[] within(long[] of, int free, SplittableRandom rnd) {
        long[] s = of.clone();
        for (int d = 0; d < s.length; d++) s[d] = d == free ? 1 + rnd.nextInt(7) : rnd.nextBoolean() ? of[d] : 1 + rnd.nextLong(of[d]);
        return s;
    }

    static NDArray index(DType t, long[] shape, long bound, SplittableRandom rnd) {
        var ids = NDArray.zeros(t, shape);
        for (long i = 0; i < ids.numel(); i++) ids.setLong(i, rnd.nextLong(bound));
        return ids;
    }

    static final long CLAIM = 90, RECORD = 91;

    static Map<Long, byte[]> withFault(Map<Long, byte[]> slots) {
        var m = new LinkedHashMap<>(slots);
        m.put(CLAIM, new byte[4]);
        m.put(RECORD, new byte[(int) DeviceFault.RECORD_BYTES]);
        return m;
    }

    @Test
    void gatherCopiesWhatTheHostBodyCopies() throws Exception {
        var rnd = new SplittableRandom(43);
        for (int trial = 0; trial < 64; trial++) {
            DType t = DType.values()[trial % DType.values().length], idType = trial % 3 == 0 ? DType.I32 : DType.I64;
            int rank = 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
            long[] xs = shape(rank, rnd), is = within(xs, dim, rnd);
            NDArray x = random(t, xs, rnd, false), ids = index(idType, is, xs[dim], rnd), want = NDArray.zeros(t, is);
            Gather.SPEC.host(List.<HostTensor>of(x, ids), List.<HostTensor>of(want), OpAttrs.of(Gather.SPEC, Map.of("dim", dim)));
            var r = emulate(CudaGatherScatter.gather(1, t, xs, 2, idType, is, dim, 3, new DeviceFault.Site(CLAIM, RECORD, 5)),
                    withFault(Map.of(1L, bytes(x), 2L, bytes(ids), 3L, new byte[(int) want.byteSize()])));
            assertThat(r.trapped()).isFalse();
            assertThat(r.slots().get(3L)).as("gather %s x%s dim %d index %s%s", t, Arrays.toString(xs), dim, idType, Arrays.toString(is)).isEqualTo(bytes(want));
        }
    }

    @Test
    void scatterAddSumsWhatTheHostBodySumsInItsOrder() throws Exception {
        var rnd = new SplittableRandom(47);
        for (int trial = 0; trial < 70; trial++) {
            DType t = NUMBERS.get(trial % NUMBERS.size()), idType = trial % 3 == 0 ? DType.I32 : DType.I64;
            int rank = 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
            long[] xs = shape(rank, rnd), is = within(xs, dim, rnd), ss = is.clone();
            for (int d = 0; d < rank; d++) if (rnd.nextInt(3) == 0) ss[d] += 1 + rnd.nextInt(3);
            long bound = Math.min(xs[dim], 1 + rnd.nextInt(3));   // few targets: many repeats
            NDArray x = random(t, xs, rnd, false), ids = index(idType, is, bound, rnd), src = random(t, ss, rnd, false), want = NDArray.zeros(t, xs);
            ScatterAdd.SPEC.host(List.<HostTensor>of(x, ids, src), List.<HostTensor>of(want), OpAttrs.of(ScatterAdd.SPEC, Map.of("dim", dim)));
            var r = emulate(CudaGatherScatter.scatterAdd(1, t, xs, 2, idType, is, 3, ss, dim, 4, new DeviceFault.Site(CLAIM, RECORD, 5)),
                    withFault(Map.of(1L, bytes(x), 2L, bytes(ids), 3L, bytes(src), 4L, new byte[(int) want.byteSize()])));
            assertThat(r.trapped()).isFalse();
            assertThat(r.slots().get(4L)).as("scatter_add %s x%s dim %d index %s%s src%s", t, Arrays.toString(xs), dim, idType, Arrays.toString(is),
                    Arrays.toString(ss)).isEqualTo(bytes(want));
        }
    }

    /** The sums' order matters here (1e8 + 1 - 1e8 in f32): the index's row-major order, not another, gives the host's value. */
    @Test
    void scatterAddsOrderIsTheIndexsRowMajorOrder() throws Exception {
        NDArray x = NDArray.zeros(DType.F32, 1, 2), ids = NDArray.of(DType.I64, new double[]{0, 0, 0, 0, 0, 0}, 3, 2),
                src = NDArray.of(DType.F32, new double[]{1e8, 1, 1, 1e8, -1e8, -1e8}, 3, 2), want = NDArray.zeros(DType.F32, 1, 2);
        ScatterAdd.SPEC.host(List.<HostTensor>of(x, ids, src), List.<HostTensor>of(want), OpAttrs.of(ScatterAdd.SPEC, Map.of("dim", 0)));
        assertThat(want.toDoubleArray()).as("the host's sums: (1e8 + 1) - 1e8 and (1 + 1e8) - 1e8 in float32").containsExactly(0, 0);
        var r = emulate(CudaGatherScatter.scatterAdd(1, DType.F32, new long[]{1, 2}, 2, DType.I64, new long[]{3, 2}, 3, new long[]{3, 2}, 0, 4,
                new DeviceFault.Site(CLAIM, RECORD, 5)), withFault(Map.of(1L, bytes(x), 2L, bytes(ids), 3L, bytes(src), 4L, new byte[8])));
        assertThat(r.slots().get(4L)).isEqualTo(bytes(want));
    }

    /** An index outside x's dimension traps with the record DeviceFault reads: code, step, value, position, bound, dimension. */
    @Test
    void aBadIndexTrapsWithItsRecord() throws Exception {
        NDArray x = NDArray.random(DType.F32, 1, 4, 3), ids = NDArray.of(DType.I64, new double[]{0, 2, 1, 3}, 2, 2);
        var gather = emulate(CudaGatherScatter.gather(1, DType.F32, new long[]{4, 3}, 2, DType.I64, new long[]{2, 2}, 1, 3,
                new DeviceFault.Site(CLAIM, RECORD, 5)), withFault(Map.of(1L, bytes(x), 2L, bytes(ids), 3L, new byte[16])));
        assertThat(gather.trapped()).isTrue();
        assertRecord(gather.slots().get(RECORD), 5, 3, 3, 3, 1);
        NDArray bad = NDArray.of(DType.I32, new double[]{0, 3, 3, 1, -1, 2}, 2, 3), src = NDArray.random(DType.F32, 2, 2, 3);
        var scatter = emulate(CudaGatherScatter.scatterAdd(1, DType.F32, new long[]{4, 3}, 2, DType.I32, new long[]{2, 3}, 3, new long[]{2, 3}, 0, 4,
                new DeviceFault.Site(CLAIM, RECORD, 6)), withFault(Map.of(1L, bytes(x), 2L, bytes(bad), 3L, bytes(src), 4L, new byte[48])));
        assertThat(scatter.trapped()).isTrue();
        assertRecord(scatter.slots().get(RECORD), 6, -1, 4, 4, 0);
        assertThat(scatter.slots().get(4L)).as("no sum was written: the check runs first").containsOnly(0);
    }

    /**
     * expert_matmul's routed GEMV: random pairs (1 to 4 choices a token, x one row a choice or a token, ids repeated),
     * f32, f16 and bf16, rows long enough that the launch cuts them into k-slices, against plain float64 loops: within
     * float32's sums (1e-5 of the sum of |x w|) and one rounding to the dtype. Every launch is CudaExpertMatmul's own.
     */
    @Test
    void expertMatmulIsThePlainLoopsProduct() throws Exception {
        var rnd = new SplittableRandom(53);
        boolean sliced = false;
        for (int trial = 0; trial < 12; trial++) {
            DType t = List.of(DType.F32, DType.F16, DType.BF16).get(trial % 3);
            int perVector = 16 / t.byteSize(), tokens = 1 + rnd.nextInt(3), k = 1 + rnd.nextInt(4), experts = 1 + rnd.nextInt(5);
            int out = 1 + rnd.nextInt(12), in = perVector * (trial % 4 == 3 ? 128 + rnd.nextInt(8) : 1 + rnd.nextInt(24));
            boolean perChoice = k > 1 && rnd.nextBoolean();
            int xRows = tokens * (perChoice ? k : 1);
            NDArray x = NDArray.zeros(t, xRows, in), w = NDArray.zeros(t, experts, out, in), ids = NDArray.zeros(DType.I64, tokens, k);
            for (long i = 0; i < x.numel(); i++) x.set(i, rnd.nextGaussian());
            for (long i = 0; i < w.numel(); i++) w.set(i, rnd.nextGaussian() * 0.1);
            for (long i = 0; i < ids.numel(); i++) ids.setLong(i, rnd.nextInt(Math.min(experts, 2)));
            var launches = CudaExpertMatmul.launches(t, 1, 2, 3, 4, (long) tokens * k, k, perChoice, experts, out, in, 132, new DeviceFault.Site(CLAIM, RECORD, 7));
            sliced |= (int) launches.getFirst().args().get(9) > 1;
            var r = emulate(launches, withFault(Map.of(1L, bytes(x), 2L, bytes(w), 3L, bytes(ids), 4L, new byte[tokens * k * out * t.byteSize()])));
            assertThat(r.trapped()).isFalse();
            NDArray y = array(t, r.slots().get(4L), tokens, k, out);
            double unit = t == DType.F32 ? 0x1p-24 : t == DType.F16 ? 0x1p-11 : 0x1p-8;
            for (int p = 0; p < tokens * k; p++)
                for (int o = 0; o < out; o++) {
                    long e = ids.getLong(p), row = perChoice ? p : p / k;
                    double dot = 0, size = 0;
                    for (int i = 0; i < in; i++) {
                        double term = x.get(row * in + i) * w.get((e * out + o) * in + i);
                        dot += term;
                        size += Math.abs(term);
                    }
                    assertThat(y.get((long) p * out + o)).as("%s tokens %d k %d experts %d out %d in %d per choice %s: pair %d column %d", t, tokens, k,
                            experts, out, in, perChoice, p, o).isCloseTo(dot, org.assertj.core.data.Offset.offset(1e-5 * size + Math.abs(dot) * unit + 1e-30));
                }
        }
        assertThat(sliced).as("some launch cut its rows into k-slices").isTrue();
    }

    /**
     * The plain GEMV kernels ({@code gemv_fma_*_M}, {@code gemv_mma_*}, the tensor cores' product emulated) with
     * {@link CudaGemv#launch}'s launches for 1 or 2 multiprocessors (so k-slices, 1 to 16), at the Llama decode
     * shapes scaled down and at odd ones (rows of the weight that end mid-way through a loop, columns that fill no tile,
     * 1 to 8 rows of x, float32, float16, bfloat16), against plain float64 loops within GemvGpuTest's tolerance; and each
     * launch again with its grid capped (a plan's {@code resident}: the blocks past the grid looped over), with and
     * without the first loop loaded before the wait, byte for byte the same output: the same sums in the same order.
     */
    @Test
    void gemvIsThePlainLoopsProductWithItsGridCappedOrNot() throws Exception {
        var rnd = new SplittableRandom(59);
        // {n, k}: q|k|v, o, gate|up, down at a sixteenth or so; then odd: k of 37 and 129 vectors, 37 and 1 columns
        int[][] shapes = {{192, 128}, {128, 128}, {512, 128}, {128, 512}, {37, 296}, {5, 1032}, {1, 64}, {70, 2056}};
        boolean looped = false, sliced = false;
        int trial = 0;
        for (int[] nk : shapes)
            for (DType t : List.of(DType.F32, DType.F16, DType.BF16)) {
                int n = nk[0], k = nk[1], m = 1 + (trial++ * 3) % 8;
                if (t == DType.F32 && k % 4 != 0) continue;
                var paths = t == DType.F32 ? List.of(CudaGemv.Path.CUDA_CORES) : List.of(CudaGemv.Path.CUDA_CORES, CudaGemv.Path.TENSOR_CORES);
                NDArray x = NDArray.zeros(t, m, k), w = NDArray.zeros(t, n, k);
                for (long i = 0; i < x.numel(); i++) x.set(i, rnd.nextGaussian());
                for (long i = 0; i < w.numel(); i++) w.set(i, rnd.nextGaussian());
                double[] want = GemvGpuTest.linear(x, w, m, n, k);
                for (CudaGemv.Path path : paths) {
                        int sms = 1 + (trial + path.ordinal()) % 2;
                        CudaGemv.Launch l = CudaGemv.launch(t, path, m, n, k, sms);
                        sliced |= l.slices() > 1;
                        byte[] first = null;
                        // the whole grid; capped at one block of the launch's warps (every block past the first looped over)
                        for (int resident : new int[]{0, l.warps()}) {
                            int grid = l.grid(1, resident);
                            looped |= grid < l.blocks();
                            int preload = resident == 0 ? 0 : 1;
                            var launch = new KernelLaunch(l.kernel(), grid, 1, 32 * l.warps(), l.sharedBytes(),
                                    List.of(1L, 2L, 3L, n, k, (long) n, m, l.slices(), preload));
                            var r = emulate(List.of(launch), Map.of(1L, bytes(x), 2L, bytes(w), 3L, new byte[m * n * t.byteSize()]));
                            assertThat(r.trapped()).isFalse();
                            String what = String.format("%s %s m %d n %d k %d: %d slices, %d warps, grid %d of %d blocks", t, path, m, n, k, l.slices(),
                                    l.warps(), grid, l.blocks());
                            GemvGpuTest.check(what, t, want, array(t, r.slots().get(3L), m, n).toDoubleArray(), k);
                            if (first == null) first = r.slots().get(3L);
                            else assertThat(r.slots().get(3L)).as(what + ": as the whole grid's, byte for byte").isEqualTo(first);
                        }
                    }
            }
        assertThat(sliced).as("some launch cut its rows into k-slices").isTrue();
        assertThat(looped).as("some capped grid looped over blocks").isTrue();
    }

    /** An id outside the experts traps before any product, with the record DeviceFault reads in the host refusal's words. */
    @Test
    void aBadExpertIdTrapsWithItsRecord() throws Exception {
        NDArray x = NDArray.random(DType.F32, 1, 2, 8), w = NDArray.random(DType.F32, 2, 3, 3, 8), ids = NDArray.of(new long[]{1, 0, 3, -1}, 2, 2);
        var r = emulate(CudaExpertMatmul.launches(DType.F32, 1, 2, 3, 4, 4, 2, false, 3, 3, 8, 132, new DeviceFault.Site(CLAIM, RECORD, 9)),
                withFault(Map.of(1L, bytes(x), 2L, bytes(w), 3L, bytes(ids), 4L, new byte[4 * 3 * 4])));
        assertThat(r.trapped()).isTrue();
        var rec = MemorySegment.ofArray(r.slots().get(RECORD));
        assertThat(rec.get(ValueLayout.JAVA_INT_UNALIGNED, 0)).as("code").isEqualTo(DeviceFault.EXPERT);
        assertThat(rec.get(ValueLayout.JAVA_INT_UNALIGNED, 4)).as("step").isEqualTo(9);
        long[] v = {rec.get(ValueLayout.JAVA_LONG_UNALIGNED, 8), rec.get(ValueLayout.JAVA_LONG_UNALIGNED, 16), rec.get(ValueLayout.JAVA_LONG_UNALIGNED, 24),
                rec.get(ValueLayout.JAVA_LONG_UNALIGNED, 32)};
        assertThat(v).containsExactly(3, 2, 3, 2);
        String host = dev.gatun.ir.ops.ExpertMatmul.SPEC.refusal(List.<HostTensor>of(x, w, ids), OpAttrs.of(dev.gatun.ir.ops.ExpertMatmul.SPEC, Map.of()));
        assertThat(dev.gatun.ir.ops.ExpertMatmul.outOfRange(v[0], v[1], v[3], v[2])).isEqualTo(host).contains("expert id 3 at position 2 [1, 0]");
    }

    static void assertRecord(byte[] record, int step, long value, long position, long bound, long dim) {
        var r = MemorySegment.ofArray(record);
        assertThat(r.get(ValueLayout.JAVA_INT_UNALIGNED, 0)).as("code").isEqualTo(DeviceFault.INDEX_ALONG);
        assertThat(r.get(ValueLayout.JAVA_INT_UNALIGNED, 4)).as("step").isEqualTo(step);
        assertThat(new long[]{r.get(ValueLayout.JAVA_LONG_UNALIGNED, 8), r.get(ValueLayout.JAVA_LONG_UNALIGNED, 16), r.get(ValueLayout.JAVA_LONG_UNALIGNED, 24),
                r.get(ValueLayout.JAVA_LONG_UNALIGNED, 32)}).containsExactly(value, position, bound, dim);
    }
}
