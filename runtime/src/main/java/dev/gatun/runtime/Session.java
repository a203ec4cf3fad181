package dev.gatun.runtime;

import dev.gatun.ir.Dim;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.ir.lower.Lowering;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.spi.Backend;
import dev.gatun.runtime.spi.Executable;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A compiled graph ready to run: compile once, call many times, close to release everything.
 *
 * <pre>{@code
 * try (var s = Session.compile(graph, CompileOptions.world(2))) {
 *     List<Map<String, NDArray>> out = s.run(List.of(Map.of("x", x0), Map.of("x", x1)));
 * }
 * }</pre>
 */
public final class Session implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.gatun.runtime");

    private final Graph graph;
    private final CompileOptions options;
    private final Backend backend;
    private final LoweredGraph lowered;
    private final Plan plan;
    private final Executable executable;
    private final AtomicBoolean closed = new AtomicBoolean();
    /** One call at a time (see {@link #run(List)}). */
    private final java.util.concurrent.locks.ReentrantLock running = new java.util.concurrent.locks.ReentrantLock();
    private volatile boolean aborted;

    private Session(Graph graph, CompileOptions options) {
        this.graph = graph;
        this.backend = chooseBackend(options.backend(), options);
        this.options = backend.adapt(options);
        this.lowered = Lowering.lower(graph, this.options.lowering());
        // -Dgatun.verbose=true (or GATUN_VERBOSE=1) prints every lowering decision; otherwise they go to DEBUG
        boolean verbose = this.options.execution().verbose();
        for (String d : lowered.decisions()) LOG.log(verbose ? System.Logger.Level.INFO : System.Logger.Level.DEBUG, "{0}: {1}", graph.name(), d);
        if (verbose) LOG.log(System.Logger.Level.INFO, "{0}", lowered.explain());
        this.plan = Planner.plan(lowered, this.options.planning().withCommGranularity(backend.commGranularity()));
        this.executable = backend.load(plan, this.options);
    }

    public static Session compile(Graph graph, CompileOptions options) { return new Session(graph, options); }

    /** All backends on the class path, available or not. */
    public static List<Backend> backends() {
        var out = new ArrayList<Backend>();
        ServiceLoader.load(Backend.class, Session.class.getClassLoader()).forEach(out::add);
        out.sort((a, b) -> Integer.compare(b.priority(), a.priority()));
        return out;
    }

    private static String whyNot(Backend b, CompileOptions world) {
        String why = b.unavailableReason();
        return why != null ? why : b.cannotRun(world);
    }

    private static Backend chooseBackend(String name, CompileOptions world) {
        var all = backends();
        if (name.equals("auto")) {
            for (Backend b : all) {
                String why = whyNot(b, world);
                if (why == null) return b;
                LOG.log(System.Logger.Level.DEBUG, "backend {0} not chosen: {1}", b.name(), why);
            }
            throw new GatunRuntimeException("no backend is available: " + all.stream().map(b -> b.name() + " (" + whyNot(b, world) + ")").toList());
        }
        for (Backend b : all) {
            if (!b.name().equals(name)) continue;
            String why = whyNot(b, world);
            if (why != null) throw new GatunRuntimeException("backend '" + name + "' cannot run this session: " + why);
            return b;
        }
        throw new GatunRuntimeException("unknown backend '" + name + "'; present: " + all.stream().map(Backend::name).toList());
    }

    public Graph graph() { return graph; }
    public LoweredGraph lowered() { return lowered; }
    public Plan plan() { return plan; }
    public String backendName() { return backend.name(); }
    public int worldSize() { return options.worldSize(); }

    /** Why each collective took its path. */
    public String explain() { return lowered.explain(); }

    /** The kernels as the backend runs them: CUDA C on the CUDA backend, the kernel IR on the host. */
    public String generatedSource() { return backend.generatedSource(plan); }

    /** The ranks this process drives: every rank when they are simulated, its own one when each process is a rank. */
    public List<Integer> ranks() { return executable.ranks(); }

    /** Runs the one rank this process drives (a world of one, or one process of a distributed world). */
    public Map<String, NDArray> run(Map<String, NDArray> inputs) {
        if (ranks().size() != 1)
            throw new GatunRuntimeException("session '" + graph.name() + "' drives " + ranks().size()
                    + " ranks in this process; pass one input map per rank");
        return run(List.of(inputs)).getFirst();
    }

    /**
     * Runs every rank this process drives: one input map per rank, one output map per rank.
     *
     * <p>Calls on one session run one at a time: a session owns one set of pools, staging buffers and rank
     * threads, so a second thread's call waits until the first has returned (compile a second session to run
     * two calls at once).
     */
    public List<Map<String, NDArray>> run(List<Map<String, NDArray>> inputsPerRank) {
        running.lock();
        try {
            if (aborted && !closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' was aborted and cannot run again; compile a new one");
            return runAlone(inputsPerRank);
        } finally {
            running.unlock();
        }
    }

    /**
     * Stops a call in flight on every rank this session drives, promptly (as {@code ncclCommAbort} does): the call
     * fails with an error saying it was aborted, and the session cannot run again (close it). Safe from any thread; it
     * does not wait for the call to end. Ranks in other processes wait for this one until their collective timeout.
     */
    public void abort() {
        aborted = true;
        executable.abort();
    }

    public boolean isAborted() { return aborted; }

    private List<Map<String, NDArray>> runAlone(List<Map<String, NDArray>> inputsPerRank) {
        if (closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' is closed");
        var ranks = ranks();
        if (inputsPerRank.size() != ranks.size())
            throw new GatunRuntimeException("session '" + graph.name() + "' was compiled for a world of " + worldSize()
                    + " ranks and drives " + ranks.size() + " of them here, but got inputs for " + inputsPerRank.size());
        Map<String, Long> first = null;
        for (int i = 0; i < inputsPerRank.size(); i++) {
            int r = ranks.get(i);
            var env = validate(r, inputsPerRank.get(i));
            if (first == null) first = env;
            else if (!first.equals(env))
                throw new GatunRuntimeException("graph '" + graph.name() + "': rank " + r + " binds symbols " + env
                        + " but rank 0 binds " + first + "; every rank must call with the same shapes");
        }
        return executable.run(inputsPerRank);
    }

    /** Checks names, dtypes and shapes; returns the symbol bindings. */
    private Map<String, Long> validate(int rank, Map<String, NDArray> inputs) {
        var expected = graph.inputs().keySet();
        var missing = new TreeSet<>(expected);
        missing.removeAll(inputs.keySet());
        var unknown = new TreeSet<>(inputs.keySet());
        unknown.removeAll(expected);
        String who = "graph '" + graph.name() + "'" + (worldSize() > 1 ? " rank " + rank : "");
        if (!unknown.isEmpty()) throw new GatunRuntimeException(who + ": " + unknownInputs(unknown, missing, expected));
        if (!missing.isEmpty())
            throw new GatunRuntimeException(who + ": missing inputs " + missing + "; inputs are " + new TreeSet<>(expected));
        var env = new HashMap<String, Long>();
        for (Map.Entry<String, Node> e : graph.inputs().entrySet()) {
            NDArray a = inputs.get(e.getKey());
            if (a == null) throw new GatunRuntimeException(who + ": input '" + e.getKey() + "' is null");
            TensorType t = e.getValue().type();
            long[] shape = a.shape();
            if (a.dtype() != t.dtype())
                throw new GatunRuntimeException(who + ": input '" + e.getKey() + "' has dtype " + a.dtype() + " but the graph declares " + t);
            if (shape.length != t.rank())
                throw new GatunRuntimeException(who + ": input '" + e.getKey() + "' has shape " + Arrays.toString(shape) + " but the graph declares " + t);
            for (int d = 0; d < shape.length; d++) {
                Dim dim = t.shape().dim(d);
                if (dim.isStatic() && dim.size() != shape[d])
                    throw new GatunRuntimeException(who + ": input '" + e.getKey() + "' has shape " + Arrays.toString(shape) + " but the graph declares " + t);
                if (!dim.isStatic()) {
                    String sym = ((Dim.Sym) dim).name();
                    Long prev = env.putIfAbsent(sym, shape[d]);
                    if (prev != null && prev != shape[d])
                        throw new GatunRuntimeException(who + ": input '" + e.getKey() + "' dimension " + d + " binds '" + sym + "' to " + shape[d]
                                + " but an earlier input bound it to " + prev);
                }
            }
        }
        return env;
    }

    /**
     * "unknown input 'xx'; did you mean 'x'? inputs are [x]": a misspelled name is the usual cause of both an unknown
     * and a missing input, so each unknown name is matched to the closest declared one (missing ones first).
     */
    private static String unknownInputs(Set<String> unknown, Set<String> missing, Set<String> expected) {
        var named = new ArrayList<String>();
        for (String u : unknown) {
            String guess = Spelling.closest(u, missing);
            if (guess == null) guess = Spelling.closest(u, expected);
            String hint = guess == null ? "" : unknown.size() == 1 ? "; did you mean '" + guess + "'?" : " (did you mean '" + guess + "'?)";
            named.add("'" + u + "'" + hint);
        }
        String head = "unknown input" + (unknown.size() > 1 ? "s " : " ") + String.join(", ", named);
        return head + (head.endsWith("?") ? " " : "; ") + "inputs are " + new TreeSet<>(expected)
                + (missing.isEmpty() ? "" : "; missing inputs " + missing);
    }

    /**
     * Releases pools and threads; idempotent. From another thread while a call runs, the call is aborted first and
     * its end awaited, so no rank is left using memory that is being freed.
     */
    @Override public void close() {
        if (!closed.compareAndSet(false, true)) return;
        if (!running.tryLock()) {
            abort();
            running.lock();
        }
        try {
            executable.close();
        } finally {
            running.unlock();
        }
    }

    public boolean isClosed() { return closed.get(); }

    @Override public String toString() {
        return "Session \"" + graph.name() + "\" world=" + worldSize() + " backend=" + backend.name() + (closed.get() ? " (closed)" : "")
                + "\n" + plan;
    }
}
