package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;

/**
 * The fields of a {@code config.json} that only Phi-3 ({@code model_type} "phi3") reads as it does: its partial
 * rotary embedding and its projections without biases. Its fused checkpoint layout follows from the type
 * ({@link LlamaConfig#fused}); its LongRoPE scaling is refused where the rope object is read.
 */
final class Phi3Fields {
    private Phi3Fields() {}

    /**
     * How many dimensions of each head rotate: {@code int(head_dim * partial_rotary_factor)} as transformers computes it,
     * the factor given at the top level or in the rope object ({@code ropePartial}, null where it has none), both
     * agreeing where both are given; 1 where neither is. A factor outside (0, 1], or one that leaves an odd or zero
     * number of dimensions, is refused.
     */
    static int rotaryDim(LlamaConfigReader.Fields f, int headDim, Double ropePartial) {
        Double top = f.has("partial_rotary_factor") ? f.number("partial_rotary_factor", 1) : null;
        if (top != null && ropePartial != null && !top.equals(ropePartial))
            throw new CompilationException(f.file() + ": fields 'partial_rotary_factor' (" + top + ") and the rope object's partial_rotary_factor ("
                    + ropePartial + ") disagree: which one the checkpoint means is unclear");
        double factor = top != null ? top : ropePartial != null ? ropePartial : 1;
        if (!(factor > 0 && factor <= 1))
            throw new GraphException(f.file() + ": field 'partial_rotary_factor' is " + factor + ": the share of each head that rotates is more than 0 and at most 1");
        int rotary = (int) (headDim * factor);   // Python's int(): truncated, as transformers computes its rotary dim
        if (rotary < 2 || rotary % 2 != 0)
            throw new CompilationException(f.file() + ": field 'partial_rotary_factor' " + factor + " of head_dim " + headDim + " rotates " + rotary
                    + " dimensions: rotary embeddings rotate pairs, so an even number of at least 2 is needed");
        return rotary;
    }

    /**
     * Refuses {@code attention_bias} or {@code mlp_bias} switched on: transformers' Phi-3 has no biases (it ignores the
     * flags), so what a file that asks for them means is unclear.
     */
    static void refuseBiases(LlamaConfigReader.Fields f) {
        for (String flag : new String[]{"attention_bias", "mlp_bias"})
            if (f.bool(flag, false))
                throw new CompilationException(f.file() + ": field '" + flag + "' is true, but transformers' phi3 has no biases (it ignores the field), "
                        + "so what the checkpoint means is unclear");
    }
}
