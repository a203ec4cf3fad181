package dev.gatun.runtime.cuda;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;

/**
 * CUDA C of a fused collective launch ({@link Step.FusedCollective}): one kernel that runs the prologue, the
 * all-reduce and the epilogue on one tile per block.
 *
 * <p>A tile is whole rows where the epilogue is a row kernel, else a run of elements (a multiple of 16, so vectors
 * stay aligned); block b takes tile b of {@code ceil(items / grid)} items, the same on every rank. The phases:
 * <ol>
 *   <li>the prologue's {@link CudaCodegen#tile tile function} writes this tile of the collective's inputs (a one-shot
 *   that copies a caller's tensor in copies this tile instead);</li>
 *   <li>a one-shot: the block barrier, this tile reduced from every peer's slot into each result, the trailing
 *   barrier; a barrier-free all-reduce: this tile pushed into every member's slot of the call's round and reduced as
 *   its elements arrive ({@code barrier_free_tile}), member after member of a batch;</li>
 *   <li>{@code __syncthreads}, then the epilogue's tile function on the same tile, reading the results this block
 *   just stored (visible to its threads after the barrier).</li>
 * </ol>
 * Why that computes what the three launches would is the planner's {@code CollectiveFusion}: the epilogue reads only
 * this tile of what the earlier phases wrote, and what it writes over is this tile of the same bytes.
 *
 * <p>ABI: {@code (peers, rank, world, op, pads, epochs, timeout_ns, abort, header, round_bytes)} as the symmetric
 * kernels take them (pads and epochs 0 for a barrier-free all-reduce, header and round bytes 0 for a one-shot), then
 * per member {@code (offset, out, in)} (a one-shot's {@code in}: the caller's tensor to copy in, or 0), then the
 * prologue's arguments and the epilogue's, each as its kernel takes them ({@link CudaCodegen}), without grid bounds.
 */
final class CollectiveCodegen {
    private CollectiveCodegen() {}

    /**
     * A fused launch's source and geometry.
     *
     * @param items     rows of the epilogue (a row kernel), else elements of each member
     * @param rowLength elements per item (1 for elements)
     * @param granule   items per tile are a multiple of this (16 for elements, 1 for rows)
     * @param block     threads per block
     */
    record FusedSource(String name, String source, long items, long rowLength, int granule, int block, DType dtype,
                       boolean barrierFree, List<String> prologueSymbols, List<String> epilogueSymbols) {
        /**
         * One block per tile, at most {@code most} (all resident): a row each for a row epilogue; else as many as about
         * one 16-byte vector a thread needs for a one-shot, and {@link SymmetricKernels#BARRIER_FREE_ELEMENTS_PER_THREAD}
         * elements a thread for a barrier-free all-reduce, whatever the dtype ({@link Distributed#barrierFreeGrid}); a
         * barrier-free one at most {@link SymmetricKernels#BARRIER_FREE_MAX_BLOCKS} blocks.
         */
        long grid(int most) {
            if (barrierFree) most = Math.min(most, SymmetricKernels.BARRIER_FREE_MAX_BLOCKS);   // more stalled on two GPUs
            if (granule == 1) return SymmetricKernels.grid(items, 1, 1, most);   // a row a block
            int perThread = barrierFree ? SymmetricKernels.BARRIER_FREE_ELEMENTS_PER_THREAD : 16 / dtype.byteSize();
            return SymmetricKernels.grid(items, block, perThread, most);
        }
    }

    static FusedSource generate(Step.FusedCollective f) { return generate(f.name(), f.prologue(), f.collective(), f.epilogue()); }

