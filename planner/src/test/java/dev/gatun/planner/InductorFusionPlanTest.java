package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Inductor's fusion and kernel-traffic cases (PyTorch's {@code test/inductor/test_perf.py}, float32, its figures in
 * elements times 4 bytes) for the fusion classes of pointwise concatenations, of views and reshapes, and of a norm followed by RoPE, planned
 * here with their launches and the bytes they move at least (every buffer a launch reads or writes counted once, whole,
 * as Inductor counts): one launch where Inductor has one, and no more bytes than Inductor moves. The figures not in
 * that file (marked) are what Inductor's lowering makes of the case: views and reshapes of an unmade value are index
 * arithmetic in the reading kernel. Random shapes check the same bounds; {@code CatThroughPointwiseTest} and
 * {@code ReshapeThroughPointwiseTest} and {@code NormThenRotaryTest} (runtime) check the values against the reference interpreter.
 */
class InductorFusionPlanTest {

    static Plan plan(String name, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name);
        body.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    /** Launches: kernels, products, registered ops (index_select), every step of device work. */
    static long launches(Plan p) { return p.steps().stream().filter(Step::isDeviceWork).count(); }

    /** The bytes the launches move at least: each buffer a launch reads, and each it writes, once and whole. */
    static long bytes(Plan p) {
        long total = 0;
        for (Step s : p.steps()) {
            if (!s.isDeviceWork()) continue;
            for (PlanBuffer b : distinct(s.reads())) total += size(b);
            for (PlanBuffer b : distinct(s.writes())) total += size(b);
        }
        return total;
    }

    private static List<PlanBuffer> distinct(List<PlanBuffer> bs) {
        var out = new ArrayList<PlanBuffer>();
        for (PlanBuffer b : bs) if (!out.contains(b)) out.add(b);
        return out;
    }

    private static long size(PlanBuffer b) { return b.shape().symNumel().constant() * b.dtype().byteSize(); }

    /** At most Inductor's launches and bytes ({@code numel} float32 elements). */
    static void atMostInductor(Plan p, int inductorLaunches, long inductorNumel) {
        assertThat(launches(p)).as("launches of\n%s", p).isLessThanOrEqualTo(inductorLaunches);
        assertThat(bytes(p)).as("bytes of\n%s", p).isLessThanOrEqualTo(inductorNumel * 4);
    }

    // ------------------------------------------------------------ class 1: pointwise concatenations

    @Test
    void testCatFromInductorsPerfTests() {
        atMostInductor(plan("cat_sin", g -> g.output("y", g.cat(0, g.input("a", F32, 10).sin(), g.input("b", F32, 10).sin()))), 1, 40);
        atMostInductor(plan("cat_inputs", g -> g.output("y", g.cat(0, g.input("a", F32, 10), g.input("b", F32, 10)))), 1, 40);
        atMostInductor(plan("cat_cos_input", g -> g.output("y", g.cat(0, g.input("a", F32, 10).cos(), g.input("b", F32, 10)))), 1, 40);
        atMostInductor(plan("cat_cos_sin", g -> {
            var a = g.input("a", F32, 10);
            g.output("y", g.cat(0, a.cos(), a.sin()));
        }), 1, 30);
        atMostInductor(plan("cat_mm", g -> {
            var a = g.input("a", F32, 10, 10);
            g.output("y", g.cat(0, a.matmul(a), g.input("b", F32, 10, 10).sin()));
        }), 2, 400);
        atMostInductor(plan("cat_sums_plus", g -> g.output("y",
                g.cat(0, g.input("a", F32, 10, 10, 10).sum(0), g.input("b", F32, 10, 10, 10).sum(0)).add(10))), 3, 2600);
    }

