package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;

import java.util.HexFormat;
import java.util.List;
import java.util.stream.Collectors;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A refactoring guard for what the planner makes of {@code update_slice} and {@code attention} (and of everything around
 * them): one SHA-256 digest over the printed plans ({@link Plan#toString()}, which carries the fingerprint), the
 * lowered graph and lowering's decisions and realizations ({@link Plan#lowered()}, {@link Plan#explain()}) and, step by step, each step's kind, label, the buffers it reads and writes and
 * its launch choice, for the Llama decoder's plans (decode at batch 1 and 8, prefill; bf16 and f32; on one GPU and on
 * two; the attention updates joined and apart), the random graphs {@link CodegenGoldenTest} plans, and small graphs of
 * updates (of a state, of a copy, strided and not) and attention. It was recorded before the two ops moved onto the
 * op registry: the same digest afterwards says every plan prints, reads, writes and launches as before.
 *
 * <p>A change that alters the digest changes some plan: where it is meant to, update {@link #DIGEST} (compare the files
 * {@code -Dgatun.golden.dump=<file>} writes before and after to see what changed).
 */
class PlanTextGoldenTest {
    /**
     * The digest of the corpus's plans (update deliberately; recorded before update_slice and attention were registered ops;
     * last: programmatic launches chosen across collectives (the multi-rank decode plans print `launches: programmatic`
     * where every product is the GEMV) and the barrier-free threshold of CompileOptions' defaults; then a widening cast
     * (or a short pointwise chain over one) that pointwise loops read computed by them (lowering), which changes one random
     * graph (random_11: the same launches and bytes, a cast member fewer); the transposed product, the scatter into x and
     * the chunked whole reduction change no plan of the corpus; then the scheduler's shrinking works moved early: the two
     * prefill plans copy each layer's keys into its cache after the attention (the cache's storage allocated later; the
     * same launches and pools) and four random graphs reorder (random_181's regular pool 288 -> 184 B); softmax's
     * detached max and the regather regions change no plan of the corpus; then a registered op's output and a
     * collective's result written straight into symmetric memory, lowering's path 1, where an identity copy was made
     * before: random_77, random_87 and random_161 at world 2 lose that copy (or the all-reduce's copy epilogue), and the
     * decoders' realizations name why a product's output keeps its copy; then a small cast or pointwise value of an input
     * or an op's result read only broadcast by pointwise loops 16 times its size computed by them (lowering): the two
     * decode forms with positions lose the cast_0 launch of the positions, random_27 a neg launch, random_198 (a short
     * chain of constants, abs then add) a launch, 2026-11-29; then every attention step's cut, positions a warp, the
     * planner's choice (LaunchChoices.attention): its line's {@code attention[early]} is now
     * {@code attention[early, positions=32, lanes=1]} (the decoders' caches of 544: 17 slices, halved would be 34, more than
     * a merge round) or 8 (the small update and attention graphs), and explain() has a line for each, 2026-11-29; then the
     * rule halves to 16 positions at the fewest, as measured on an H200: those 8s are 16s, 2026-11-29; then a pointwise
     * producer a reduction reads through a loop dimension of extent 1 at a stride of its own computed inside the
     * reduction: the batch-1 norms' squares (fused_mul_mean_... kernels are fused_mean_...) and the mixtures' weighted
     * products, 2026-11-30; then every row kernel's form, the planner's choice (LaunchChoices.rows): each row kernel
     * launched on its own prints {@code rows[block]} on its line (no row kernel of the corpus has the rows for a warp a
     * row) and explain() has a line for each, 2026-11-30; the rule measured: a warp a row at most 2 KB rows, never ahead
     * unless forced, so the explain lines name 2048 B, 2026-11-30; a programmatic GEMV's grid capped at 16 warps a
     * multiprocessor, printed {@code , resident=16}, was measured slower on an H200 and is off: no plan changed by it).
     */
    static final String DIGEST = "2cfec41dfa10d502e88c1657bfc1e3136089dcbff21e82fbef20451182bc1cdf";
    static final int COUNT = 1595;

    @Test
    void theCorpusPlansAsRecorded() throws Exception {
        var d = new CodegenGoldenTest.Digest();
        var c = new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
        List<Graph> llama = List.of(LlamaDecoder.prefill(c, 512, 544, 1, DType.BFLOAT16), LlamaDecoder.decode(c, 1, 544, 1, DType.BFLOAT16),
                LlamaDecoder.decode(c, 8, 544, 1, DType.BFLOAT16), LlamaDecoder.prefill(c, 512, 544, 1, DType.FLOAT32),
                LlamaDecoder.decode(c, 1, 544, 1, DType.FLOAT32));
        for (Graph g : llama)
            for (boolean joined : new boolean[]{true, false})
                plan(d, g, 1, PlanOptions.DEFAULT.withAttentionUpdates(joined));
        var small = new LlamaConfig(2048, 1, 32, 8, 8192, 1000, 500000.0, 1e-5, true);
        plan(d, LlamaDecoder.decode(small, 64, 2, DType.BF16), 2, PlanOptions.DEFAULT);
        plan(d, LlamaDecoder.decode(small, 4, 64, 2, DType.BF16), 2, PlanOptions.DEFAULT);
        plan(d, LlamaDecoder.prefill(small, 64, 128, 2, DType.BF16), 2, PlanOptions.DEFAULT);
        for (var form : List.of(new LlamaDecoder.Form(true, false), new LlamaDecoder.Form(true, true), new LlamaDecoder.Form(false, true)))
            plan(d, LlamaDecoder.decode(small, 2, 64, 1, DType.F32, form), 1, PlanOptions.DEFAULT);
        for (long seed = 0; seed < 300; seed++) {
            Graph g = CodegenGoldenTest.randomGraph(seed);
            plan(d, g, 1 + (int) (seed % 2), PlanOptions.DEFAULT);
        }
        for (Graph g : updates()) plan(d, g, 1, PlanOptions.DEFAULT);
        d.writeDump();
        String hex = HexFormat.of().formatHex(d.sha.digest());
        System.out.printf("PlanTextGoldenTest: %d results, SHA-256 %s%n", d.count, hex);
        assertThat(d.count).as("results in the corpus").isEqualTo(COUNT);
        assertThat(hex).as("digest of the plans (" + d.count + " results)").isEqualTo(DIGEST);
    }

    private static void plan(CodegenGoldenTest.Digest d, Graph g, int world, PlanOptions options) {
        Plan p;
        try {
            p = Planner.plan(Lowering.lower(g, LoweringOptions.world(world)), options);
        } catch (RuntimeException e) {
            d.add(() -> "refused: " + e.getClass().getName() + ": " + e.getMessage());
            return;
        }
        d.add(p::toString);
        d.add(p::explain);
        d.add(() -> p.lowered().toString());
        d.add(() -> String.join("\n", p.lowered().decisions()));
        d.add(() -> {
            var sb = new StringBuilder();
            for (Step s : p.steps())
                sb.append(s.kind()).append(" | ").append(s.label()).append(" | ").append(names(s.reads())).append(" | ").append(names(s.writes()))
                        .append(" | ").append(s.isDeviceWork()).append(" | ").append(s.parts().size()).append(" | ").append(p.choice(s).describe()).append('\n');
            return sb.toString();
        });
    }

    private static String names(List<PlanBuffer> buffers) { return buffers.stream().map(PlanBuffer::name).collect(Collectors.joining(",")); }

    /** Updates of a state and of a copy, of a packed update and of a strided one, at i32 and i64; attention over them. */
    private static List<Graph> updates() {
        var out = new java.util.ArrayList<Graph>();
        for (DType at : List.of(DType.I32, DType.I64)) {
            GraphBuilder g = Gatun.graph("updates_" + at.shortName());
            Tensor pos = g.input("pos", at, 1);
            Tensor x = g.input("x", DType.F32, 4, 6);
            g.output("copy", x.updateSlice(1, g.input("u", DType.F32, 4, 2), pos));
            g.output("neg", x.neg().updateSlice(-1, g.input("w", DType.F32, 4, 6).transpose(0, 1).slice(0, 0, 1).transpose(0, 1), pos));
            Tensor fused = g.input("kv", DType.F32, 2, 3, 8);
            Tensor k = g.state("k", DType.F32, 2, 3, 4, 10).updateSlice(3, fused.slice(2, 0, 4).reshape(2, 3, 4, 1), pos);
            Tensor v = g.state("v", DType.F32, 2, 3, 10, 4).updateSlice(2, fused.slice(2, 4, 8).reshape(2, 3, 1, 4), pos);
            Tensor q = g.input("q", DType.F32, 2, 3, 1, 4);
            g.output("y", q.reshape(6, 1, 4).attention(k.reshape(6, 4, 10), v.reshape(6, 10, 4), pos, 0.5));
            g.output("z", g.state("h", DType.I64, 2, 10).updateSlice(1, g.input("id", DType.I64, 2, 1), pos));
            out.add(g.build());
        }
        var g = Gatun.graph("attention_only");
        Tensor pos = g.input("pos", DType.I64);
        g.output("y", g.input("q", DType.BF16, 2, 4, 8).attention(g.input("kT", DType.BF16, 2, 8, 16), g.input("v", DType.BF16, 2, 16, 8), pos,
                1 / Math.sqrt(8)));
        out.add(g.build());
        return out;
    }
}
