package dev.gatun.lowering;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.AllocatorType;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Layout;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.ir.Algorithm;
import dev.gatun.lowering.Realization.Path;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class LoweringTest {

    static Graph seeds() {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, 4, 4);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    static List<Realization> collectives(LoweredGraph l) {
        return l.realizations().stream().filter(r -> r.algorithm() != null).toList();
    }

    @Test
    void seedsFirstThreeAllReducesTakePathOne() {
        LoweredGraph l = Lowering.lower(seeds(), LoweringOptions.world(2));
        var rs = collectives(l);
        assertThat(rs).hasSize(4);
        assertThat(rs).allSatisfy(r -> {
            assertThat(r.path()).isEqualTo(Path.ZERO_COPY);
            assertThat(r.algorithm()).isEqualTo(Algorithm.ONE_SHOT);
            assertThat(r.commBuffer()).isEqualTo(r.input());
        });
        // the producers' layouts became communication buffers of "world"; the collectives' outputs did not
        for (var r : rs) {
            var in = l.buffer(r.input());
            assertThat(in).isInstanceOf(ComputedBuffer.class);
            assertThat(in.layout()).isInstanceOf(Layout.CommBuffer.class);
            assertThat(in.layout().allocator()).isEqualTo(AllocatorType.symmMem("world"));
            assertThat(l.buffer(r.consumer()).isSymmetric()).isFalse();
        }
        assertThat(l.toString()).contains("all_reduce.one_shot", "CommBuffer(SYMM_MEM, \"world\"");
        assertThat(l.explain()).contains("path 1");
        assertThat(l.outputs().get("d").isSymmetric()).isFalse();
    }

    /** One all-reduce of a {@code rows x cols} f32 input, lowered with the measured barrier-free threshold. */
    static Algorithm measuredChoice(int world, int rows, int cols) {
        var g = Gatun.graph("bf");
        var x = g.input("x", F32, rows, cols);
        g.output("y", x.add(1).allReduce(SUM));
        return collectives(Lowering.lower(g.build(), LoweringOptions.world(world).withMeasuredBarrierFree())).getFirst().algorithm();
    }

    @Test
    void anAllGatherOfAnyDtypeIsSymmetricButAReductionOfI64IsNccl() {
        for (var t : new dev.gatun.ir.DType[]{dev.gatun.ir.DType.I64, dev.gatun.ir.DType.I32, dev.gatun.ir.DType.F64}) {
            var g = Gatun.graph("ag").world(2);
            g.output("y", g.input("x", t, 4).allGather());
            g.output("z", g.input("w", t, 4).allReduce(SUM));
            var cs = collectives(Lowering.lower(g.build(), LoweringOptions.world(2)));
            assertThat(cs).extracting(c -> c.algorithm()).as(t.toString()).containsExactly(Algorithm.SYMM_MEM, Algorithm.NCCL);
        }
    }

    @Test
    void theMeasuredBarrierFreeThresholdTakesTheAllReducesItWon() {
        assertThat(LoweringOptions.world(2).barrierFreeMaxBytes()).isZero(); // not the lowering's own default
        assertThat(measuredChoice(2, 8, 8)).isEqualTo(Algorithm.BARRIER_FREE);     // 256 B
        assertThat(measuredChoice(2, 64, 64)).isEqualTo(Algorithm.BARRIER_FREE);   // 16 KiB
        assertThat(measuredChoice(2, 256, 512)).isEqualTo(Algorithm.BARRIER_FREE); // 512 KiB
        assertThat(measuredChoice(2, 512, 512)).isEqualTo(Algorithm.ONE_SHOT);     // 1 MiB
        assertThat(measuredChoice(4, 8, 8)).isEqualTo(Algorithm.BARRIER_FREE);     // 256 B
        assertThat(measuredChoice(4, 16, 16)).isEqualTo(Algorithm.BARRIER_FREE);   // 1 KiB
        assertThat(measuredChoice(4, 32, 32)).isEqualTo(Algorithm.ONE_SHOT);       // 4 KiB
        assertThat(LoweringOptions.world(1).withMeasuredBarrierFree().barrierFreeMaxBytes()).isZero();
    }

    /**
     * An uneven all_to_all stays on symmetric memory past the threshold (its counts are read on the device, which NCCL's
     * send and receive cannot do); an even one of the same size goes to NCCL; with symmetric memory off both go to NCCL.
     */
    @Test
    void anUnevenAllToAllStaysOnSymmetricMemoryPastTheThreshold() {
        long rows = 20L * 1024 * 1024 / (4 * 64);   // 20 MiB of f32 rows of 64: past the 16 MiB threshold of two ranks
        var g = Gatun.graph("big").world(2);
        var x = g.input("x", F32, rows, 64).mul(2);
        var r = x.allToAll("world", g.input("counts", dev.gatun.ir.DType.I64, 2), rows);
        g.output("y", r.values().add(1));
        g.output("even", x.allToAll("world"));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var algorithms = collectives(l).stream().map(Realization::algorithm).toList();
        assertThat(algorithms).as(l.explain()).contains(Algorithm.SYMM_MEM, Algorithm.NCCL);
        assertThat(l.decisions()).anySatisfy(d -> assertThat(d).contains("all_to_all.symm_mem (20 MiB, uneven: its row counts are read on the device"));
        assertThat(l.decisions()).anySatisfy(d -> assertThat(d).contains("all_to_all.nccl (20 MiB > 16 MiB symmetric threshold)"));
        LoweredGraph off = Lowering.lower(g.build(), LoweringOptions.world(2).withSymmetricMemory(false));
        assertThat(collectives(off)).as(off.explain()).allMatch(c -> c.algorithm() == Algorithm.NCCL);
    }

    @Test
    void graphInputTakesPathTwo() {
        var g = Gatun.graph("p2");
        var x = g.input("x", F32, 8, 8);
        g.output("y", x.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = collectives(l).getFirst();
        assertThat(r.path()).isEqualTo(Path.SYMMETRIC_INPUT);
        assertThat(r.notTaken()).singleElement().asString().contains("path 1 not taken", "graph input");
        InputBuffer in = l.inputs().get("x");
        assertThat(in.layout().allocator()).isEqualTo(AllocatorType.symmMem("world"));
        assertThat(in.layout()).isInstanceOf(Layout.Fixed.class);
    }

    @Test
    void graphInputTakesPathThreeWhenSymmetricInputsAreOff() {
        var g = Gatun.graph("p2off");
        var x = g.input("x", F32, 8, 4);
        g.output("y", x.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2).withSymmetricInputs(false));
        var r = collectives(l).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken()).hasSize(2).last().asString().contains("path 2 not taken", "switched off");
        assertThat(l.inputs().get("x").layout().allocator().isSymmetric()).isFalse();
    }

    @Test
    void viewInputTakesPathThree() {
        var g = Gatun.graph("p3");
        var x = g.input("x", F32, 8, 4);
        var y = x.mul(2).t();                     // a view of a computed buffer
        g.output("z", y.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = collectives(l).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken()).hasSize(2);
        assertThat(r.notTaken().get(0)).contains("is a view (permute)");
        assertThat(r.notTaken().get(1)).contains("not a graph input");
        var copy = l.buffer(r.commBuffer());
        assertThat(copy).isInstanceOf(ComputedBuffer.class);
        assertThat(((ComputedBuffer) copy).label()).isEqualTo("copy");
        assertThat(copy.layout()).isInstanceOf(Layout.CommBuffer.class);
        assertThat(l.buffer(r.input())).isInstanceOf(ViewBuffer.class);
    }

    @Test
    void fixedLayoutInputTakesPathThreeAndSaysWhy() {
        var g = Gatun.graph("fixed");
        var x = g.input("x", F32, 4, 4);
        var h = x.exp();
        var v = h.reshape(16);                      // viewing h fixes its layout (a reduction reads the view: it is made)
        g.output("v", v.sum(0));
        g.output("s", h.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = collectives(l).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken().getFirst()).contains("fixed layout", "reshape");
    }

    @Test
    void externOutputTakesPathThree() {
        var g = Gatun.graph("mm");
        var a = g.input("a", F32, 4, 8);
        var w = g.input("w", F32, 8, 4);
        g.output("y", a.matmul(w).allReduce(SUM));
        var r = collectives(Lowering.lower(g.build(), LoweringOptions.world(2))).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken().getFirst()).contains("extern kernel", "a product, whose copy the collective's launch may take");
    }

    /**
     * A registered op's output and a collective's result take path 1: the call writes the communication buffer itself
     * (an index_select's rows and an all_to_all's received counts feeding an uneven all_to_all: mixture-of-experts
     * dispatch and combine), where before each was copied by a launch of its own.
     */
    @Test
    void registeredOpOutputsAndCollectiveResultsTakePathOne() {
        var g = Gatun.graph("moe").mesh("ep", 2);
        var x = g.input("x", F32, 4, 8);
        var order = g.input("order", DType.I64, 4);
        var counts = g.input("counts", DType.I64, 2);
        var sent = x.indexSelect(0, order).allToAll("ep", counts.neg().neg(), 8);
        g.output("y", sent.values().allToAll("ep", sent.counts(), 4).values());
        var rs = collectives(Lowering.lower(g.build(), LoweringOptions.world(2)));
        assertThat(rs).hasSize(5);   // the dispatch's rows and counts, the counts' all_to_all, the combine's rows and counts
        assertThat(rs).allSatisfy(r -> assertThat(r.path()).as(r.input()).isEqualTo(Path.ZERO_COPY));
    }

    /** An op that writes its input in place (update_slice) keeps the copy: its output is its target's slot. */
    @Test
    void anInPlaceOpsOutputTakesPathThree() {
        var g = Gatun.graph("upd");
        var pos = g.input("pos", DType.I64, 1);
        var t = g.input("t", F32, 4, 8).neg();
        g.output("y", t.updateSlice(0, g.input("u", F32, 1, 8), pos).allReduce(SUM));
        var r = collectives(Lowering.lower(g.build(), LoweringOptions.world(2))).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken().getFirst()).contains("written in place by update_slice");
    }

    @Test
    void symbolicShapeFallsBackToNccl() {
        var g = Gatun.graph("dyn");
        var x = g.input("x", F32, "n", 4);
        g.output("y", x.add(1).allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = collectives(l).getFirst();
        assertThat(r.algorithm()).isEqualTo(Algorithm.NCCL);
        assertThat(r.whyAlgorithm()).contains("symbolic");
        assertThat(r.path()).isEqualTo(Path.NONE);
        assertThat(l.buffers()).noneMatch(b -> b.isSymmetric());
    }

    @Test
    void thresholdsPickOneShotTwoShotAndNccl() {
        var g = Gatun.graph("sizes");
        var small = g.input("s", F32, 64, 64);        // 16 KiB
        var mid = g.input("m", F32, 1024, 1024);      // 4 MiB
        var big = g.input("b", F32, 4096, 4096);      // 64 MiB
        g.output("s2", small.add(1).allReduce(SUM));
        g.output("m2", mid.add(1).allReduce(SUM));
        g.output("b2", big.add(1).allReduce(SUM));
        var rs = collectives(Lowering.lower(g.build(), LoweringOptions.world(4)));
        assertThat(rs).extracting(Realization::algorithm).containsExactly(Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL);
        // two ranks: one-shot up to the two-shot threshold (two-shot gains nothing there)
        var two = collectives(Lowering.lower(g.build(), LoweringOptions.world(2)));
        assertThat(two).extracting(Realization::algorithm).containsExactly(Algorithm.ONE_SHOT, Algorithm.ONE_SHOT, Algorithm.NCCL);
        var custom = collectives(Lowering.lower(g.build(), LoweringOptions.world(2).withThresholds(1024, 1024)));
        assertThat(custom).extracting(Realization::algorithm).containsExactly(Algorithm.NCCL, Algorithm.NCCL, Algorithm.NCCL);
    }

    @Test
    void outputThatIsAlsoCollectiveInputStaysRegular() {
        var g = Gatun.graph("out");
        var x = g.input("x", F32, 4, 4);
        var h = x.add(1);
        g.output("h", h);
        g.output("s", h.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = collectives(l).getFirst();
        assertThat(r.path()).isEqualTo(Path.IDENTITY_COPY);
        assertThat(r.notTaken().getFirst()).contains("graph output");
        assertThat(l.outputs().get("h").isSymmetric()).isFalse();
    }

    @Test
    void outputInSymmetricMemoryIsCopiedOut() {
        // a path-2 input returned as an output, and a view of a path-1 buffer returned as an output
        var g = Gatun.graph("copies");
        var x = g.input("x", F32, 4, 4);
        var h = x.add(1);
        g.output("a", x.allReduce(SUM));
        g.output("x_again", x);
        g.output("b", h.allReduce(SUM));
        g.output("h_view", h.reshape(16));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        assertThat(l.inputs().get("x").isSymmetric()).isTrue();
        for (String name : List.of("x_again", "h_view")) {
            var out = l.outputs().get(name);
            assertThat(out.isSymmetric()).as(name).isFalse();
            assertThat(out).isInstanceOf(ComputedBuffer.class);
            assertThat(((ComputedBuffer) out).label()).isEqualTo("copy");
        }
        assertThat(l.decisions()).anyMatch(d -> d.contains("output 'x_again' is copied out of symmetric memory"));
    }

    @Test
    void allocatorSurvivesFixingCopyingAndEquality() {
        var flex = Layout.flexible(F32, dev.gatun.ir.Shape.of(4, 4)).withAllocator(AllocatorType.symmMem("tp"));
        var fixed = flex.fix();
        assertThat(fixed.allocator()).isEqualTo(AllocatorType.symmMem("tp"));
        assertThat(fixed).isNotEqualTo(Layout.flexible(F32, dev.gatun.ir.Shape.of(4, 4)).fix());
        assertThat(fixed).isEqualTo(Layout.flexible(F32, dev.gatun.ir.Shape.of(4, 4)).withAllocator(AllocatorType.symmMem("tp")).fix());
        assertThat(fixed.withAllocator(AllocatorType.DEFAULT)).isNotEqualTo(fixed);
        var comm = Layout.CommBuffer.of(flex, dev.gatun.ir.CommBufferType.SYMM_MEM, "tp");
        assertThat(comm.fix().allocator()).isEqualTo(AllocatorType.symmMem("tp"));
        assertThat(comm.allocator().isSymmetric()).isTrue();
    }

    @Test
    void userOpSymmetricInputIsRealized() {
        var op = UserOp.builder("scale_in_place")
                .input(TensorSpec.of("x", F32, "n"))
                .output(TensorSpec.of("y", F32, "n"))
                .symmetricInput(0)
                .cuda("scale", "extern \"C\" __global__ void scale(const float* x, float* y, long long n) {}")
                .build();
        var g = Gatun.graph("user").register(op);
        var x = g.input("x", F32, 128);
        g.output("y", g.call1("scale_in_place", x.mul(3)));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        var r = l.realizations().getFirst();
        assertThat(r.op()).isEqualTo("scale_in_place input 0");
        assertThat(r.path()).isEqualTo(Path.ZERO_COPY);
        var call = (ExternBuffer) l.buffer(r.consumer());
        assertThat(call.call()).isInstanceOf(ExternCall.UserOpCall.class);
        assertThat(call.inputs().getFirst().isSymmetric()).isTrue();
    }

    @Test
    void symmetricRegionPlacesResultsInThePool() {
        var g = Gatun.graph("region");
        var x = g.input("x", F32, 16);
        var y = g.symmetric("world", () -> x.mul(2).add(1));
        g.output("z", y.allReduce(SUM));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(2));
        assertThat(l.realizations()).anyMatch(r -> r.op().startsWith("symmetric region"));
        // both region results are in the pool; the all-reduce then reads one with zero copies
        assertThat(l.buffers().stream().filter(b -> b instanceof ComputedBuffer && b.isSymmetric())).hasSize(2);
        assertThat(collectives(l).getFirst().path()).isEqualTo(Path.ZERO_COPY);
    }

    @Test
    void worldMismatchAndGroupRanksAreChecked() {
        var g = Gatun.graph("w").world(2);
        g.output("y", g.input("x", F32, 4).allReduce(SUM));
        assertThatThrownBy(() -> Lowering.lower(g.build(), LoweringOptions.world(4)))
                .isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("built for a world of 2").hasMessageContaining("compiled for 4");
        var h = Gatun.graph("grp").group("tp", 0, 3);
        h.output("y", h.input("x", F32, 4).allReduce(SUM, "tp"));
        assertThatThrownBy(() -> Lowering.lower(h.build(), LoweringOptions.world(2)))
                .isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("group 'tp' has rank 3");
    }

    @Test
    void nonSymmetricDtypeGoesToNccl() {
        var g = Gatun.graph("ints");
        g.output("y", g.input("x", DType.I32, 4).add(1).allReduce(SUM));
        var r = collectives(Lowering.lower(g.build(), LoweringOptions.world(2))).getFirst();
        assertThat(r.algorithm()).isEqualTo(Algorithm.NCCL);
        assertThat(r.whyAlgorithm()).contains("i32");
    }

    @Test
    void deadNodesAreDropped() {
        var g = Gatun.graph("dead");
        var x = g.input("x", F32, 4);
        x.exp();                                  // unused
        g.output("y", x.add(1));
        LoweredGraph l = Lowering.lower(g.build(), LoweringOptions.world(1));
        assertThat(l.buffers()).hasSize(2);
        assertThat(l.decisions()).anyMatch(d -> d.contains("dropped"));
    }
}