    /** {@code torch.cat((a + 1, b + 2, c + 3)) + 10}: was four launches and 4800 B (the parts, then a pass over the cat). */
    @Test
    void aPointwiseOpOfAConcatenationOfPointwisePartsIsOneKernel() {
        Plan p = plan("cat_plus", g -> {
            var a = g.input("a", F32, 10, 10);
            var b = g.input("b", F32, 10, 10);
            var c = g.input("c", F32, 10, 10);
            g.output("y", g.cat(0, a.add(1), b.add(2), c.add(3)).add(10));
        });
        atMostInductor(p, 1, 600);
        assertThat(p.kernels().getFirst().ops()).containsExactly("add", "add", "add", "add", "add", "add");
        assertThat(p.lowered().decisions()).anyMatch(d -> d.contains("cat: not made")).anyMatch(d -> d.contains("computed part by part through"));
        // five parts: Inductor makes the concatenation (2000 elements); here still one kernel reading and writing each once
        Plan five = plan("cat_plus_5", g -> {
            var parts = new ArrayList<Tensor>();
            for (int i = 0; i < 5; i++) parts.add(g.input("x" + i, F32, 10, 10).add(i + 1));
            g.output("y", g.cat(0, parts).add(10));
        });
        atMostInductor(five, 1, 1000);
    }

    /** Random part counts, sizes and joined dimensions: never more launches or bytes than Inductor's pointwise concatenation. */
    @Property(tries = 60)
    void randomPointwiseConcatenationsAreOneKernelMovingEachElementTwice(
            @ForAll @IntRange(min = 1, max = 3) int rank, @ForAll @IntRange(min = 0, max = 2) int dimPick,
            @ForAll @IntRange(min = 2, max = 5) int parts, @ForAll @IntRange(min = 1, max = 6) int side) {
        int dim = dimPick % rank;
        long[] shape = new long[rank];
        java.util.Arrays.fill(shape, side);
        Plan p = plan("cat_random", g -> {
            var xs = new ArrayList<Tensor>();
            for (int i = 0; i < parts; i++) xs.add(g.input("x" + i, F32, dims(shape)).mul(i + 2));
            g.output("y", g.cat(dim, xs).sin().add(1));
        });
        long numel = parts * (long) Math.pow(side, rank);
        atMostInductor(p, 1, 2 * numel);   // Inductor: each part read once, the result written once
    }

