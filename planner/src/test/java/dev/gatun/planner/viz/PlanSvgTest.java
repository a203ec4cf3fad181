package dev.gatun.planner.viz;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/** Liveness reconstruction and SVG text of plans; the SVG's structure is checked with an XML parser in the examples module. */
class PlanSvgTest {

    /** Counts {@code <rect class="buffer ...">} elements in the text. */
    static int bufferRects(String svg) {
        var m = java.util.regex.Pattern.compile("<rect class=\"buffer[ \"]").matcher(svg);
        int n = 0;
        while (m.find()) n++;
        return n;
    }



    /** The seeds' plan with each collective a launch of its own. */
    static Plan seedsPlan() { return dev.gatun.planner.SeedsPlanTest.plan(2); }

    static long placeSteps(Plan p) { return p.steps().stream().filter(s -> s instanceof Step.Place).count(); }

    @Test
    void seedsLivenessFollowsTheCrossRankLifetimes() {
        var t = PlanTimeline.of(seedsPlan());
        // the kernel, the batch of three all-reduces (one launch), the sum kernel, the last all-reduce
        assertThat(t.operations()).hasSize(4);
        Map<String, int[]> live = new HashMap<>();
        t.boxes().forEach(b -> live.put(b.buffer(), new int[]{b.first(), b.last()}));
        // x+1, x+2, x+3 written by operation 0, all freed by the trailing barrier of the batch
        assertThat(live.get("buf0")).containsExactly(0, 1);
        assertThat(live.get("buf2")).containsExactly(0, 1);
        assertThat(live.get("buf4")).containsExactly(0, 1);
        assertThat(live.get("buf7")).containsExactly(2, 3);
        // regular buffers: from the collective that writes them to the kernel that reads them; the output to the end
        assertThat(live.get("buf1")).containsExactly(1, 2);
        assertThat(live.get("buf8")).containsExactly(3, 3);
        assertThat(t.boxes().stream().filter(b -> b.buffer().equals("buf8")).findFirst().orElseThrow().role()).isEqualTo(PlanTimeline.Role.OUTPUT);
    }

    @Test
    void aUserOpsSymmetricInputStaysLiveUntilTheFinalBarrier() {
        var op = UserOp.builder("peer_sum").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n")).symmetricInput(0).build();
        var g = Gatun.graph("userop").register(op);
        g.output("y", g.call1("peer_sum", g.input("x", F32, 64).mul(3)).add(1));
        Plan plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)));
        var t = PlanTimeline.of(plan);
        var comm = t.boxes().stream().filter(b -> b.role() == PlanTimeline.Role.COMM).toList();
        assertThat(comm).hasSize(1);
        var last = t.operations().getLast();
        assertThat(last.step()).isInstanceOf(Step.Barrier.class);
        assertThat(comm.getFirst().last()).as("read by peers in the user op, freed only by the final barrier").isEqualTo(last.index());
        assertThat(bufferRects(PlanSvg.render(plan))).isEqualTo(placeSteps(plan));
    }

    @Test
    void deterministicAndSelfContained() {
        String a = PlanSvg.render(seedsPlan()), b = PlanSvg.render(seedsPlan());
        assertThat(a).isEqualTo(b);
        assertThat(bufferRects(a)).isEqualTo(8);
        assertThat(a).doesNotContain("<script", "<image", "href=", "@import", "<foreignObject");
        assertThat(a.replace("http://www.w3.org/2000/svg", "")).doesNotContain("http:", "https:", "file:");
        String html = PlanSvg.html(seedsPlan());
        assertThat(html).startsWith("<!DOCTYPE html>").contains("<svg xmlns=\"http://www.w3.org/2000/svg\"").contains("pool0 = alloc_symmetric(192 B")
                .doesNotContain("<?xml");
        assertThat(html).isEqualTo(PlanSvg.html(seedsPlan()));
    }

    @Test
    void aPlanWithoutPoolsStillRenders() {
        var g = Gatun.graph("dyn");
        g.output("y", g.input("x", F32, "n", 4).add(1).allReduce(SUM));
        Plan plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)));
        assertThat(placeSteps(plan)).isZero();
        assertThat(bufferRects(PlanSvg.render(plan))).isZero();
        assertThat(PlanSvg.render(plan)).contains("alloc_dynamic", "no pools");
    }

    /**
     * Over random plans: well-formed, one rectangle per placed buffer, and the reconstructed live ranges agree with
     * the planner's offsets: two buffers whose slots overlap are never live at once (an in-place pair shares only
     * the kernel that reads one and writes the other).
     */
    @Test
    void randomPlansRenderAndTheirLiveRangesAgreeWithTheOffsets() {
        var failures = new ArrayList<String>();
        int plans = 0;
        for (int world = 1; world <= 4; world++) {
            for (long seed = 0; seed < 60; seed++) {
                var opts = RandomGraphs.Options.defaults().withWorldSize(world).withMaxNodes(8 + (int) (seed % 5) * 8);
                Graph g = RandomGraphs.generate(7000L * world + seed, opts);
                PlanOptions po = seed % 2 == 0 ? PlanOptions.DEFAULT : PlanOptions.DEFAULT.withReorder(false);
                Plan plan = Planner.plan(Lowering.lower(g, LoweringOptions.world(world)), po);
                plans++;
                int rects = bufferRects(PlanSvg.render(plan));
                if (rects != placeSteps(plan)) failures.add("seed " + seed + " world " + world + ": rect count " + rects + " != " + placeSteps(plan));
                var boxes = PlanTimeline.of(plan).boxes();
                for (var x : boxes) {
                    if (x.first() > x.last()) failures.add(plan.name() + " " + x.buffer() + ": empty live range");
                    for (var y : boxes) {
                        if (x == y || x.pool() != y.pool() || x.buffer().compareTo(y.buffer()) >= 0) continue;
                        boolean bytes = x.offset() < y.offset() + y.bytes() && y.offset() < x.offset() + x.bytes();
                        boolean time = x.first() <= y.last() && y.first() <= x.last();
                        if (!bytes || !time) continue;
                        boolean inPlacePair = (x.inPlace() && y.buffer().equals(x.reuses()) && x.first() == y.last())
                                || (y.inPlace() && x.buffer().equals(y.reuses()) && y.first() == x.last());
                        boolean persistent = x.pool().kind() == Pool.Kind.CONSTANT || x.pool().kind() == Pool.Kind.SYMM_INPUTS;
                        // inside one fused collective launch the epilogue writes a slot whose last reader was its collective
                        // (the same tile of the same bytes: CollectiveFusionTest)
                        int meet = x.first() == y.last() ? x.first() : y.first() == x.last() ? y.first() : -1;
                        boolean fusedHandOver = meet >= 0 && PlanTimeline.of(plan).operations().get(meet).step() instanceof Step.FusedCollective;
                        if (!inPlacePair && !persistent && !fusedHandOver)
                            failures.add("seed " + seed + " world " + world + ": " + x + " and " + y + " overlap\n" + plan);
                    }
                }
            }
        }
        assertThat(plans).isEqualTo(240);
        assertThat(failures).isEmpty();
    }
}
