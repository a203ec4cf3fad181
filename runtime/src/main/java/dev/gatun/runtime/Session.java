package dev.gatun.runtime;

import dev.gatun.ir.Dim;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.spi.Backend;
import dev.gatun.runtime.spi.Executable;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A compiled graph ready to run: compile once, call many times, close to release everything. With {@code graph} a
 * graph of input {@code x} and output {@code d}, and {@code x0}, {@code x1} each rank's {@link NDArray}:
 *
 * <pre>{@code
 * try (var s = Session.compile(graph, CompileOptions.world(2))) {
 *     // one map of inputs per rank; the outputs stay on each rank's device until the session's next call
 *     List<Map<String, DeviceArray>> out = s.run(List.of(Map.of("x", x0), Map.of("x", x1)));
 *     NDArray d0 = out.get(0).get("d").toHost();
 *     // or copied to the host inside the call
 *     List<Map<String, NDArray>> host = s.runToHost(List.of(Map.of("x", x0), Map.of("x", x1)));
 *     // inputs may already lie on the device, and a bound input need not be passed again
 *     DeviceArray x0OnDevice = s.toDevice(0, x0);
 *     s.bind(0, "x", x0OnDevice).bind(1, "x", x1);
 *     List<Map<String, NDArray>> again = s.runToHost(List.of(Map.of(), Map.of()));
 * }
 * }</pre>
 *
 * <p>A session compiled for one rank (or driving one rank of a launched world) takes and returns one map:
 * {@link #run(Map)}, {@link #runToHost(Map)}.
 *
 * <p><b>Ranks.</b> A session drives every rank of a simulated world (one input map per rank, as above), or one rank
 * of a world whose ranks are sessions of their own: threads of {@link dev.gatun.runtime.distributed.LocalWorld}
 * ({@link CompileOptions#rank}) or processes of gatun-run ({@link CompileOptions#world(int)} reads the launcher's
 * environment). Such a session runs its rank's plan, and its collectives meet the other ranks' for real: on a GPU
 * through symmetric memory and NCCL; on the host backend through shared memory on one host, else TCP (as PyTorch's
 * Gloo; {@link CompileOptions#hostTransport}), every rank getting the bits the simulated world computes. So the same
 * program runs on a laptop and on GPUs:
 *
 * <pre>{@code
 * LocalWorld.run(2, rv -> {
 *     try (var s = Session.compile(graph, CompileOptions.world(2).rank(rv))) {
 *         Map<String, NDArray> out = s.runToHost(Map.of("x", shards.get(rv.rank())));
 *     }
 * });
 * }</pre>
 * A peer that fails, leaves or never comes fails this rank's call within the timeout, naming it and the collective;
 * the session then cannot run again. Closing the session releases its files and sockets.
 *
 * <p><b>Threads.</b> A session may be called from several threads. Its calls, binds and close run one at a time (a
 * session owns one set of pools, staging buffers and rank threads; compile a second session to run two calls at
 * once). A call's outputs are that call's: {@link #runToHost} and {@link #runCopied} copy them inside the call, so
 * nothing comes between; the {@link DeviceArray}s {@link #run} returns are the session's memory, valid until its next
 * call or bind, whichever thread makes it. Reading one checks and copies it in one step that no call comes between:
 * it gives its own call's values, or, once another call has run, throws a {@link GatunRuntimeException} saying it was
 * overwritten, by which call and thread, and the fixes. Never another call's values.
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
    /** One call, bind or close at a time, and reads of outputs that no call comes between (see {@link CallLock}). */
    private final CallLock calls;
    private volatile boolean aborted;

    private Session(Graph graph, CompileOptions options) {
        this.graph = graph;
        this.calls = new CallLock(graph.name());
        this.backend = chooseBackend(options.backend(), options);
        this.options = backend.adapt(options);
        this.lowered = Lowering.lower(graph, this.options.lowering());
        // -Dgatun.verbose=true (or GATUN_VERBOSE=1) prints every lowering decision; otherwise they go to DEBUG
        boolean verbose = this.options.execution().verbose();
        for (String d : lowered.decisions()) LOG.log(verbose ? System.Logger.Level.INFO : System.Logger.Level.DEBUG, "{0}: {1}", graph.name(), d);
        if (verbose) LOG.log(System.Logger.Level.INFO, "{0}", lowered.explain());
        this.plan = Planner.plan(lowered, this.options.planning().withCommGranularity(backend.commGranularity()));
        this.executable = backend.load(plan, this.options);
        // a state is never passed: it counts as bound from the start (zeros until bind sets it)
        for (int i = 0; i < executable.ranks().size(); i++) {
            bound.add(new java.util.HashSet<>(graph.states()));
            inPlace.add(new HashMap<>());
        }
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

    /** Why each collective took its path, and which all_to_alls run as one barrier pair ({@link Plan#explain()}). */
    public String explain() { return plan.explain(); }

    /** The kernels as the backend runs them: CUDA C on the CUDA backend, the kernel IR on the host. */
    public String generatedSource() { return backend.generatedSource(plan); }

    /** The ranks this process drives: every rank when they are simulated, its own one when each process is a rank. */
    public List<Integer> ranks() { return executable.ranks(); }

    /** Where this session's arrays live: "cuda:0", "host" (the first rank's device where it drives several). */
    public String device() { return executable.device(0); }

    /**
     * Runs the one rank this process drives (a world of one, or one process of a distributed world). Inputs may mix
     * host {@link NDArray}s and {@link DeviceArray}s; outputs stay on the device, valid until this session's next call
     * or bind ({@link DeviceArray#copy()} keeps one longer, {@link DeviceArray#toHost()} reads it). The call may still
     * run on the GPU when this returns: reading an output, or passing it to another session, is ordered after it.
     * Where other threads call this session too, one of them may run before this thread reads an output, which is then
     * refused as overwritten (never read): use {@link #runToHost(Map)} or {@link #runCopied(Map)} there.
     */
    public Map<String, DeviceArray> run(Map<String, ? extends ArrayLike> inputs) {
        checkOneRank();
        return run(List.of(inputs)).getFirst();
    }

    /**
     * Runs every rank this process drives: one input map per rank, one output map per rank, valid until this
     * session's next call or bind.
     *
     * <p>Calls on one session run one at a time: a session owns one set of pools, staging buffers and rank
     * threads, so a second thread's call waits until the first has returned (compile a second session to run
     * two calls at once). See the class comment for what holds for outputs when several threads call.
     */
    public List<Map<String, DeviceArray>> run(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return calls.exclusive(() -> handOut(call(inputsPerRank)));
    }

    /**
     * {@link #run(Map)} with every output copied to the host inside the call (waits for the call to end): no other
     * thread's call comes between the call and its copies.
     */
    public Map<String, NDArray> runToHost(Map<String, ? extends ArrayLike> inputs) {
        checkOneRank();
        return runToHost(List.of(inputs)).getFirst();
    }

    /**
     * Runs one call of the one rank this process drives and times each of its plan's steps on the device (see
     * {@link Profile}): where the time of a call goes, step by step as the plan prints them. The call's outputs are not
     * returned; run it again for them.
     */
    public Profile profile(Map<String, ? extends ArrayLike> inputs) { return profile(List.of(inputs)); }

    /** {@link #profile(Map)} for every rank this process drives, timing the first. */
    public Profile profile(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return calls.exclusive(() -> {
            var checked = checkedCall(inputsPerRank);
            calls.call();
            return new Profile(plan, device(), executable.profile(checked));
        });
    }

    /** {@link #run(List)} with every output copied to the host inside the call (waits for the call to end). */
    public List<Map<String, NDArray>> runToHost(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return calls.exclusive(() -> {
            var out = new ArrayList<Map<String, NDArray>>();
            for (var m : call(inputsPerRank).outputs()) {
                var host = new LinkedHashMap<String, NDArray>();
                m.forEach((k, v) -> host.put(k, v.toHost()));
                out.add(host);
            }
            return out;
        });
    }

    /**
     * {@link #run(Map)} with every output copied on the device inside the call, into memory the caller owns (as
     * {@link DeviceArray#copy()}; close them when done): outputs that stay on the device and that no later call, of
     * this thread or another, overwrites.
     */
    public Map<String, DeviceArray> runCopied(Map<String, ? extends ArrayLike> inputs) {
        checkOneRank();
        return runCopied(List.of(inputs)).getFirst();
    }

    /** {@link #run(List)} with every output copied on the device inside the call, into memory the caller owns. */
    public List<Map<String, DeviceArray>> runCopied(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return calls.exclusive(() -> {
            Call c = call(inputsPerRank);
            var out = new ArrayList<Map<String, DeviceArray>>();
            try {
                for (int i = 0; i < c.outputs().size(); i++) {
                    var copies = new LinkedHashMap<String, DeviceArray>();
                    out.add(copies);
                    for (var e : c.outputs().get(i).entrySet())
                        copies.put(e.getKey(), e.getValue().asOutput(null, origin(e.getKey(), i, c.number())).copy());
                }
            } catch (RuntimeException e) {
                for (var m : out) m.values().forEach(DeviceArray::close);   // nothing half-made is left behind
                throw e;
            }
            return out;
        });
    }

    private void checkOneRank() {
        if (ranks().size() != 1)
            throw new GatunRuntimeException("session '" + graph.name() + "' drives " + ranks().size()
                    + " ranks in this process; pass one input map per rank");
    }

    /** One call made inside the call lock: its number, and the backend's outputs (this call's until the lock goes). */
    private record Call(long number, List<Map<String, DeviceArray>> outputs) {}

    /**
     * Runs one call; the caller holds the call lock. Other sessions' outputs among its inputs (passed or bound in
     * place) are held from their sessions' calls while it reads them ({@link CallLock#holdSources}).
     */
    private Call call(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        var checked = checkedCall(inputsPerRank);
        var read = new java.util.LinkedHashMap<String, DeviceArray>();
        for (int i = 0; i < checked.size(); i++) {
            int rank = ranks().get(i);
            checked.get(i).forEach((name, a) -> { if (a instanceof DeviceArray d) read.put(who(rank) + ": input '" + name + "': " + d.origin(), d); });
            inPlace.get(i).forEach((name, d) -> read.put(who(rank) + ": input '" + name + "' (bound in place): " + d.origin(), d));
        }
        long number = calls.call();   // marked before sources are taken, so a session waiting for this one's refuses
        try (var sources = calls.holdSources(read, Session::refused)) {
            return new Call(number, executable.run(checked));
        }
    }

    private static GatunRuntimeException refused(String what, String why) { return new GatunRuntimeException(what + " " + why); }

    /** The inputs of a call checked, and the session able to run it. */
    private List<Map<String, ArrayLike>> checkedCall(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        if (aborted && !closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' was aborted and cannot run again; compile a new one");
        return checkInputs(inputsPerRank);
    }

    /** A call's outputs as the session hands them out: stamped with the call, so reading one is checked against later calls. */
    private List<Map<String, DeviceArray>> handOut(Call c) {
        CallLock.Stamp stamp = calls.stamp();
        var out = new ArrayList<Map<String, DeviceArray>>();
        for (int i = 0; i < c.outputs().size(); i++) {
            var m = new LinkedHashMap<String, DeviceArray>();
            int rank = i;
            c.outputs().get(i).forEach((name, d) -> m.put(name, d.asOutput(stamp, origin(name, rank, c.number()))));
            out.add(m);
        }
        return out;
    }

    /** "output 'y' of plan 'mlp' rank 1, call 3" */
    private String origin(String output, int rankIndex, long call) {
        return "output '" + output + "' of plan '" + plan.name() + "'" + (worldSize() > 1 ? " rank " + ranks().get(rankIndex) : "") + ", call " + call;
    }

    /**
     * Waits until every call and copy this session queued on its device is done (as {@code torch.cuda.synchronize()}
     * for one stream): what a benchmark or a hand-off to code that does not order by stream needs. Reading an output
     * never needs it.
     */
    public void synchronize() {
        checkOpen("synchronize");
        executable.synchronize();
    }

    /**
     * {@link #run(Map)} on a thread of the session's own, so the caller overlaps host work with it: the future
     * completes once the outputs are ready on the device (or with the call's failure). Calls still run one at a time,
     * and the outputs are {@link #run(Map)}'s: valid until the session's next call or bind.
     */
    public java.util.concurrent.CompletableFuture<Map<String, DeviceArray>> runAsync(Map<String, ? extends ArrayLike> inputs) {
        var copy = Map.<String, ArrayLike>copyOf(inputs);
        return java.util.concurrent.CompletableFuture.supplyAsync(() -> {
            var out = run(copy);
            for (DeviceArray a : out.values()) a.memory().await();
            return out;
        }, asyncThread());
    }

    private java.util.concurrent.ExecutorService async;

    private synchronized java.util.concurrent.ExecutorService asyncThread() {
        if (closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' is closed");
        if (async == null)
            async = java.util.concurrent.Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon(true).name("gatun-async-" + graph.name()).factory());
        return async;
    }

    // ------------------------------------------------------------------ arrays

    /**
     * Binds {@code input} for every later call: it is no longer passed to {@link #run}. The value, host or device array,
     * is copied once, now, into memory the session owns and keeps resident (no copy per call); later changes to
     * {@code value} are not seen, and it may be closed. Binding again replaces the value; {@link #unbind} undoes it.
     * In a session that drives several ranks, this binds the first of them ({@link #ranks()}); a rank's own process
     * drives only itself.
     */
    public Session bind(String input, ArrayLike value) { return bind(ranks().getFirst(), input, value); }

    /** {@link #bind(String, ArrayLike)} for one rank of a session that drives several ({@code rank} in {@link #ranks()}). */
    public Session bind(int rank, String input, ArrayLike value) {
        java.util.Objects.requireNonNull(value, "bind(\"" + input + "\"): the value is null; unbind(name) removes a binding");
        return bind(rank, Map.of(input, value));
    }

    /**
     * {@link #bind(int, String, ArrayLike)} of several inputs of one rank at once: on a GPU the copies are queued
     * together and waited for once (binding a decode session's caches from a prefill's outputs, say). Every name and
     * value is checked before anything is bound.
     */
    public Session bind(int rank, Map<String, ? extends ArrayLike> values) {
        return calls.exclusive(() -> {
            int i = rankIndex("bind", rank);
            for (var e : values.entrySet()) {
                String input = e.getKey();
                java.util.Objects.requireNonNull(e.getValue(), "bind(\"" + input + "\"): the value is null; unbind(name) removes a binding");
                String who = who(rank) + " bind(\"" + input + "\")";
                checkInput(who, input, bindable(who, input).type(), e.getValue(), i, new HashMap<>());
            }
            var read = new java.util.LinkedHashMap<String, DeviceArray>();
            values.forEach((name, a) -> { if (a instanceof DeviceArray d) read.put(who(rank) + " bind(\"" + name + "\"): " + d.origin(), d); });
            calls.writes("bound " + (values.size() == 1 ? "input '" + values.keySet().iterator().next() + "'" : "inputs " + new TreeSet<>(values.keySet()))
                    + (worldSize() > 1 ? " of rank " + rank : ""));
            try (var sources = calls.holdSources(read, Session::refused)) {
                executable.bind(i, values);
            }
            bound.get(i).addAll(values.keySet());
            values.keySet().forEach(inPlace.get(i)::remove);
            return this;
        });
    }

    /**
     * Binds {@code input} to {@code array} itself: every later call reads it where it lies, with no copy now or per call
     * and no staging buffer (PyTorch's static inputs of a CUDA graph; the weights that two sessions share). A call reads
     * the array's contents as they are when the call's work runs, in order after the work that writes it
     * ({@link DeviceArray#copyFrom} between calls changes what the next call reads). The array must be on this
     * session's device, contiguous, of the input's dtype and shape, and no output of this session (the next call
     * overwrites those); the caller keeps it open while it is bound (a closed one fails the next call, naming the
     * input). Binding again, by either method, replaces it; {@link #unbind} makes it an input again. In a session that
     * drives several ranks this binds the first of them.
     */
    public Session bindInPlace(String input, DeviceArray array) { return bindInPlace(ranks().getFirst(), input, array); }

    /** {@link #bindInPlace(String, DeviceArray)} for one rank of a session that drives several. */
    public Session bindInPlace(int rank, String input, DeviceArray array) {
        java.util.Objects.requireNonNull(array, "bindInPlace(\"" + input + "\"): the array is null; unbind(name) removes a binding");
        return calls.exclusive(() -> {
            int i = rankIndex("bindInPlace", rank);
            String who = who(rank) + " bindInPlace(\"" + input + "\")";
            if (graph.states().contains(input)) throw new GatunRuntimeException(who + ": " + stateProblem(input));
            if (array.isOutputOf(calls))
                throw new GatunRuntimeException(who + ": " + array.origin() + " is an output of this session, which its next call overwrites; copy() it first");
            checkInput(who, input, bindable(who, input).type(), array, i, new HashMap<>());
            if (!array.isContiguous())
                throw new GatunRuntimeException(who + ": " + array.origin() + " is a strided view; an input read in place must be contiguous (copy() it)");
            calls.writes("bound input '" + input + "' in place" + (worldSize() > 1 ? " on rank " + rank : ""));
            executable.bindInPlace(i, input, array);
            bound.get(i).add(input);
            inPlace.get(i).put(input, array);
            return this;
        });
    }

    /** The declaration of {@code input}, which may be bound: it exists (else the closest name is suggested) and is static. */
    private Node bindable(String who, String input) {
        Node decl = graph.inputs().get(input);
        if (decl == null) {
            String guess = Spelling.closest(input, graph.inputs().keySet());
            throw new GatunRuntimeException(who + ": no such input" + (guess == null ? "" : "; did you mean '" + guess + "'?")
                    + " inputs are " + new TreeSet<>(graph.inputs().keySet()));
        }
        if (!decl.type().shape().isStatic())
            throw new GatunRuntimeException(who + ": the input's shape " + decl.type() + " is symbolic; only inputs of static shape can be bound");
        return decl;
    }

    /** Removes the binding of {@code input} (on every rank this session drives); it must be passed to run again. */
    public Session unbind(String input) {
        if (graph.states().contains(input))
            throw new GatunRuntimeException("unbind(\"" + input + "\"): '" + input + "' is a state of graph '" + graph.name()
                    + "', which the session always keeps; bind zeros (or any value) to reset it");
        return calls.exclusive(() -> {
            calls.writes("unbound input '" + input + "'");
            for (int i = 0; i < ranks().size(); i++) {
                if (bound.get(i).remove(input)) executable.bind(i, input, null);
                inPlace.get(i).remove(input);
            }
            return this;
        });
    }

    /** The inputs bound on the first rank this session drives. */
    public Set<String> boundInputs() { return java.util.Collections.unmodifiableSet(new TreeSet<>(bound.getFirst())); }

    /**
     * A zeroed host array in page-locked (pinned) memory, which the GPU reads and writes at full speed without a staging
     * copy: the fast way to feed inputs from the host and to receive outputs ({@code out.copyTo(pinned)}). Given as an
     * input, it is read by the copy engine after {@code run} returns (as PyTorch's {@code non_blocking} copies are): change
     * it only once an output of that call was read, or after {@link #synchronize()}. An ordinary host array is copied
     * before {@code run} returns and may be changed at once. Freed when the session closes; using it afterwards is an
     * error, not a crash. On the host backend it is an ordinary array.
     */
    public NDArray allocateHost(dev.gatun.ir.DType dtype, long... shape) {
        checkOpen("allocateHost");
        java.util.Objects.requireNonNull(dtype, "allocateHost: dtype");
        for (long d : shape) if (d < 0) throw new GatunRuntimeException("allocateHost: negative dimension in " + Arrays.toString(shape));
        return executable.allocateHost(0, dtype, shape.clone());
    }

    /** A copy of {@code host} on this session's device, owned by the session until it, or the array, is closed. */
    public DeviceArray toDevice(NDArray host) { return toDevice(ranks().getFirst(), host); }

    /** {@link #toDevice(NDArray)} on the device of one rank this session drives. */
    public DeviceArray toDevice(int rank, NDArray host) {
        checkOpen("toDevice");
        return executable.toDevice(rankIndex("toDevice", rank), java.util.Objects.requireNonNull(host, "toDevice: the array is null"));
    }

    /**
     * Views memory another library allocated on this session's device ({@code address}: its first element, row-major).
     * Gatun never frees it: {@code release} runs when the array is closed (null where the caller keeps ownership and
     * frees it after closing the array and any session reading it).
     */
    public DeviceArray wrap(long address, dev.gatun.ir.DType dtype, long[] shape, Runnable release) {
        checkOpen("wrap");
        if (address == 0) throw new GatunRuntimeException("wrap: the address is null (0)");
        java.util.Objects.requireNonNull(dtype, "wrap: dtype");
        return executable.wrap(0, address, dtype, shape.clone(), release);
    }

    private void checkOpen(String op) {
        if (closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' is closed: " + op + " needs an open session");
    }

    private int rankIndex(String op, int rank) {
        int i = ranks().indexOf(rank);
        if (i < 0) throw new GatunRuntimeException(op + ": rank " + rank + " is not driven by session '" + graph.name() + "' here; it drives " + ranks());
        return i;
    }

    private String who(int rank) { return "graph '" + graph.name() + "'" + (worldSize() > 1 ? " rank " + rank : ""); }

    /** The inputs bound per rank index. */
    private final List<Set<String>> bound = new ArrayList<>();
    /** The arrays bound in place per rank index, which every call reads where they lie. */
    private final List<Map<String, DeviceArray>> inPlace = new ArrayList<>();

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

    /** The inputs of every rank checked (names, dtypes, shapes, devices; the same symbols on every rank). */
    private List<Map<String, ArrayLike>> checkInputs(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        if (closed.get()) throw new GatunRuntimeException("session '" + graph.name() + "' is closed");
        var ranks = ranks();
        if (inputsPerRank.size() != ranks.size())
            throw new GatunRuntimeException("session '" + graph.name() + "' was compiled for a world of " + worldSize()
                    + " ranks and drives " + ranks.size() + " of them here, but got inputs for " + inputsPerRank.size());
        Map<String, Long> first = null;
        var checked = new ArrayList<Map<String, ArrayLike>>(inputsPerRank.size());
        for (int i = 0; i < inputsPerRank.size(); i++) {
            int r = ranks.get(i);
            var in = inputsPerRank.get(i);
            if (in == null) throw new GatunRuntimeException(who(r) + ": the input map is null");
            var env = validate(r, i, in);
            if (first == null) first = env;
            else if (!first.equals(env))
                throw new GatunRuntimeException("graph '" + graph.name() + "': rank " + r + " binds symbols " + env
                        + " but rank 0 binds " + first + "; every rank must call with the same shapes");
            @SuppressWarnings("unchecked") var typed = (Map<String, ArrayLike>) in;
            checked.add(typed);
        }
        return checked;
    }

    /** Checks names, dtypes, shapes and devices; returns the symbol bindings. */
    private Map<String, Long> validate(int rank, int index, Map<String, ? extends ArrayLike> inputs) {
        var decls = graph.inputs();
        var isBound = bound.get(index);
        String who = who(rank);
        // the common case first, without building sets: exactly the unbound inputs, each present
        if (inputs.size() + isBound.size() != decls.size() || !decls.keySet().containsAll(inputs.keySet()))
            throw new GatunRuntimeException(who + ": " + nameProblem(inputs.keySet(), isBound));
        var env = new HashMap<String, Long>();
        for (var e : inputs.entrySet()) {
            String name = e.getKey();
            if (graph.states().contains(name)) throw new GatunRuntimeException(who + ": " + stateProblem(name));
            if (isBound.contains(name))
                throw new GatunRuntimeException(who + ": input '" + name + "' is bound (Session.bind); bind it again to change it, or unbind it to pass it here");
            checkInput(who, name, decls.get(name).type(), e.getValue(), index, env);
        }
        return env;
    }

    private String stateProblem(String name) {
        return "'" + name + "' is a state of graph '" + graph.name() + "': the session keeps it between calls and it is never passed;"
                + " set it with bind(\"" + name + "\", value), read it by making its last update an output";
    }

    /** The names passed do not match the declared unbound inputs: says which are unknown, missing or bound. */
    private String nameProblem(Set<String> given, Set<String> isBound) {
        var expected = new TreeSet<>(graph.inputs().keySet());
        expected.removeAll(isBound);
        var missing = new TreeSet<>(expected);
        missing.removeAll(given);
        var unknown = new TreeSet<>(given);
        unknown.removeAll(graph.inputs().keySet());
        var twice = new TreeSet<>(given);
        twice.retainAll(isBound);
        if (!unknown.isEmpty()) return unknownInputs(unknown, missing, expected);
        for (String s : given) if (graph.states().contains(s)) return stateProblem(s);
        if (twice.size() == 1) return "input '" + twice.first() + "' is bound (Session.bind); bind it again to change it, or unbind it to pass it here";
        if (!twice.isEmpty()) return "inputs " + twice + " are bound (Session.bind); bind them again to change them, or unbind them to pass them here";
        return "missing inputs " + missing + "; inputs are " + expected + (isBound.isEmpty() ? "" : " (bound: " + new TreeSet<>(isBound) + ")");
    }

    private void checkInput(String who, String name, TensorType t, ArrayLike a, int index, Map<String, Long> env) {
        if (a == null) throw new GatunRuntimeException(who + ": input '" + name + "' is null");
        if (a instanceof DeviceArray d) {
            String why = d.whyUnusable();
            if (why != null) throw new GatunRuntimeException(who + ": input '" + name + "': " + why);
            String dev = executable.device(index);
            if (!d.device().equals(dev))
                throw new GatunRuntimeException(who + ": input '" + name + "' is an array on " + d.device() + " but the session runs on " + dev
                        + "; toHost() it, or pass an array of this session's device");
        }
        long[] shape = a.shape();
        if (a.dtype() != t.dtype())
            throw new GatunRuntimeException(who + ": input '" + name + "' has dtype " + a.dtype() + " but the graph declares " + t);
        if (shape.length != t.rank())
            throw new GatunRuntimeException(who + ": input '" + name + "' has shape " + Arrays.toString(shape) + " but the graph declares " + t);
        for (int d = 0; d < shape.length; d++) {
            Dim dim = t.shape().dim(d);
            if (dim.isStatic() && dim.size() != shape[d])
                throw new GatunRuntimeException(who + ": input '" + name + "' has shape " + Arrays.toString(shape) + " but the graph declares " + t);
            if (!dim.isStatic()) {
                String sym = ((Dim.Sym) dim).name();
                Long prev = env.putIfAbsent(sym, shape[d]);
                if (prev != null && prev != shape[d])
                    throw new GatunRuntimeException(who + ": input '" + name + "' dimension " + d + " binds '" + sym + "' to " + shape[d]
                            + " but an earlier input bound it to " + prev);
            }
        }
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
        if (!calls.tryEnter()) {
            if (calls.isHeldAlone()) abort();   // a call in flight; a thread reading an output is only waited for
            calls.enter();
        }
        try {
            calls.writes("close");
            executable.close();
        } finally {
            calls.exit();
            synchronized (this) {
                if (async != null) async.shutdown();
            }
        }
    }

    public boolean isClosed() { return closed.get(); }

    @Override public String toString() {
        return "Session \"" + graph.name() + "\" world=" + worldSize() + " backend=" + backend.name() + (closed.get() ? " (closed)" : "")
                + "\n" + plan;
    }
}