    /** The same for a collective step with a prologue and an epilogue, either or both null (a batch of barrier-free all-reduces alone). */
    static FusedSource generate(String name, Step.Launch prologue, Step collective, Step.Launch epilogue) {
        List<Step.Collective> members = collective.collectives();
        Step.Collective first = members.getFirst();
        DType t = first.input().dtype();
        boolean free = first.call().algorithm() == Algorithm.BARRIER_FREE;
        long n = first.input().shape().numel();
        Kernel pro = prologue == null ? null : prologue.kernel(), epi = epilogue == null ? null : epilogue.kernel();
        CudaCodegen.TileFunction p = pro == null ? null : CudaCodegen.tile(pro), e = epi == null ? null : CudaCodegen.tile(epi);
        boolean rows = epi != null && epi.isReduction();
        long rowLength = rows ? n / product(epi.ranges()) : 1;
        long items = n / rowLength;
        int block = e != null && e.block() > 0 ? e.block() : SymmetricKernels.THREADS;

        var helpers = new LinkedHashSet<String>();
        if (p != null) helpers.addAll(p.helpers());
        if (e != null) helpers.addAll(e.helpers());
        var src = new StringBuilder();
        src.append("// ").append(name).append(": ").append(collective.format().lines().findFirst().orElse("")).append('\n');
        src.append("// generated by Gatun's CUDA backend: ").append(rows ? "tiles of whole rows (" + rowLength + " elements)" : "tiles of elements")
                .append(", ").append(block).append(" threads a block\n");
        src.append(SymmetricKernels.DEVICE).append('\n');
        src.append(CudaCodegen.prelude(false, false, (p != null && p.vectors()) || (e != null && e.vectors()), helpers));
        if (p != null) src.append(p.source()).append('\n');
        if (e != null) src.append(e.source()).append('\n');

        var params = new ArrayList<String>(List.of("const char* const* gt_peers", "int gt_rank", "int gt_world", "int gt_op", "u32* const* gt_pads",
                "u32* gt_epochs", "u64 gt_timeout", "const volatile u32* gt_abort", "long long gt_header", "long long gt_round_bytes"));
        for (int m = 0; m < members.size(); m++) params.addAll(List.of("long long gt_offset" + m, "void* gt_out" + m, "const char* gt_in" + m));
        if (p != null) params.addAll(CudaCodegen.tileParams(pro, p, "p_"));
        if (e != null) params.addAll(CudaCodegen.tileParams(epi, e, "e_"));
        src.append("extern \"C\" __global__ void __launch_bounds__(").append(block).append(") ").append(name).append("(\n        ")
                .append(String.join(",\n        ", params)).append(")\n{\n");
        String T = CudaCodegen.storageType(t);
        src.append("    // this block's tile: items [gt_b, gt_e), elements [gt_lo, gt_hi)\n");
        src.append("    const long long gt_tile = ((").append(items).append("LL + gridDim.x - 1) / gridDim.x + ").append(granule(rows) - 1).append(") / ")
                .append(granule(rows)).append(" * ").append(granule(rows)).append(";\n");
        src.append("    const long long gt_b = min(").append(items).append("LL, (long long) blockIdx.x * gt_tile), gt_e = min(").append(items).append("LL, gt_b + gt_tile);\n");
        src.append("    const long long gt_lo = gt_b * ").append(rowLength).append("LL, gt_hi = gt_e * ").append(rowLength).append("LL;\n");
        if (p != null) {
            src.append("    if (gt_lo < gt_hi) ").append(p.name()).append("(").append(CudaCodegen.tileArgs(pro, p, "p_")).append(", gt_lo, gt_hi").append(");   // the prologue\n");
            src.append("    __syncthreads();\n");
        }
        if (free) {
            for (int m = 0; m < members.size(); m++)
                src.append("    barrier_free_tile<").append(T).append(">(gt_peers, gt_offset").append(m).append(", gt_out").append(m).append(", gt_in").append(m)
                        .append(", ").append(n).append("LL, gt_lo, gt_hi, gt_rank, gt_world, gt_op, gt_header, gt_round_bytes, gt_timeout, gt_abort);\n");
        } else {
            for (int m = 0; m < members.size(); m++)
                src.append("    if (gt_in").append(m).append(" && gt_lo < gt_hi) copy_tile<").append(T).append(">(gt_in").append(m)
                        .append(", (char*) gt_peers[gt_rank] + gt_offset").append(m).append(", 0, gt_lo, gt_hi);   // path 2's copy, this tile\n");
            src.append("    block_barrier(gt_pads, gt_rank, gt_world, gt_epochs, gt_timeout, gt_abort);\n");
            for (int m = 0; m < members.size(); m++)
                src.append("    if (gt_lo < gt_hi) reduce_tile<").append(T).append(">(gt_peers, gt_offset").append(m).append(", gt_out").append(m)
                        .append(", 0, gt_lo, gt_hi, gt_world, gt_op);\n");
            src.append("    block_barrier(gt_pads, gt_rank, gt_world, gt_epochs, gt_timeout, gt_abort);   // every peer has read this tile\n");
        }
        if (e != null) {
            src.append("    __syncthreads();   // the results of this tile, stored by this block's threads\n");
            src.append("    if (gt_b < gt_e) ").append(e.name()).append("(").append(CudaCodegen.tileArgs(epi, e, "e_")).append(rows ? ", gt_b, gt_e" : ", gt_lo, gt_hi")
                    .append(");   // the epilogue\n");
        }
        src.append("}\n");
        return new FusedSource(name, src.toString(), items, rowLength, granule(rows), block, t, free,
                p == null ? List.of() : p.symbols(), e == null ? List.of() : e.symbols());
    }

    private static int granule(boolean rows) { return rows ? 1 : 16; }

    private static long product(List<dev.gatun.ir.SymInt> xs) {
        long p = 1;
        for (var x : xs) p *= x.constant();
        return p;
    }

    /** The buffers a kernel's arguments point at, in its ABI's order (inputs, then stores). */
    static List<PlanBuffer> pointers(Kernel k) {
        var out = new ArrayList<PlanBuffer>(k.inputs());
        k.stores().forEach(s -> out.add(s.buffer()));
        return out;
    }
}
