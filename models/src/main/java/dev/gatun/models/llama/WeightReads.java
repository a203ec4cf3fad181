package dev.gatun.models.llama;

import dev.gatun.runtime.LoadProgress;
import dev.gatun.runtime.TensorFiles;

import java.util.Collection;
import java.util.function.Consumer;

/**
 * The reads of one rank's shard of a checkpoint, reported to a listener as they happen: {@link LoadProgress} of the
 * tensors the shard is made of (once before the first, then after each array made of them), so a command-line tool
 * can print a progress line while a large checkpoint comes off the disk. The bytes are the tensors' bytes in the files.
 */
final class WeightReads {
    private final TensorFiles files;
    private final Consumer<LoadProgress> listener;
    private LoadProgress at;

    /** Reads of {@code names} (each once) from {@code files}; the listener hears the start at once. */
    WeightReads(TensorFiles files, Collection<String> names, Consumer<LoadProgress> listener) {
        this.files = files;
        this.listener = listener == null ? p -> {} : listener;
        long total = 0;
        for (String n : names) total += bytes(n);
        at = LoadProgress.start(total, names.size());
        this.listener.accept(at);
    }

    private long bytes(String name) {
        var e = files.entry(name);
        return e.end() - e.begin();
    }

    /** {@code made}, once it is made from the tensors {@code names}: they count as read. */
    <T> T read(T made, String... names) {
        for (String n : names) {
            at = at.next(n, bytes(n));
            listener.accept(at);
        }
        return made;
    }
}
