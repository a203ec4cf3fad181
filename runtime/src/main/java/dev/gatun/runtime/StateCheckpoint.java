package dev.gatun.runtime;

import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeSet;

/**
 * A graph's states (weights, optimizer moments, step counts: {@code GraphBuilder.state}) saved a file a rank and bound
 * again to resume, as PyTorch's distributed checkpoints save each rank's shards: {@link #save} writes rank r's states
 * to {@code DIR/states-rank0000r-of-0000N.safetensors} with the graph's name and the world in its metadata;
 * {@link #load} reads them back, checking the file is this graph's at this world and rank and that it holds every
 * state with the graph's dtype and shape and nothing else, and {@code session.bind(rank, loaded)} resumes. The bytes
 * are written and read as they are, so a resumed run continues bit for bit.
 *
 * <pre>{@code
 * var out = session.runToHost(perRank);                  // a training graph that outputs its states (LlamaTraining's outputStates)
 * for (int r = 0; r < world; r++) StateCheckpoint.save(dir, graph, r, world, out.get(r));
 * ...
 * for (int r = 0; r < world; r++) resumed.bind(r, StateCheckpoint.load(dir, graph, r, world));
 * }</pre>
 *
 * <p><b>Resharding</b> to another world size ({@link #reshard}): where each state is held whole or as rank r's block of
 * dimension 0 over the whole world (FSDP over {@code "world"}, PyTorch's {@code Shard(0)} placement), {@link #loadWhole}
 * puts every rank's file together into the whole states (a block per rank, concatenated in rank order; a whole state
 * must be the same bytes on every rank) and {@link #shard} cuts them for a graph at any world size whose states are
 * whole or blocks of dimension 0: the bytes are moved, never recomputed, so the resumed run is the run at the new world
 * from exactly the saved values. Which states are blocks is told by the shapes of a graph whose states are all whole
 * (the world-1 step). States sharded over a mesh axis (TP x FSDP) or any other group are refused by name.
 */
public final class StateCheckpoint {
    private StateCheckpoint() {}

    /** The metadata key listing the saving graph's process groups (none for a graph over the whole world only). */
    private static final String GROUPS = "groups";

    /** The file of rank {@code rank} of {@code world} in {@code dir}. */
    public static Path file(Path dir, int rank, int world) {
        checkRank(rank, world);
        return dir.resolve(String.format(java.util.Locale.ROOT, "states-rank%05d-of-%05d.safetensors", rank, world));
    }

    /**
     * Writes rank {@code rank}'s states: each of {@code graph}'s states taken from {@code values} (a call's outputs
     * under the states' names, or arrays of the states' types); a missing one or one of another type is refused, naming it.
     */
    public static Path save(Path dir, Graph graph, int rank, int world, Map<String, NDArray> values) {
        Path file = file(dir, rank, world);
        var tensors = new LinkedHashMap<String, NDArray>();
        for (String name : graph.states()) {
            NDArray v = values.get(name);
            if (v == null)
                throw new GatunRuntimeException("StateCheckpoint.save: graph '" + graph.name() + "' has state '" + name
                        + "' but rank " + rank + "'s values do not hold it (output the states, e.g. TrainStep.states())");
            check("save", graph, name, v, rank);
            tensors.put(name, v);
        }
        try {
            Files.createDirectories(dir);
            SafeTensors.write(file, tensors, Map.of("graph", graph.name(), "world", Integer.toString(world), "rank", Integer.toString(rank),
                    GROUPS, String.join(",", meshGroups(graph))));
        } catch (IOException e) {
            throw new GatunRuntimeException("StateCheckpoint.save: " + file + ": " + e.getMessage(), e);
        }
        return file;
    }

    /**
     * Rank {@code rank}'s states from {@code dir}, in memory of their own (the file is closed), ready for
     * {@code session.bind(rank, ...)}. A file of another graph, world or rank, a missing or extra tensor, or one of
     * another dtype or shape is refused, naming it.
     */
    public static Map<String, NDArray> load(Path dir, Graph graph, int rank, int world) {
        var out = read("load", dir, graph, rank, world);
        for (var e : out.entrySet()) check("load", graph, e.getKey(), e.getValue(), rank);
        return out;
    }

