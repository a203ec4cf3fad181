package dev.gatun.ir.viz;

import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.testing.RandomGraphs;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.regex.Pattern;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

class GraphPicturesTest {

    /** The seeds' graph of docs/DESIGN.md, built without the DSL. */
    static Graph seeds() {
        var b = Graph.builder("seeds");
        Node x = b.input("x", TensorType.of(F32, 4, 4));
        Node[] r = new Node[3];
        for (int i = 0; i < 3; i++) {
            Node c = b.constant(new double[]{i + 1}, new TensorType(F32, Shape.SCALAR));
            r[i] = allReduce(b, b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(x, c)));
        }
        Node sum = b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(b.add(new Op.Pointwise(PointwiseFn.ADD), List.of(r[0], r[1])), r[2]));
        b.output("d", allReduce(b, sum));
        return b.build();
    }

    static Node allReduce(Graph.Builder b, Node n) {
        return b.add(new Op.Collective(CollectiveKind.ALL_REDUCE, ReduceOp.SUM, "world", 0), List.of(n));
    }

    static int count(String text, String regex) {
        var m = Pattern.compile(regex, Pattern.MULTILINE).matcher(text);
        int n = 0;
        while (m.find()) n++;
        return n;
    }

    static int edges(Graph g) {
        int e = g.outputs().size();
        for (Node n : g.nodes()) e += n.inputs().size();
        return e;
    }

    @Test
    void dotHasANodePerGraphNodeAnEdgePerInputAndMarksInputsOutputsAndCollectives() {
        Graph g = seeds();
        String dot = GraphDot.render(g);
        assertThat(dot).startsWith("digraph \"seeds\" {\n").endsWith("}\n");
        assertThat(count(dot, "\\{")).isEqualTo(count(dot, "\\}"));
        assertThat(count(dot, "^  n\\d+ \\[label=")).isEqualTo(g.nodes().size());
        assertThat(count(dot, " -> ")).isEqualTo(edges(g));
        assertThat(count(dot, "class=\"collective\"")).isEqualTo(4);
        assertThat(dot).contains("n0 [label=\"%0 input \\\"x\\\"\\nf32[4,4]\", shape=invhouse");
        assertThat(dot).contains("n3 [label=\"%3 all_reduce sum \\\"world\\\"\\nf32[4,4]\", shape=hexagon");
        assertThat(dot).contains("out_d [label=\"output d\", shape=house").contains("n12 -> out_d");
        assertThat(dot).contains("n0 -> n2;\n  n1 -> n2;\n");
        // every edge joins declared nodes
        var declared = Pattern.compile("^  (\\w+) \\[", Pattern.MULTILINE).matcher(dot).results().map(r -> r.group(1)).toList();
        Pattern.compile("^  (\\w+) -> (\\w+)", Pattern.MULTILINE).matcher(dot).results()
                .forEach(r -> assertThat(declared).contains(r.group(1), r.group(2)));
        assertThat(GraphDot.render(seeds())).isEqualTo(dot);
    }

    @Test
    void mermaidHasTheSameStructure() {
        Graph g = seeds();
        String mmd = GraphMermaid.render(g);
        assertThat(mmd).startsWith("---\ntitle: graph seeds\n---\nflowchart TD\n");
        assertThat(count(mmd, "^    n\\d+[\\[({]")).isEqualTo(g.nodes().size());
        assertThat(count(mmd, " (-->|==>)")).isEqualTo(edges(g));
        assertThat(mmd).contains("    n0[/\"%0 input #quot;x#quot;<br/>f32[4,4]\"/]\n");
        assertThat(mmd).contains("    n3{{\"%3 all_reduce sum #quot;world#quot;<br/>f32[4,4]\"}}\n");
        assertThat(mmd).contains("    class n3,n6,n9,n12 collective\n", "    class n0 input\n", "    class out_d output\n", "    n12 ==> out_d\n");
        assertThat(mmd).contains("classDef collective");
        assertThat(GraphMermaid.render(seeds())).isEqualTo(mmd);
    }

    @Test
    void orderedArgumentsAreLabelledAndOddNamesEscaped() {
        var b = Graph.builder("odd \"name\"");
        Node x = b.input("a\"b<c>#", TensorType.of(F32, 3));
        Node y = b.input("y", TensorType.of(F32, 3));
        b.output("out-1", b.add(new Op.Pointwise(PointwiseFn.SUB), List.of(x, y)));
        Graph g = b.build();
        String dot = GraphDot.render(g);
        assertThat(dot).startsWith("digraph \"odd \\\"name\\\"\" {").contains("%0 input \\\"a\\\"b<c>#\\\"");
        assertThat(dot).contains("n0 -> n2 [label=\"0\"];", "n1 -> n2 [label=\"1\"];", "out_out_1 [label=\"output out-1\"");
        String mmd = GraphMermaid.render(g);
        assertThat(mmd).contains("a#quot;b#lt;c#gt;#35;", "n0 -->|0| n2", "n1 -->|1| n2", "out_out_1([\"output out-1\"])");
        assertThat(mmd.lines().filter(l -> l.contains("input")).toList()).allSatisfy(l -> assertThat(l).doesNotContain("<c>"));
    }

    @Test
    void randomGraphsRenderWithOneLinePerNodeAndEdge() {
        for (long seed = 0; seed < 100; seed++) {
            Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(1 + (int) (seed % 4)));
            String dot = GraphDot.render(g), mmd = GraphMermaid.render(g);
            assertThat(count(dot, "^  n\\d+ \\[label=")).as("seed " + seed).isEqualTo(g.nodes().size());
            assertThat(count(dot, "^  \\w+ -> \\w+")).as("seed " + seed).isEqualTo(edges(g));
            assertThat(count(mmd, "^    n\\d+[\\[({]")).as("seed " + seed).isEqualTo(g.nodes().size());
            assertThat(count(mmd, "^    \\w+ (-->|==>)")).as("seed " + seed).isEqualTo(edges(g));
            long collectives = g.nodes().stream().filter(n -> n.op() instanceof Op.Collective).count();
            assertThat(count(dot, "class=\"collective\"")).isEqualTo((int) collectives);
        }
    }
}
