package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code gather} and {@code scatter_add} on the GPU, exactly as {@link dev.gatun.ir.ops.Gather} and
 * {@link dev.gatun.ir.ops.ScatterAdd}'s host bodies. Shapes of any rank up to {@link #MAX_RANK} are passed as sizes (x's,
 * the index's, the source's), padded with ones; each thread unravels its element's row-major position with the loop
 * over dimensions fully unrolled, so no kernel needs a stack frame.
 *
 * <p><b>gather</b>: one thread per index element copies x's element, as the element's bytes (one kernel per element
 * size, so every dtype, bool too). <b>scatter_add</b>: a thread owns a run of targets (coordinates along {@code dim}) of
 * one column (coordinates outside it): it copies x's elements there, then goes down its column of the index in order
 * and adds each source element that points into its run, in place, so every element of the result gets its additions
 * in the index's row-major order. Each addition is rounded to the dtype as the host rounds it (f16 and bf16 through
 * float, integers wrapping), so the sums are the host's bit for bit, never an atomic's order. The runs are cut for about
 * {@value #SCATTER_THREADS} threads; each reads its column of the index once. (One thread an element, the first form,
 * read the index once per element: an embedding's gradient in a Llama-3.2-1B training step took 426 ms on an H200.)
 *
 * <p>An index outside {@code [0, x.size(dim))} writes the executable's {@link DeviceFault} record (the value, its
 * position in the index, the bound, the dimension) and traps, as {@link CudaIndexSelect} does: gather checks in its
 * copy, scatter_add in a first launch over the index (an index that points nowhere would otherwise add nothing).
 */
final class CudaGatherScatter {
    /** The most dimensions a tensor may have here; CudaBackend refuses a plan with more when it loads it. */
    static final int MAX_RANK = 8;

    static final String SOURCE = Programmatic.SOURCE + DeviceFault.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            #define GS_MAX 8
            // eight sizes as kernel arguments (p0 .. p7), and the same as an array the unrolled loops index with constants
            #define GS_ARGS(p) long long p##0, long long p##1, long long p##2, long long p##3, long long p##4, long long p##5, long long p##6, long long p##7
            #define GS_ARRAY(a, p) const long long a[GS_MAX] = {p##0, p##1, p##2, p##3, p##4, p##5, p##6, p##7}

            __device__ __forceinline__ long long gs_index(const void* index, int index64, long long k) {
                return index64 ? ((const long long*) index)[k] : (long long) ((const int*) index)[k];
            }

            // a bad index: the value, its position in the index, the bound and the dimension go into the record (code 4)
            __device__ __forceinline__ void gs_check(long long v, long long k, long long bound, int dim, int* claim, gatun_fault* fault, int step) {
                if (v < 0 || v >= bound) gatun_fail(claim, fault, 4, step, v, k, bound, dim);
            }

            // out[k] = x[coordinates of index element k, the dim-th replaced by index[k]]
            template <typename U>
            __device__ __forceinline__ void gs_gather(const U* x, const void* index, int index64, U* out, long long n, long long bound, int rank, int dim,
                                      const long long* xs, const long long* is, int* claim, gatun_fault* fault, int step) {
                for (long long k = blockIdx.x * (long long) blockDim.x + threadIdx.x; k < n; k += (long long) gridDim.x * blockDim.x) {
                    long long v = gs_index(index, index64, k);
                    gs_check(v, k, bound, dim, claim, fault, step);
                    long long rest = k, at = 0, stride = 1;
                    #pragma unroll
                    for (int d = GS_MAX - 1; d >= 0; d--) {
                        if (d < rank) {
                            long long c = rest % is[d];
                            rest /= is[d];
                            at += (d == dim ? v : c) * stride;
                            stride *= xs[d];
                        }
                    }
                    out[k] = x[at];
                }
            }

