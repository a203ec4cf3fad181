package dev.gatun.planner;

import dev.gatun.ir.CompilationException;

/**
 * Options of planning. Every transformation a backend applies to the steps is one of these planner passes, so the
 * printed plan, its fingerprint and the host simulation are what the GPU runs.
 *
 * @param commGranularity    allocation granularity of symmetric memory the backend reports (host: 1; CUDA VMM: 2 MiB)
 * @param regularGranularity allocation granularity of the regular arena
 * @param reorder            try memory-aware orders and keep the best (never worse than the plain order)
 * @param inPlace            let an elementwise kernel write over a dead input of identical size (regular buffers only)
 * @param fuseCopyIns        let a symmetric collective that reads a path-2 input copy the caller's tensor in itself,
 *                           before its first barrier, instead of a separate copy_in step
 * @param batchCollectives   the most consecutive one-shot all-reduces run as one launch, and the most independent
 *                           all_to_alls of one group joined into one step with one barrier pair (1: each on its own)
 * @param roundEachOp        round every f16/bf16 op's result to its type inside fused kernels, as the reference
 *                           interpreter and eager PyTorch do; off (the default), a fused kernel holds its f16/bf16
 *                           intermediates in float32 and rounds what it stores, as {@code torch.compile} and XLA do:
 *                           more accurate, and fewer conversions
 * @param fuseCollectives    let a one-shot or barrier-free all-reduce take in the kernel that writes its inputs and the
 *                           one that reads its results, as one launch ({@code CollectiveFusion})
 * @param attentionUpdates   let an attention take in the update of its caches at its position just before it, as one
 *                           launch ({@code AttentionUpdates})
 * @param productEpilogues   let a product of a few rows take in the kernels after it that read its output wherever the
 *                           same-tiles rule holds, as one launch ({@code ProductEpilogues}): a SwiGLU or GeGLU, a bias, a
 *                           rotary embedding however it is spelled, a norm over each head, a residual add, a cast. On
 *                           by default: on an H200 the Llama-1B decode step measured 0.948 ms a token with it against
 *                           0.973 apart (batch 8: 1.096 against 1.207), the same tokens; the joined kernel holds no more
 *                           registers than the product's alone (its epilogues' table waits in shared memory)
 * @param programmaticLaunch whether the plan's own kernels are programmatic dependent launches (each may start while the
 *                           one before it ends; {@code Plan.launches()} prints the decision): by default where that
 *                           was measured to pay, or always, or never (GATUN_PROGRAMMATIC_LAUNCH=1 or 0)
 * @param target             the GPU the launch choices are made for ({@code LaunchChoices}): by default an H200, where
 *                           they were measured; the CUDA backend plans for the GPU it runs on
 * @param gatherFusion       let the kernels that read an {@code index_select}'s result read the table's rows through
 *                           the indices themselves ({@code GatherFusion}), so the picked rows are never copied: one
 *                           launch where there were two. On by default; both backends run such kernels, checking
 *                           every index (the CUDA backend on the device, through its fault record); false keeps every
 *                           index_select a launch of its own (the plan then prints {@code # gather fusion: off})
 * @param attentionPositions every attention's cut, positions of the cache a warp (8, 16 or 32), in place of the
 *                           planner's rule ({@code LaunchChoices.attention}) where not 0 (the default): for measuring each
 *                           cut ({@code AttentionBench}); printed on each attention's line as any cut is
 * @param rowForm            every row kernel's form ({@code LaunchChoices.rows}): {@code AUTO} (the default) the
 *                           planner's rule, else a block a row, a warp a row, or a warp a row loading its next row ahead
 *                           wherever the kernel can take that form: for measuring each ({@code GpuSuite --row-forms});
 *                           printed on each row kernel's line as any form is
 */
