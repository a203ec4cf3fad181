package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The bad inputs of issue 2: each fails early, and the message names the op, the tensors and the problem. */
class BadInputTest {

    @Test
    void shapeMismatchInMatmul() {
        var g = Gatun.graph("g");
        var x = g.input("x", F32, 4, 3);
        var w = g.input("w", F32, 4, 5);
        assertThatThrownBy(() -> x.matmul(w)).isInstanceOf(GraphException.class)
                .hasMessage("matmul('x' f32[4,3], 'w' f32[4,5]): inner dimensions 3 and 4 differ");
    }

    @Test
    void dtypeMismatchInMatmul() {
        var g = Gatun.graph("g");
        var x = g.input("x", F32, 4, 4);
        var w = g.input("w", F64, 4, 4);
        assertThatThrownBy(() -> x.matmul(w)).isInstanceOf(GraphException.class)
                .hasMessageContaining("matmul('x' f32[4,4], 'w' f64[4,4])")
                .hasMessageContaining("same floating dtype, got f32 and f64");
    }

    @Test
    void dtypeMismatchInWhereCondition() {
        var g = Gatun.graph("g");
        var c = g.input("c", F32, 4);
        var a = g.input("a", F32, 4);
        assertThatThrownBy(() -> c.where(a, a)).isInstanceOf(GraphException.class)
                .hasMessageContaining("where('c' f32[4], 'a' f32[4], 'a' f32[4])")
                .hasMessageContaining("condition 'c' must be bool, not f32");
    }

    @Test
    void broadcastingFailure() {
        var g = Gatun.graph("g");
        var x = g.input("x", F32, 4, 3);
        var y = g.input("y", F32, 4);
        assertThatThrownBy(() -> x.add(y)).isInstanceOf(GraphException.class)
                .hasMessage("add('x' f32[4,3], 'y' f32[4]): shapes [4,3] and [4] do not broadcast");
        assertThatThrownBy(() -> y.expand(4, 3)).isInstanceOf(GraphException.class)
                .hasMessage("expand('y' f32[4]): cannot broadcast [4] to [4,3]");
    }

    @Test
    void reductionOverAMissingDim() {
        var g = Gatun.graph("g");
        var x = g.input("x", F32, 4, 3);
        assertThatThrownBy(() -> x.sum(2)).isInstanceOf(GraphException.class)
                .hasMessage("sum('x' f32[4,3]): dimension 2 does not exist (rank 2)");
        assertThatThrownBy(() -> x.mean(true, -3)).isInstanceOf(GraphException.class)
                .hasMessage("mean('x' f32[4,3]): dimension -3 does not exist (rank 2)");
    }