    /**
     * Rank {@code rank}'s file read into memory of its own (the file is closed): checked to be {@code graph}'s (by name)
     * at this world and rank and to hold exactly its states, by name, in the graph's order; shapes are not checked here.
     */
    private static Map<String, NDArray> read(String call, Path dir, Graph graph, int rank, int world) {
        Path file = file(dir, rank, world);
        if (!Files.isRegularFile(file))
            throw new GatunRuntimeException("StateCheckpoint." + call + ": no file " + file + " for rank " + rank + " of " + world);
        try (var st = SafeTensors.open(file)) {
            var meta = st.metadata();
            if (!graph.name().equals(meta.get("graph")) || !Integer.toString(world).equals(meta.get("world")) || !Integer.toString(rank).equals(meta.get("rank")))
                throw new GatunRuntimeException("StateCheckpoint." + call + ": " + file + " holds graph '" + meta.get("graph") + "' rank " + meta.get("rank")
                        + " of " + meta.get("world") + ", not graph '" + graph.name() + "' rank " + rank + " of " + world);
            if (call.equals("loadWhole") && meta.get(GROUPS) != null && !meta.get(GROUPS).isEmpty())
                throw new GatunRuntimeException("StateCheckpoint.loadWhole: " + file + " was saved by a graph with process groups [" + meta.get(GROUPS)
                        + "] (a mesh); resharding knows states held whole or in blocks over the whole world only (FSDP over \"world\"); resume at the saved world with load");
            var extra = new TreeSet<>(st.names());
            extra.removeAll(graph.states());
            if (!extra.isEmpty())
                throw new GatunRuntimeException("StateCheckpoint." + call + ": " + file + " holds " + extra + ", which are not states of graph '" + graph.name() + "'");
            var out = new LinkedHashMap<String, NDArray>();
            for (String name : graph.states()) {
                if (!st.contains(name))
                    throw new GatunRuntimeException("StateCheckpoint." + call + ": " + file + " has no tensor for state '" + name + "' of graph '" + graph.name() + "'");
                NDArray v = st.get(name);
                NDArray own = NDArray.zeros(v.dtype(), v.shape());   // the bytes as they are: the file closes now
                java.lang.foreign.MemorySegment.copy(v.segment(), 0, own.segment(), 0, v.byteSize());
                out.put(name, own);
            }
            return out;
        } catch (IOException e) {
            throw new GatunRuntimeException("StateCheckpoint." + call + ": " + file + ": " + e.getMessage(), e);
        }
    }

    /**
     * Rank {@code rank}'s states for {@code graph} at {@code world} from the files of a run saved at {@code savedWorld}
     * ranks: {@link #shard} of {@link #loadWhole}. {@code whole} is a graph of the same model whose states are all
     * whole (the world-1 step), of the name the files were saved under.
     */
    public static Map<String, NDArray> reshard(Path dir, int savedWorld, Graph whole, Graph graph, int rank, int world) {
        return shard(graph, loadWhole(dir, whole, savedWorld), rank, world);
    }

