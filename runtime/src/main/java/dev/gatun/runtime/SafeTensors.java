package dev.gatun.runtime;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SequencedMap;
import java.util.StringJoiner;

/**
 * A {@code .safetensors} file, the format most open model checkpoints ship in, memory-mapped: its tensors are
 * {@link NDArray} views of the mapped file, so {@code session.bind(name, file.get(name))} or {@code toDevice} copies
 * the bytes from the page cache to where they go without a Java array in between.
 *
 * <p>The format: an 8-byte little-endian header length {@code N}, {@code N} bytes of UTF-8 JSON (padded with spaces)
 * mapping each tensor's name to {@code {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}} (offsets into
 * the data after the header) and an optional {@code "__metadata__"} object of strings, then the data, little-endian,
 * row-major. Reading refuses, naming the file and the tensor, with a {@link GraphException} (an {@link IOException}
 * is a failure to read the file at all): a header longer than {@value #MAX_HEADER_BYTES} bytes or than the file, a
 * header that is not a JSON object, a dtype Gatun lacks ({@code U8}, {@code F8_*}, ...), a shape or offsets that do
 * not agree with the dtype, data past the end of the file, and tensors that overlap or leave holes.
 *
 * <p>A hostile header costs no more than its bytes: every size it declares is checked against the file's real size
 * (a shape whose element or byte count overflows, or whose data lies past the end, is refused from the header, before
 * anything is mapped for it), and reading is linear in the header's length (the JSON reader counts no line or column
 * but for an error; the tiling check sorts once).
 *
 * <p>The views stay valid until {@link #close()} (idempotent); reading one afterwards throws, it never reads freed
 * memory. The mapping is read-only: writing into a view throws.
 */
public final class SafeTensors implements TensorFiles {
    /** The reference implementation's limit; a larger header is refused before it is read. */
    public static final long MAX_HEADER_BYTES = 100L << 20;

    /** One tensor's entry in the header. */
    public record Entry(String name, DType dtype, long[] shape, long begin, long end) {
        public Entry { shape = shape.clone(); }
        @Override public long[] shape() { return shape.clone(); }
        @Override public String toString() { return name + ": " + dtype + Arrays.toString(shape); }
    }

    private final Path file;
    private final Arena arena;
    private final MemorySegment data;
    private final SequencedMap<String, Entry> entries;
    private final Map<String, String> metadata;
    private boolean closed;

    private SafeTensors(Path file, Arena arena, MemorySegment data, SequencedMap<String, Entry> entries, Map<String, String> metadata) {
        this.file = file;
        this.arena = arena;
        this.data = data;
        this.entries = entries;
        this.metadata = metadata;
    }

