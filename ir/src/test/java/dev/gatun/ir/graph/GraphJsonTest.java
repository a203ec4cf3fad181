package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.testing.RandomGraphs;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class GraphJsonTest {

    /** The seeds' example graph of docs/DESIGN.md, built on the IR directly. */
    static Graph seeds() {
        var b = Graph.builder("seeds").worldSize(2);
        Node x = b.input("x", TensorType.of(DType.FLOAT32, 4, 4));
        Node[] ar = new Node[3];
        for (int i = 0; i < 3; i++) {
            Node c = b.constant(new double[]{i + 1}, new TensorType(DType.FLOAT32, Shape.SCALAR));
            Node s = b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(x, c));
            ar[i] = b.add(new Op.Collective(CollectiveKind.ALL_REDUCE, ReduceOp.SUM, "world", 0), List.of(s));
        }
        Node ab = b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(ar[0], ar[1]));
        Node abc = b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(ab, ar[2]));
        b.output("d", b.add(new Op.Collective(CollectiveKind.ALL_REDUCE, ReduceOp.SUM, "world", 0), List.of(abc)));
        return b.build();
    }

    @Test
    void writingIsDeterministicAndReadable() {
        String json = GraphJson.toJson(seeds());
        assertThat(GraphJson.toJson(seeds())).isEqualTo(json);
        assertThat(json).startsWith("{\n  \"format\": \"gatun.graph\",\n  \"version\": 1,\n  \"name\": \"seeds\",\n  \"world_size\": 2,");
        assertThat(json).contains("\"op\": \"all_reduce\"", "\"reduce_op\": \"sum\"", "\"type\": \"f32[4,4]\"", "\"outputs\": {\n    \"d\": 12\n  }");
    }

    /** The notes a builder recorded (a recomputed region's, say) are written and read back; a graph without them writes none. */
    @Test
    void notesAreWrittenAndReadBack() {
        var b = Graph.builder("noted");
        b.output("x", b.input("x", TensorType.of(DType.FLOAT32, 2)));
        b.note("recompute layer.0: 3 ops");
        b.note("a second, with \"quotes\"");
        Graph g = b.build();
        String json = GraphJson.toJson(g);
        assertThat(GraphJson.fromJson(json).notes()).isEqualTo(g.notes());
        assertThat(GraphJson.toJson(seeds())).doesNotContain("\"notes\"");
        assertThat(GraphJson.fromJson(GraphJson.toJson(seeds())).notes()).isEmpty();
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"recompute layer.0: 3 ops\"", "7")))
                .isInstanceOf(GraphException.class).hasMessageContaining("notes");
    }

    @Test
    void constantsKeepExactDoublesNaNAndInfinities() {
        double[] values = {0.1, -0.0, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, Double.MIN_VALUE, 1.0 / 3};
        var b = Graph.builder("c");
        Node c = b.constant(values, TensorType.of(DType.FLOAT64, values.length));
        b.output("c", c);
        String json = GraphJson.toJson(b.build());
        assertThat(json).contains("\"NaN\"", "\"Infinity\"", "\"-Infinity\"");
        var back = (Op.Constant) GraphJson.fromJson(json).outputs().get("c").op();
        for (int i = 0; i < values.length; i++)
            assertThat(Double.doubleToRawLongBits(back.value(i))).as("value %d", i).isEqualTo(Double.doubleToRawLongBits(values[i]));
    }

    /** A literal past float64's range would read as an infinity the file did not write: refused, naming the field. */
    @Test
    void aNumberPastFloat64sRangeIsRefusedNotReadAsInfinity() {
        var b = Graph.builder("c");
        b.output("c", b.constant(new double[]{1.5}, TensorType.of(DType.FLOAT64, 1)));
        String json = GraphJson.toJson(b.build());
        assertThat(json).contains("1.5");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("1.5", "1e400"))).isInstanceOf(GraphException.class)
                .hasMessageContaining("a number within float64's range");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("1.5", "-1e400"))).isInstanceOf(GraphException.class)
                .hasMessageContaining("a number within float64's range");
    }

    @Test
    void groupsWorldSizeSymbolsAndSymmetricMarksSurvive() {
        var b = Graph.builder("marks").worldSize(4).group(ProcessGroup.of("pair", 2, 0));
        Node x = b.input("x", new TensorType(DType.BFLOAT16, Shape.parse("n", 8)));
        b.pushSymmetric("pair");
        Node y = b.add(new Op.Pointwise(PointwiseFn.GELU), List.of(x));
        b.popSymmetric();
        Node z = b.add(new Op.Collective(CollectiveKind.ALL_REDUCE, ReduceOp.AVG, "pair", 0), List.of(y));
        b.output("z", z);
        Graph back = GraphJson.fromJson(GraphJson.toJson(b.build()));
        assertThat(back.worldSize()).isEqualTo(4);
        assertThat(back.groups().get("pair").ranks()).containsExactly(2, 0);
        assertThat(back.node(1).symmetricGroup()).isEqualTo("pair");
        assertThat(back.node(2).symmetricGroup()).isNull();
        assertThat(back.inputs().get("x").type().toString()).isEqualTo("bf16[n,8]");
    }

    @Test
    void userOpsKeepTheirDeclarationAndTakeTheHostImplementationFromTheRegistry() {
        var b = Graph.builder("u").worldSize(2);
        b.register(RandomGraphs.SPLIT_SIGN);
        Node x = b.input("x", TensorType.of(DType.FLOAT32, 3, 2));
        var outs = b.call("split_sign", List.of(x));
        b.output("pos", outs.get(0)).output("neg", outs.get(1));
        String json = GraphJson.toJson(b.build());

        UserOp rebuilt = GraphJson.fromJson(json).userOps().get("split_sign");
        assertThat(rebuilt.hasHostImplementation()).isFalse();
        assertThat(rebuilt.cudaSource()).isEqualTo(RandomGraphs.SPLIT_SIGN.cudaSource());
        assertThat(rebuilt.kernelName()).isEqualTo("split_sign");
        assertThat(rebuilt.blockSize()).isEqualTo(128);
        assertThat(rebuilt.symmetricInputs()).containsExactly(0);
        assertThat(rebuilt.inputs()).isEqualTo(RandomGraphs.SPLIT_SIGN.inputs());
        // the outputs are not fixed by the specs: the recorded call signatures type the calls
        assertThat(rebuilt.outputTypes(List.of(TensorType.of(DType.FLOAT32, 3, 2)))).hasSize(2);

        assertThat(GraphJson.fromJson(json, RandomGraphs.userOps()).userOps().get("split_sign")).isSameAs(RandomGraphs.SPLIT_SIGN);
    }

    @Test
    void aRegisteredOpWithOtherSpecsIsRefused() {
        var b = Graph.builder("u");
        b.register(RandomGraphs.SCALED_ADD);
        Node x = b.input("x", TensorType.of(DType.FLOAT32, 2, 2));
        b.output("y", b.call("scaled_add", List.of(x, x)).getFirst());
        String json = GraphJson.toJson(b.build());
        UserOp other = UserOp.builder("scaled_add").input(TensorSpec.any("x")).input(TensorSpec.any("y"))
                .output(TensorSpec.of("out", DType.FLOAT32, "a", "b")).build();
        assertThatThrownBy(() -> GraphJson.fromJson(json, Map.of("scaled_add", other)))
                .isInstanceOf(GraphException.class).hasMessageContaining("user op 'scaled_add'").hasMessageContaining("registered op declares");
    }

    // ---- bad input

    @Test
    void malformedJsonNamesLineAndColumn() {
        String json = GraphJson.toJson(seeds());
        String broken = json.replaceFirst("\"version\": 1,", "\"version\" 1,");
        assertThatThrownBy(() -> GraphJson.fromJson(broken)).isInstanceOf(GraphException.class)
                .hasMessageContaining("malformed JSON at line 3, column 13").hasMessageContaining("expected ':'");
        assertThatThrownBy(() -> GraphJson.fromJson(json.substring(0, json.length() / 2)))
                .isInstanceOf(GraphException.class).hasMessageContaining("malformed JSON").hasMessageContaining("found the end of the text");
    }

    @Test
    void unknownOpNamesTheNodeAndField() {
        String json = GraphJson.toJson(seeds()).replaceFirst("\"op\": \"add\"", "\"op\": \"fused_add\"");
        assertThatThrownBy(() -> GraphJson.fromJson(json)).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (fused_add): field 'op': unknown op 'fused_add'");
    }

    @Test
    void missingFieldNamesTheNodeAndField() {
        String json = GraphJson.toJson(seeds()).replaceFirst(",\n\\s*\"group\": \"world\"", "");
        assertThatThrownBy(() -> GraphJson.fromJson(json)).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 3 (all_reduce): missing field 'group'");
    }

    @Test
    void wrongTypeNamesTheNodeAndField() {
        String json = GraphJson.toJson(seeds()).replaceFirst("\"inputs\": \\[0, 1\\]", "\"inputs\": \"0, 1\"");
        assertThatThrownBy(() -> GraphJson.fromJson(json)).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (add): field 'inputs': expected an array, found the string \"0, 1\"");
        String json2 = GraphJson.toJson(seeds()).replaceFirst("\"reduce_op\": \"sum\"", "\"reduce_op\": \"prod\"");
        assertThatThrownBy(() -> GraphJson.fromJson(json2)).hasMessageContaining("node 3 (all_reduce): field 'reduce_op': unknown value 'prod'");
    }

    @Test
    void danglingReferenceNamesTheNodeAndField() {
        String json = GraphJson.toJson(seeds()).replaceFirst("\"inputs\": \\[0, 1\\]", "\"inputs\": [0, 42]");
        assertThatThrownBy(() -> GraphJson.fromJson(json)).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (add): field 'inputs' refers to node 42, which is not defined before it");
        String json2 = GraphJson.toJson(seeds()).replaceFirst("\"d\": 12", "\"d\": 99");
        assertThatThrownBy(() -> GraphJson.fromJson(json2)).hasMessageContaining("output 'd' refers to node 99");
    }

    @Test
    void recordedTypesAreCheckedAgainstTheOps() {
        String json = GraphJson.toJson(seeds()).replaceFirst("\"type\": \"f32\\[4,4\\]\",\n(\\s*)\"symmetric", "");
        String wrongType = GraphJson.toJson(seeds()).replace("\"id\": 2,\n      \"op\": \"add\",\n      \"inputs\": [0, 1],\n      \"type\": \"f32[4,4]\"",
                "\"id\": 2,\n      \"op\": \"add\",\n      \"inputs\": [0, 1],\n      \"type\": \"f64[4,4]\"");
        assertThat(wrongType).isNotEqualTo(json);
        assertThatThrownBy(() -> GraphJson.fromJson(wrongType)).isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 2 (add): field 'type' says f64[4,4] but the op computes f32[4,4]");
    }

    @Test
    void typeErrorsFoundWhenRebuildingNameTheNode() {
        // an all_reduce over a group the file does not declare
        String json = GraphJson.toJson(seeds()).replaceFirst("\"group\": \"world\"", "\"group\": \"tp\"");
        assertThatThrownBy(() -> GraphJson.fromJson(json)).isInstanceOf(GraphException.class)
                .hasMessageContaining("graph JSON: node 3 (all_reduce): all_reduce(%2 f32[4,4]): unknown group 'tp'");
    }

    /** A document of one node, {@code node} (JSON fields), as output "o"; {@code worldSize} as given. */
    static String oneNode(String worldSize, String... nodes) {
        return "{\"format\": \"gatun.graph\", \"version\": 1, \"name\": \"bomb\", \"world_size\": " + worldSize
                + ", \"groups\": [], \"user_ops\": [], \"nodes\": [" + String.join(", ", nodes) + "], \"outputs\": {\"o\": " + (nodes.length - 1) + "}}";
    }

    @Test
    void declaredSizesAreBoundedBeforeAnythingIsBuiltOrAllocated() {
        String x = "{\"id\": 0, \"op\": \"input\", \"name\": \"x\", \"type\": \"f32[4]\"}";
        // a constant declaring 2^64 elements: its count used to overflow (ArithmeticException) before any check
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("1", "{\"id\": 0, \"op\": \"constant\", \"values\": [1], \"type\": \"f32[4611686018427387904,4]\"}")))
                .isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 0 (constant): field 'type': \"f32[4611686018427387904,4]\" declares more than 70368744177664 elements"
                        + " (4 bytes each, more than 256 TiB); Gatun plans tensors of at most 256 TiB");
        // a plausible size, but not the values the file holds: refused before they are read
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("1", "{\"id\": 0, \"op\": \"constant\", \"values\": [1, 2], \"type\": \"f64[1048576,1024]\"}")))
                .isInstanceOf(GraphException.class)
                .hasMessage("graph JSON: node 0 (constant): field 'values' holds 2 values, but field 'type' declares f64[1048576,1024] (1073741824 elements)");
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("1", "{\"id\": 0, \"op\": \"constant\", \"values\": [1], \"type\": \"f32[n]\"}")))
                .isInstanceOf(GraphException.class).hasMessage("graph JSON: node 0 (constant): field 'type': a constant's type must be static, not f32[n]");
        // 3^42 elements in a reshape, 2^62 in an input with a symbol, a world of 2^31 - 1 ranks
        String many = String.join(", ", java.util.Collections.nCopies(42, "3"));
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("1", x, "{\"id\": 1, \"op\": \"reshape\", \"inputs\": [0], \"shape\": [" + many + "], \"type\": \"f32[4]\"}")))
                .isInstanceOf(GraphException.class).hasMessageStartingWith("graph JSON: node 1 (reshape): field 'shape': [3,3,3,")
                .hasMessageContaining("declares more than 281474976710656 elements");
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("1", "{\"id\": 0, \"op\": \"input\", \"name\": \"x\", \"type\": \"bf16[n,4611686018427387904]\"}")))
                .isInstanceOf(GraphException.class).hasMessageStartingWith("graph JSON: node 0 (input): field 'type': \"bf16[n,4611686018427387904]\" declares more than");
        assertThatThrownBy(() -> GraphJson.fromJson(oneNode("2147483647", x)))
                .isInstanceOf(GraphException.class).hasMessage("graph JSON: field 'world_size': 2147483647 ranks; a graph declares a world of 1 to 1048576");
        // the same sizes built through the API are refused by the builder, never by an ArithmeticException
        assertThatThrownBy(() -> Graph.builder("b").constant(new double[]{1}, new TensorType(DType.FLOAT32, Shape.parse(4611686018427387904L, 4))))
                .isInstanceOf(GraphException.class).hasMessageContaining("has more elements than 2^63");
        assertThatThrownBy(() -> Shape.parse(4611686018427387904L, 4).numel()).isInstanceOf(GraphException.class)
                .hasMessage("shape [4611686018427387904,4] has more than 2^63 elements; no tensor can be this large");
    }

    @Test
    void notAGraphDocument() {
        assertThatThrownBy(() -> GraphJson.fromJson("[1, 2]")).hasMessageContaining("graph JSON: expected the document (an object), found array");
        assertThatThrownBy(() -> GraphJson.fromJson("{\"format\": \"onnx\"}")).hasMessageContaining("field 'format' is \"onnx\"");
    }
}
