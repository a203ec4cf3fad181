package dev.gatun.models.llama;

import dev.gatun.runtime.TensorFiles;

import java.util.List;

/**
 * Where one rank's rows of a layer's stacked query|key|value weight and gate|up weight lie in a checkpoint, in either
 * layout: Llama's separate {@code q_proj}, {@code k_proj}, {@code v_proj}, {@code gate_proj} and {@code up_proj}, or
 * Phi-3's fused {@code qkv_proj} (the query rows, then the key rows, then the value rows) and {@code gate_up_proj} (the
 * gate rows, then the up rows). A fused tensor is split here, at load time, into the same parts a separate one gives:
 * each rank takes its own query heads, key-value heads and MLP columns of each part, so tensor parallelism shards a
 * fused checkpoint exactly as it shards a split one ({@link LlamaPrefill#shard}).
 */
record ProjectionRows(List<Part> parts) {
    /** Rows [first, first + n) of the tensor {@code name}. */
    record Part(String name, long first, long n) {}

    /**
     * The query, key and value rows of the rank whose query heads start at {@code rank * hl} and whose {@code kl}
     * key-value heads start at {@code kvFirst}, in layer prefix {@code p}.
     */
    static ProjectionRows qkv(LlamaConfig c, String p, int rank, int hl, int kl, int kvFirst) {
        long d = c.headDim(), q = (long) c.heads() * d, kv = (long) c.kvHeads() * d;
        if (c.fused()) {
            String w = p + "self_attn.qkv_proj.weight";
            return new ProjectionRows(List.of(new Part(w, rank * hl * d, hl * d), new Part(w, q + kvFirst * d, kl * d),
                    new Part(w, q + kv + kvFirst * d, kl * d)));
        }
        return new ProjectionRows(List.of(new Part(p + "self_attn.q_proj.weight", rank * hl * d, hl * d),
                new Part(p + "self_attn.k_proj.weight", kvFirst * d, kl * d), new Part(p + "self_attn.v_proj.weight", kvFirst * d, kl * d)));
    }

    /** The gate and up rows of the rank whose {@code fl} MLP columns start at {@code rank * fl}, in layer prefix {@code p}. */
    static ProjectionRows gateUp(LlamaConfig c, String p, int rank, int fl) {
        long f = c.intermediateSize();
        if (c.fused()) {
            String w = p + "mlp.gate_up_proj.weight";
            return new ProjectionRows(List.of(new Part(w, (long) rank * fl, fl), new Part(w, f + (long) rank * fl, fl)));
        }
        return new ProjectionRows(List.of(new Part(p + "mlp.gate_proj.weight", (long) rank * fl, fl), new Part(p + "mlp.up_proj.weight", (long) rank * fl, fl)));
    }

    /** The parts as rows of the tensors of {@code weights}. */
    LlamaPrefill.Rows[] rows(TensorFiles weights) {
        return parts.stream().map(x -> new LlamaPrefill.Rows(weights.get(x.name()), x.first(), x.n())).toArray(LlamaPrefill.Rows[]::new);
    }

    /** The tensors read, each once. */
    String[] names() { return parts.stream().map(Part::name).distinct().toArray(String[]::new); }
}
