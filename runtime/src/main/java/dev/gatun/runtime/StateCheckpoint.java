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
 */
public final class StateCheckpoint {
    private StateCheckpoint() {}

    /** The file of rank {@code rank} of {@code world} in {@code dir}. */
    public static Path file(Path dir, int rank, int world) {
        if (world < 1 || rank < 0 || rank >= world)
            throw new GatunRuntimeException("StateCheckpoint: rank " + rank + " is not a rank of a world of " + world);
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
            SafeTensors.write(file, tensors, Map.of("graph", graph.name(), "world", Integer.toString(world), "rank", Integer.toString(rank)));
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
        Path file = file(dir, rank, world);
        if (!Files.isRegularFile(file))
            throw new GatunRuntimeException("StateCheckpoint.load: no file " + file + " for rank " + rank + " of " + world);
        try (var st = SafeTensors.open(file)) {
            var meta = st.metadata();
            if (!graph.name().equals(meta.get("graph")) || !Integer.toString(world).equals(meta.get("world")) || !Integer.toString(rank).equals(meta.get("rank")))
                throw new GatunRuntimeException("StateCheckpoint.load: " + file + " holds graph '" + meta.get("graph") + "' rank " + meta.get("rank")
                        + " of " + meta.get("world") + ", not graph '" + graph.name() + "' rank " + rank + " of " + world);
            var extra = new TreeSet<>(st.names());
            extra.removeAll(graph.states());
            if (!extra.isEmpty())
                throw new GatunRuntimeException("StateCheckpoint.load: " + file + " holds " + extra + ", which are not states of graph '" + graph.name() + "'");
            var out = new LinkedHashMap<String, NDArray>();
            for (String name : graph.states()) {
                if (!st.contains(name))
                    throw new GatunRuntimeException("StateCheckpoint.load: " + file + " has no tensor for state '" + name + "' of graph '" + graph.name() + "'");
                NDArray v = st.get(name);
                check("load", graph, name, v, rank);
                NDArray own = NDArray.zeros(v.dtype(), v.shape());   // the bytes as they are: the file closes now
                java.lang.foreign.MemorySegment.copy(v.segment(), 0, own.segment(), 0, v.byteSize());
                out.put(name, own);
            }
            return out;
        } catch (IOException e) {
            throw new GatunRuntimeException("StateCheckpoint.load: " + file + ": " + e.getMessage(), e);
        }
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
