package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code expert_matmul} ({@link dev.gatun.ir.ops.ExpertMatmul}) on the GPU: the routed product of a mixture-of-experts
 * decode step, {@code y[p, :] = w[ids[p]] @ x[p or p / k, :]} for the {@code N * k} (token, choice) pairs p, by
 * {@link CudaGemv}'s one-row CUDA-core kernel ({@code gemv_fma<T, 1>}) with an indexed weight base: a launch's grid is
 * the GEMV's blocks for one [Out, In] matrix along x and the pairs along y; each block reads its pair's expert id from
 * {@code ids} on the device (after the wait for the kernel before it: the router's top-k writes them), and runs the
 * GEMV template unchanged on that expert's matrix, its pair's row of x and its pair's row of y. So each pair streams one
 * expert's weights in 16-byte vectors past the caches, exactly once, at the bandwidth the template reaches on a dense
 * decode product of that shape; there is no host synchronisation between the router and the product, and a captured
 * graph runs it as is. The GEMV's k-slices are chosen by {@link CudaGemv#launch}'s rule over all the pairs' tiles.
 * The weight's first loop is not loaded before the wait (as the dense GEMV's preload does): which expert to load is
 * what the wait gives.
 *
 * <p>An id outside {@code [0, E)} writes the executable's {@link DeviceFault} record ({@link DeviceFault#EXPERT}: the
 * id, its position in ids, the experts, k) and traps before any load from the weights; the message is the host
 * refusal's ({@link dev.gatun.ir.ops.ExpertMatmul#outOfRange}). Sums are float32, rounded once to the dtype.
 *
 * <p>Taken for f32, f16 and bf16 whose rows of {@code In} elements are a whole number of 16-byte vectors, at most
 * 65,535 pairs (a grid's y); {@link #refusal} names anything else when the plan loads. x and w are read as the GEMV
 * reads its operands (an input that does not lie 16-byte aligned is staged, {@code CudaExecutable#gemvOperand}).
 */
final class CudaExpertMatmul {
    /** The most (token, choice) pairs of a call: a grid's y dimension. */
    static final int MAX_PAIRS = 65_535;

    static final String SOURCE = CudaGemv.DEVICE + DeviceFault.SOURCE + """

            // expert_matmul: pair p = blockIdx.y (token p / choices, choice p % choices) multiplies its expert's [n, k] matrix
            // by x's row p (one row a choice) or p / choices (one row a token): the one-row GEMV on that expert's base
            template <typename T>
            __device__ __forceinline__ void gemv_routed(const T* x, const T* w, const long long* ids, T* y, int n, int k, int experts,
                                                        int choices, int rowPerChoice, int slices, int* claim, gatun_fault* fault, int step) {
                GATUN_DEPENDENT_START();   // the ids are the kernel before's (the router's top-k)
                const long long pair = blockIdx.y, e = ids[pair];
                if (e < 0 || e >= experts) gatun_fail(claim, fault, 5, step, e, pair, experts, choices);
                const long long row = rowPerChoice ? pair : pair / choices;
                gemv_fma_block<T, 1>(x + row * k, w + e * n * (long long) k, y + pair * n, n, k, n, 1, slices, 0, nullptr, blockIdx.x, true);
            }

            #define GV_ROUTED_ENTRY(T, NAME) \\
                extern "C" __global__ void __launch_bounds__(512) gemv_routed_##NAME(const T* x, const T* w, const long long* ids, T* y, int n, \\
                        int k, int experts, int choices, int rowPerChoice, int slices, int* claim, gatun_fault* fault, int step) { \\
                    gemv_routed<T>(x, w, ids, y, n, k, experts, choices, rowPerChoice, slices, claim, fault, step); }
            GV_ROUTED_ENTRY(float, f32)
            GV_ROUTED_ENTRY(__half, f16)
            GV_ROUTED_ENTRY(__nv_bfloat16, bf16)
            """;

    /** The entry point of each dtype. */
    static final Map<DType, String> ENTRIES = Map.of(DType.F32, "gemv_routed_f32", DType.F16, "gemv_routed_f16", DType.BF16, "gemv_routed_bf16");

    private final Map<String, Kernel> kernels = new HashMap<>();
    /** The device's multiprocessors, which a launch's k-slices fill. */
    final int sms;

    /**
     * Compiles the program and looks up every entry point now (not in the middle of a call: see
     * {@link LazyProgram#loadNow}), for a device of {@code sms} multiprocessors.
     */
    CudaExpertMatmul(LazyProgram.Compiler compiler, int sms) {
        this.sms = Math.max(1, sms);
        var program = new LazyProgram(compiler, "gatun_expert_matmul", SOURCE);
        for (String name : ENTRIES.values()) kernels.put(name, program.kernel(name));
    }

    /** Why the kernel cannot run expert_matmul call {@code o}, or null where it can (or {@code o} is another op). */
    static String refusal(Step.OpCall o) {
        if (o.spec() != dev.gatun.ir.ops.ExpertMatmul.SPEC) return null;
        DType t = o.input(0).dtype();
        String call = "expert_matmul (" + o.format().strip() + ")";
        if (!ENTRIES.containsKey(t)) return call + " of " + t + ": the CUDA kernel takes f32, f16 or bf16; run it in f32, or on the host backend";
        long in = o.input(1).shape().sizes()[2];
        if (in * t.byteSize() % 16 != 0)
            return call + ": rows of " + in + " " + t + " elements are not a whole number of 16-byte vectors, which the CUDA kernel reads;"
                    + " pad the experts' inputs to a multiple of " + 16 / t.byteSize() + " elements, or run this graph on the host backend";
        var ids = o.input(2).shape();
        if (ids.isStatic() && ids.sizes()[0] * ids.sizes()[1] > MAX_PAIRS)
            return call + ": " + ids.sizes()[0] * ids.sizes()[1] + " (token, choice) pairs, more than the kernel's " + MAX_PAIRS
                    + "; a step of that many tokens reads every expert anyway: compute it densely (MixtureOfExperts' prefill form)";
        return null;
    }

    /**
     * The launch of {@code y = expert_matmul(x, w, ids)}: {@code pairs} (token, choice) pairs of {@code choices} a token,
     * x with one row a pair ({@code rowPerChoice}) or a token, w {@code experts} matrices of {@code out} rows of
     * {@code in} elements of {@code t}, on a GPU of {@code sms} multiprocessors; none for no pairs.
     */
    static List<KernelLaunch> launches(DType t, long x, long w, long ids, long y, long pairs, int choices, boolean rowPerChoice, int experts, int out,
                                       int in, int sms, DeviceFault.Site f) {
        if (pairs == 0 || out == 0) return List.of();
        if (pairs > MAX_PAIRS)
            throw new dev.gatun.runtime.GatunRuntimeException("expert_matmul of " + pairs + " (token, choice) pairs: the CUDA kernel takes at most "
                    + MAX_PAIRS + "; compute a step of that many tokens densely (MixtureOfExperts' prefill form)");
        CudaGemv.Launch l = CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, out, in, sms, pairs);
        var args = new ArrayList<Object>(List.of(x, w, ids, y, out, in, experts, choices, rowPerChoice ? 1 : 0, l.slices(), f.claim(), f.record(), f.step()));
        return List.of(new KernelLaunch(ENTRIES.get(t), l.blocks(), (int) pairs, 32 * l.warps(), l.sharedBytes(), args));
    }

    /** {@code launches} on {@code stream}. */
    void run(List<KernelLaunch> launches, boolean programmatic, Stream stream) {
        for (KernelLaunch l : launches) l.launch(kernels, programmatic, stream);
    }
}
