package dev.gatun.lowering;

import dev.gatun.ir.graph.Graph;

import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The lowered form of a graph: buffers in a valid execution order, the graph's inputs and outputs as
 * buffers, and the record of every symmetric-memory decision.
 */
public final class LoweredGraph {
    private final Graph graph;
    private final LoweringOptions options;
    private final List<Buffer> buffers;
    /**
     * Buffers by name: backends look buffers up per step and element, so a scan made large graphs quadratic. Made on
     * the first lookup: planning never asks, and a 100k-buffer map was 2 % of a large compile.
     */
    private volatile Map<String, Buffer> byName;
    private final Map<String, InputBuffer> inputs;
    private final Map<String, Buffer> outputs;
    private final List<Realization> realizations;
    private final List<String> decisions;

    LoweredGraph(Graph graph, LoweringOptions options, List<Buffer> buffers, Map<String, InputBuffer> inputs,
                 Map<String, Buffer> outputs, List<Realization> realizations, List<String> decisions) {
        this.graph = graph;
        this.options = options;
        this.buffers = List.copyOf(buffers);
        for (int i = 0; i < this.buffers.size(); i++) this.buffers.get(i).setId(i);
        this.inputs = Collections.unmodifiableMap(new LinkedHashMap<>(inputs));
        this.outputs = Collections.unmodifiableMap(new LinkedHashMap<>(outputs));
        this.realizations = List.copyOf(realizations);
        this.decisions = List.copyOf(decisions);
    }

    public Graph graph() { return graph; }
    public LoweringOptions options() { return options; }
    public int worldSize() { return options.worldSize(); }
    public List<Buffer> buffers() { return buffers; }
    public Map<String, InputBuffer> inputs() { return inputs; }
    public Map<String, Buffer> outputs() { return outputs; }
    public List<Realization> realizations() { return realizations; }

    /** Every lowering decision in order, for the verbose log. */
    public List<String> decisions() { return decisions; }

    public Buffer buffer(String name) {
        Buffer b = byName().get(name);
        if (b != null) return b;
        throw new dev.gatun.ir.CompilationException("no buffer named '" + name + "' in lowered graph '" + graph.name() + "'");
    }

    private Map<String, Buffer> byName() {
        var m = byName;
        if (m == null) {   // two threads asking first each make the same map: harmless
            m = HashMap.newHashMap(buffers.size());
            for (Buffer b : buffers) m.put(b.name(), b);
            byName = m;
        }
        return m;
    }

    /** The realization recorded for a consumer buffer (e.g. a collective's output), or null. */
    public Realization realizationOf(String consumer) {
        for (Realization r : realizations) if (r.consumer().equals(consumer)) return r;
        return null;
    }

    /** Why each collective took its path. */
    public String explain() {
        var sb = new StringBuilder("realizations of \"" + graph.name() + "\" (world=" + worldSize() + ")");
        if (realizations.isEmpty()) sb.append("\n  (none: no op needs symmetric memory)");
        for (Realization r : realizations) sb.append("\n  ").append(r.explain());
        for (String note : graph.notes()) sb.append("\n  # ").append(note);   // choices made in the graph (recomputation)
        return sb.toString();
    }

    @Override public String toString() {
        var sb = new StringBuilder("lowered \"" + graph.name() + "\"  world=" + worldSize() + "\n");
        for (Buffer b : buffers) sb.append("  ").append(b.format()).append('\n');
        sb.append("  return ");
        sb.append(String.join(", ", outputs.entrySet().stream().map(e -> e.getKey() + "=" + e.getValue().name()).toList()));
        return sb.toString();
    }
}