            #define GS_GATHER(name, U) \\
                extern "C" __global__ void name(const U* x, const void* index, int index64, U* out, long long n, long long bound, int rank, int dim, \\
                                                GS_ARGS(x), GS_ARGS(i), int* claim, gatun_fault* fault, int step) { \\
                    GATUN_DEPENDENT_START(); \\
                    GS_ARRAY(xs, x); \\
                    GS_ARRAY(is, i); \\
                    gs_gather<U>((const U*) x, index, index64, out, n, bound, rank, dim, xs, is, claim, fault, step); \\
                }
            GS_GATHER(gather_1, unsigned char)
            GS_GATHER(gather_2, unsigned short)
            GS_GATHER(gather_4, unsigned int)
            GS_GATHER(gather_8, unsigned long long)

            // scatter_add's first launch: every index value inside [0, bound)
            extern "C" __global__ void scatter_check(const void* index, int index64, long long n, long long bound, int dim,
                                                     int* claim, gatun_fault* fault, int step) {
                GATUN_DEPENDENT_START();
                for (long long k = blockIdx.x * (long long) blockDim.x + threadIdx.x; k < n; k += (long long) gridDim.x * blockDim.x)
                    gs_check(gs_index(index, index64, k), k, bound, dim, claim, fault, step);
            }

            // one addition rounded as the host rounds it: f16 and bf16 through float, integers wrapping (two's complement)
            __device__ __forceinline__ float gs_add(float a, float b) { return a + b; }
            __device__ __forceinline__ double gs_add(double a, double b) { return a + b; }
            __device__ __forceinline__ __half gs_add(__half a, __half b) { return __float2half_rn(__half2float(a) + __half2float(b)); }
            __device__ __forceinline__ __nv_bfloat16 gs_add(__nv_bfloat16 a, __nv_bfloat16 b) {
                return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
            }
            __device__ __forceinline__ signed char gs_add(signed char a, signed char b) { return (signed char) (unsigned char) ((unsigned int) a + (unsigned int) b); }
            __device__ __forceinline__ int gs_add(int a, int b) { return (int) ((unsigned int) a + (unsigned int) b); }
            __device__ __forceinline__ long long gs_add(long long a, long long b) { return (long long) ((unsigned long long) a + (unsigned long long) b); }

            // A thread owns a run of `chunk` targets (coordinates along dim) of one column (x's coordinates outside dim;
            // consecutive threads take consecutive columns, so their accesses are coalesced): it copies x's elements there
            // into out, then goes down the column's index in order and adds each src element that points into its run to
            // out, in place. Each element of out has one owner and gets its additions in the index's row-major order, so
            // the sums are the host's; the work is every thread reading its column's index once (columns x runs x along),
            // where one thread an element read it once per element (x.numel() x along: 426 ms for a 1B model's embedding
            // gradient on an H200). Columns outside the index's size (a smaller index) are copied only. x's size along dim comes as an
            // argument of its own (`targets`): read as xs[dim], a runtime index, it would put xs in a stack frame.
            template <typename T>
            __device__ __forceinline__ void gs_scatter_add(const T* x, const void* index, int index64, const T* src, T* out, long long columns,
                                                           long long targets, long long along, long long chunk, int rank, int dim,
                                                           const long long* xs, const long long* is, const long long* ss) {
                const long long runs = (targets + chunk - 1) / chunk;
                for (long long w = blockIdx.x * (long long) blockDim.x + threadIdx.x; w < columns * runs; w += (long long) gridDim.x * blockDim.x) {
                    long long rest = w % columns, at_x = 0, at_i = 0, at_s = 0, stride_x = 1, stride_i = 1, stride_s = 1, step_x = 0, step_i = 0, step_s = 0;
                    bool inside = true;
                    #pragma unroll
                    for (int d = GS_MAX - 1; d >= 0; d--) {
                        if (d < rank) {
                            if (d == dim) {
                                step_x = stride_x;
                                step_i = stride_i;
                                step_s = stride_s;
                            } else {
                                long long c = rest % xs[d];
                                rest /= xs[d];
                                inside = inside && c < is[d];
                                at_x += c * stride_x;
                                at_i += c * stride_i;
                                at_s += c * stride_s;
                            }
                            stride_x *= xs[d];
                            stride_i *= is[d];
                            stride_s *= ss[d];
                        }
                    }
                    const long long lo = (w / columns) * chunk, hi = min(lo + chunk, targets);
                    for (long long g = lo; g < hi; g++) out[at_x + g * step_x] = x[at_x + g * step_x];
                    if (inside)
                        for (long long t = 0; t < along; t++) {
                            const long long target = gs_index(index, index64, at_i + t * step_i);
                            if (target >= lo && target < hi) {
                                T* o = out + at_x + target * step_x;
                                *o = gs_add(*o, src[at_s + t * step_s]);
                            }
                        }
                }
            }