public record PlanOptions(long commGranularity, long regularGranularity, boolean reorder, boolean inPlace, boolean fuseCopyIns,
                          int batchCollectives, boolean roundEachOp, boolean fuseCollectives, boolean attentionUpdates,
                          boolean productEpilogues,
                          ProgrammaticLaunch programmaticLaunch, Target target, boolean gatherFusion, int attentionPositions, RowForm rowForm) {
    /** The largest batch the symmetric kernels take. */
    public static final int MAX_BATCH = 4;

    public static final PlanOptions DEFAULT = new PlanOptions(1, 1, true, true, true, MAX_BATCH, false, true, true, true,
            ProgrammaticLaunch.AUTO, Target.H200, true, 0, RowForm.AUTO);

    /**
     * What the launch choices depend on of the GPU: its multiprocessors (a GEMV's k-slices fill them) and whether it has
     * programmatic dependent launches (compute capability 9.0 and later).
     */
    public record Target(int multiprocessors, boolean programmaticLaunches) {
        /** An H200: 132 multiprocessors, compute capability 9.0. */
        public static final Target H200 = new Target(132, true);

        public Target {
            if (multiprocessors < 1) throw new CompilationException("a target GPU has at least one multiprocessor, not " + multiprocessors);
        }

        /** One line for the plan: "target: 132 multiprocessors, programmatic launches". */
        String describe() { return "target: " + multiprocessors + " multiprocessors" + (programmaticLaunches ? ", programmatic launches" : ", no programmatic launches"); }
    }

    /**
     * When a plan's own kernels are programmatic dependent launches: ({@code AUTO}) where measured to pay
     * ({@code ProductKernels.launches}: every product the few-row kernel by a weight no step writes; collectives are
     * launched as always between them), always, or never.
     */
    public enum ProgrammaticLaunch { AUTO, ON, OFF }

    /**
     * How a row kernel runs ({@code LaunchChoice.Rows}): by the planner's rule, a block a row, a warp a row, or a warp a
     * row that loads its next row while it reduces this one.
     */
    public enum RowForm { AUTO, BLOCK, WARP, WARP_AHEAD }

    public PlanOptions {
        if (rowForm == null) throw new CompilationException("plan options need a row form (PlanOptions.RowForm.AUTO by default)");
        if (target == null) throw new CompilationException("plan options need a target GPU (PlanOptions.Target.H200 by default)");
        if (commGranularity < 1 || regularGranularity < 1) throw new CompilationException("granularities must be positive");
        if (batchCollectives < 1 || batchCollectives > MAX_BATCH)
            throw new CompilationException("batchCollectives must be 1 (off) to " + MAX_BATCH + ", not " + batchCollectives);
        if (attentionPositions != 0 && attentionPositions != 8 && attentionPositions != 16 && attentionPositions != 32)
            throw new CompilationException("attentionPositions must be 0 (the planner's rule), 8, 16 or 32, not " + attentionPositions);
    }

    public PlanOptions withCommGranularity(long g) { return new PlanOptions(g, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    public PlanOptions withReorder(boolean on) { return new PlanOptions(commGranularity, regularGranularity, on, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    public PlanOptions withInPlace(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, on, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    public PlanOptions withFusedCopyIns(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, on, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** Round every f16/bf16 op's result inside fused kernels (true), or hold intermediates in float32 (false, the default). */
    public PlanOptions withRoundEachOp(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, on, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** At most {@code n} one-shot all-reduces in one launch (and all_to_alls in one joined step); 1 switches both off. */
    public PlanOptions withBatchCollectives(int n) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, n, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** Fuse all-reduces with the kernels around them (true, the default), or keep each a launch of its own. */
    public PlanOptions withFusedCollectives(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, on, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** Let an attention take in the update of its caches (true, the default), or keep the update a launch of its own. */
    public PlanOptions withAttentionUpdates(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, on, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** Let a product of a few rows take in the kernels after it that read it where the same-tiles rule holds (true), or keep them launches of their own (false). On by default. */
    public PlanOptions withProductEpilogues(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, on, programmaticLaunch, target, gatherFusion, attentionPositions, rowForm); }
    /** The GPU the launch choices are made for. */
    public PlanOptions withTarget(Target t) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, t, gatherFusion, attentionPositions, rowForm); }
    /** Let the readers of an {@code index_select} read the table through its indices (true, the default), or keep the op a launch of its own (false). */
    public PlanOptions withGatherFusion(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, on, attentionPositions, rowForm); }
    /** When the plan's own kernels are programmatic dependent launches. */
    public PlanOptions withProgrammaticLaunch(ProgrammaticLaunch p) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, p, target, gatherFusion, attentionPositions, rowForm); }
    /** Every attention cut into slices of {@code positions} positions a warp (8, 16 or 32), or by the planner's rule (0, the default). */
    public PlanOptions withAttentionPositions(int positions) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, positions, rowForm); }

    /** Every row kernel in form {@code f} where it can take it ({@code AUTO}: the planner's rule). */
    public PlanOptions withRowForm(RowForm f) { return new PlanOptions(commGranularity, regularGranularity, reorder, inPlace, fuseCopyIns, batchCollectives, roundEachOp, fuseCollectives, attentionUpdates, productEpilogues, programmaticLaunch, target, gatherFusion, attentionPositions, f); }
}