    @Test
    void tensorFromAnotherGraph() {
        var g1 = Gatun.graph("first");
        var g2 = Gatun.graph("second");
        var x = g1.input("x", F32, 4);
        var y = g2.input("y", F32, 4);
        assertThatThrownBy(() -> y.add(x)).isInstanceOf(GraphException.class)
                .hasMessage("add: tensor 'x' f32[4] belongs to graph 'first', not to graph 'second'");
        assertThatThrownBy(() -> g2.output("out", x)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor 'x' f32[4] belongs to graph 'first'");
    }

    @Test
    void unknownGroup() {
        var g = Gatun.graph("g").world(2);
        var x = g.input("x", F32, 4);
        assertThatThrownBy(() -> x.allReduce(SUM, "tp")).isInstanceOf(GraphException.class)
                .hasMessage("all_reduce('x' f32[4]): unknown group 'tp'; declare it on the graph first");
    }

    @Test
    void reduceScatterNotDivisibleByGroupSize() {
        var g = Gatun.graph("g").world(4).group("pair", 0, 1);
        var x = g.input("x", F32, 6, 2);
        assertThatThrownBy(() -> x.reduceScatter(SUM)).isInstanceOf(GraphException.class)
                .hasMessage("reduce_scatter('x' f32[6,2]): dimension 0 of size 6 is not divisible by the size 4 of group 'world'");
        // a group that leaves out ranks 2 and 3 has no result of the new shape for them: refused, a mesh axis suggested
        assertThatThrownBy(() -> x.reduceScatter(SUM, "pair")).isInstanceOf(GraphException.class)
                .hasMessageContaining("group 'pair' [0, 1] leaves out ranks [2, 3] of the world of 4").hasMessageContaining("g.mesh(");
        var m = Gatun.graph("m").mesh("dp", 2, "tp", 2);
        m.input("x", F32, 6, 2).reduceScatter(SUM, "tp"); // 6 splits over the 2 ranks of each tp slice
    }

    @Test
    void userOpOutputsNotMatchingTheirSpec() {
        UserOp bad = UserOp.builder("widen")
                .input(TensorSpec.of("x", F32, "n"))
                .output(TensorSpec.of("y", F32, "n"))
                .outputTypes(ts -> List.of(TensorType.of(DType.FLOAT32, 99)))
                .build();
        var g = Gatun.graph("g").register(bad);
        var x = g.input("x", F32, 4);
        assertThatThrownBy(() -> g.call1("widen", x)).isInstanceOf(GraphException.class)
                .hasMessage("user op 'widen': output 0 'y' does not match its spec y: f32[n]: it has dimension 0 is 99 but 'n' is already 4");
    }

    @Test
    void userOpInputsNotMatchingTheirSpec() {
        UserOp op = UserOp.builder("twice").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n")).build();
        var g = Gatun.graph("g").register(op);
        var x = g.input("x", F64, 4);
        assertThatThrownBy(() -> g.call1("twice", x)).isInstanceOf(GraphException.class)
                .hasMessage("user op 'twice': input 0 'x' has dtype f64 where f32 is declared");
    }

    @Test
    void malformedJson() {
        var g = Gatun.graph("g");
        g.output("y", g.input("x", F32, 2).relu());
        String json = GraphJson.toJson(g.build());
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"relu\"", "relu"))).isInstanceOf(GraphException.class)
                .hasMessageMatching("malformed JSON at line \\d+, column \\d+: expected a value .*found 'relu'");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"relu\"", "\"relux\""))).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 1 (relux): field 'op': unknown op 'relux'");
    }

    @Test
    void hugeShapesAreRefusedWhereTheyAppearNamingTheSize() {
        var g = Gatun.graph("huge");
        assertThatThrownBy(() -> g.input("x", F32, 1L << 32, 1L << 31)).isInstanceOf(GraphException.class)
                .hasMessage("input 'x': f32[4294967296,2147483648] has more elements than 2^63; no tensor can be this large");
        var x = g.input("y", F32, 1L << 24, 1L << 20);   // 2^44 elements: 64 TiB, still planned
        assertThatThrownBy(() -> x.expand(1L << 10, 1L << 24, 1L << 20)).isInstanceOf(GraphException.class)
                .hasMessageContaining("expand('y' f32[16777216,1048576]): f32[1024,16777216,1048576] is 18014398509481984 elements")
                .hasMessageContaining("at most 256 TiB");
    }

    @Test
    void badDimensionsAndNullsNameTheOp() {
        var g = Gatun.graph("bad");
        assertThatThrownBy(() -> g.input("x", F32, -1)).isInstanceOf(GraphException.class).hasMessage("input 'x': a dimension cannot be negative: -1");
        assertThatThrownBy(() -> g.input("x", null, 4)).isInstanceOf(GraphException.class).hasMessage("input 'x': the dtype is null");
        assertThatThrownBy(() -> g.input("x", F32, (Object[]) null)).isInstanceOf(GraphException.class).hasMessageContaining("input 'x': the dimensions are null");
        var x = g.input("x", F32, 4);
        assertThatThrownBy(() -> x.reshape(-2, -2)).isInstanceOf(GraphException.class).hasMessage("reshape('x' f32[4]): a dimension cannot be negative: -2");
        assertThatThrownBy(() -> x.add((Tensor) null)).isInstanceOf(GraphException.class).hasMessageContaining("add: a tensor argument is null");
        // one null among the dimensions: checked by name, not an NullPointerException caught and reworded
        assertThatThrownBy(() -> g.input("z", F32, 4, null)).isInstanceOf(GraphException.class).hasMessage("input 'z': a dimension is null; give a number or a symbol name");
        assertThatThrownBy(() -> x.reshape(2, null)).isInstanceOf(GraphException.class).hasMessageStartingWith("reshape('x' f32[4]): a dimension is null");
    }

    @Test
    void integerConstantsKeepTheirValueOrAreRefused() {
        var g = Gatun.graph("ints");
        var x = g.input("x", dev.gatun.ir.DType.I32, 4);
        assertThatThrownBy(() -> x.add(1e20)).isInstanceOf(GraphException.class)
                .hasMessageContaining("constant of i32: 1.0E20 is not an integer from -2147483648 to 2147483647");
        assertThatThrownBy(() -> g.scalar(Double.NaN, dev.gatun.ir.DType.I32)).isInstanceOf(GraphException.class).hasMessageContaining("NaN is not an integer");
        assertThatThrownBy(() -> g.scalar(2, dev.gatun.ir.DType.BOOL)).isInstanceOf(GraphException.class).hasMessageContaining("2.0 is not 0 or 1");
        x.add(2147483647).mul(-3);                       // in range: fine
        assertThat(x.add(0.5).dtype()).isEqualTo(F32); // a fraction promotes, as before
        // an i64 constant of 2^53 or more may already be rounded on its way in as a double (2^53 + 1 arrives as 2^53)
        var y = g.input("y", dev.gatun.ir.DType.I64, 4);
        long big = (1L << 53) + 1;
        assertThatThrownBy(() -> y.add(big)).isInstanceOf(GraphException.class)
                .hasMessageContaining("constant of i64: 9007199254740992 is not within 2^53 - 1").hasMessageContaining("pass it as an i64 input instead");
        assertThatThrownBy(() -> y.mul(-(double) (1L << 60))).isInstanceOf(GraphException.class).hasMessageContaining("is not within 2^53 - 1");
        y.add((1L << 53) - 1).sub(-((1L << 53) - 1));   // below 2^53 every integer is exact: fine
    }

    @Test
    void namesAreBoundedSoErrorsStayReadable() {
        String longName = "g".repeat(100_000_000);
        assertThatThrownBy(() -> Gatun.graph(longName)).isInstanceOf(GraphException.class)
                .hasMessageStartingWith("a graph name may have at most 256 characters, not 100000000")
                .satisfies(e -> assertThat(e.getMessage().length()).isLessThan(200));
        var g = Gatun.graph("names");
        assertThatThrownBy(() -> g.input("i".repeat(300), F32, 4)).isInstanceOf(GraphException.class).hasMessageContaining("an input name may have at most 256");
    }

    @Test
    void aMisspelledJsonFieldIsAnErrorNotDropped() {
        var g = Gatun.graph("j").world(2);
        g.output("y", g.input("x", F32, 4).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        String json = GraphJson.toJson(g.build());
        assertThat(GraphJson.fromJson(json).worldSize()).isEqualTo(2);
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"world_size\"", "\"worldsize\""))).isInstanceOf(GraphException.class)
                .hasMessageContaining("graph JSON: unknown field 'worldsize'; did you mean 'world_size'?");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"reduce_op\"", "\"reduceop\""))).isInstanceOf(GraphException.class)
                .hasMessageContaining("unknown field 'reduceop'; did you mean 'reduce_op'?");
    }
}
