package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CudaGraph;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.planner.Plan;
import dev.gatun.runtime.spi.StepLoop;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * An executable's captured partitions: a CUDA graph bakes in the addresses its kernels read, so the graphs are kept per
 * set of input addresses (one set where every input is staged), a few sets at once, least recently used dropped first.
 * Inputs that keep arriving at new addresses would capture again and again: after {@value #RECAPTURES} new sets device
 * inputs are staged instead ({@link #readInPlace}), one device copy each.
 */
final class CapturedGraphs {
    /** Captured graph sets kept at once, and new address sets tolerated before device inputs are staged instead. */
    private static final int GRAPH_SETS = 4, RECAPTURES = 8;

    private final Plan plan;
    private final Stream stream;
    /** Captured partitions per set of input addresses, least recently used first. */
    private final Map<AddressKey, GraphExec[]> graphs = new LinkedHashMap<>(8, 0.75f, true);
    /** The graphs the last call replayed, and the input addresses they were captured for. */
    private GraphExec[] lastGraphs;
    private AddressKey lastKey;
    /** How many times inputs arrived at a new set of addresses after the first capture. */
    private int recaptures;
    /** False once inputs arrived at new addresses too often: device inputs are staged from then on. */
    private boolean readInPlace = true;
    /** Whether the ranks met after this executable's first captures (once: see {@link #captureMissing}). */
    private boolean metAfterCapture;

    /** The addresses a set of captured graphs reads its inputs from. */
    private record AddressKey(long[] addresses) {
        @Override public boolean equals(Object o) { return o instanceof AddressKey k && Arrays.equals(addresses, k.addresses); }
        @Override public int hashCode() { return Arrays.hashCode(addresses); }
    }

    /** The graphs of {@code plan}'s partitions, captured from and launched on {@code stream}. */
    CapturedGraphs(Plan plan, Stream stream) {
        this.plan = plan;
        this.stream = stream;
    }

    /** Whether device inputs may still be read where they lie (false once they moved too often). */
    boolean readInPlace() { return readInPlace; }

    /** The graphs the last call replayed (for the benchmarks' bare-replay floor). */
    GraphExec[] last() { return lastGraphs; }

    /** Notes the graphs a call replays. */
    void replaying(GraphExec[] set) { lastGraphs = set; }

    /** The graphs captured for inputs at {@code addresses}, or null where there are none and no more may be captured. */
    GraphExec[] forAddresses(long[] addresses, boolean mayStage) {
        if (lastKey != null && Arrays.equals(lastKey.addresses(), addresses)) return lastGraphs; // the usual case: as last call
        var key = new AddressKey(addresses);
        GraphExec[] g = graphs.get(key);
        if (g != null) {
            lastKey = key;
            return g;
        }
        if (!graphs.isEmpty()) {
            if (mayStage && ++recaptures > RECAPTURES) {
                readInPlace = false;
                CudaExecutable.LOG.log(System.Logger.Level.INFO, "plan {0}: device inputs arrived at {1} different addresses; they are copied into fixed staging"
                        + " buffers from now on (one device copy each) instead of capturing the graphs again", plan.name(), recaptures);
                return null;
            }
            if (graphs.size() >= GRAPH_SETS) {
                var eldest = graphs.entrySet().iterator().next();
                stream.synchronize(); // the eldest graphs may still be running
                for (GraphExec e : eldest.getValue()) if (e != null) e.close();
                graphs.remove(eldest.getKey());
            }
        }
        g = new GraphExec[plan.partitions().size()];
        graphs.put(key, g);
        lastKey = key;
        return g;
    }

    /**
     * Every partition not yet captured in {@code set} is captured from {@code steps} and instantiated before any is
     * launched. After the first call's captures the ranks meet ({@code dist}, null for a world of one): instantiating
     * may wait for every kernel of the context, and where ranks share a GPU a peer's collective spins until this
     * rank's kernels arrive.
     */
    void captureMissing(GraphExec[] set, StepLoop.Steps steps, Distributed dist) {
        boolean captured = false;
        for (Plan.Partition part : plan.partitions()) {
            if (set[part.index()] != null) continue;
            CudaGraph graph;
            try (StreamCapture capture = stream.beginCapture()) {
                StepLoop.run(plan, part.first(), part.last(), steps);
                graph = capture.end();
            }
            set[part.index()] = graph.instantiate();
            CudaExecutable.LOG.log(System.Logger.Level.DEBUG, "plan {0}: captured partition {1} ({2} nodes)", plan.name(), part.index(), graph.nodeCount());
            graph.close(); // the executable graph is all replays need
            captured = true;
        }
        // the first call's captures are made on every rank, so the ranks meet there; a later capture is one rank's
        // own (its inputs moved: only where ranks do not share a GPU, as they stage inputs) and meets nobody
        if (captured && dist != null && !metAfterCapture) {
            dist.meet("captured");
            metAfterCapture = true;
        }
    }

    /** Frees every captured graph, each failure kept in {@code failed}. */
    void close(List<RuntimeException> failed) {
        for (GraphExec[] set : graphs.values()) for (GraphExec g : set) if (g != null) CudaExecutable.quietly(failed, g::close);
        graphs.clear();
    }
}
