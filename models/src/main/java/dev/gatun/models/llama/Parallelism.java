package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.graph.ProcessGroup;

/**
 * How a decoder is split over its ranks: tensor parallelism of degree {@code tp} (each rank whole heads and a slice of
 * every MLP's width, {@link LlamaPrefill}), and for a mixture of experts expert parallelism of degree {@code ep} (each
 * rank {@code experts / ep} whole experts, or TP-slices of them, {@link MixtureOfExperts}). The world is
 * {@code ep * tp} ranks laid out as the mesh {@code ("ep", ep) x ("tp", tp)}: rank r is member {@code r / tp} of its
 * "ep" group and member {@code r % tp} of its "tp" group. Along "ep" the attention, the dense MLPs, the router and the
 * head are replicated (each ep member a copy of the TP shards of its "tp" group); only the experts are split.
 *
 * <p>At {@code ep} 1 it is plain tensor parallelism over the world, the graphs exactly those of the {@code int tp}
 * methods. {@link #check} refuses, by field, a split the configuration does not allow.
 */
public record Parallelism(int tp, int ep) {
    /** The mesh axis the experts are split along. */
    public static final String EXPERT_AXIS = "ep";
    /** The mesh axis heads and widths are split along where {@code ep} is above 1 (else the world). */
    public static final String TENSOR_AXIS = "tp";

    public Parallelism {
        if (tp < 1) throw new CompilationException("Parallelism: a tensor-parallel degree of " + tp + ": give at least 1");
        if (ep < 1) throw new CompilationException("Parallelism: an expert-parallel degree of " + ep + ": give at least 1");
    }

    /** Tensor parallelism of degree {@code tp} alone. */
    public static Parallelism tensor(int tp) { return new Parallelism(tp, 1); }

    /** Expert parallelism of degree {@code ep} by tensor parallelism of degree {@code tp}: {@code ep * tp} ranks. */
    public static Parallelism experts(int ep, int tp) { return new Parallelism(tp, ep); }

    /** The number of ranks. */
    public int world() { return Math.multiplyExact(ep, tp); }

    /** Rank {@code rank}'s member number in its "tp" group: the shard of heads and widths it holds. */
    public int tensorRank(int rank) { return rank % tp; }

    /** Rank {@code rank}'s member number in its "ep" group: the experts it holds are {@code [m * E / ep, (m + 1) * E / ep)}. */
    public int expertRank(int rank) { return rank / tp; }

    /** The group of the tensor-parallel collectives: the world at {@code ep} 1, else the "tp" axis. */
    String tensorGroup() { return ep > 1 ? TENSOR_AXIS : ProcessGroup.WORLD_NAME; }

    /**
     * Refuses what {@code c} cannot be split into: {@link LlamaConfig#checkTensorParallel} for {@code tp}; an
     * {@code ep} above 1 on a configuration without experts, or one that does not divide the experts.
     */
    public void check(LlamaConfig c) {
        c.checkTensorParallel(tp);
        if (ep == 1) return;
        if (c.moe() == null)
            throw new CompilationException("expert parallelism of degree " + ep + ": the configuration has no mixture of experts to split"
                    + " (a dense decoder); use Parallelism.tensor(" + world() + ") for " + world() + " ranks");
        int experts = c.moe().experts();
        if (experts % ep != 0)
            throw new CompilationException("an expert-parallel degree of " + ep + " does not divide the " + experts
                    + " experts (num_local_experts / num_experts): each rank of the \"ep\" axis holds an equal share of whole experts;"
                    + " use a degree that divides it");
    }

    /** The first of the {@code experts / ep} experts rank {@code rank} holds. */
    int firstExpert(int experts, int rank) { return expertRank(rank) * (experts / ep); }
}
