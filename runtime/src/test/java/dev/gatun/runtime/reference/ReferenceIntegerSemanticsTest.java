package dev.gatun.runtime.reference;

import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.testing.IntegerSemanticsContract;

import java.util.List;
import java.util.Map;

/** The reference interpreter keeps int64 exact and wraps integer arithmetic as Java does ({@link IntegerSemanticsContract}). */
class ReferenceIntegerSemanticsTest extends IntegerSemanticsContract {

    @Override protected List<Map<String, NDArray>> run(Graph graph, List<Map<String, NDArray>> inputsPerRank) {
        return ReferenceInterpreter.evaluate(graph, inputsPerRank);
    }

    @Override protected Map<String, NDArray> runWithStates(Graph graph, Map<String, NDArray> states, Map<String, NDArray> inputs) {
        return new ReferenceInterpreter(graph).run(merged(states, inputs));
    }
}
