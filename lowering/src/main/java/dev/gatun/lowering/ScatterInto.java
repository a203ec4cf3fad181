package dev.gatun.lowering;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Where {@code add(x, scatter_add(zeros, index, src))} is lowered as {@code scatter_add(x, index, src)}: a gradient that
 * sums a lookup's scattered rows with another contribution (a tied embedding's, whose head adds its product's gradient)
 * would otherwise fill a zero tensor, copy it into the scatter's result and read both back to add them: three passes
 * over a table-sized tensor where one (the scatter's own copy of x) does. Taken where the zeros are a constant of zeros
 * or a broadcast of one (fresh: nothing else can have written them), the scatter_add's only reader is the add and it is
 * no graph output, x, the scatter and the sum have one type (no broadcast), and none of them is in a symmetric region.
 * x is only read (the call writes a result of its own), so a later reader of x sees it unchanged. A float sum is
 * reassociated: x is added first, then the source's rows in the index's order, where the zeros took the rows first;
 * integers are exact. The zeros (when nothing else reads them) and the scatter are not made; the add makes the call.
 */
final class ScatterInto {
    private record Rewrite(Node scatter, Node target) {}

    private final Map<Integer, Rewrite> byAdd = new HashMap<>();
    private final Map<Integer, String> skipped = new HashMap<>();

    private ScatterInto() {}

    static ScatterInto find(Graph graph, boolean[] live) {
        var into = new ScatterInto();
        for (Node n : graph.nodes()) {
            if (!live[n.id()] || !(n.op() instanceof Op.Pointwise p) || p.fn() != PointwiseFn.ADD || n.symmetricGroup() != null) continue;
            for (int k = 0; k < 2; k++) {
                Node s = n.input(k), x = n.input(1 - k);
                if (takes(graph, n, s, x) && !into.skipped.containsKey(s.id())) {
                    into.byAdd.put(n.id(), new Rewrite(s, x));
                    into.skipped.put(s.id(), "computed by %" + n.id() + " add as one scatter_add into %" + x.id());
                    Node zeros = s.input(0);
                    if (!graph.isOutput(zeros) && graph.users(zeros).stream().allMatch(u -> u == s))
                        into.skipped.put(zeros.id(), "its only reader, %" + s.id() + " scatter_add, scatters into %" + x.id() + " instead");
                    break;
                }
            }
        }
        return into;
    }

    private static boolean takes(Graph graph, Node add, Node s, Node x) {
        return s.op() instanceof Op.Registered r && r.opName().equals("scatter_add") && s != x && !graph.isOutput(s)
                && graph.users(s).equals(List.of(add)) && s.symmetricGroup() == null && x.symmetricGroup() == null
                && x.type().equals(add.type()) && s.type().equals(add.type()) && zeros(s.input(0));
    }

    /** Whether {@code n} is a constant of zeros or a broadcast or reshape of one (its values are zero whatever ran before). */
    static boolean zeros(Node n) {
        return switch (n.op()) {
            case Op.Constant c -> {
                for (double v : c.values()) if (v != 0) yield false;
                yield true;
            }
            case Op.Expand e -> zeros(n.input(0));
            case Op.Reshape r -> zeros(n.input(0));
            default -> false;
        };
    }

    boolean rewrites(Node add) { return byAdd.containsKey(add.id()); }

    boolean skipped(Node n) { return skipped.containsKey(n.id()); }

    String why(Node n) { return skipped.get(n.id()); }

    Node scatterOf(Node add) { return byAdd.get(add.id()).scatter(); }

    Node targetOf(Node add) { return byAdd.get(add.id()).target(); }
}
