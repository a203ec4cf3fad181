package dev.gatun.ir.viz;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;

import java.util.ArrayList;
import java.util.List;

/**
 * A {@link Graph} as a Graphviz DOT digraph: one node per graph node, labelled with its op (and attributes) and
 * its type; an edge from each input to its user (labelled with the argument's index where order matters); graph
 * inputs drawn as inverted houses, outputs as extra house-shaped nodes named after the output, constants small
 * and grey, collectives highlighted (orange, bold hexagons). Deterministic: nodes and edges in graph order.
 * Render with {@code dot -Tsvg graph.dot -o graph.svg}.
 */
public final class GraphDot {
    private GraphDot() {}

    public static String render(Graph g) {
        var sb = new StringBuilder();
        sb.append("digraph ").append(quote(g.name())).append(" {\n");
        sb.append("  graph [rankdir=TB, label=").append(quote("graph \"" + g.name() + "\"" + (g.worldSize() != null ? "  world=" + g.worldSize() : "")))
                .append(", labelloc=t, fontname=\"Helvetica\", fontsize=14];\n");
        sb.append("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#e8eef7\", color=\"#4a6a8a\", fontname=\"Courier\", fontsize=10];\n");
        sb.append("  edge [color=\"#555555\", arrowsize=0.7, fontname=\"Courier\", fontsize=9];\n");
        for (Node n : g.nodes()) {
            var attrs = new ArrayList<String>();
            attrs.add("label=" + quote(String.join("\n", GraphLabels.lines(n))));
            switch (GraphLabels.kind(n)) {
                case INPUT -> attrs.addAll(List.of("shape=invhouse", "style=filled", "fillcolor=\"#cde8cd\"", "color=\"#3a7d3a\"", "class=\"input\""));
                case CONSTANT -> attrs.addAll(List.of("shape=ellipse", "style=filled", "fillcolor=\"#eeeeee\"", "color=\"#999999\"", "fontsize=8", "class=\"constant\""));
                case COLLECTIVE -> attrs.addAll(List.of("shape=hexagon", "style=\"filled,bold\"", "fillcolor=\"#f9c38c\"", "color=\"#c0600b\"", "penwidth=2", "class=\"collective\""));
                case CUSTOM -> attrs.addAll(List.of("shape=component", "style=filled", "fillcolor=\"#e3d3ef\"", "color=\"#7d4a9b\"", "class=\"custom\""));
                case OP -> attrs.add("class=\"op\"");
            }
            if (n.symmetricGroup() != null) attrs.add("peripheries=2");
            sb.append("  ").append(id(n)).append(" [").append(String.join(", ", attrs)).append("];\n");
        }
        for (var e : g.outputs().entrySet())
            sb.append("  ").append(GraphLabels.ident("out_", e.getKey())).append(" [label=").append(quote("output " + e.getKey()))
                    .append(", shape=house, style=filled, fillcolor=\"#cde8cd\", color=\"#3a7d3a\", class=\"output\"];\n");
        for (Node n : g.nodes()) {
            boolean ordered = GraphLabels.orderedInputs(n);
            for (int i = 0; i < n.inputs().size(); i++) {
                sb.append("  ").append(id(n.input(i))).append(" -> ").append(id(n));
                if (ordered) sb.append(" [label=\"").append(i).append("\"]");
                sb.append(";\n");
            }
        }
        for (var e : g.outputs().entrySet())
            sb.append("  ").append(id(e.getValue())).append(" -> ").append(GraphLabels.ident("out_", e.getKey())).append(" [style=bold];\n");
        sb.append("}\n");
        return sb.toString();
    }

    static String id(Node n) { return "n" + n.id(); }

    /** A DOT quoted string: backslashes and quotes escaped, newlines as centred line breaks. */
    static String quote(String s) {
        var sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> { }
                default -> sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
