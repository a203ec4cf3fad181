package dev.gatun.runtime.cuda;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.testing.RowPrograms;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A refactoring guard: the sources {@link CudaCodegen} wrote before its split into the generator's pieces, as one
 * SHA-256 digest over a fixed, seeded corpus of kernels; update deliberately when the codegen changes.
 *
 * <p>The corpus: the hand-built fixtures ({@link CudaCodegenFixtures#handBuilt}: every op, reduction and cast at
 * every dtype, and the special layouts); the first-reduction specs of planned random graphs
 * ({@link CudaCodegenFixtures#planned}); every kernel of 300 planned random graphs ({@link RandomGraphs}, seeds 0 to
 * 299, as {@link CudaCodegenCompileTest} plans them); every row program ({@link RowPrograms}) at every floating dtype
 * and at shapes that take each row path; row kernels with folds; the loop-ordering seed (transposing) at every
 * floating dtype and a transposing row kernel at integer dtypes; a local nothing uses; the Llama decoder's plans
 * (prefill and decode, bf16 and f32, on one GPU as {@link KernelStackTest} plans them, and on two). Each kernel gives
 * its {@link CudaCodegen#generate source} and its {@link CudaCodegen#tile tile function} (or the refusal's message),
 * both again rounding each op ({@link Kernel#withRoundEachOp}); every fused collective launch of the two-GPU plans
 * gives its {@link CollectiveCodegen} source. The digest covers each result whole (every field of
 * {@link KernelSource} and of {@link CudaCodegen.TileFunction}), in the corpus's order.
 *
 * <p>A change that alters the digest changes some generated source: where it is meant to, update {@link #DIGEST} and
 * {@link #COUNT} with the values this test prints (and say so in the commit); where it is not, the change is wrong.
 * The corpus comes from the planner, the lowering and the test fixtures as well, so a change there that alters the
 * kernels they make changes the digest too: check that the generator's own output did not change (run this test with
 * {@code -Dgatun.golden.dump=<file>} before and after and compare the files), then update the values. The corpus is
 * seeded throughout: the digest is the same on every run and in any test order.
 */
class CodegenGoldenTest {
    /**
     * The digest of the corpus's sources (update deliberately; last: a pointwise producer a reduction reads through a
     * loop dimension of extent 1 at a stride of its own (a norm's square or a weighted sum over the choices at a batch of
     * one) is computed inside the reduction, 36 results fewer, 2026-11-30; before it: pointwise kernels whose loads walk the innermost
     * dimension element for element and the rows in whole vectors (slices of wider rows) take the 16-byte vector path,
     * 102 kernels of the corpus, their scalar loops unchanged, 2026-11-30; before it: every programmatic kernel lets the next be
     * scheduled before it waits (GATUN_DEPENDENT_START's two instructions swapped, 2026-11-30); before it: a registered op's output and a collective's result
     * written straight into symmetric memory (lowering's path 1): the random graphs' identity copies into a communication
     * buffer are gone, 13 results fewer; then a small value read only broadcast by pointwise loops computed by them
     * (lowering): the decode forms' cast of the positions, random_27's neg and random_198's abs-then-add of constants
     * are no kernels of their own, 12 results fewer; before them the scheduler's shrinking works moved early, which
     * reorders the prefill plans' cache copies and four random graphs' steps, so kernels are numbered otherwise (the
     * same kernels, the same launches); before it, the two-GPU decoder plans' fused all-reduces barrier-free under
     * CompileOptions' new default (their CollectiveCodegen sources, 8 results more), and the cross-entropy's and
     * vocabulary gradient's lowering rules, which change one random graph's kernels (a widening cast recomputed by its
     * pointwise readers), 2026-11-29).
     */
    static final String DIGEST = "0f1d70118c18b4943de183d780ad1aeeaeff8f5c4988441c65e688ad9900d97e";
    /** How many results the corpus gives. */
    static final int COUNT = 8413;

    @Test
    void theCorpusGivesTheRecordedSources() throws Exception {
        var d = new Digest();
        corpus(d);
        d.writeDump();
        String hex = HexFormat.of().formatHex(d.sha.digest());
        System.out.printf("CodegenGoldenTest: %d results, SHA-256 %s%n", d.count, hex);
        assertThat(d.count).as("results in the corpus").isEqualTo(COUNT);
        assertThat(hex).as("digest of the generated sources (" + d.count + " results)").isEqualTo(DIGEST);
    }

    /** Feeds every result of the corpus to {@code d}, in a fixed order. */
    static void corpus(Digest d) {
        for (var c : CudaCodegenFixtures.handBuilt()) kernel(d, c.kernel().toKernel(c.dtypes()::get));
        for (var c : CudaCodegenFixtures.planned(0, 60)) kernel(d, c.kernel().toKernel(c.dtypes()::get));
        for (long seed = 0; seed < 300; seed++) {
            var world = LoweringOptions.world(1 + (int) (seed % 2));
            plan(d, Planner.plan(Lowering.lower(randomGraph(seed), world)));
        }
        long[][] shapes = {{4, 16}, {33, 1000}, {64, 4096}, {3, 20000}, {6, 1, 12}, {130, 257}, {1, 7}, {5, 1}, {2, 3, 10}, {300, 48}};
        var floating = List.of(DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16, DType.FLOAT64);
        for (var c : RowPrograms.cases(17, ROW_PROGRAMS, floating, shapes))
            plan(d, Planner.plan(Lowering.lower(c.graph(), LoweringOptions.world(1))));
        plan(d, Planner.plan(Lowering.lower(folds(), LoweringOptions.world(1))));
        for (DType t : floating) {
            plan(d, Planner.plan(Lowering.lower(NormWorkloads.loopOrder(t, 4096, 1000), LoweringOptions.world(1))));
            plan(d, Planner.plan(Lowering.lower(NormWorkloads.loopOrder(t, 40, 70), LoweringOptions.world(1))));
        }
        for (DType t : List.of(DType.INT8, DType.INT32, DType.INT64, DType.FLOAT16))
            for (long[] shape : new long[][]{{64, 100}, {4096, 1000}, {5, 3, 40}})
                plan(d, Planner.plan(Lowering.lower(transposing(t, shape), LoweringOptions.world(1))));
        kernel(d, unusedLocal());
        for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
            for (DType t : List.of(DType.F32, DType.BF16, DType.F16)) plan(d, CollectiveCodegenCompileTest.seeds(t), a);
            plan(d, CollectiveCodegenCompileTest.arNorm(8, 4096, DType.BF16), a);
            plan(d, CollectiveCodegenCompileTest.arNorm(256, 8192, DType.BF16), a);
        }
        var c = new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
        for (Graph g : List.of(LlamaDecoder.prefill(c, 512, 544, 1, DType.BFLOAT16), LlamaDecoder.decode(c, 1, 544, 1, DType.BFLOAT16),
                LlamaDecoder.decode(c, 8, 544, 1, DType.BFLOAT16), LlamaDecoder.prefill(c, 512, 544, 1, DType.FLOAT32),
                LlamaDecoder.decode(c, 1, 544, 1, DType.FLOAT32)))
            plan(d, Planner.plan(Lowering.lower(g, LoweringOptions.world(1))));
        var small = new LlamaConfig(2048, 1, 32, 8, 8192, 1000, 500000.0, 1e-5, true);
        plan(d, LlamaDecoder.decode(small, 64, 2, DType.BF16), null);
        plan(d, LlamaDecoder.prefill(small, 64, 128, 2, DType.BF16), null);
    }

    /** Every program of {@link RowPrograms}. */
    static final List<String> ROW_PROGRAMS = List.of("softmax", "layer_norm", "rms_norm", "siblings", "row_tail_and_centre", "min_then_scale",
            "columns", "cos_then_sum", "loop_order", "transposed_copy", "softmax_then_sum");

    /** A row sum beside a transposed copy of the rows (a transposing row kernel), at integer dtypes too. */
    private static Graph transposing(DType t, long[] shape) {
        var g = dev.gatun.dsl.Gatun.graph("transposing");
        var x = g.input("x", t, java.util.Arrays.stream(shape).boxed().toArray());
        g.output("s", x.sum(-1));
        g.output("z_t", x.add(1).transpose(-2, -1).copy().transpose(-2, -1));
        return g.build();
    }

    /** A pointwise kernel with a local nothing uses (the planner leaves none; the generator writes it as a comment). */
    private static Kernel unusedLocal() {
        var ranges = List.of(CudaCodegenFixtures.N, CudaCodegenFixtures.c(16));
        var x = CudaCodegenFixtures.load(0, CudaCodegenFixtures.rowMajor(ranges, 0), DType.FLOAT32);
        var spec = new CudaCodegenFixtures.Spec("unused_local", ranges, null, List.of(), List.of("x"),
                List.of(new KExpr.Apply(PointwiseFn.EXP, List.of(x), DType.FLOAT32), new KExpr.Apply(PointwiseFn.NEG, List.of(x), DType.FLOAT32)),
                List.of(new CudaCodegenFixtures.Spec.Store("y", 1)), List.of("exp", "neg"));
        return spec.toKernel(java.util.Map.of("x", DType.FLOAT32, "y", DType.FLOAT32)::get);
    }

    /** {@code g} planned at world 2 (with {@code a} forced where not null): its kernels, then its fused launches. */
    private static void plan(Digest d, Graph g, Algorithm a) {
        var lowering = LoweringOptions.world(2);
        if (a != null) lowering = lowering.withForcedAllReduce(a);
        plan(d, Planner.plan(Lowering.lower(g, lowering)));
    }

    private static void plan(Digest d, Plan p) {
        for (Kernel k : p.kernels()) kernel(d, k);
        for (Step s : p.steps()) {
            if (s instanceof Step.FusedCollective f) d.add(() -> CollectiveCodegen.generate(f).toString());
            if (s instanceof Step.CollectiveBatch b && b.first().slots() != null) d.add(() -> CollectiveCodegen.generate("batch", null, b, null).toString());
        }
    }

    private static void kernel(Digest d, Kernel k) {
        for (Kernel x : List.of(k, k.withRoundEachOp())) {
            d.add(() -> CudaCodegen.generate(x).toString());
            d.add(() -> CudaCodegen.tile(x).toString());
        }
    }

    /** Row kernels whose per-row values fold after the rows, at several row types (as {@link CudaCodegenCompileTest}'s). */
    private static Graph folds() {
        var g = dev.gatun.dsl.Gatun.graph("folds");
        g.output("m", g.input("x", DType.BF16, 300, 5000).max(-1).mean());
        g.output("s", g.input("y", DType.I32, 33, 100).sum(-1).sum());
        g.output("t", g.input("z", DType.F16, 64, 64, 8).sum(-1).max());
        var none = g.input("e", DType.F32, 0, 8);
        g.output("z0", none.sum(-1).sum());
        g.output("zm", none.max(-1).mean());
        return g.build();
    }

    static Graph randomGraph(long seed) {
        var options = RandomGraphs.Options.defaults().withWorldSize(1 + (int) (seed % 2)).withMaxNodes(8 + (int) (seed % 4) * 8)
                .withDTypes(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32, DType.INT8, DType.INT64, DType.BOOL);
        try {
            return RandomGraphs.generate(seed, options);
        } catch (RuntimeException e) {
            return RandomGraphs.generate(seed, options.withDTypes(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32));
        }
    }

    /**
     * SHA-256 over the results, each its length and UTF-8 bytes; a generator's refusal counts as its class and message.
     * With {@code -Dgatun.golden.dump=<file>} the results are also written there, one after another, so two runs'
     * files can be compared to find the source that changed.
     */
    static final class Digest {
        final MessageDigest sha;
        final StringBuilder dump = System.getProperty("gatun.golden.dump") == null ? null : new StringBuilder();
        int count;

        Digest() throws Exception { sha = MessageDigest.getInstance("SHA-256"); }

        void writeDump() throws java.io.IOException {
            if (dump != null) java.nio.file.Files.writeString(java.nio.file.Path.of(System.getProperty("gatun.golden.dump")), dump);
        }

        void add(java.util.function.Supplier<String> result) {
            String s;
            try {
                s = result.get();
            } catch (RuntimeException e) {
                s = "refused: " + e.getClass().getName() + ": " + e.getMessage();
            }
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            sha.update(java.nio.ByteBuffer.allocate(8).putLong(b.length).array());
            sha.update(b);
            if (dump != null) dump.append("==== result ").append(count).append('\n').append(s).append('\n');
            count++;
        }
    }
}
