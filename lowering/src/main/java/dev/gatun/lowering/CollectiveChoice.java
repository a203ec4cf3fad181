package dev.gatun.lowering;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.ByteSize;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;

/** A collective's algorithm and the reason for it, as the plan prints it ({@code all_reduce.one_shot (16 KiB <= ...)}). */
record CollectiveChoice(Algorithm algorithm, String why) {
    /**
     * The algorithm collective {@code n} of type {@code t} runs with under {@code options}, and why: by size against the
     * thresholds, NCCL where nothing symmetric applies, a symmetric kernel where NCCL cannot run here, or a refusal.
     */
    static CollectiveChoice of(Node n, Op.Collective c, TensorType t, LoweringOptions options) {
        CollectiveChoice choice = preferred(c, t, options);
        String noNccl = options.ncclUnavailable();
        if (choice.algorithm() != Algorithm.NCCL || noNccl == null) return choice;
        // NCCL cannot run here: a symmetric algorithm serves the collective where one can, else a clear refusal
        // all-gather and broadcast only move data: any dtype; the reductions have f32, f16 and bf16 kernels
        boolean movesOnly = c.kind().movesOnly();
        boolean symmetricPossible = options.symmetricMemory() && t.shape().isStatic()
                && (movesOnly || t.dtype() == DType.FLOAT32 || t.dtype().isHalf())
                && (c.kind() != CollectiveKind.ALL_REDUCE || options.forceAllReduce() != Algorithm.NCCL);
        if (!symmetricPossible)
            throw new CompilationException(n.format() + ": " + c.kind().opName() + " would run through NCCL (" + choice.why() + "), but NCCL cannot run here: "
                    + noNccl + ". Give it a static shape and an f32, f16 or bf16 dtype (the symmetric kernels' cases), or run one rank per GPU");
        Algorithm a = c.kind() == CollectiveKind.ALL_REDUCE ? Algorithm.TWO_SHOT : Algorithm.SYMM_MEM;
        return new CollectiveChoice(a, choice.why() + ", but NCCL cannot run here (" + noNccl + "): " + a.opName() + " instead");
    }

    private static CollectiveChoice preferred(Op.Collective c, TensorType t, LoweringOptions options) {
        if (!options.symmetricMemory()) return new CollectiveChoice(Algorithm.NCCL, "symmetric memory is switched off");
        if (!t.shape().isStatic()) return new CollectiveChoice(Algorithm.NCCL, "shape " + t.shape() + " is symbolic");
        // a collective that only moves data takes any dtype (its kernel moves the elements' bytes); a reduction needs its type
        if (!(t.dtype() == DType.FLOAT32 || t.dtype().isHalf()) && c.kind() != CollectiveKind.ALL_TO_ALL && c.kind() != CollectiveKind.ALL_GATHER)
            return new CollectiveChoice(Algorithm.NCCL, "dtype " + t.dtype() + " has no symmetric-memory kernel (f32, f16, bf16 do)");
        long bytes = t.byteSize();
        String size = ByteSize.format(bytes);
        // NCCL's send and receive take their counts from the host; the symmetric kernels read them on the device
        if (c.kind() == CollectiveKind.ALL_TO_ALL && c.uneven())
            return new CollectiveChoice(Algorithm.SYMM_MEM, size + ", uneven: its row counts are read on the device (NCCL takes counts from the host)");
        return switch (c.kind()) {
            case BROADCAST -> new CollectiveChoice(Algorithm.NCCL, "broadcast runs through NCCL");
            case REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL -> bytes <= options.twoShotMaxBytes()
                    ? new CollectiveChoice(Algorithm.SYMM_MEM, size + " <= " + ByteSize.format(options.twoShotMaxBytes()) + " symmetric threshold")
                    : new CollectiveChoice(Algorithm.NCCL, size + " > " + ByteSize.format(options.twoShotMaxBytes()) + " symmetric threshold");
            case ALL_REDUCE -> {
                if (options.forceAllReduce() != null) yield new CollectiveChoice(options.forceAllReduce(), "forced by options");
                if (bytes <= options.barrierFreeMaxBytes())
                    yield new CollectiveChoice(Algorithm.BARRIER_FREE, size + " <= barrier-free threshold " + ByteSize.format(options.barrierFreeMaxBytes()));
                if (bytes <= options.oneShotMaxBytes())
                    yield new CollectiveChoice(Algorithm.ONE_SHOT, size + " <= one-shot threshold " + ByteSize.format(options.oneShotMaxBytes()));
                if (bytes <= options.twoShotMaxBytes())
                    yield new CollectiveChoice(Algorithm.TWO_SHOT, size + " <= two-shot threshold " + ByteSize.format(options.twoShotMaxBytes()));
                yield new CollectiveChoice(Algorithm.NCCL, size + " > two-shot threshold " + ByteSize.format(options.twoShotMaxBytes()));
            }
        };
    }
}
