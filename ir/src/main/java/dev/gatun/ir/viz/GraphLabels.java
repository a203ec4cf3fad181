package dev.gatun.ir.viz;

import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** What graph pictures say about a node: its label lines and its kind. Shared by {@link GraphDot} and {@link GraphMermaid}. */
final class GraphLabels {
    private GraphLabels() {}

    enum Kind { INPUT, CONSTANT, COLLECTIVE, CUSTOM, OP }

    static Kind kind(Node n) {
        return switch (n.op()) {
            case Op.Input i -> Kind.INPUT;
            case Op.Constant c -> Kind.CONSTANT;
            case Op.Collective c -> Kind.COLLECTIVE;
            case Op.Custom c -> Kind.CUSTOM;
            case Op.CustomOutput c -> Kind.CUSTOM;
            default -> Kind.OP;
        };
    }

    /** Line 1: {@code %3 all_reduce sum "world"}; line 2: the type; line 3, if any: the symmetric-region mark. */
    static List<String> lines(Node n) {
        var lines = new ArrayList<String>();
        String attrs = switch (n.op()) {
            case Op.Input in -> "\"" + in.name() + "\"";
            case Op.Constant c -> c.length() == 1 ? Double.toString(c.value(0)) : "[" + c.length() + " values]";
            case Op.Cast c -> "to " + c.to();
            case Op.Reduce r -> "dims=" + r.dims() + (r.keepdim() ? " keepdim" : "");
            case Op.Collective c -> (c.reduceOp() != null ? c.reduceOp().opName() + " " : "")
                    + (c.kind() == CollectiveKind.BROADCAST ? "root=" + c.root() + " " : "") + (c.uneven() ? "capacity=" + c.capacity() + " " : "")
                    + "\"" + c.group() + "\"";
            case Op.Reshape r -> r.shape().toString();
            case Op.Permute p -> p.perm().toString();
            case Op.Slice s -> "dim=" + s.dim() + " " + s.start() + ":" + s.end() + (s.step() == 1 ? "" : ":" + s.step());
            case Op.Expand e -> e.shape().toString();
            case Op.Cat c -> "dim=" + c.dim();
            case Op.Registered r -> r.attrs().format().replace(",", "");
            default -> "";
        };
        lines.add("%" + n.id() + " " + n.op().opName() + (attrs.isEmpty() ? "" : " " + attrs));
        lines.add(n.type().toString());
        if (n.symmetricGroup() != null) lines.add("symmetric \"" + n.symmetricGroup() + "\"");
        return lines;
    }

    /** Whether the order of a node's inputs matters, so edges carry the argument's index. */
    static boolean orderedInputs(Node n) {
        if (n.inputs().size() < 2) return false;
        return switch (n.op()) {
            case Op.Pointwise p -> p.fn() != PointwiseFn.ADD && p.fn() != PointwiseFn.MUL && p.fn() != PointwiseFn.MAXIMUM
                    && p.fn() != PointwiseFn.MINIMUM && p.fn() != PointwiseFn.EQ && p.fn() != PointwiseFn.NE;
            default -> true;
        };
    }

    /** Output names of each node, in declaration order. */
    static List<String> outputNames(Graph g, Node n) {
        var names = new ArrayList<String>();
        for (Map.Entry<String, Node> e : g.outputs().entrySet()) if (e.getValue() == n) names.add(e.getKey());
        return names;
    }

    /** A name safe as an identifier in DOT and Mermaid: letters, digits and underscores. */
    static String ident(String prefix, String s) {
        var sb = new StringBuilder(prefix);
        for (char c : s.toCharArray()) sb.append(Character.isLetterOrDigit(c) && c < 128 ? c : '_');
        return sb.toString();
    }
}
