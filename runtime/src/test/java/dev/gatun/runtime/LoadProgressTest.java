package dev.gatun.runtime;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Reading a checkpoint's tensors reports its progress ({@link TensorFiles#forEachTensor}, {@link LoadProgress}), and a
 * safetensors file is memory-mapped: its tensors are views of the mapping, nothing of them copied onto the Java heap.
 */
class LoadProgressTest {
    @TempDir Path dir;

    /** Tensors of several dtypes and sizes, one of them empty; their bytes counted here as numel times element size. */
    static Map<String, NDArray> tensors() {
        var t = new LinkedHashMap<String, NDArray>();
        t.put("embed", NDArray.randn(DType.F32, 1, 16, 8));
        t.put("norm", NDArray.full(DType.BF16, 1, 8));
        t.put("empty", NDArray.zeros(DType.F16, 0, 4));
        t.put("ids", NDArray.full(DType.I64, 3, 5));
        t.put("mask", NDArray.full(DType.BOOL, 1, 3, 3));
        return t;
    }

    static long bytesOf(Map<String, NDArray> tensors) {
        long sum = 0;
        for (NDArray a : tensors.values()) {
            long n = 1;
            for (long s : a.shape()) n *= s;
            sum += n * a.dtype().byteSize();
        }
        return sum;
    }

    /** The listener's reports: the start, then one a tensor, bytes never falling, ending at every byte and tensor. */
    static void checkReports(List<LoadProgress> seen, long totalBytes, List<String> names) {
        assertThat(seen).hasSize(names.size() + 1);
        assertThat(seen.getFirst()).isEqualTo(LoadProgress.start(totalBytes, names.size()));
        for (int i = 1; i < seen.size(); i++) {
            assertThat(seen.get(i).bytes()).as("report %d", i).isGreaterThanOrEqualTo(seen.get(i - 1).bytes());
            assertThat(seen.get(i).tensors()).isEqualTo(i);
            assertThat(seen.get(i).tensor()).isEqualTo(names.get(i - 1));
            assertThat(seen.get(i).totalBytes()).isEqualTo(totalBytes);
        }
        assertThat(seen.getLast().bytes()).isEqualTo(totalBytes);
        assertThat(seen.getLast().done()).isTrue();
    }

    @Test
    void readingEveryTensorOfAFileReportsBytesUpToTheTotal() throws IOException {
        var tensors = tensors();
        Path file = dir.resolve("model.safetensors");
        SafeTensors.write(file, tensors, Map.of());
        var seen = new ArrayList<LoadProgress>();
        var read = new LinkedHashMap<String, NDArray>();
        try (var files = SafeTensors.open(file)) {
            files.forEachTensor((name, view) -> read.put(name, view.copy()), seen::add);
            checkReports(seen, bytesOf(tensors), files.names());
        }
        assertThat(read).isEqualTo(tensors);
        assertThat(seen.getLast().line()).isEqualTo("loading weights: 577 bytes of 577 bytes (100%), 5 of 5 tensors");
    }

    @Test
    void theShardsOfAnIndexReportAsOneCheckpoint() throws IOException {
        var tensors = tensors();
        var one = new LinkedHashMap<String, NDArray>();
        var two = new LinkedHashMap<String, NDArray>();
        tensors.forEach((k, v) -> (one.size() < 2 ? one : two).put(k, v));
        SafeTensors.write(dir.resolve("one.safetensors"), one, Map.of());
        SafeTensors.write(dir.resolve("two.safetensors"), two, Map.of());
        var map = new StringBuilder();
        tensors.keySet().forEach(k -> map.append(map.isEmpty() ? "" : ", ").append('"').append(k).append("\": \"")
                .append(one.containsKey(k) ? "one" : "two").append(".safetensors\""));
        Path index = Files.writeString(dir.resolve("model.safetensors.index.json"), "{\"weight_map\": {" + map + "}}");
        var seen = new ArrayList<LoadProgress>();
        try (var files = SafeTensorsIndex.open(index)) {
            files.forEachTensor((name, view) -> assertThat(view).isEqualTo(tensors.get(name)), seen::add);
            checkReports(seen, bytesOf(tensors), files.names());
        }
    }

    @Test
    void aProgressLineAndItsBounds() {
        var p = LoadProgress.start(3L << 30, 100).next("a", 1L << 30).next("b", 0);
        assertThat(p.line()).isEqualTo("loading weights: 1.00 GiB of 3.00 GiB (33%), 2 of 100 tensors");
        assertThat(p.fraction()).isEqualTo(1.0 / 3);
        assertThat(LoadProgress.start(5L << 20, 1).next("w", 5L << 19).line()).isEqualTo("loading weights: 2.50 MiB of 5.00 MiB (50%), 1 of 1 tensors");
        assertThat(LoadProgress.start(0, 0).done()).isTrue();
        assertThatThrownBy(() -> LoadProgress.start(10, 1).next("w", 11)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("11 of 10 bytes");
        assertThatThrownBy(() -> LoadProgress.start(10, 1).next("a", 1).next("b", 1)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("2 of 1 tensors");
    }

    /**
     * A file of one 1 GiB tensor (sparse on disk: its data is zeros the file system does not store): opening it and
     * reading the tensor allocates next to nothing on the Java heap, the view's segment is the mapping, and its bytes
     * read as the file's.
     */
    @Test
    void aSafetensorsFileIsMappedNotCopiedOntoTheHeap() throws IOException {
        long gib = 1L << 30;
        String header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + (gib / 4) + "],\"data_offsets\":[0," + gib + "]}}";
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        int padded = (h.length + 7) / 8 * 8;
        Path file = dir.resolve("big.safetensors");
        try (var f = new RandomAccessFile(file.toFile(), "rw")) {
            var head = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN).putLong(padded).put(h);
            while (head.hasRemaining()) head.put((byte) ' ');
            f.write(head.array());
            f.setLength(8 + padded + gib);
            f.seek(8 + padded + gib - 4);
            f.write(new byte[]{0, 0, (byte) 0x80, 0x3f});   // the last float: 1.0f, little-endian
        }
        var threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long tid = Thread.currentThread().threadId();
        long before = threads.getThreadAllocatedBytes(tid);
        try (var files = SafeTensors.open(file)) {
            NDArray w = files.get("w");
            double first = w.get(0), last = w.get(gib / 4 - 1);
            long allocated = threads.getThreadAllocatedBytes(tid) - before;
            assertThat(w.segment().isMapped()).as("the tensor is a view of the mapped file").isTrue();
            assertThat(w.segment().byteSize()).isEqualTo(gib);
            assertThat(new double[]{first, last}).containsExactly(0, 1);
            assertThat(allocated).as("heap bytes allocated opening and reading a 1 GiB tensor").isLessThan(8L << 20);
        }
    }
}
