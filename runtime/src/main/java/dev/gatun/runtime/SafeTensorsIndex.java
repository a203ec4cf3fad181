package dev.gatun.runtime;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A sharded checkpoint: the {@code model.safetensors.index.json} that Hugging Face writes for weights larger than one
 * file, and the {@code .safetensors} shards beside it that its {@code weight_map} names, read as one set of tensors.
 *
 * <p>The index and the shards must agree exactly, or the checkpoint is refused naming the tensor and both files:
 * every tensor the index places in a shard is in that shard, and every tensor of a shard is placed there by the index
 * (a tensor the index does not know of, or knows in another shard, is a tensor some reader would take and another
 * would not). A shard is named by a plain file name in the index's directory, never a path. The index is read only
 * when it is at most {@value #MAX_INDEX_BYTES} bytes (a real one of a model with hundreds of layers is a few hundred
 * kilobytes); its {@code metadata} is not used. Closing closes every shard.
 */
public final class SafeTensorsIndex implements TensorFiles {
    /** The largest index read. */
    public static final long MAX_INDEX_BYTES = 64L << 20;

    private final Path index;
    private final Map<String, SafeTensors> shards;      // file name -> the open shard
    private final Map<String, SafeTensors> byTensor;    // tensor -> its shard

    private SafeTensorsIndex(Path index, Map<String, SafeTensors> shards, Map<String, SafeTensors> byTensor) {
        this.index = index;
        this.shards = shards;
        this.byTensor = byTensor;
    }

    /**
     * Reads {@code index} and opens the shards it names: an {@link IOException} where a file cannot be read, a
     * {@link GraphException} naming the file, the tensor and the field where the index or a shard is malformed or the
     * two disagree. Nothing stays open when it fails.
     */
    public static SafeTensorsIndex open(Path index) throws IOException {
        Map<String, String> weightMap = weightMap(index);
        var shards = new LinkedHashMap<String, SafeTensors>();
        try {
            for (String name : weightMap.values()) {
                if (shards.containsKey(name)) continue;
                Path shard = index.resolveSibling(name);
                if (!Files.isRegularFile(shard))
                    throw new GraphException(index + ": weight_map places tensors (" + firstIn(weightMap, name) + " among them) in '" + name
                            + "', which is not a file in " + index.getParent());
                shards.put(name, SafeTensors.open(shard));
            }
            return new SafeTensorsIndex(index, shards, agree(index, weightMap, shards));
        } catch (IOException | RuntimeException e) {
            for (SafeTensors s : shards.values()) s.close();
            throw e;
        }
    }

    /** The index's {@code weight_map}: tensor name to shard file name, each a plain file name. */
    private static Map<String, String> weightMap(Path index) throws IOException {
        long size = Files.size(index);
        if (size > MAX_INDEX_BYTES)
            throw new GraphException(index + ": " + size + " bytes is over the " + MAX_INDEX_BYTES + "-byte limit of a safetensors index (not an index?)");
        Json root;
        try {
            root = Json.parse(Files.readString(index, StandardCharsets.UTF_8).strip());
        } catch (GraphException e) {
            throw new GraphException(index + ": not JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof Json.Obj o)) throw new GraphException(index + ": a JSON " + root.kind() + ", not an object");
        if (!(o.get("weight_map") instanceof Json.Obj map))
            throw new GraphException(index + ": field 'weight_map' is " + (o.get("weight_map") == null ? "missing" : "a JSON " + o.get("weight_map").kind())
                    + ": a safetensors index maps each tensor's name to the file that holds it");
        var out = new LinkedHashMap<String, String>();
        for (var e : map.fields().entrySet()) {
            if (!(e.getValue() instanceof Json.Str file))
                throw new GraphException(index + ": field 'weight_map' places tensor '" + e.getKey() + "' in a JSON " + e.getValue().kind() + ", not a file name");
            String f = file.value();
            if (f.isEmpty() || f.contains("/") || f.contains("\\") || f.equals(".") || f.equals("..") || f.indexOf('\0') >= 0)
                throw new GraphException(index + ": field 'weight_map' places tensor '" + e.getKey() + "' in '" + f
                        + "', which is not a plain file name beside the index");
            out.put(e.getKey(), f);
        }
        if (out.isEmpty()) throw new GraphException(index + ": field 'weight_map' names no tensor");
        return out;
    }

    /** Each tensor's shard, where the index and the shards agree exactly (see the class comment). */
    private static Map<String, SafeTensors> agree(Path index, Map<String, String> weightMap, Map<String, SafeTensors> shards) {
        var byTensor = new LinkedHashMap<String, SafeTensors>();
        for (var e : weightMap.entrySet()) {
            SafeTensors shard = shards.get(e.getValue());
            if (!shard.contains(e.getKey()))
                throw new GraphException(index + ": weight_map places tensor '" + e.getKey() + "' in '" + e.getValue() + "', which does not hold it");
            byTensor.put(e.getKey(), shard);
        }
        for (var s : shards.entrySet())
            for (String name : s.getValue().names()) {
                String placed = weightMap.get(name);
                if (!s.getKey().equals(placed))
                    throw new GraphException(index.resolveSibling(s.getKey()) + ": tensor '" + name + "' is " + (placed == null
                            ? "not in the weight_map of " + index : "placed by " + index + " in '" + placed + "', not in this file")
                            + ": the index must name every tensor of its files, each in one file");
            }
        return byTensor;
    }

    private static String firstIn(Map<String, String> weightMap, String file) {
        for (var e : weightMap.entrySet()) if (e.getValue().equals(file)) return "'" + e.getKey() + "'";
        return "none";
    }

    @Override public List<String> names() { return List.copyOf(byTensor.keySet()); }

    @Override public boolean contains(String name) { return byTensor.containsKey(name); }

    @Override public SafeTensors.Entry entry(String name) { return shard(name).entry(name); }

    @Override public NDArray get(String name) { return shard(name).get(name); }

    @Override public Path file(String name) { return shard(name).source(); }

    @Override public long dataBytes() {
        long sum = 0;
        for (SafeTensors s : shards.values()) sum += s.dataBytes();
        return sum;
    }

    @Override public Path source() { return index; }

    /** The shard of a tensor; {@link GatunRuntimeException} naming the index where there is none. */
    private SafeTensors shard(String name) {
        SafeTensors s = byTensor.get(name);
        if (s == null) throw new GatunRuntimeException(index + " names no tensor '" + name + "' (" + byTensor.size() + " tensors in " + shards.size() + " files)");
        return s;
    }

    @Override public void close() {
        for (SafeTensors s : shards.values()) s.close();
    }

    @Override public String toString() { return "SafeTensorsIndex(" + index + ": " + byTensor.size() + " tensors in " + shards.size() + " files)"; }
}
