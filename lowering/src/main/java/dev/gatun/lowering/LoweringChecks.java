package dev.gatun.lowering;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.ProcessGroup;

import java.util.ArrayDeque;

/** What lowering checks before it lowers a node: the world the graph fits, and which nodes any output needs. */
final class LoweringChecks {
    private LoweringChecks() {}

    /** The world the graph was built for and every group's ranks and broadcast roots against the compiled world. */
    static void checkWorld(Graph graph, LoweringOptions options) {
        Integer declared = graph.worldSize();
        if (declared != null && declared != options.worldSize()) {
            var axes = graph.groups().values().stream().filter(ProcessGroup::isMeshAxis).map(ProcessGroup::name).toList();
            throw new CompilationException("graph '" + graph.name() + "' was built for a world of " + declared + " ranks"
                    + (axes.isEmpty() ? "" : " (its mesh of axes " + axes + ")") + " but is compiled for " + options.worldSize());
        }
        for (ProcessGroup g : graph.groups().values())
            for (int r : g.ranks())
                if (r >= options.worldSize())
                    throw new CompilationException("group '" + g.name() + "' has rank " + r + ", outside a world of " + options.worldSize());
        // what the graph could not check before the world size was known
        for (Node n : graph.nodes()) {
            if (!(n.op() instanceof Op.Collective c)) continue;
            ProcessGroup g = graph.groups().get(c.group());
            if (!g.coversEveryRank(options.worldSize()))   // describing the operand is only for the error: not per collective
                dev.gatun.ir.graph.TypeInference.checkCoversEveryRank(c, n.input(0).describe(), g, options.worldSize());
            int size = g.size(options.worldSize());
            if (c.kind() == CollectiveKind.BROADCAST && c.root() >= size)
                throw new CompilationException(n.format() + ": broadcast root " + c.root() + " is not a rank of group '" + g.name() + "', which has "
                        + size + " rank" + (size == 1 ? "" : "s") + " in a world of " + options.worldSize());
        }
    }

    /** Whether each node (by id) is needed: an output depends on it, or it updates a state. */
    static boolean[] liveNodes(Graph graph) {
        var live = new boolean[graph.nodes().size()];
        var work = new ArrayDeque<>(graph.outputs().values());
        // an update of a state is kept whether or not an output reads it: the state holds it after the call
        for (Node n : graph.nodes()) if (Graph.writesInPlace(n) && graph.stateOf(n) != null) work.add(n);
        while (!work.isEmpty()) {
            Node n = work.pop();
            if (!live[n.id()]) {
                live[n.id()] = true;
                work.addAll(n.inputs());
            }
        }
        return live;
    }
}
