package dev.gatun.ir.testing;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import org.junit.jupiter.api.Test;

import java.util.EnumSet;
import java.util.HashSet;

import static org.assertj.core.api.Assertions.assertThat;

class RandomGraphsTest {

    @Test
    void sameSeedSameGraph() {
        for (long s = 0; s < 20; s++) assertThat(RandomGraphs.generate(s).toString()).isEqualTo(RandomGraphs.generate(s).toString());
    }

    @Test
    void coversEveryOpFamilyAcrossSeeds() {
        var fns = EnumSet.noneOf(PointwiseFn.class);
        var kinds = new HashSet<String>();
        var dtypes = EnumSet.noneOf(DType.class);
        boolean symbolic = false, symmetric = false, subgroup = false;
        for (long s = 0; s < 300; s++) {
            Graph g = RandomGraphs.generate(s);
            assertThat(g.outputs()).isNotEmpty();
            subgroup |= g.groups().containsKey("sub");
            for (Node n : g.nodes()) {
                if (n.op() instanceof Op.Pointwise p) fns.add(p.fn());
                kinds.add(n.op().getClass().getSimpleName() + (n.op() instanceof Op.Collective c ? c.kind() + "" + c.reduceOp() : ""));
                dtypes.add(n.type().dtype());
                symbolic |= !n.type().shape().isStatic();
                symmetric |= n.symmetricGroup() != null;
            }
        }
        assertThat(fns).containsAll(EnumSet.allOf(PointwiseFn.class));
        assertThat(kinds).contains("Cast", "Reduce", "Matmul", "Reshape", "Permute", "Slice", "Expand", "Cat", "Custom", "CustomOutput",
                "CollectiveALL_REDUCESUM", "CollectiveALL_REDUCEAVG", "CollectiveALL_REDUCEMAX", "CollectiveALL_REDUCEMIN",
                "CollectiveALL_GATHERnull", "CollectiveBROADCASTnull");
        assertThat(kinds).anyMatch(k -> k.startsWith("CollectiveREDUCE_SCATTER"));
        assertThat(dtypes).contains(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32, DType.BOOL);
        assertThat(symbolic).isTrue();
        assertThat(symmetric).isTrue();
        assertThat(subgroup).isTrue();
    }

    @Test
    void optionsSwitchFeaturesOff() {
        var opts = RandomGraphs.Options.defaults().withCollectives(false).withUserOps(false).staticOnly()
                .withDTypes(DType.FLOAT32).withMaxNodes(12).withOutputs(3);
        for (long s = 0; s < 100; s++) {
            Graph g = RandomGraphs.generate(s, opts);
            assertThat(g.nodes().size()).isLessThanOrEqualTo(12 + 8); // helper sub-expressions may finish the last step
            assertThat(g.outputs().size()).isBetween(1, 3);
            for (Node n : g.nodes()) {
                assertThat(n.op()).isNotInstanceOfAny(Op.Collective.class, Op.Custom.class);
                assertThat(n.type().shape().isStatic()).isTrue();
                assertThat(n.type().dtype()).isIn(DType.FLOAT32, DType.BOOL);
            }
        }
    }

    @Test
    void concatenationsJoinAlongAnyDimensionOrOnlyContiguousSlices() {
        int strided = 0, negative = 0;
        for (long s = 0; s < 300; s++) {
            for (Node n : RandomGraphs.generate(s).nodes()) {
                if (!(n.op() instanceof Op.Cat c)) continue;
                int d = c.dim() < 0 ? c.dim() + n.type().rank() : c.dim();
                if (c.dim() < 0) negative++;
                for (int k = 0; k < d; k++) if (!n.type().shape().dim(k).equals(dev.gatun.ir.Dim.of(1))) { strided++; break; }
            }
        }
        assertThat(strided).as("concatenations whose parts are strided slices").isGreaterThan(10);
        assertThat(negative).isGreaterThan(10);
        var contiguousOnly = RandomGraphs.Options.defaults().withStridedConcat(false);
        int cats = 0;
        for (long s = 0; s < 300; s++) {
            for (Node n : RandomGraphs.generate(s, contiguousOnly).nodes()) {
                if (!(n.op() instanceof Op.Cat c)) continue;
                cats++;
                int d = c.dim() < 0 ? c.dim() + n.type().rank() : c.dim();
                for (int k = 0; k < d; k++) assertThat(n.type().shape().dim(k)).as(n.format()).isEqualTo(dev.gatun.ir.Dim.of(1));
            }
        }
        assertThat(cats).isGreaterThan(30);
        for (long s = 0; s < 100; s++)
            assertThat(RandomGraphs.generate(s, RandomGraphs.Options.defaults().withConcat(false)).nodes()).noneMatch(n -> n.op() instanceof Op.Cat);
    }

    @Test
    void inputsAreDeterministicPerRankAndCoverEveryInput() {
        Graph g = RandomGraphs.generate(7);
        var a = RandomGraphs.inputs(g, 7, 0);
        var b = RandomGraphs.inputs(g, 7, 0);
        var c = RandomGraphs.inputs(g, 7, 1);
        assertThat(a.keySet()).isEqualTo(g.inputs().keySet());
        a.forEach((k, v) -> {
            assertThat(v.values()).isEqualTo(b.get(k).values());
            assertThat(v.shape()).isEqualTo(c.get(k).shape());
            for (double x : v.values()) assertThat(Math.abs(x)).isLessThanOrEqualTo(4);
        });
    }
}
