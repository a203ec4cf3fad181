package dev.gatun.runtime;

import java.nio.file.Path;
import java.util.List;

/**
 * Named tensors read from one or more files: one {@link SafeTensors} file, or the shards of a sharded checkpoint that
 * a {@link SafeTensorsIndex} lists. A model's loader reads its weights by name through this, the same for either,
 * and names the file a tensor lives in when it refuses it. Closing closes every file; the tensors' views die with
 * them.
 */
public sealed interface TensorFiles extends AutoCloseable permits SafeTensors, SafeTensorsIndex {
    /** Every tensor's name, each once, in the files' order. */
    List<String> names();

    boolean contains(String name);

    /** A tensor's entry (dtype, shape, bytes in its file); {@link GatunRuntimeException} when there is none. */
    SafeTensors.Entry entry(String name);

    /** A tensor as a view of its file (see {@link SafeTensors#get}). */
    NDArray get(String name);

    /** The file a tensor lives in. */
    Path file(String name);

    /** The bytes of tensor data in all the files together (headers not counted). */
    long dataBytes();

    /** What the tensors are read from, for messages: the file, or the index. */
    Path source();

    @Override void close();
}
