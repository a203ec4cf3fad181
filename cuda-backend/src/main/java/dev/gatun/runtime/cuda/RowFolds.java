package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.cuda.CudaExpressions.Domain;

import static dev.gatun.runtime.cuda.CudaExpressions.identity;

/**
 * The folds of a row kernel's per-row values ({@link Kernel.Fold}), written after its rows: the last block to finish
 * folds every row's value into each fold's one element, so one launch does what a second kernel over the rows'
 * values would.
 */
final class RowFolds {
    private final KernelScope scope;
    private final CudaExpressions ex;
    private final Kernel k;
    private final DType[] outTypes;

    RowFolds(KernelScope scope, CudaExpressions ex) {
        this.scope = scope;
        this.ex = ex;
        k = scope.k;
        outTypes = scope.outTypes;
    }

    /**
     * The folds of the per-row values ({@link Kernel.Fold}), after the rows: each block counts itself done with an
     * acquire-release atomic that publishes its rows' stores; the last one reads every row's value back (from L2, as stored)
     * and folds them in row order through the usual warp and block tree, then sets the counter back to 0 for the
     * next launch. One launch where a second kernel would read the rows' values.
     */
    void write() {
        scope.line(1, "__shared__ bool gt_last;", "the folds: the last block to finish folds every row's value");
        // the barrier orders the block's per-row stores before thread 0's count, which releases them at GPU scope
        // (a release is cumulative) and, in the last block, acquires every other block's; no fence in every thread
        scope.line(1, "__syncthreads();", null);
        scope.line(1, "if (threadIdx.x == 0) {", null);
        scope.line(2, "unsigned int gt_before;", null);
        scope.line(2, "asm volatile(\"atom.add.acq_rel.gpu.u32 %0, [%1], 1;\" : \"=r\"(gt_before) : \"l\"(gt_done) : \"memory\");", null);
        scope.line(2, "gt_last = gt_before == gridDim.x - 1;", null);
        scope.line(1, "}", null);
        scope.line(1, "__syncthreads();", "the last block's threads see what its thread 0 acquired");
        scope.line(1, "if (gt_last) {", null);
        scope.line(2, "const int gt_lane = threadIdx.x & 31, gt_warp = threadIdx.x >> 5, gt_warps = (blockDim.x + 31) >> 5;", null);
        for (int f = 0; f < k.folds().size(); f++) fold(f);
        scope.line(2, "if (threadIdx.x == 0) *gt_done = 0u;", "zero again for the next launch");
        scope.line(1, "}", null);
    }

    /** Fold f: every row's value read back, folded by the block in row order, its result written by thread 0. */
    private void fold(int f) {
        var fold = k.folds().get(f);
        int of = fold.of();
        DType rowType = outTypes[of];
        Domain acc = Domain.of(rowType);
        ReduceFn fn = fold.fn(); // a mean accumulates as a sum (combine, identity) and divides in result
        scope.line(2, "{", "fold" + f + " = " + fold.fn().opName() + " of " + k.stores().get(of).buffer().name());
        scope.line(3, "__shared__ " + acc.c + " gt_fold" + f + "[32];", null);
        scope.line(3, acc.c + " acc = " + identity(fn, acc) + ";", null);
        String head = "0";
        if (rowType == DType.FLOAT32) {
            // f32 values four to a load where aligned: 4096 rows are then four loads a thread, all in flight at once
            // (one wait on L2, not two); measured on an H100 with the loop-ordering seed's tail
            head = "gt_head" + f;
            scope.line(3, "long long " + head + " = 0;", null);
            scope.line(3, "if ((reinterpret_cast<unsigned long long>(out" + of + ") & 15ull) == 0) {", "four values a load");
            scope.line(4, head + " = total / 4 * 4;", null);
            scope.line(4, "#pragma unroll 4", null);
            scope.line(4, "for (long long v = threadIdx.x; v < total / 4; v += blockDim.x) {", null);
            scope.line(5, "float4 q = __ldcg(reinterpret_cast<const float4*>(out" + of + ") + v);", null);
            scope.line(5, "acc = " + ex.combine(fn, acc, ex.combine(fn, acc, ex.combine(fn, acc, ex.combine(fn, acc, "acc", "q.x"), "q.y"), "q.z"), "q.w") + ";", null);
            scope.line(4, "}", null);
            scope.line(3, "}", null);
        }
        scope.line(3, "#pragma unroll 8", "8 loads in flight, not one at a time");
        scope.line(3, "for (long long r = " + head + " + threadIdx.x; r < total; r += blockDim.x) acc = " + ex.combine(fn, acc, "acc",
                ex.convert(foldLoad(rowType, "out" + of + " + r"), rowType, acc.type)) + ";", null);
        scope.line(3, "for (int d = 16; d > 0; d >>= 1) acc = " + ex.combine(fn, acc, "acc", "__shfl_down_sync(0xffffffffu, acc, d)") + ";", null);
        scope.line(3, "if (gt_lane == 0) gt_fold" + f + "[gt_warp] = acc;", null);
        scope.line(3, "__syncthreads();", null);
        scope.line(3, "if (threadIdx.x == 0) {", null);
        scope.line(4, "for (int w = 1; w < gt_warps; w++) acc = " + ex.combine(fn, acc, "acc", "gt_fold" + f + "[w]") + ";", "in the same order every launch");
        scope.line(4, "fold" + f + "[0] = " + ex.store(ex.result(fn, fold.dtype(), acc, "acc", "total"), k.held(fold.dtype()), fold.buffer().dtype()) + ";",
                fold.buffer().name());
        scope.line(3, "}", null);
        scope.line(3, "__syncthreads();", null);
        scope.line(2, "}", null);
    }

    /** A value of {@code t} read past the L1 cache (another block stored it), in its value type's C expression. */
    private static String foldLoad(DType t, String pointer) {
        return switch (t) {
            case BFLOAT16 -> "__bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(" + pointer + "))))";
            case FLOAT16 -> "__half2float(__ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(" + pointer + "))))";
            case BOOL -> "(__ldcg(reinterpret_cast<const unsigned char*>(" + pointer + ")) != 0)";
            case INT8 -> "(signed char) __ldcg(reinterpret_cast<const signed char*>(" + pointer + "))";
            case FLOAT32, FLOAT64, INT32, INT64 -> "__ldcg(" + pointer + ")";
        };
    }
}
