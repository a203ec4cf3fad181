package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.SymInt;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A concatenation planned without copies: each producer (a matrix product, a fused kernel) writes straight into its
 * slice of the concatenation's one storage, and a copy kernel appears only where a producer cannot, with the reason
 * in the plan's notes. Every plan also passes {@link PlanChecks}, whose concatenation check verifies that the parts tile
 * the storage and that each kernel stores exactly at its part's place.
 */
class CatPlanTest {

    static Plan plan(String name, int world, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name);
        if (world > 1) g.world(world);
        body.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(world)));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    static List<Step.Matmul> matmuls(Plan p) { return p.steps().stream().filter(s -> s instanceof Step.Matmul).map(s -> (Step.Matmul) s).toList(); }

    static List<Step.Place> places(Plan p) { return p.steps().stream().filter(s -> s instanceof Step.Place).map(s -> (Step.Place) s).toList(); }

    static boolean copies(Kernel k) { return k.ops().contains("copy"); }

    static String line(Plan p, String start) {
        return p.toString().lines().map(String::strip).filter(l -> l.startsWith(start)).findFirst().orElseThrow(() -> new AssertionError(start + " in\n" + p));
    }

    @Test
    void matmulsWriteStraightIntoTheirSlicesAlongDimZero() {
        Plan p = plan("mm_rows", 1, g -> {
            var w = g.input("w", F32, 8, 16);
            g.output("y", g.cat(0, g.input("a", F32, 4, 8).matmul(w), g.input("b", F32, 2, 8).matmul(w)));
        });
        PlanBuffer y = p.outputs().get("y");
        assertThat(p.kernels()).as("no copy, no kernel at all").isEmpty();
        assertThat(matmuls(p)).hasSize(2).allSatisfy(m -> {
            assertThat(m.output().storage()).isSameAs(y);
            assertThat(m.output().placement()).as("a part has no slot of its own").isNull();
            assertThat(m.output().isContiguous() || m.output().strides().equals(m.output().shape().contiguousStrides())).isTrue();
        });
        assertThat(matmuls(p)).extracting(m -> m.output().offset()).containsExactly(SymInt.ZERO, SymInt.of(4 * 16));
        // one allocation: the concatenation's, 6 x 16 floats
        assertThat(places(p)).singleElement().satisfies(pl -> {
            assertThat(pl.buffer()).isSameAs(y);
            assertThat(pl.bytes()).isEqualTo(6 * 16 * 4);
        });
        assertThat(p.pools()).singleElement().extracting(Pool::maxLive).isEqualTo(6L * 16 * 4);
        String mm = matmuls(p).getFirst().output().name();
        assertThat(line(p, mm + " = matmul(a, w)")).endsWith("# " + mm + " into " + y.name() + "[0:4]");
        assertThat(line(p, y.name() + " = pool0.at(0")).contains("# cat on dim 0 of " + mm + " [0:4], ");
    }

    @Test
    void matmulsWriteColumnSlicesAtALeadingDimension() {
        Plan p = plan("mm_cols", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            g.output("y", g.cat(-1, x.matmul(g.input("wq", F32, 8, 6)), x.matmul(g.input("wk", F32, 8, 6)), x.matmul(g.input("wv", F32, 8, 4))));
        });
        PlanBuffer y = p.outputs().get("y");
        assertThat(p.kernels()).isEmpty();
        assertThat(matmuls(p)).extracting(m -> m.output().offset()).containsExactly(SymInt.ZERO, SymInt.of(6), SymInt.of(12));
        assertThat(matmuls(p)).allSatisfy(m -> {
            assertThat(m.output().storage()).isSameAs(y);
            assertThat(m.output().strides()).containsExactly(SymInt.of(16), SymInt.ONE);   // rows 16 apart: ldc 16
            assertThat(m.format()).contains(" into " + y.name() + "[:, ").endsWith("(ldc 16)");
        });
        assertThat(places(p)).singleElement().extracting(Step.Place::bytes).isEqualTo(4L * 16 * 4);
    }

    @Test
    void batchedMatmulsWriteTheirSlicesBatchByBatch() {
        Plan p = plan("bmm", 1, g -> {
            var x = g.input("x", F32, 3, 4, 8);
            g.output("y", g.cat(1, x.matmul(g.input("w", F32, 8, 5)), x.matmul(g.input("v", F32, 3, 8, 5))));
        });
        assertThat(p.kernels()).isEmpty();
        assertThat(matmuls(p)).allSatisfy(m -> assertThat(m.output().strides()).containsExactly(SymInt.of(40), SymInt.of(5), SymInt.ONE));
    }

    @Test
    void pointwiseProducersStoreIntoRowSlices() {
        Plan p = plan("rows", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            var y = g.input("y", F32, 2, 8);
            g.output("c", g.cat(0, x.exp(), y.sin().mul(2), x.add(1).sum(true, 0)));
        });
        PlanBuffer c = p.outputs().get("c");
        assertThat(p.kernels()).as(p.toString()).hasSize(3).noneMatch(CatPlanTest::copies);
        for (Kernel k : p.kernels())
            assertThat(k.stores()).singleElement().satisfies(s -> {
                assertThat(s.isRowMajor()).as("a contiguous slice is stored row-major from its start").isTrue();
                assertThat(s.buffer().storage()).isSameAs(c);
            });
        assertThat(places(p)).singleElement().extracting(Step.Place::bytes).isEqualTo(7L * 8 * 4);
        // the sin and the mul are one kernel, storing only the product, into rows 4:6
        Kernel sinMul = p.kernels().stream().filter(k -> k.ops().equals(List.of("sin", "mul"))).findFirst().orElseThrow();
        assertThat(sinMul.stores().getFirst().buffer().part().range()).isEqualTo(c.name() + "[4:6]");
    }

    @Test
    void pointwiseProducersStoreIntoColumnSlicesAtTheirStrides() {
        Plan p = plan("cols", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            g.output("c", g.cat(1, x.exp(), x.sin(), x.max(true, 1)));
        });
        PlanBuffer c = p.outputs().get("c");
        // exp, sin and the row max all read x by rows: one row kernel with three stores at the concatenation's strides
        assertThat(p.kernels()).as(p.toString()).hasSize(1).noneMatch(CatPlanTest::copies);
        Kernel all = p.kernels().getFirst();
        assertThat(all.ops()).containsExactlyInAnyOrder("exp", "sin", "max");
        assertThat(all.stores()).hasSize(3);
        assertThat(all.stores()).extracting(s -> s.buffer().offset()).containsExactlyInAnyOrder(SymInt.ZERO, SymInt.of(8), SymInt.of(16));
        for (Kernel.Store st : all.stores()) assertThat(PlanChecks.storeCoversItsBuffer(all, st)).as(st.toString()).isNull();
        assertThat(all.stores()).filteredOn(Kernel.Store::perRow).singleElement().satisfies(s -> {
            assertThat(s.buffer().offset()).isEqualTo(SymInt.of(16));
            assertThat(s.strides()).containsExactly(SymInt.of(17), SymInt.ONE);
        });
        assertThat(places(p)).singleElement().satisfies(pl -> assertThat(pl.buffer()).isSameAs(c));
    }

    @Test
    void inputsConstantsAndViewsAreCopiedAndThePlanSaysWhy() {
        Plan p = plan("copies", 1, g -> {
            var x = g.input("x", F32, 2, 4);
            var w = g.input("w", F32, 4, 2);
            g.output("c", g.cat(0, x, x.exp(), w.t(), g.constant(F32, new long[]{1, 4}, 1, 2, 3, 4)));
        });
        PlanBuffer c = p.outputs().get("c");
        // three copies; those of the parts' one loop shape join the exp's kernel (one kernel writes the parts of a loop shape)
        assertThat(p.kernels().stream().mapToLong(k -> k.ops().stream().filter("copy"::equals).count()).sum()).isEqualTo(3);
        String place = line(p, c.name() + " = pool0.at(");
        assertThat(place).contains("(a copy: x is a graph input)", "(a copy: " , " is a permute view of w)", " is a constant)");
        assertThat(p.toString()).contains("into " + c.name() + "[0:2], a copy: x is a graph input");
        // the exp is the one part written in place; the copy of x shares its kernel (both read x), and so does the copy of
        // w's transposed view (a part of the same loop shape); the constant's part, of one row, stays a kernel of its own
        var exp = p.kernels().stream().filter(k -> k.ops().contains("exp")).findFirst().orElseThrow();
        assertThat(exp.ops()).containsExactly("exp", "copy", "copy");
        assertThat(exp.stores()).extracting(s -> s.buffer().part().copied()).startsWith(null, "x is a graph input");
        assertThat(exp.stores().getLast().buffer().part().copied()).endsWith("is a permute view of w");
    }

    @Test
    void aStridedSliceOfAValueReadElsewhereFirstIsACopy() {
        Plan p = plan("read_first", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            var e = x.exp();
            g.output("s", e.matmul(g.input("w", F32, 8, 8)));   // reads e row-major before the cat
            g.output("c", g.cat(1, e, x.sin()));
        });
        PlanBuffer c = p.outputs().get("c");
        var parts = c.parts();
        assertThat(parts).hasSize(2);
        assertThat(parts.getFirst().copied()).matches("buf\\d+ is already read row-major by buf\\d+, and its slice along dimension 1 is strided");
        assertThat(parts.get(1).copied()).isNull();
        assertThat(p.kernels()).filteredOn(CatPlanTest::copies).hasSize(1);
        // along dimension 0 the slice is contiguous, and the earlier reader's row-major loads stay right: no copy
        Plan q = plan("read_first_rows", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            var e = x.exp();
            g.output("s", e.matmul(g.input("w", F32, 8, 8)));
            g.output("c", g.cat(0, e, x.sin()));
        });
        assertThat(q.kernels()).noneMatch(CatPlanTest::copies);
        PlanBuffer s = matmuls(q).getFirst().a();
        assertThat(s.part()).isNotNull();
        assertThat(s.storage()).isSameAs(q.outputs().get("c"));
    }

    @Test
    void aValueInTwoConcatenationsIsWrittenIntoTheFirstAndCopiedIntoTheSecond() {
        Plan p = plan("twice", 1, g -> {
            var x = g.input("x", F32, 2, 4);
            var e = x.exp();
            g.output("c1", g.cat(0, e, x.sin()));
            g.output("c2", g.cat(0, x.cos(), e));
        });
        PlanBuffer c1 = p.outputs().get("c1"), c2 = p.outputs().get("c2");
        assertThat(c1.parts()).allMatch(part -> part.copied() == null);
        assertThat(c2.parts().get(1).copied()).isEqualTo(c1.parts().getFirst().writer() + " is already written into " + c1.name() + "[0:2]");
        assertThat(p.kernels()).filteredOn(CatPlanTest::copies).hasSize(1);
        // the same value twice in one concatenation: the second is a copy
        Plan q = plan("same", 1, g -> {
            var e = g.input("x", F32, 2, 4).exp();
            g.output("c", g.cat(0, e, e));
        });
        assertThat(q.outputs().get("c").parts().get(1).copied()).endsWith("is already written into an earlier slice of this concatenation");
    }

    @Test
    void collectiveResultsAndSymmetricBuffersAreCopied() {
        Plan p = plan("collectives", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            var e = x.exp();
            var r = e.allReduce(SUM);                          // e goes to symmetric memory (path 1); r is the collective's buffer
            g.output("c", g.cat(0, e, r));
        });
        var parts = p.outputs().get("c").parts();
        assertThat(parts.get(0).copied()).matches("buf\\d+ lives in symmetric memory of group 'world', where a collective reads it");
        assertThat(parts.get(1).copied()).matches("buf\\d+ is the result of all_reduce\\.one_shot, which writes a buffer of its own");
        // built-in ops other than matmul are named as such, not as user ops
        Plan q = plan("greedy_cat", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            g.output("c", g.cat(0, x.argmax(-1), x.neg().argmax(-1)));
        });
        assertThat(q.outputs().get("c").parts().get(0).copied()).matches("buf\\d+ is the result of argmax, which writes a buffer of its own");
    }

    @Test
    void aConcatenationInsideAnotherIsOneAllocation() {
        Plan p = plan("nested", 1, g -> {
            var x = g.input("x", F32, 2, 4);
            var inner = g.cat(0, x.exp(), x.sin());
            g.output("y", g.cat(0, x.cos(), inner, x.neg()));
        });
        PlanBuffer y = p.outputs().get("y");
        assertThat(p.kernels()).noneMatch(CatPlanTest::copies);
        assertThat(places(p)).singleElement().satisfies(pl -> assertThat(pl.buffer()).isSameAs(y));
        PlanBuffer inner = p.buffer(y.parts().get(1).writer());
        assertThat(inner.parts()).hasSize(2);
        assertThat(inner.storage()).isSameAs(y);
        assertThat(inner.offset()).isEqualTo(SymInt.of(8));
        for (var part : inner.parts()) assertThat(p.buffer(part.writer()).storage()).isSameAs(y);
        assertThat(p.buffer(inner.parts().get(1).writer()).offset()).isEqualTo(SymInt.of(16));
        // joined along another dimension, the inner one is strided inside the outer: copied
        Plan q = plan("nested_cols", 1, g -> {
            var x = g.input("x", F32, 2, 4);
            g.output("y", g.cat(1, x.cos(), g.cat(0, x.exp(), x.sin()).reshape(2, 8)));
        });
        assertThat(q.kernels()).filteredOn(CatPlanTest::copies).hasSize(1);
    }

    @Test
    void theConcatenationLivesFromItsFirstPartToItsLastReadAndTheKernelsAndBytesAreCounted() {
        Plan p = plan("lifetime", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            var a = x.matmul(w);
            var b = x.exp();
            var c = g.cat(0, a, b);                        // [16, 8]
            g.output("y", c.sum(1));                      // its last read
        });
        PlanBuffer cat = p.buffers().stream().filter(b -> !b.parts().isEmpty()).findFirst().orElseThrow();
        var slot = p.slots().stream().filter(s -> s.buffer() == cat).findFirst().orElseThrow();
        var steps = p.steps();
        int firstPart = -1, lastRead = -1;
        for (int i = 0; i < steps.size(); i++) {
            if (firstPart < 0 && PlanChecks.writeBuffers(steps.get(i)).stream().anyMatch(b -> b.storage() == cat)) firstPart = i;
            if (PlanChecks.readBuffers(steps.get(i)).stream().anyMatch(b -> b.storage() == cat)) lastRead = i;
        }
        assertThat(slot.first()).isEqualTo(firstPart);
        assertThat(slot.last()).isEqualTo(lastRead);
        // a matrix product, the exp into its slice, the row sums: two kernels, no copy; slots for the cat and the sums only
        assertThat(p.kernels()).extracting(Kernel::ops).containsExactly(List.of("exp"), List.of("sum"));
        assertThat(places(p)).extracting(Step.Place::bytes).containsExactlyInAnyOrder(16L * 8 * 4, 16L * 4);
    }

    @Test
    void anElementwiseConsumerOfADyingConcatenationTakesItsSlotUnlessItAlsoReadsAPart() {
        Plan p = plan("in_place", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            g.output("y", g.cat(1, x.matmul(g.input("w", F32, 8, 4)), x.sin()).mul(2));
        });
        PlanBuffer y = p.outputs().get("y");
        Step.Place yAt = places(p).stream().filter(pl -> pl.buffer() == y).findFirst().orElseThrow();
        assertThat(yAt.inPlace()).as(p.toString()).isTrue();
        assertThat(p.buffer(yAt.reuses()).parts()).hasSize(2);
        assertThat(p.pools()).singleElement().extracting(Pool::bytes).isEqualTo(4L * 12 * 4);
        // reading a part at other indices as well: no reuse (the part's elements would be overwritten before they are read)
        Plan q = plan("not_in_place", 1, g -> {
            var x = g.input("x", F32, 1, 8);
            var s = x.sin();
            g.output("y", g.cat(0, s, x.cos()).add(s));                // s broadcast over both rows of the concatenation
        });
        assertThat(places(q)).noneMatch(Step.Place::inPlace);
    }

    static Plan withSteps(Plan p, List<Step> steps, List<Kernel> kernels) {
        return new Plan(p.lowered(), p.buffers(), p.pools(), steps, kernels, p.partitions(), p.slots(), "mutated", p.plainOrderPeak(),
                p.estimatedPeak(), p.options());
    }

    @Test
    void theCheckerCatchesPartsWrittenLateTwiceOrElsewhere() {
        Plan p = plan("checked", 1, g -> {
            var x = g.input("x", F32, 4, 8);
            g.output("y", g.cat(1, x.matmul(g.input("w", F32, 8, 8)), x.sin()).sum(1));
        });
        var steps = p.steps();
        int mm = steps.indexOf(matmuls(p).getFirst());
        int sum = -1, sin = -1;
        for (int i = 0; i < steps.size(); i++)
            if (steps.get(i) instanceof Step.Launch l) { if (l.kernel().isReduction()) sum = i; else sin = i; }
        // the sum before the matrix product's part is written
        var late = new java.util.ArrayList<>(steps);
        late.remove(mm);
        late.add(late.indexOf(steps.get(sum)) + 1, steps.get(mm));
        assertThat(PlanChecks.order(withSteps(p, late, p.kernels()))).anyMatch(v -> v.contains("before all of it is written: elements"));
        // the matrix product twice
        var twice = new java.util.ArrayList<>(steps);
        twice.add(mm + 1, steps.get(mm));
        assertThat(PlanChecks.order(withSteps(p, twice, p.kernels()))).anyMatch(v -> v.contains("already written"));
        // the sin stored row-major from its part's start, over the matrix product's columns
        Kernel k = ((Step.Launch) steps.get(sin)).kernel();
        var rowMajor = new Kernel(k.name(), k.ranges(), k.reductionRanges(), k.inputs(), k.locals(), k.reductions(),
                k.stores().stream().map(st -> new Kernel.Store(st.buffer(), st.local())).toList(), k.ops());
        var elsewhere = new java.util.ArrayList<>(steps);
        elsewhere.set(sin, new Step.Launch(rowMajor));
        var kernels = p.kernels().stream().map(x -> x == k ? rowMajor : x).toList();
        assertThat(PlanChecks.concatenations(withSteps(p, elsewhere, kernels))).singleElement().asString()
                .contains("stores " + k.stores().getFirst().buffer().name() + " at offset 0 strides null, not exactly at its elements", "(its slice ");
    }

    @Test
    void aConsumerOfTheConcatenationWaitsForEveryPartEvenWhenReordered() {
        // the parts are independent of each other; the sum reads them all and must come after the last of them
        Plan p = plan("order", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            var parts = new dev.gatun.dsl.Tensor[6];
            for (int i = 0; i < parts.length; i++) parts[i] = x.mul(i + 1).matmul(x);
            g.output("y", g.cat(0, parts).sum());
        });
        assertThat(PlanChecks.order(p)).isEmpty();
        assertThat(matmuls(p)).hasSize(6);
    }
}