    /**
     * Every state whole from the files of a run at {@code savedWorld} ranks. For each state of {@code whole} (whose
     * states are all whole: it gives their dtypes and shapes) the ranks' tensors must all be its shape (held whole:
     * the same bytes on every rank, else refused naming the ranks) or all its shape with dimension 0 divided by
     * {@code savedWorld} (blocks: concatenated in rank order); anything else is refused naming the state.
     */
    public static Map<String, NDArray> loadWhole(Path dir, Graph whole, int savedWorld) {
        var ranks = new java.util.ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < savedWorld; r++) ranks.add(read("loadWhole", dir, whole, r, savedWorld));
        var out = new LinkedHashMap<String, NDArray>();
        for (String name : whole.states()) {
            TensorType t = staticType("loadWhole", whole, name);
            long[] full = t.shape().sizes();
            var parts = new java.util.ArrayList<NDArray>();
            for (var rank : ranks) parts.add(rank.get(name));
            NDArray first = parts.getFirst();
            for (int r = 0; r < savedWorld; r++)
                if (parts.get(r).dtype() != t.dtype() || !Arrays.equals(parts.get(r).shape(), first.shape()))
                    throw new GatunRuntimeException("StateCheckpoint.loadWhole: state '" + name + "' is " + describe(first) + " on rank 0 but "
                            + describe(parts.get(r)) + " on rank " + r + " (the whole state is " + t + ")");
            if (Arrays.equals(first.shape(), full)) {
                for (int r = 1; r < savedWorld; r++)
                    if (!parts.get(r).equals(first))
                        throw new GatunRuntimeException("StateCheckpoint.loadWhole: state '" + name + "' is whole (" + t + ") on every rank but rank " + r
                                + "'s values differ from rank 0's; a state held whole must be the same on every rank");
                out.put(name, first);
            } else if (full.length > 0 && Arrays.equals(blockShape(full, savedWorld), first.shape())) {
                out.put(name, NDArray.concat(0, parts));
            } else {
                throw new GatunRuntimeException("StateCheckpoint.loadWhole: state '" + name + "' is " + describe(first) + " on each of " + savedWorld
                        + " ranks, neither the whole state " + t + " nor a block of 1/" + savedWorld + " of its dimension 0");
            }
        }
        return out;
    }

    /**
     * Rank {@code rank}'s states for {@code graph} at {@code world} cut from the whole states: a state the graph holds
     * whole is passed as it is, one whose dimension 0 is 1/{@code world} of the whole is rank {@code rank}'s block of it
     * (the world's FSDP layout); a missing or extra state, another dtype or any other shape is refused naming it, as is a
     * graph with process groups (a mesh axis's blocks are not the world's).
     */
    public static Map<String, NDArray> shard(Graph graph, Map<String, NDArray> whole, int rank, int world) {
        checkRank(rank, world);
        if (graph.worldSize() != null && graph.worldSize() != world)
            throw new GatunRuntimeException("StateCheckpoint.shard: graph '" + graph.name() + "' is declared for " + graph.worldSize() + " ranks, not " + world);
        if (!meshGroups(graph).isEmpty())
            throw new GatunRuntimeException("StateCheckpoint.shard: graph '" + graph.name() + "' has process groups " + meshGroups(graph)
                    + " (a mesh); resharding cuts states whole or in blocks over the whole world only (FSDP over \"world\")");
        var extra = new TreeSet<>(whole.keySet());
        extra.removeAll(graph.states());
        if (!extra.isEmpty()) throw new GatunRuntimeException("StateCheckpoint.shard: " + extra + " are not states of graph '" + graph.name() + "'");
        var out = new LinkedHashMap<String, NDArray>();
        for (String name : graph.states()) {
            TensorType t = staticType("shard", graph, name);
            NDArray v = whole.get(name);
            if (v == null) throw new GatunRuntimeException("StateCheckpoint.shard: no whole value for state '" + name + "' of graph '" + graph.name() + "'");
            long[] mine = t.shape().sizes();
            if (v.dtype() == t.dtype() && Arrays.equals(v.shape(), mine)) out.put(name, v);
            else if (v.dtype() == t.dtype() && v.shape().length > 0 && Arrays.equals(blockShape(v.shape(), world), mine))
                out.put(name, v.slice(0, rank * mine[0], (rank + 1) * mine[0]));
            else throw new GatunRuntimeException("StateCheckpoint.shard: state '" + name + "' of graph '" + graph.name() + "' is " + t + " on rank " + rank
                        + " of " + world + ", neither the whole value " + describe(v) + " nor a block of 1/" + world + " of its dimension 0");
        }
        return out;
    }

    private static void checkRank(int rank, int world) {
        if (world < 1 || rank < 0 || rank >= world)
            throw new GatunRuntimeException("StateCheckpoint: rank " + rank + " is not a rank of a world of " + world);
    }

    /** The graph's process groups other than the whole world: mesh axes and named groups. */
    private static TreeSet<String> meshGroups(Graph graph) {
        var out = new TreeSet<>(graph.groups().keySet());
        out.remove(dev.gatun.ir.graph.ProcessGroup.WORLD_NAME);
        return out;
    }

    /** {@code full} with dimension 0 divided by {@code n}, or null where it does not divide. */
    private static long[] blockShape(long[] full, int n) {
        if (full[0] % n != 0) return null;
        long[] b = full.clone();
        b[0] /= n;
        return b;
    }

    private static String describe(NDArray v) { return v.dtype().shortName() + Arrays.toString(v.shape()); }

    private static TensorType staticType(String call, Graph graph, String name) {
        TensorType t = graph.inputs().get(name).type();
        if (!t.shape().isStatic())
            throw new GatunRuntimeException("StateCheckpoint." + call + ": state '" + name + "' has a symbolic shape " + t.shape());
        return t;
    }

    private static void check(String call, Graph graph, String name, NDArray v, int rank) {
        TensorType t = graph.inputs().get(name).type();
        if (!t.shape().isStatic())
            throw new GatunRuntimeException("StateCheckpoint." + call + ": state '" + name + "' has a symbolic shape " + t.shape());
        if (v.dtype() != t.dtype() || !Arrays.equals(v.shape(), t.shape().sizes()))
            throw new GatunRuntimeException("StateCheckpoint." + call + ": state '" + name + "' of graph '" + graph.name() + "' is " + t
                    + " on rank " + rank + ", but the tensor is " + v.dtype().shortName() + Arrays.toString(v.shape()));
    }
}