    /**
     * Where computing through a concatenation or a reshape would not pay, it is not done and the plan is as before: the
     * chain's result read by a pointwise op of another shape (a pass of its own either way), by a collective (which
     * wants the last op written straight into symmetric memory, path 1), and a reshape's reader with a broadcast operand.
     */
    @Test
    void neitherRuleIsTakenWhereItDoesNotPay() {
        Plan wider = plan("cat_then_wider", g -> {
            var y = g.cat(0, g.input("a", F32, 4, 8).sin(), g.input("b", F32, 4, 8).sin()).mul(2);
            g.output("z", y.add(g.input("c", F32, 3, 8, 8)));
        });
        assertThat(wider.lowered().decisions()).noneMatch(d -> d.contains("not made"));
        var g2 = Gatun.graph("cat_then_all_reduce");
        g2.world(2);
        g2.output("s", g2.cat(0, g2.input("a", F32, 4, 8).sin(), g2.input("b", F32, 4, 8).sin()).mul(2).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        Plan reduced = Planner.plan(Lowering.lower(g2.build(), LoweringOptions.world(2)));
        assertThat(PlanChecks.all(reduced)).isEmpty();
        assertThat(reduced.lowered().decisions()).noneMatch(d -> d.contains("not made"));
        assertThat(reduced.explain()).contains("path 1");
        Plan broadcast = plan("reshape_broadcast", g -> {
            var x = g.input("x", F32, 4, 6).mul(2).t().reshape(3, 8);
            g.output("y", x.add(g.input("w", F32, 8)));
        });
        assertThat(broadcast.lowered().decisions()).noneMatch(d -> d.contains("not made"));
    }

    // ------------------------------------------------------------ class 2: views, layouts and reshapes

    @Test
    void tilingCasesFromInductorsPerfTests() {
        atMostInductor(plan("a_plus_bt", g -> g.output("y", g.input("a", F32, 10, 10).add(g.input("b", F32, 10, 10).t()))), 1, 300);
        atMostInductor(plan("at_plus_b", g -> g.output("y", g.input("a", F32, 10, 10).t().add(g.input("b", F32, 10, 10)))), 1, 300);
        atMostInductor(plan("three_permutes", g -> {
            var a = g.input("a", F32, 10, 10, 10);
            g.output("y", a.add(g.input("b", F32, 10, 10, 10).permute(1, 2, 0)).add(g.input("c", F32, 10, 10, 10).permute(2, 0, 1)));
        }), 1, 4000);
        atMostInductor(plan("x_plus_xt", g -> {
            var x = g.input("x", F32, 10, 10);
            g.output("y", x.add(x.t()));
        }), 1, 200);
        atMostInductor(plan("sum_dim0", g -> g.output("y", g.input("x", F32, 10, 10).sum(0))), 1, 110);
        atMostInductor(plan("transpose_sum", g -> g.output("y", g.input("x", F32, 10, 10).t().sum(1))), 1, 110);
        // a.sum(1) beside a reshape of a read pointwise (Inductor: one kernel, 210 elements with a.cos())
        atMostInductor(plan("sum_beside_reshape", g -> {
            var a = g.input("a", F32, 10, 10);
            g.output("b", a.sum(1));
            g.output("c", a.reshape(100).cos());
        }), 1, 210);
    }

    /**
     * Heads out of a projection, {@code x.mul(2).permute(0, 2, 1, 3).reshape(B*H, S, D).exp()}: was a copy kernel and the
     * exp (4 x the elements in bytes, twice); Inductor (marked, its lowering): one kernel reading x and writing the result.
     */
    @Test
    void aReshapeOfAPermutedResultIsIndexArithmeticInItsReader() {
        Plan p = plan("heads", g -> g.output("y", g.input("x", F32, 2, 6, 4, 8).mul(2).permute(0, 2, 1, 3).reshape(8, 6, 8).exp()));
        atMostInductor(p, 1, 2 * 384);
        assertThat(p.kernels().getFirst().ops()).containsExactly("mul", "exp");
        assertThat(p.lowered().decisions()).anyMatch(d -> d.contains("reshape: not made"));
        Plan view = plan("view", g -> g.output("y", g.input("x", F32, 2, 6, 4, 8).mul(2).reshape(8, 48).exp()));
        atMostInductor(view, 1, 2 * 384);
        Plan t = plan("transpose_view", g -> g.output("y", g.input("x", F32, 6, 8).mul(2).t().reshape(2, 4, 6).exp()));
        atMostInductor(t, 1, 2 * 48);
    }

    /** Random shapes, permutations (square ones too) and reshapes of a pointwise result, read by a pointwise chain. */
    @Property(tries = 60)
    void randomPermutedReshapesAreOneKernel(@ForAll @IntRange(min = 2, max = 4) int rank, @ForAll @IntRange(min = 1, max = 4) int side,
                                             @ForAll @IntRange(min = 0, max = 23) int permPick, @ForAll boolean merge) {
        long[] shape = new long[rank];
        for (int d = 0; d < rank; d++) shape[d] = side + d % 2;
        int[] perm = permutation(rank, permPick);
        long[] permuted = new long[rank];
        for (int d = 0; d < rank; d++) permuted[d] = shape[perm[d]];
        // merge the first two permuted dimensions, or split nothing and flatten all
        long[] target = merge ? mergeFirstTwo(permuted) : new long[]{numel(shape)};
        Plan p = plan("reshape_random", g -> g.output("y", g.input("x", F32, dims(shape)).mul(2).permute(perm).reshape(dims(target)).exp().add(1)));
        atMostInductor(p, 1, 2 * numel(shape));
    }

    // ------------------------------------------------------------ class 4: a norm, then RoPE of the same heads

    /** RoPE as the models write it, per half: {@code (x1 c1 - x2 s1, x2 c2 + x1 s2)}. */
    static Tensor rope(Tensor x, Tensor cos, Tensor sin, int d) {
        Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
        Tensor c1 = cos.slice(-1, 0, d / 2), c2 = cos.slice(-1, d / 2, d), s1 = sin.slice(-1, 0, d / 2), s2 = sin.slice(-1, d / 2, d);
        return x1.mul(c1).sub(x2.mul(s1)).cat(-1, x2.mul(c2).add(x1.mul(s2)));
    }

    private static Plan rmsNormThenRope(String name, long b, long s, long h, int d) {
        return plan(name, g -> {
            var x = g.input("x", F32, b, s, h, d);
            var n = x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("w", F32, d));
            g.output("y", rope(n, g.input("cos", F32, s, 1, d), g.input("sin", F32, s, 1, d), d));
        });
    }

