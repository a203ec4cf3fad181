package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Random;
import java.util.function.Consumer;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ProductEpilogues}: one rule, the same tiles, joins a few-row product with the kernels after it that read it,
 * whatever they compute and however the graph spells it. Each spelling is planned on random shapes with the rule on
 * (and the model-keyed passes off, which the rule is to replace); {@link PlanChecks#tiledProducts} checks every tile
 * again by walking the kernels' loops.
 */
class ProductEpiloguesTest {

    static final PlanOptions RULE = PlanOptions.DEFAULT.withProductEpilogues(true);

    static Plan plan(Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(RULE, body); }

    static List<Step.TiledProduct> tiled(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.TiledProduct).map(s -> (Step.TiledProduct) s).toList();
    }

    /** x [rows, k] by w [n, k] lying transposed. */
    static Tensor product(GraphBuilder g, DType t, int rows, int n, int k) {
        return g.input("x", t, rows, k).matmul(g.input("w", t, n, k).transpose(0, 1));
    }

    /**
     * A random decode-like shape the few-row kernel takes (only such a product has epilogues): rows 1 to 8 (float32: one),
     * a head of 8 to 64 (even), 1 to 6 heads, k 16 to 80 in whole 16-byte vectors.
     */
    record Shape(int rows, int head, int heads, int k, DType t) {
        static Shape random(Random r) {
            DType[] types = {DType.BF16, DType.F16, DType.F32};
            DType t = types[r.nextInt(3)];
            return new Shape(t == DType.F32 ? 1 : 1 + r.nextInt(8), 8 * (1 + r.nextInt(8)), 1 + r.nextInt(6), 16 + 8 * r.nextInt(9), t);
        }
    }

    /** Plans {@code body} on 12 random shapes and checks it is one tiled product whose tiles are {@code expected} in size. */
    static void fusesOnRandomShapes(String spelling, Function<Shape, Consumer<GraphBuilder>> body, Function<Shape, Integer> tile) {
        var random = new Random(spelling.hashCode());
        for (int i = 0; i < 12; i++) {
            Shape s = Shape.random(random);
            Plan p = plan(body.apply(s));
            assertThat(tiled(p)).as(spelling + " " + s + "\n" + p).singleElement().satisfies(t -> {
                assertThat(t.tiles().largest()).as(spelling + " " + s).isEqualTo(tile.apply(s));
                assertThat(t.tiles().rows()).isEqualTo(s.rows());
            });
            assertThat(p.steps()).as(spelling + ": no product or kernel left apart\n" + p)
                    .noneMatch(st -> st instanceof Step.Matmul || st instanceof Step.Launch);
        }
    }

    @Test
    void swiGluAndGeGluOverTheTwoHalvesFuseWithTilesOfTwoColumns() {
        fusesOnRandomShapes("swiglu", s -> g -> {
            int h = s.head() * s.heads();
            Tensor y = product(g, s.t(), s.rows(), 2 * h, s.k());
            g.output("y", y.slice(1, 0, h).silu().mul(y.slice(1, h, 2 * h)));
        }, s -> 2);
        fusesOnRandomShapes("geglu (erf)", s -> g -> {
            int h = s.head() * s.heads();
            Tensor y = product(g, s.t(), s.rows(), 2 * h, s.k());
            g.output("y", y.slice(1, 0, h).gelu().mul(y.slice(1, h, 2 * h)));
        }, s -> 2);
        fusesOnRandomShapes("geglu (tanh)", s -> g -> {
            int h = s.head() * s.heads();
            Tensor y = product(g, s.t(), s.rows(), 2 * h, s.k());
            Tensor x = y.slice(1, 0, h);
            Tensor gelu = x.mul(0.5).mul(x.add(x.mul(x).mul(x).mul(0.044715)).mul(Math.sqrt(2 / Math.PI)).tanh().add(1));
            g.output("y", gelu.mul(y.slice(1, h, 2 * h)));
        }, s -> 2);
        // the halves the other way round: still two columns a tile, the rule does not care which is the gate
        fusesOnRandomShapes("swiglu, halves swapped", s -> g -> {
            int h = s.head() * s.heads();
            Tensor y = product(g, s.t(), s.rows(), 2 * h, s.k());
            g.output("y", y.slice(1, h, 2 * h).silu().mul(y.slice(1, 0, h)));
        }, s -> 2);
    }

    @Test
    void biasesResidualsScalingAndCastsFuseColumnByColumn() {
        fusesOnRandomShapes("q|k|v bias", s -> g -> {
            int n = s.head() * s.heads() * 3;
            g.output("y", product(g, s.t(), s.rows(), n, s.k()).add(g.input("b", s.t(), n)));
        }, s -> 1);
        fusesOnRandomShapes("residual add", s -> g -> {
            int n = s.head() * s.heads();
            g.output("y", product(g, s.t(), s.rows(), n, s.k()).add(g.input("r", s.t(), s.rows(), n)));
        }, s -> 1);
        fusesOnRandomShapes("scale and cast", s -> g -> {
            int n = s.head() * s.heads();
            g.output("y", product(g, s.t(), s.rows(), n, s.k()).mul(0.125).cast(DType.F32));
        }, s -> 1);
    }

    /** Hugging Face's rotate_half: cat(-x[..., D/2:], x[..., :D/2]). */
    static Tensor rotateHalf(Tensor x, int head) {
        return x.slice(2, head / 2, head).neg().cat(2, x.slice(2, 0, head / 2));
    }

    /** q [rows, heads, D] rotated: q * cos + rotate_half(q) * sin, with tables [D] as the graph's inputs. */
    static Tensor rope(GraphBuilder g, String name, Tensor q, Shape s) {
        Tensor cos = g.input(name + "_cos", s.t(), s.head()), sin = g.input(name + "_sin", s.t(), s.head());
        return q.mul(cos).add(rotateHalf(q, s.head()).mul(sin));
    }

    @Test
    void rotaryEmbeddingsWrittenWithSlicesCatAndNegFuseWithTilesOfTwoColumns() {
        // the query heads and the key heads of a q|k|v product rotated, the value heads read as they are: fusion makes the
        // query's and the key's rotations one kernel (and their concatenations one), so an item reads column c of a query
        // head, the column half a head on, and the same two of the key head: tiles of 4 columns
        fusesOnRandomShapes("rope, rotate_half", s -> g -> {
            int h = s.heads();
            Tensor y = product(g, s.t(), s.rows(), 3 * h * s.head(), s.k()).reshape(s.rows(), 3 * h, s.head());
            g.output("q", rope(g, "q", y.slice(1, 0, h), s));
            g.output("k", rope(g, "k", y.slice(1, h, 2 * h), s));
            g.output("v", y.slice(1, 2 * h, 3 * h));
        }, s -> 4);
        // the query's heads alone: tiles of the two columns a rotation pairs
        fusesOnRandomShapes("rope, rotate_half, queries", s -> g -> {
            Tensor y = product(g, s.t(), s.rows(), s.heads() * s.head(), s.k()).reshape(s.rows(), s.heads(), s.head());
            g.output("q", rope(g, "q", y, s));
        }, s -> 2);
    }

    @Test
    void aNormOverEachHeadFusesWithTilesOfAWholeHead() {
        fusesOnRandomShapes("qk-norm", s -> g -> {
            int n = s.head() * s.heads();
            Tensor q = product(g, s.t(), s.rows(), n, s.k()).reshape(s.rows(), s.heads(), s.head());
            Tensor ms = q.mul(q).mean(true, 2);
            g.output("q", q.mul(ms.add(1e-6).rsqrt()).mul(g.input("norm_w", s.t(), s.head())));
        }, Shape::head);
    }

    @Test
    void whatBreaksTheRuleStaysApartAndSaysWhy() {
        // a sum over all columns reads every column in one item: a tile of the whole row, more than a block holds
        Plan wide = plan(g -> g.output("s", product(g, DType.BF16, 2, 512, 32).sum(1)));
        assertThat(tiled(wide)).isEmpty();
        assertThat(wide.toString()).contains("not an epilogue of the product before it: ", "a tile of 512 columns is more than one block of the product holds (" + Step.TiledProduct.MAX_TILE_COLUMNS + ")");
        // more rows than a few-row product: nothing is tried, nothing is noted
        Plan tall = plan(g -> {
            Tensor y = product(g, DType.BF16, 9, 48, 32);
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)));
        });
        assertThat(tiled(tall)).isEmpty();
        assertThat(tall.toString()).doesNotContain("not an epilogue");
        // the rule off: the product, then the kernel
        Plan off = PlanChecks.checkedPlan(RULE.withProductEpilogues(false), g -> {
            Tensor y = product(g, DType.BF16, 2, 48, 32);
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)));
        });
        assertThat(tiled(off)).isEmpty();
        assertThat(off.steps()).filteredOn(s -> s instanceof Step.Matmul).hasSize(1);
    }

    @Test
    void thePlanSaysWhichColumnsEachBlockHolds() {
        Plan p = plan(g -> {
            Tensor y = product(g, DType.BF16, 1, 64, 32);
            g.output("y", y.slice(1, 0, 32).silu().mul(y.slice(1, 32, 64)));
        });
        assertThat(p.toString()).contains("launch tiled_0 {", "32 groups of 2 columns, e.g. {0, 32}", "epilogue kernel");
        Plan norm = plan(g -> {
            Tensor q = product(g, DType.BF16, 1, 128, 32).reshape(1, 2, 64);
            g.output("q", q.mul(q.mul(q).mean(true, 2).rsqrt()));
        });
        assertThat(norm.toString()).contains("2 groups of 64 columns, e.g. {0..63}");
    }

    @Test
    void thePlanChecksCatchATileMapThatSplitsWhatAnItemReads() {
        Plan p = plan(g -> {
            Tensor y = product(g, DType.BF16, 2, 64, 32);
            g.output("y", y.slice(1, 0, 32).silu().mul(y.slice(1, 32, 64)));
        });
        var t = tiled(p).getFirst();
        assertThat(PlanChecks.tiledProducts(List.of(t))).isEmpty();
        // the tiles of a bias over the same product (single columns) put on the SwiGLU: each item reads two tiles
        Plan bias = plan(g -> g.output("y", product(g, DType.BF16, 2, 64, 32).add(g.input("b", DType.BF16, 64))));
        var singles = tiled(bias).getFirst().tiles();
        var wrong = new Step.TiledProduct(t.name(), t.product(), t.epilogues(), singles);
        assertThat(PlanChecks.tiledProducts(List.of(wrong))).isNotEmpty()
                .anySatisfy(line -> assertThat(line).contains("reads tiles [0, 32]"));
    }
}
