package dev.gatun.runtime;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A random graph's seeded inputs as NDArrays, one map per rank. */
public final class TestInputs {
    private TestInputs() {}

    public static List<Map<String, NDArray>> of(Graph g, long seed, int world) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            var m = new LinkedHashMap<String, NDArray>();
            RandomGraphs.inputs(g, seed, r).forEach((k, v) -> m.put(k, NDArray.of(v.dtype(), v.values(), v.shape())));
            out.add(m);
        }
        return out;
    }
}
