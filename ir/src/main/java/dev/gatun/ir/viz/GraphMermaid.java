package dev.gatun.ir.viz;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A {@link Graph} as a Mermaid flowchart: one node per graph node labelled with its op and type, edges from
 * inputs (labelled with the argument's index where order matters), graph inputs as parallelograms, outputs as
 * extra stadium nodes, collectives as highlighted hexagons (class {@code collective}). Deterministic. Paste into
 * a Markdown {@code ```mermaid} block, or render with the Mermaid CLI.
 */
public final class GraphMermaid {
    private GraphMermaid() {}

    public static String render(Graph g) {
        var sb = new StringBuilder();
        sb.append("---\ntitle: ").append(title(g)).append("\n---\n");
        sb.append("flowchart TD\n");
        var classes = new LinkedHashMap<String, List<String>>();
        for (String c : List.of("input", "constant", "collective", "custom", "symmetric", "output")) classes.put(c, new ArrayList<>());
        for (Node n : g.nodes()) {
            String label = label(String.join("<br/>", GraphLabels.lines(n).stream().map(GraphMermaid::escape).toList()));
            String shape = switch (GraphLabels.kind(n)) {
                case INPUT -> "[/" + label + "/]";
                case CONSTANT -> "([" + label + "])";
                case COLLECTIVE -> "{{" + label + "}}";
                case CUSTOM -> "[[" + label + "]]";
                case OP -> "[" + label + "]";
            };
            sb.append("    ").append(GraphDot.id(n)).append(shape).append('\n');
            switch (GraphLabels.kind(n)) {
                case INPUT -> classes.get("input").add(GraphDot.id(n));
                case CONSTANT -> classes.get("constant").add(GraphDot.id(n));
                case COLLECTIVE -> classes.get("collective").add(GraphDot.id(n));
                case CUSTOM -> classes.get("custom").add(GraphDot.id(n));
                case OP -> { }
            }
            if (n.symmetricGroup() != null && GraphLabels.kind(n) == GraphLabels.Kind.OP) classes.get("symmetric").add(GraphDot.id(n));
        }
        for (Map.Entry<String, Node> e : g.outputs().entrySet()) {
            String id = GraphLabels.ident("out_", e.getKey());
            sb.append("    ").append(id).append("([").append(label(escape("output " + e.getKey()))).append("])\n");
            classes.get("output").add(id);
        }
        for (Node n : g.nodes()) {
            boolean ordered = GraphLabels.orderedInputs(n);
            for (int i = 0; i < n.inputs().size(); i++)
                sb.append("    ").append(GraphDot.id(n.input(i))).append(ordered ? " -->|" + i + "| " : " --> ").append(GraphDot.id(n)).append('\n');
        }
        for (Map.Entry<String, Node> e : g.outputs().entrySet())
            sb.append("    ").append(GraphDot.id(e.getValue())).append(" ==> ").append(GraphLabels.ident("out_", e.getKey())).append('\n');
        sb.append("    classDef input fill:#cde8cd,stroke:#3a7d3a\n");
        sb.append("    classDef constant fill:#eeeeee,stroke:#999999,font-size:10px\n");
        sb.append("    classDef collective fill:#f9c38c,stroke:#c0600b,stroke-width:3px\n");
        sb.append("    classDef custom fill:#e3d3ef,stroke:#7d4a9b\n");
        sb.append("    classDef symmetric stroke:#c0600b,stroke-dasharray:4 3\n");
        sb.append("    classDef output fill:#cde8cd,stroke:#3a7d3a,stroke-width:2px\n");
        classes.forEach((c, ids) -> { if (!ids.isEmpty()) sb.append("    class ").append(String.join(",", ids)).append(' ').append(c).append('\n'); });
        return sb.toString();
    }

    private static String title(Graph g) {
        String t = "graph " + g.name() + (g.worldSize() != null ? " (world " + g.worldSize() + ")" : "");
        return t.replaceAll("[\\r\\n:#]", " ");
    }

    private static String label(String escaped) { return "\"" + escaped + "\""; }

    /** Mermaid entity codes for characters that would end a quoted label or be read as markup. */
    static String escape(String s) {
        var sb = new StringBuilder();
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("#quot;");
                case '<' -> sb.append("#lt;");
                case '>' -> sb.append("#gt;");
                case '#' -> sb.append("#35;");
                case '\n', '\r' -> sb.append(' ');
                default -> sb.append(c);
            }
        }
        return sb.toString();
    }
}