    /**
     * Maps {@code file} and reads its header: an {@link IOException} where the file cannot be read, a
     * {@link GraphException} naming the file (and the tensor and field) where it is not a safetensors file.
     */
    public static SafeTensors open(Path file) throws IOException {
        if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) throw new GraphException(file + ": safetensors files are read on little-endian machines only");
        var arena = Arena.ofShared();
        try (var ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            if (size < 8) throw new GraphException(file + ": " + size + " bytes is too short for a safetensors file (8-byte header length first)");
            MemorySegment all = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
            long n = all.get(ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN), 0);
            if (n < 0 || n > MAX_HEADER_BYTES) throw new GraphException(file + ": header length " + n + " is over the " + MAX_HEADER_BYTES + "-byte limit (not a safetensors file?)");
            if (8 + n > size) throw new GraphException(file + ": header length " + n + " runs past the end of the " + size + "-byte file (truncated?)");
            byte[] header = all.asSlice(8, n).toArray(ValueLayout.JAVA_BYTE);
            var meta = new LinkedHashMap<String, String>();
            MemorySegment data = all.asSlice(8 + n);
            var entries = parse(file, new String(header, StandardCharsets.UTF_8), meta, data.byteSize());
            check(file, entries, data.byteSize());
            return new SafeTensors(file, arena, data, entries, Collections.unmodifiableMap(meta));
        } catch (IOException | RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** The header's entries, each checked against the {@code dataBytes} of data the file holds after the header. */
    private static SequencedMap<String, Entry> parse(Path file, String text, Map<String, String> meta, long dataBytes) {
        Json root;
        try {
            root = Json.parse(text.strip());
        } catch (RuntimeException e) {
            throw new GraphException(file + ": the header is not valid JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof Json.Obj obj)) throw new GraphException(file + ": the header is a JSON " + root.kind() + ", not an object");
        var out = new LinkedHashMap<String, Entry>();
        for (var f : obj.fields().entrySet()) {
            String name = f.getKey();
            if (name.equals("__metadata__")) {
                if (!(f.getValue() instanceof Json.Obj m)) throw new GraphException(file + ": __metadata__ is a JSON " + f.getValue().kind() + ", not an object of strings");
                for (var kv : m.fields().entrySet()) {
                    if (!(kv.getValue() instanceof Json.Str s)) throw new GraphException(file + ": __metadata__ value '" + kv.getKey() + "' is not a string");
                    meta.put(kv.getKey(), s.value());
                }
                continue;
            }
            if (!(f.getValue() instanceof Json.Obj t)) throw new GraphException(file + ": tensor '" + name + "': its entry is a JSON " + f.getValue().kind() + ", not an object");
            out.put(name, entry(file + ": tensor '" + name + "'", name, t, dataBytes));
        }
        return out;
    }

    /**
     * One tensor's entry, its sizes checked before anything is made of them: the shape's element count and bytes
     * without overflow, the offsets the bytes of the shape, and within the {@code dataBytes} the file holds.
     */
    private static Entry entry(String where, String name, Json.Obj t, long dataBytes) {
        if (!(t.get("dtype") instanceof Json.Str d)) throw new GraphException(where + ": no \"dtype\" string");
        DType dtype = dtypeOf(d.value(), where);
        long[] shape = longs(t.get("shape"), where, "shape");
        long[] offsets = longs(t.get("data_offsets"), where, "data_offsets");
        if (offsets.length != 2) throw new GraphException(where + ": \"data_offsets\" has " + offsets.length + " numbers, not [begin, end]");
        for (var k : t.fields().keySet())
            if (!List.of("dtype", "shape", "data_offsets").contains(k)) throw new GraphException(where + ": unknown field \"" + k + "\"");
        long numel = 1;
        for (long s : shape) {
            if (s < 0) throw new GraphException(where + ": negative dimension in shape " + Arrays.toString(shape));
            if (s != 0 && numel > Long.MAX_VALUE / s)
                throw new GraphException(where + ": shape " + Arrays.toString(shape) + " has more elements than a file can hold (the count overflows a long)");
            numel *= s;
        }
        if (numel > Long.MAX_VALUE / dtype.byteSize())
            throw new GraphException(where + ": shape " + Arrays.toString(shape) + " of " + dtype + " is more bytes than a file can hold (the count overflows a long)");
        long bytes = numel * dtype.byteSize();
        if (offsets[0] < 0 || offsets[1] < offsets[0]) throw new GraphException(where + ": data_offsets " + Arrays.toString(offsets) + " are not [begin, end] with begin <= end");
        if (offsets[1] - offsets[0] != bytes)
            throw new GraphException(where + ": data_offsets " + Arrays.toString(offsets) + " hold " + (offsets[1] - offsets[0]) + " bytes, but "
                    + dtype + Arrays.toString(shape) + " (its shape) needs " + bytes);
        if (offsets[1] > dataBytes)
            throw new GraphException(where + ": data_offsets " + Arrays.toString(offsets) + " run past the " + dataBytes + " bytes of data the file holds (truncated?)");
        return new Entry(name, dtype, shape, offsets[0], offsets[1]);
    }

    /** The tensors must tile the data exactly, as the format requires: no overlap, no hole, nothing past the end. */
    private static void check(Path file, SequencedMap<String, Entry> entries, long dataBytes) {
        var sorted = new ArrayList<>(entries.values());
        sorted.sort(Comparator.comparingLong(Entry::begin).thenComparingLong(Entry::end));
        long at = 0;
        for (Entry e : sorted) {
            if (e.begin() < at) throw new GraphException(file + ": tensor '" + e.name() + "' at bytes [" + e.begin() + ", " + e.end() + ") overlaps the tensor before it");
            if (e.begin() > at) throw new GraphException(file + ": bytes [" + at + ", " + e.begin() + ") before tensor '" + e.name() + "' belong to no tensor (wrong offsets?)");
            if (e.end() > dataBytes)
                throw new GraphException(file + ": tensor '" + e.name() + "' ends at byte " + e.end() + " of the data, but the file holds " + dataBytes + " (truncated?)");
            at = e.end();
        }
        if (at != dataBytes) throw new GraphException(file + ": " + (dataBytes - at) + " bytes after the last tensor belong to no tensor");
    }

    private static long[] longs(Json v, String where, String field) {
        if (!(v instanceof Json.Arr a)) throw new GraphException(where + ": no \"" + field + "\" array");
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) {
            if (!(a.get(i) instanceof Json.Num n) || !n.isIntegral()) throw new GraphException(where + ": \"" + field + "\" holds " + a.get(i) + ", not an integer");
            try {
                out[i] = Long.parseLong(n.text());
            } catch (NumberFormatException e) {
                throw new GraphException(where + ": \"" + field + "\" value " + n.text() + " is out of range");
            }
        }
        return out;
    }

    private static final Map<String, DType> DTYPES = Map.of("F64", DType.FLOAT64, "F32", DType.FLOAT32, "F16", DType.FLOAT16,
            "BF16", DType.BFLOAT16, "I64", DType.INT64, "I32", DType.INT32, "I8", DType.INT8, "BOOL", DType.BOOL);

    private static DType dtypeOf(String name, String where) {
        DType t = DTYPES.get(name);
        if (t == null) throw new GraphException(where + ": dtype " + name + " is not one Gatun has (it reads " + String.join(", ", DTYPES.keySet().stream().sorted().toList())
                + "); convert the checkpoint first, e.g. in PyTorch: {k: v.to(torch.bfloat16) for k, v in state.items()}");
        return t;
    }

    static String nameOf(DType t) {
        for (var e : DTYPES.entrySet()) if (e.getValue() == t) return e.getKey();
        throw new IllegalStateException("no safetensors name for " + t);
    }

    // ------------------------------------------------------------------ reading

    /** The tensors' names, in the header's order. */
    @Override public List<String> names() { return List.copyOf(entries.keySet()); }

    /** This file, for every tensor it holds. */
    @Override public Path file(String name) {
        entry(name);
        return file;
    }

    @Override public long dataBytes() { return data.byteSize(); }

    @Override public Path source() { return file; }

    public Map<String, String> metadata() { return metadata; }

    /** A tensor's entry; {@link GatunRuntimeException} naming the close names when there is none. */
    @Override public Entry entry(String name) {
        Entry e = entries.get(name);
        if (e == null) {
            var close = entries.keySet().stream().filter(k -> k.contains(name) || name.contains(k)).limit(5).toList();
            throw new GatunRuntimeException(file + " has no tensor '" + name + "'" + (close.isEmpty() ? "" : "; close: " + close)
                    + " (" + entries.size() + " tensors)");
        }
        return e;
    }

    @Override public boolean contains(String name) { return entries.containsKey(name); }

    /**
     * Tensor {@code name} as a view of the mapped file (no copy), valid until {@link #close()}; a copy when its bytes
     * are not aligned to its element size in the file.
     */
    @Override public NDArray get(String name) {
        if (closed) throw new GatunRuntimeException(file + " is closed; open it again to read '" + name + "'");
        Entry e = entry(name);
        MemorySegment bytes = data.asSlice(e.begin(), e.end() - e.begin());
        if (bytes.address() % e.dtype().byteSize() != 0) {
            NDArray copy = NDArray.zeros(e.dtype(), e.shape());
            MemorySegment.copy(bytes, 0, copy.segment(), 0, bytes.byteSize());
            return copy;
        }
        return NDArray.wrap(e.dtype(), bytes, e.shape());
    }

    @Override public void close() {
        if (closed) return;
        closed = true;
        arena.close();
    }

    @Override public String toString() {
        var j = new StringJoiner(", ", "SafeTensors(" + file + ": ", ")");
        entries.values().stream().limit(8).forEach(e -> j.add(e.toString()));
        if (entries.size() > 8) j.add("... " + (entries.size() - 8) + " more");
        return j.toString();
    }

    // ------------------------------------------------------------------ writing

    /**
     * Writes {@code tensors} (in the map's order) and {@code metadata} as a safetensors file: the header padded with
     * spaces to a multiple of 8 bytes, each tensor's data at an offset aligned to its element size.
     */
    public static void write(Path file, Map<String, NDArray> tensors, Map<String, String> metadata) throws IOException {
        if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) throw new IOException(file + ": safetensors files are written on little-endian machines only");
        // largest elements first, so every tensor starts aligned to its element size
        var order = new ArrayList<>(tensors.entrySet());
        order.sort(Comparator.comparingInt((Map.Entry<String, NDArray> e) -> -e.getValue().dtype().byteSize()));
        var fields = new LinkedHashMap<String, Json>();
        if (metadata != null && !metadata.isEmpty()) {
            var m = new LinkedHashMap<String, Json>();
            metadata.forEach((k, v) -> m.put(k, new Json.Str(v)));
            fields.put("__metadata__", new Json.Obj(m));
        }
        long at = 0;
        for (var e : order) {
            NDArray a = e.getValue();
            var shape = new ArrayList<Json>();
            for (long s : a.shape()) shape.add(Json.Num.of(s));
            var t = new LinkedHashMap<String, Json>();
            t.put("dtype", new Json.Str(nameOf(a.dtype())));
            t.put("shape", new Json.Arr(shape));
            t.put("data_offsets", new Json.Arr(List.of(Json.Num.of(at), Json.Num.of(at + a.byteSize()))));
            fields.put(e.getKey(), new Json.Obj(t));
            at += a.byteSize();
        }
        byte[] text = compact(new Json.Obj(fields)).getBytes(StandardCharsets.UTF_8);
        int padded = (text.length + 7) / 8 * 8;
        var head = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
        head.putLong(padded).put(text);
        while (head.hasRemaining()) head.put((byte) ' ');
        head.flip();
        try (var ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE)) {
            while (head.hasRemaining()) ch.write(head);
            for (var e : order) {
                MemorySegment seg = e.getValue().segment();
                for (long off = 0; off < seg.byteSize(); off += 1L << 30) {
                    ByteBuffer b = seg.asSlice(off, Math.min(1L << 30, seg.byteSize() - off)).asByteBuffer();
                    while (b.hasRemaining()) ch.write(b);
                }
            }
        }
    }

    /** JSON on one line, as other writers of the format produce it. */
    private static String compact(Json v) {
        return switch (v) {
            case Json.Obj o -> {
                var j = new StringJoiner(",", "{", "}");
                o.fields().forEach((k, x) -> j.add(quote(k) + ":" + compact(x)));
                yield j.toString();
            }
            case Json.Arr a -> {
                var j = new StringJoiner(",", "[", "]");
                a.items().forEach(x -> j.add(compact(x)));
                yield j.toString();
            }
            case Json.Str s -> quote(s.value());
            case Json.Num n -> n.text();
            case Json.Bool b -> Boolean.toString(b.value());
            case Json.Null n -> "null";
        };
    }

    private static String quote(String s) {
        var sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
        return sb.append('"').toString();
    }
}
