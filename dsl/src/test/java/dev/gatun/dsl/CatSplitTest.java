package dev.gatun.dsl;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.ir.graph.Op;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.BOOL;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** cat, split and chunk in the DSL: their types, the graph they build, JSON, and every refusal naming op, tensors and fix. */
class CatSplitTest {

    @Test
    void catJoinsAlongADimensionCountedFromEitherEnd() {
        var g = Gatun.graph("cat");
        var a = g.input("a", F32, 2, 3, 4);
        var b = g.input("b", F32, 2, 5, 4);
        assertThat(g.cat(1, a, b).shape()).isEqualTo(Shape.of(2, 8, 4));
        assertThat(a.cat(-2, b, a).shape()).isEqualTo(Shape.of(2, 11, 4));
        assertThat(g.cat(0, List.of(a, a)).shape()).isEqualTo(Shape.of(4, 3, 4));
        assertThat(g.cat(2, a).shape()).isEqualTo(a.shape());                       // one tensor: itself
        var n = g.input("n", BOOL, "k", 1);
        assertThat(n.cat(1, n).shape()).isEqualTo(Shape.parse("k", 2));             // symbolic outside the joined dim: fine
        var c = g.cat(-1, a, a);
        assertThat(c.node().op()).isEqualTo(new Op.Cat(-1));
        assertThat(c.node().format()).isEqualTo("%" + c.node().id() + " = cat(%0, %0, dim=-1) : f32[2,3,8]");
    }

