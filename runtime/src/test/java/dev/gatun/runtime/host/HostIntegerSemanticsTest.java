package dev.gatun.runtime.host;

import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.testing.IntegerSemanticsContract;

import java.util.List;
import java.util.Map;

/** The host backend keeps int64 exact and wraps integer arithmetic as Java does ({@link IntegerSemanticsContract}). */
class HostIntegerSemanticsTest extends IntegerSemanticsContract {

    @Override protected List<Map<String, NDArray>> run(Graph graph, List<Map<String, NDArray>> inputsPerRank) {
        try (var s = Session.compile(graph, CompileOptions.world(inputsPerRank.size()).backend("host"))) {
            return s.runToHost(inputsPerRank);
        }
    }

    @Override protected Map<String, NDArray> runWithStates(Graph graph, Map<String, NDArray> states, Map<String, NDArray> inputs) {
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            states.forEach(s::bind);
            return s.runToHost(inputs);
        }
    }
}