    /**
     * RMSNorm of each head, then RoPE (Qwen3's QK-norm): was two launches and 5472 B at [2, 5, 4, 8] (the norm's row
     * kernel storing the normalised heads, then the rotation reading them back); Inductor (marked, its lowering): one
     * kernel reading the heads, the weight and the tables, writing the result. The decode shape too: one token.
     */
    @Test
    void anRmsNormThenRopeOfTheSameHeadsIsOneKernel() {
        Plan p = rmsNormThenRope("rms_rope", 2, 5, 4, 8);
        atMostInductor(p, 1, 2 * 320 + 8 + 2 * 40);
        assertThat(p.toString()).contains("element loop narrowed to 4 of 8 columns");
        atMostInductor(rmsNormThenRope("rms_rope_decode", 1, 1, 16, 128), 1, 2 * 2048 + 128 + 2 * 128);
        // as the decoder has Qwen3's: the heads out of a projection, normed, rotated as [b, h, t, d]: the product, then one kernel
        Plan prefill = plan("qk_norm_rope", g -> {
            long b = 2, t = 6, h = 4;
            int d = 16;
            var x = g.input("x", F32, b, t, 32).matmul(g.input("wq", F32, 32, h * d)).reshape(b, t, h, d);
            var n = x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("w", F32, d)).transpose(1, 2);
            g.output("q", rope(n, g.input("cos", F32, 1, t, d), g.input("sin", F32, 1, t, d), d));
        });
        atMostInductor(prefill, 2, (384 + 2048 + 768) + (768 + 16 + 2 * 96 + 768));
        assertThat(prefill.toString()).contains("loop reordered to the kernel's");
    }

    /** Random heads, positions and head sizes (square ones too): one kernel, no more bytes than Inductor moves. */
    @Property(tries = 60)
    void randomRmsNormsThenRopeAreOneKernel(@ForAll @IntRange(min = 1, max = 3) int b, @ForAll @IntRange(min = 1, max = 6) int s,
                                            @ForAll @IntRange(min = 1, max = 6) int h, @ForAll @IntRange(min = 2, max = 8) int half, @ForAll boolean square) {
        int d = 2 * half;
        long heads = square ? s : h;
        Plan p = rmsNormThenRope("rms_rope_random", b, s, heads, d);
        long numel = b * s * heads * d;
        atMostInductor(p, 1, 2 * numel + d + 2L * s * d);
    }

    // ------------------------------------------------------------ class 3: across a gather (PlanOptions.withGatherFusion, on by default)

    static Plan gathering(String name, Consumer<GraphBuilder> body) { return plan(name, body); }

    /**
     * {@code x[idx] + 1} over a 10x10 table and 10 i64 indices: two launches and 1,680 B without the option (the picked
     * rows written, then read back); with it (the default) one kernel reading {@code x[idx[i], j]}, 880 B, as Inductor.
     */
    @Test
    void aPointwiseOpOfAnIndexSelectReadsTheTableThroughTheIndices() {
        Consumer<GraphBuilder> body = g -> g.output("y", g.input("x", F32, 10, 10).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT64, 10)).add(1));
        var g = Gatun.graph("gather_add");
        body.accept(g);
        Plan apart = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), PlanOptions.DEFAULT.withGatherFusion(false));
        assertThat(PlanChecks.all(apart)).as(apart.toString()).isEmpty();
        assertThat(launches(apart)).isEqualTo(2);
        assertThat(bytes(apart)).isEqualTo(1680);
        assertThat(apart.toString()).contains("gather fusion: off");
        Plan p = gathering("gather_add", body);
        atMostInductor(p, 1, 220);
        assertThat(p.steps()).noneMatch(s -> s instanceof Step.OpCall);
        assertThat(p.kernels()).hasSize(1);
        assertThat(p.kernels().getFirst().gathers()).isTrue();
        assertThat(p.toString()).doesNotContain("gather fusion: ").contains("through its indices");
    }

    /**
     * A reader that also reads a product's result (a residual add after a projection) may become the product's epilogue,
     * which a gathering kernel never is: the index_select stays a launch of its own and nothing gathers. The same with an
     * all-reduce's result (the add may be the collective's epilogue) and with an all-reduce's input (its prologue).
     */
    @Test
    void aReaderThatMayJoinAProductOrACollectiveKeepsTheIndexSelectALaunch() {
        List<Consumer<GraphBuilder>> bodies = List.of(
                g -> g.output("y", g.input("x", F32, 10, 8).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT64, 4))
                        .add(g.input("a", F32, 4, 16).matmul(g.input("w", F32, 16, 8)))),
                g -> g.output("y", g.input("x", F32, 10, 8).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT32, 4))
                        .add(g.input("h", F32, 4, 8).mul(2).allReduce(dev.gatun.ir.graph.ReduceOp.SUM))),
                g -> g.output("y", g.input("x", F32, 10, 8).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT32, 4)).mul(2)
                        .allReduce(dev.gatun.ir.graph.ReduceOp.SUM)));
        for (var body : bodies) {
            var g = Gatun.graph("gather_join");
            body.accept(g);
            Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)), PlanOptions.DEFAULT.withGatherFusion(true));   // two ranks: collectives
            assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
            assertThat(p.kernels()).as("%s", p).noneMatch(k -> k.gathers());
            assertThat(p.steps()).as("%s", p).anyMatch(s -> s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.IndexSelect.SPEC);
        }
    }

    /** Random tables, index shapes and chains: one launch, each of table, indices and result moved once at most. */
    @Property(tries = 60)
    void randomGathersThroughPointwiseOpsAreOneKernel(
            @ForAll @IntRange(min = 1, max = 3) int tableRank, @ForAll @IntRange(min = 1, max = 2) int idsRank,
            @ForAll @IntRange(min = 1, max = 5) int side, @ForAll boolean i32) {
        long[] table = new long[tableRank], ids = new long[idsRank];
        java.util.Arrays.fill(table, side + 1);
        java.util.Arrays.fill(ids, side);
        var it = i32 ? dev.gatun.ir.DType.INT32 : dev.gatun.ir.DType.INT64;
        Plan p = gathering("gather_random", g -> g.output("y", g.input("x", F32, dims(table)).indexSelect(0, g.input("idx", it, dims(ids))).mul(2).sin()));
        long row = numel(table) / table[0], picked = numel(ids) * row;
        long bytes = numel(table) * 4 + numel(ids) * it.byteSize() + picked * 4;
        assertThat(launches(p)).as("%s", p).isEqualTo(1);
        assertThat(bytes(p)).as("%s", p).isLessThanOrEqualTo(bytes);
    }

    /** Where the result is a graph output or a product reads it, the op stays a launch of its own. */
    @Test
    void anIndexSelectWhoseResultIsAnOutputOrAProductsIsMade() {
        Plan out = gathering("gather_out", g -> {
            var y = g.input("x", F32, 10, 10).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT64, 10));
            g.output("y", y);
            g.output("z", y.add(1));
        });
        assertThat(out.steps()).anyMatch(s -> s instanceof Step.OpCall);
        Plan mm = gathering("gather_mm", g -> {
            var y = g.input("x", F32, 10, 10).indexSelect(0, g.input("idx", dev.gatun.ir.DType.INT64, 10));
            g.output("z", y.matmul(g.input("w", F32, 10, 10)));
        });
        assertThat(mm.steps()).anyMatch(s -> s instanceof Step.OpCall);
    }

    private static int[] permutation(int rank, int pick) {
        var left = new ArrayList<Integer>();
        for (int i = 0; i < rank; i++) left.add(i);
        int[] out = new int[rank];
        for (int i = 0; i < rank; i++) {
            out[i] = left.remove(pick % left.size());
            pick /= Math.max(1, left.size() + 1);
        }
        return out;
    }

    private static long[] mergeFirstTwo(long[] s) {
        long[] out = new long[s.length - 1];
        out[0] = s[0] * s[1];
        System.arraycopy(s, 2, out, 1, s.length - 2);
        return out;
    }

    private static long numel(long[] s) {
        long n = 1;
        for (long x : s) n *= x;
        return n;
    }

    private static Object[] dims(long[] shape) {
        var out = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) out[i] = shape[i];
        return out;
    }
}
