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

    /**
     * Gives every tensor, in the files' order, as a view ({@link #get}) to {@code action}, which reads it where it goes
     * (a session's {@code bind}, {@code toDevice}, a conversion); after each, {@code progress} learns how far the
     * reading has got ({@link LoadProgress}: once before the first, then after each tensor, the bytes growing to
     * {@link #dataBytes()}). The files are memory-mapped: the bytes come from disk as {@code action} reads them.
     */
    default void forEachTensor(java.util.function.BiConsumer<String, NDArray> action, java.util.function.Consumer<LoadProgress> progress) {
        List<String> names = names();
        var at = LoadProgress.start(dataBytes(), names.size());
        progress.accept(at);
        for (String name : names) {
            SafeTensors.Entry e = entry(name);
            action.accept(name, get(name));
            at = at.next(name, e.end() - e.begin());
            progress.accept(at);
        }
    }

    @Override void close();
}