    @Test
    void catRoundTripsThroughJson() {
        var g = Gatun.graph("j");
        var a = g.input("a", F32, 2, 3);
        g.output("y", g.cat(-1, a, a.exp(), a));
        Graph graph = g.build();
        String json = GraphJson.toJson(graph);
        assertThat(json).contains("\"op\": \"cat\"", "\"dim\": -1");
        Graph back = GraphJson.fromJson(json);
        assertThat(back.toString()).isEqualTo(graph.toString());
        assertThat(GraphJson.toJson(back)).isEqualTo(json);
        // the type is checked again when read: a shape the inputs do not give is refused, naming the node
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"type\": \"f32[2,9]\"", "\"type\": \"f32[2,8]\""))).isInstanceOf(GraphException.class)
                .hasMessageContaining("node 2 (cat): field 'type' says f32[2,8] but the op computes f32[2,9]");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"dim\": -1", "\"dim\": 2"))).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (cat): cat('a' f32[2,3], %1 f32[2,3], 'a' f32[2,3]): dimension 2 does not exist (rank 2)");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"dim\": -1,", ""))).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (cat): missing field 'dim'");
    }

    @Test
    void badCatsNameTheOpTheTensorsAndTheFix() {
        var g = Gatun.graph("bad");
        var x = g.input("x", F32, 4, 3);
        var y = g.input("y", F64, 4, 3);
        var v = g.input("v", F32, 3);
        var z = g.input("z", F32, 5, 2);
        var s = g.input("s", F32, "n", 3);
        assertThatThrownBy(() -> g.cat(0)).isInstanceOf(GraphException.class)
                .hasMessage("cat(dim 0): no tensors to concatenate; give at least one");
        assertThatThrownBy(() -> g.cat(0, List.of())).isInstanceOf(GraphException.class)
                .hasMessage("cat(dim 0): no tensors to concatenate; give at least one");
        assertThatThrownBy(() -> x.cat(0, y)).isInstanceOf(GraphException.class)
                .hasMessage("cat('x' f32[4,3], 'y' f64[4,3]): 'y' is f64 but 'x' is f32; cast them to one dtype first");
        assertThatThrownBy(() -> x.cat(0, v)).isInstanceOf(GraphException.class)
                .hasMessage("cat('x' f32[4,3], 'v' f32[3]): 'v' has rank 1 but 'x' has rank 2; every tensor needs the same rank");
        assertThatThrownBy(() -> x.cat(0, z)).isInstanceOf(GraphException.class)
                .hasMessage("cat('x' f32[4,3], 'z' f32[5,2]): along dimension 0, 'z' has size 2 in dimension 1 where 'x' has 3; the sizes must match outside dimension 0");
        assertThatThrownBy(() -> x.cat(2, x)).isInstanceOf(GraphException.class)
                .hasMessage("cat('x' f32[4,3], 'x' f32[4,3]): dimension 2 does not exist (rank 2)");
        assertThatThrownBy(() -> x.cat(-3, x)).isInstanceOf(GraphException.class)
                .hasMessage("cat('x' f32[4,3], 'x' f32[4,3]): dimension -3 does not exist (rank 2)");
        assertThatThrownBy(() -> s.cat(0, s)).isInstanceOf(GraphException.class)
                .hasMessage("cat('s' f32[n,3], 's' f32[n,3]): dimension 0 of 's' is symbolic (n); the sizes along the concatenated dimension must be static");
        var scalar = g.scalar(1, F32);
        assertThatThrownBy(() -> scalar.cat(0, scalar)).isInstanceOf(GraphException.class)
                .hasMessageContaining("has no dimensions to concatenate along; reshape it to [1] first");
        assertThatThrownBy(() -> x.cat(0, (Tensor) null)).isInstanceOf(GraphException.class).hasMessage("cat: a tensor argument is null");
        var other = Gatun.graph("other").input("w", F32, 4, 3);
        assertThatThrownBy(() -> x.cat(0, other)).isInstanceOf(GraphException.class)
                .hasMessage("cat: tensor 'w' f32[4,3] belongs to graph 'other', not to graph 'bad'");
    }

    @Test
    void splitAndChunkAreSlicesThatCatPutsBack() {
        var g = Gatun.graph("split");
        var x = g.input("x", F32, 6, 4);
        var parts = x.split(0, 1, 0, 5);
        assertThat(parts).extracting(Tensor::shape).containsExactly(Shape.of(1, 4), Shape.of(0, 4), Shape.of(5, 4));
        assertThat(parts).extracting(t -> t.node().op()).containsExactly(new Op.Slice(0, 0, 1, 1), new Op.Slice(0, 1, 1, 1), new Op.Slice(0, 1, 6, 1));
        var cols = x.chunk(2, -1);
        assertThat(cols).extracting(t -> t.node().op()).containsExactly(new Op.Slice(1, 0, 2, 1), new Op.Slice(1, 2, 4, 1));
        assertThat(x.chunk(1, 0).getFirst().shape()).isEqualTo(x.shape());
        assertThat(g.cat(1, cols).shape()).isEqualTo(x.shape());
        assertThat(x.split(-2, 3, 3)).hasSize(2);
    }

    @Test
    void badSplitsAndChunksSayWhatWouldFit() {
        var g = Gatun.graph("bad");
        var x = g.input("x", F32, 10, 4);
        var s = g.input("s", F32, "n", 4);
        assertThatThrownBy(() -> x.split(0, 3, 4)).isInstanceOf(GraphException.class)
                .hasMessage("split('x' f32[10,4]): sizes [3, 4] add up to 7, but dimension 0 has size 10; give sizes that add up to 10");
        assertThatThrownBy(() -> x.split(1, 5, -1)).isInstanceOf(GraphException.class)
                .hasMessage("split('x' f32[10,4]): size -1 is negative; every part needs a size of 0 or more");
        assertThatThrownBy(() -> x.split(0)).isInstanceOf(GraphException.class)
                .hasMessage("split('x' f32[10,4]): no sizes given; give the size of each part, e.g. split(0, 2, 3)");
        assertThatThrownBy(() -> x.split(2, 4)).isInstanceOf(GraphException.class)
                .hasMessage("split('x' f32[10,4]): dimension 2 does not exist (rank 2)");
        assertThatThrownBy(() -> s.split(0, 1, 1)).isInstanceOf(GraphException.class)
                .hasMessage("split('s' f32[n,4]): dimension 0 is symbolic (n); cutting it into parts needs a static size");
        assertThatThrownBy(() -> x.chunk(3, 0)).isInstanceOf(GraphException.class)
                .hasMessage("chunk('x' f32[10,4]): 3 chunks do not divide dimension 0 of size 10; use a number of chunks that divides 10,"
                        + " or split(0, sizes...) for unequal parts");
        assertThatThrownBy(() -> x.chunk(0, 1)).isInstanceOf(GraphException.class)
                .hasMessage("chunk('x' f32[10,4]): 0 chunks asked for; the number of chunks must be at least 1");
        assertThatThrownBy(() -> x.chunk(2, -3)).isInstanceOf(GraphException.class)
                .hasMessage("chunk('x' f32[10,4]): dimension -3 does not exist (rank 2)");
    }
}
