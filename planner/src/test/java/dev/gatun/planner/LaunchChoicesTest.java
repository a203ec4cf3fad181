package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link LaunchChoices}: every choice of how a step is launched is the plan's, printed on the step's line and in the
 * fingerprint. Expected k-slices are worked out by hand from the rule (16 warps a multiprocessor, one unrolled loop a
 * slice, at most 16), not by the code under test.
 */
class LaunchChoicesTest {

    static Plan plan(PlanOptions options, Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(options, body); }

    /** x [rows, k] of {@code t} by w [24, k] lying transposed. */
    static Plan product(PlanOptions options, DType t, int rows, int k) {
        return plan(options, g -> g.output("y", g.input("x", t, rows, k).matmul(g.input("w", t, 24, k).transpose(0, 1))));
    }

    static Step.Matmul theProduct(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.Matmul).map(s -> (Step.Matmul) s).findFirst().orElseThrow();
    }

    @Test
    void theGemvsFormIsChosenForTheTargetAndPrintedOnItsLine() {
        // one row of bf16, k 4096: 512 vectors, 16 steps of 32 (2 unrolled); 6 tiles of 4 columns. On 132 SMs the warps
        // never fill the GPU, so slices double while a slice keeps a loop: 1, 2, 4, 8 (16 / (2 * 8) = 1 < 2 stops there)
        Plan h200 = product(PlanOptions.DEFAULT, DType.BF16, 1, 4096);
        LaunchChoice c = h200.choice(theProduct(h200));
        assertThat(c.gemv()).isEqualTo(new LaunchChoice.Gemv(false, 8, 8, true, 0));
        assertThat(c.programmatic()).isTrue();
        assertThat(h200.toString()).contains("# gemv   # launch: programmatic, gemv[fma, slices=8, warps=8, preload]");
        // on one SM: 6 tiles x slices < 16 warps: 1, 2, 4 (24 >= 16 stops)
        Plan small = product(PlanOptions.DEFAULT.withTarget(new PlanOptions.Target(1, true)), DType.BF16, 1, 4096);
        assertThat(small.choice(theProduct(small)).gemv()).isEqualTo(new LaunchChoice.Gemv(false, 4, 8, true, 0));
        assertThat(small.toString()).contains("gemv[fma, slices=4, warps=8, preload]").contains("# target: 1 multiprocessors, programmatic launches");
        assertThat(small.fingerprint()).isNotEqualTo(h200.fingerprint());
        assertThat(product(PlanOptions.DEFAULT, DType.BF16, 1, 4096).fingerprint()).isEqualTo(h200.fingerprint());
        // two rows of bf16: the tensor cores' kernel; 128 steps of 4 (4 unrolled), 3 tiles of 8: slices to the most, 16
        Plan two = product(PlanOptions.DEFAULT, DType.BF16, 2, 4096);
        assertThat(two.choice(theProduct(two)).gemv()).isEqualTo(new LaunchChoice.Gemv(true, 16, 16, true, 0));
        assertThat(two.toString()).contains("gemv[mma, slices=16, warps=16, preload]");
    }

    @Test
    void aWeightComputedInTheCallIsNotPreloaded() {
        Plan p = plan(PlanOptions.DEFAULT, g -> g.output("y", g.input("x", DType.BF16, 1, 64).matmul(g.input("w", DType.BF16, 24, 64).exp().transpose(0, 1))));
        LaunchChoice c = p.choice(theProduct(p));
        assertThat(c.gemv()).isNotNull();
        assertThat(c.gemv().preload()).isFalse();
        assertThat(c.programmatic()).as(p.launches().why()).isFalse();
        assertThat(c.gemv().resident()).as("not programmatic: the whole grid at once").isZero();
    }

    @Test
    void programmaticIsPerEdgeTheLibrarysProductIsNeverOne() {
        var on = PlanOptions.DEFAULT.withProgrammaticLaunch(PlanOptions.ProgrammaticLaunch.ON);
        // 9 rows: the library's GEMM, then a kernel of Gatun's
        Plan p = plan(on, g -> g.output("y", g.input("x", DType.BF16, 9, 32).matmul(g.input("w", DType.BF16, 24, 32).transpose(0, 1)).exp()));
        assertThat(p.launches().programmatic()).isTrue();
        Step.Matmul m = theProduct(p);
        assertThat(m.gemv()).isFalse();
        assertThat(p.choice(m)).isEqualTo(LaunchChoice.PLAIN);
        var launches = p.steps().stream().filter(s -> s instanceof Step.Launch).toList();
        assertThat(launches).isNotEmpty().allSatisfy(l -> assertThat(p.choice(l).programmatic()).isTrue());
        assertThat(p.toString()).contains("# launch: programmatic");
        // a target without programmatic launches: none, even where asked for
        Plan old = plan(on.withTarget(new PlanOptions.Target(108, false)), g -> g.output("y", g.input("x", DType.F32, 4).exp()));
        assertThat(old.launches().programmatic()).isFalse();
        assertThat(old.launches().why()).contains("target GPU has none");
        assertThat(old.steps()).allSatisfy(s -> assertThat(old.choice(s).programmatic()).isFalse());
    }

    /** A decode step's attention: q [batch, rows, 64] of bf16 over input caches of {@code len} positions. */
    static Plan attention(PlanOptions options, int batch, int rows, int len) {
        return plan(options, g -> g.output("y", g.input("q", DType.BF16, batch, rows, 64)
                .attention(g.input("kT", DType.BF16, batch, 64, len), g.input("v", DType.BF16, batch, len, 64), g.input("pos", DType.I32, 1), 0.125)));
    }

    static LaunchChoice.Attention theAttention(Plan p) {
        return p.steps().stream().filter(AttentionCall::is).map(s -> p.choice(s).attention()).findFirst().orElseThrow();
    }

    @Test
    void theAttentionsCutIsChosenForTheCacheTheRowsAndTheTarget() {
        // Llama-3.2-1B at batch 1: 8 tiles of 4 rows. A cache of 160 on 132 SMs: 5 slices of 32 = 40 warps, under 4 a
        // multiprocessor (528), and 10 slices of 16 merge in one round: 16 (the fewest the rule takes)
        Plan p = attention(PlanOptions.DEFAULT, 8, 4, 160);
        assertThat(theAttention(p).positions()).isEqualTo(16);
        assertThat(theAttention(p).early()).as("input caches: nothing written just before").isFalse();
        assertThat(p.toString()).contains("# launch: attention[positions=16, lanes=2]");
        assertThat(p.explain()).contains("16 positions a warp: 8 tiles (4 query rows each) x 10 slices of a cache of 160 = 80 warps for 132 multiprocessors");
        // batch 8: 64 tiles x 5 = 320 warps < 528: 16; 64 x 10 = 640 stops there
        assertThat(theAttention(attention(PlanOptions.DEFAULT, 64, 4, 160)).positions()).isEqualTo(16);
        // six rows are two tiles of four: 16 tiles x 5 = 80, x 10 = 160: 16, no fewer
        assertThat(theAttention(attention(PlanOptions.DEFAULT, 8, 6, 160)).positions()).isEqualTo(16);
        // a cache of 1024 at batch 1: 8 x 32 = 256 warps < 528, but 64 slices of 16 would take two merge rounds: 32
        assertThat(theAttention(attention(PlanOptions.DEFAULT, 8, 4, 1024)).positions()).isEqualTo(32);
        assertThat(theAttention(attention(PlanOptions.DEFAULT, 8, 4, 4096)).positions()).isEqualTo(32);
        // a cache of 33: 8 x 2 = 16 warps; 3 slices of 16: 16
        assertThat(theAttention(attention(PlanOptions.DEFAULT, 8, 4, 33)).positions()).isEqualTo(16);
        // 8 positions a warp where the options force it
        assertThat(theAttention(attention(PlanOptions.DEFAULT.withAttentionPositions(8), 8, 4, 160)).positions()).isEqualTo(8);
        // one multiprocessor: 40 warps are 4 and more a multiprocessor: 32
        var one = PlanOptions.DEFAULT.withTarget(new PlanOptions.Target(1, true));
        Plan small = attention(one, 8, 4, 160);
        assertThat(theAttention(small).positions()).isEqualTo(32);
        assertThat(small.toString()).contains("attention[positions=32, lanes=1]");
        assertThat(small.fingerprint()).isNotEqualTo(p.fingerprint());
        // forced by the options, whatever the rule says, and printed as any cut
        Plan forced = attention(PlanOptions.DEFAULT.withAttentionPositions(16), 8, 4, 4096);
        assertThat(theAttention(forced).positions()).isEqualTo(16);
        assertThat(forced.toString()).contains("attention[positions=16, lanes=2]");
        assertThat(forced.explain()).contains("16 positions a warp, as the plan options ask");
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> PlanOptions.DEFAULT.withAttentionPositions(12))
                .isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("attentionPositions").hasMessageContaining("12");
    }
}