            #define GS_SCATTER(name, T) \\
                extern "C" __global__ void name(const T* x, const void* index, int index64, const T* src, T* out, long long columns, long long targets, \\
                                                long long along, long long chunk, int rank, int dim, \\
                                                GS_ARGS(x), GS_ARGS(i), GS_ARGS(s)) { \\
                    GATUN_DEPENDENT_START(); \\
                    GS_ARRAY(xs, x); \\
                    GS_ARRAY(is, i); \\
                    GS_ARRAY(ss, s); \\
                    gs_scatter_add<T>((const T*) x, index, index64, src, out, columns, targets, along, chunk, rank, dim, xs, is, ss); \\
                }
            GS_SCATTER(scatter_add_f32, float)
            GS_SCATTER(scatter_add_f64, double)
            GS_SCATTER(scatter_add_f16, __half)
            GS_SCATTER(scatter_add_bf16, __nv_bfloat16)
            GS_SCATTER(scatter_add_i8, signed char)
            GS_SCATTER(scatter_add_i32, int)
            GS_SCATTER(scatter_add_i64, long long)
            """;

    /** gather's entry point by element size in bytes. */
    static final Map<Integer, String> GATHER = Map.of(1, "gather_1", 2, "gather_2", 4, "gather_4", 8, "gather_8");

    /** The threads a scatter_add's runs of targets are cut for (fewer where there are fewer elements). */
    static final long SCATTER_THREADS = 65_536;

    /** scatter_add's entry point by dtype (every one but bool). */
    static final Map<DType, String> SCATTER_ADD = scatterEntries();

    private static Map<DType, String> scatterEntries() {
        var m = new EnumMap<DType, String>(DType.class);
        for (DType t : DType.values()) if (t != DType.BOOL) m.put(t, "scatter_add_" + t.shortName());
        return m;
    }

    static final int BLOCK = 256;

    private final Map<String, Kernel> kernels = new HashMap<>();

    /** Compiles the program and looks up every entry point now (not in the middle of a call: see {@link LazyProgram#loadNow}). */
    CudaGatherScatter(LazyProgram.Compiler compiler) {
        var program = new LazyProgram(compiler, "gatun_gather_scatter", SOURCE);
        for (String name : GATHER.values()) kernels.put(name, program.kernel(name));
        for (String name : SCATTER_ADD.values()) kernels.put(name, program.kernel(name));
        kernels.put("scatter_check", program.kernel("scatter_check"));
    }

    /**
     * Why the kernels cannot run gather or scatter_add call {@code o} (a tensor of more than {@link #MAX_RANK}
     * dimensions), or null where they can (or {@code o} is another op).
     */
    static String refusal(dev.gatun.planner.Step.OpCall o) {
        String op = o.spec().name();
        if (!op.equals(dev.gatun.ir.ops.Gather.SPEC.name()) && !op.equals(dev.gatun.ir.ops.ScatterAdd.SPEC.name())) return null;
        int rank = o.input(0).shape().rank();
        if (rank <= MAX_RANK) return null;
        return op + " of tensors of rank " + rank + " (" + o.format().strip() + "): the CUDA kernel takes at most " + MAX_RANK
                + " dimensions; merge dimensions outside dim with reshape first, or run this graph on the host backend";
    }

    /**
     * The launch of {@code out = gather(x, dim, index)}: x of dtype {@code t} and shape {@code xShape}, the index (i32 or
     * i64) of shape {@code indexShape}, out of the index's shape.
     */
    static List<KernelLaunch> gather(long x, DType t, long[] xShape, long index, DType indexType, long[] indexShape, int dim, long out, DeviceFault.Site f) {
        long n = numel(indexShape);
        if (n == 0) return List.of();
        // the sizes along dim as arguments of their own: read from the arrays by a runtime index, they would need a stack frame
        var args = new ArrayList<Object>(List.of(x, index, indexType == DType.INT64 ? 1 : 0, out, n, xShape[dim], xShape.length, dim));
        sizes(args, xShape);
        sizes(args, indexShape);
        args.addAll(List.of(f.claim(), f.record(), f.step()));
        return List.of(launch(GATHER.get(t.byteSize()), n, args));
    }

    /**
     * The launches of {@code out = x.scatter_add(dim, index, src)}: x and src of dtype {@code t}, the index i32 or i64; a
     * check of the index first, then the sums (x's elements alone, for an empty index).
     */
    static List<KernelLaunch> scatterAdd(long x, DType t, long[] xShape, long index, DType indexType, long[] indexShape, long src, long[] srcShape,
                                         int dim, long out, DeviceFault.Site f) {
        long n = numel(xShape), indices = numel(indexShape);
        int index64 = indexType == DType.INT64 ? 1 : 0;
        var launches = new ArrayList<KernelLaunch>();
        if (indices > 0)
            launches.add(launch("scatter_check", indices, List.of(index, index64, indices, xShape[dim], dim, f.claim(), f.record(), f.step())));
        if (n == 0) return launches;
        // runs of targets a thread: enough threads (about 64K) to fill the GPU, each reading its column's index once
        long targets = xShape[dim], columns = n / targets;
        long runs = Math.clamp(SCATTER_THREADS / columns, 1, targets), chunk = Math.ceilDiv(targets, runs);
        // x's size along dim as an argument of its own, as gather's bound (read from the array by a runtime index: a stack frame)
        var args = new ArrayList<Object>(List.of(x, index, index64, src, out, columns, targets, indexShape[dim], chunk, xShape.length, dim));
        sizes(args, xShape);
        // an empty index reads nothing: a size 0 along dim loops no times, one elsewhere leaves every thread outside it
        sizes(args, indexShape);
        sizes(args, srcShape);
        launches.add(launch(SCATTER_ADD.get(t), columns * Math.ceilDiv(targets, chunk), args));   // the kernel's columns x runs
        return launches;
    }

    /** {@code launches} on {@code stream}. */
    void run(List<KernelLaunch> launches, boolean programmatic, Stream stream) {
        for (KernelLaunch l : launches) l.launch(kernels, programmatic, stream);
    }

    private static KernelLaunch launch(String name, long threads, List<Object> args) {
        if (name == null) throw new IllegalStateException("no kernel for these operands");   // the graph admits only dtypes with one
        return new KernelLaunch(name, (int) Math.min(Math.ceilDiv(threads, BLOCK), 65_535), BLOCK, args);
    }

    /** A shape's sizes as the kernels' eight arguments, padded with ones. */
    private static void sizes(List<Object> args, long[] shape) {
        if (shape.length > MAX_RANK) throw new IllegalStateException("a tensor of rank " + shape.length);   // refused when the plan loads
        for (int d = 0; d < MAX_RANK; d++) args.add(d < shape.length ? shape[d] : 1L);
    }

    private static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) n *= s;
        return n;
    }
}
