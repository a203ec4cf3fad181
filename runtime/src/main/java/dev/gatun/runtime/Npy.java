package dev.gatun.runtime;

import dev.gatun.ir.DType;

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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.StringJoiner;

/**
 * NumPy's {@code .npy} format (versions 1.0, 2.0 and 3.0), so that weights and inputs move between Gatun and
 * NumPy/PyTorch ({@code np.save}/{@code np.load}, {@code torch.from_numpy}) without a converter.
 *
 * <p>A file is the magic {@code \x93NUMPY}, a version (major, minor), the header's length (2 bytes little-endian
 * in 1.0, 4 bytes in 2.0 and 3.0), the header: a Python dict literal such as
 * {@code {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }} padded with spaces and a newline so that
 * the data starts at a multiple of 64 bytes, then the elements, little-endian, in C order.
 *
 * <p>Writing follows NumPy ≥ 1.24 byte for byte (including the spare spaces it leaves so that the first dimension
 * can grow in place). bfloat16 is refused: NumPy has no such dtype, and the {@code ml_dtypes} package saves it as
 * an untyped {@code |V2} that loads back as raw bytes, so a file would silently lose its meaning. Reading refuses,
 * with the file and the reason, Fortran order, big-endian data, dtypes Gatun lacks, truncated or overlong data and
 * headers over {@value #MAX_HEADER_BYTES} bytes (NumPy's own default limit: the header is parsed, never evaluated).
 */
final class Npy {
    private Npy() {}

    static final int MAX_HEADER_BYTES = 10_000;
    private static final byte[] MAGIC = {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y'};
    private static final int ALIGN = 64;
    /** NumPy leaves room for the first dimension to grow to this many digits without rewriting the data. */
    private static final int GROWTH_AXIS_MAX_DIGITS = 21;
    private static final long CHUNK = 1L << 30;

    /** A parsed header: where the data starts and what it holds. */
    record Header(DType dtype, long[] shape, long dataOffset) {}

    // ------------------------------------------------------------------ descr

    /** NumPy's type string for a dtype; bfloat16 has none. */
    static String descr(DType t) {
        return switch (t) {
            case FLOAT32 -> "<f4";
            case FLOAT64 -> "<f8";
            case FLOAT16 -> "<f2";
            case INT32 -> "<i4";
            case INT64 -> "<i8";
            case INT8 -> "|i1";
            case BOOL -> "|b1";
            case BFLOAT16 -> throw new GatunRuntimeException("saveNpy: NumPy has no bfloat16 dtype (ml_dtypes writes an untyped '|V2'"
                    + " that loads back as raw bytes); save a float32 copy instead, which is exact: a.to(DType.F32).saveNpy(file)");
        };
    }

    private static final Map<String, DType> BY_DESCR = Map.of(
            "<f4", DType.FLOAT32, "<f8", DType.FLOAT64, "<f2", DType.FLOAT16, "<i4", DType.INT32, "<i8", DType.INT64,
            "|i1", DType.INT8, "<i1", DType.INT8, "|b1", DType.BOOL, "<b1", DType.BOOL);

    private static DType dtypeOf(String descr, Path file) throws IOException {
        DType t = BY_DESCR.get(descr);
        if (t != null) return t;
        if (descr.startsWith(">") && BY_DESCR.containsKey("<" + descr.substring(1)))
            throw new IOException(file + ": big-endian data ('" + descr + "') is not supported; in NumPy save a little-endian"
                    + " copy: np.save(path, a.astype(a.dtype.newbyteorder('<')))");
        throw new IOException(file + ": dtype '" + descr + "' is not one Gatun has (it reads <f4, <f8, <f2, <i4, <i8, |i1, |b1);"
                + " convert in NumPy first, e.g. np.save(path, a.astype(np.float32))");
    }

    // ------------------------------------------------------------------ writing

    /** The bytes before the data: magic, version, header length and the padded header. */
    static byte[] prefix(DType dtype, long[] shape) {
        String dict = "{'descr': '" + descr(dtype) + "', 'fortran_order': False, 'shape': " + tuple(shape) + ", }";
        if (shape.length > 0) dict += " ".repeat(GROWTH_AXIS_MAX_DIGITS - Long.toString(shape[0]).length());
        byte[] text = dict.getBytes(StandardCharsets.ISO_8859_1);
        int lengthBytes = 2;                                   // version 1.0 while the padded header fits 16 bits
        int pad = padding(MAGIC.length + 2 + lengthBytes, text.length);
        if (text.length + pad + 1 > 0xffff) {
            lengthBytes = 4;
            pad = padding(MAGIC.length + 2 + lengthBytes, text.length);
        }
        int headerLength = text.length + pad + 1;
        var out = ByteBuffer.allocate(MAGIC.length + 2 + lengthBytes + headerLength).order(ByteOrder.LITTLE_ENDIAN);
        out.put(MAGIC).put((byte) (lengthBytes == 2 ? 1 : 2)).put((byte) 0);
        if (lengthBytes == 2) out.putShort((short) headerLength);
        else out.putInt(headerLength);
        out.put(text).put(" ".repeat(pad).getBytes(StandardCharsets.ISO_8859_1)).put((byte) '\n');
        return out.array();
    }

    /** Spaces that make prefix + text + newline a multiple of 64; NumPy pads a whole 64 when already aligned. */
    private static int padding(int fixed, int textLength) { return ALIGN - (fixed + textLength + 1) % ALIGN; }

    /** Python's repr of a shape tuple: {@code ()}, {@code (3,)}, {@code (2, 3)}. */
    static String tuple(long[] shape) {
        if (shape.length == 1) return "(" + shape[0] + ",)";
        var j = new StringJoiner(", ", "(", ")");
        for (long s : shape) j.add(Long.toString(s));
        return j.toString();
    }

    static void write(NDArray a, Path file) throws IOException {
        byte[] prefix = prefix(a.dtype(), a.shape());
        try (var ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING, StandardOpenOption.WRITE);
             var arena = Arena.ofConfined()) {
            writeFully(ch, ByteBuffer.wrap(prefix));
            MemorySegment data = littleEndian(a.segment(), a.dtype(), arena);
            for (long off = 0; off < data.byteSize(); off += CHUNK)
                writeFully(ch, data.asSlice(off, Math.min(CHUNK, data.byteSize() - off)).asByteBuffer());
        }
    }

    private static void writeFully(FileChannel ch, ByteBuffer b) throws IOException {
        while (b.hasRemaining()) ch.write(b);
    }

    /** The elements in little-endian order: the segment itself on little-endian machines, a swapped copy otherwise. */
    private static MemorySegment littleEndian(MemorySegment native_, DType t, Arena arena) {
        if (ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN || t.byteSize() == 1) return native_;
        MemorySegment out = arena.allocate(native_.byteSize());
        ValueLayout layout = wordLayout(t);
        MemorySegment.copy(native_, layout, 0, out, layout.withOrder(ByteOrder.LITTLE_ENDIAN), 0, native_.byteSize() / t.byteSize());
        return out;
    }

    private static ValueLayout wordLayout(DType t) {
        return switch (t.byteSize()) {
            case 2 -> ValueLayout.JAVA_SHORT_UNALIGNED;
            case 4 -> ValueLayout.JAVA_INT_UNALIGNED;
            case 8 -> ValueLayout.JAVA_LONG_UNALIGNED;
            default -> ValueLayout.JAVA_BYTE;
        };
    }

    // ------------------------------------------------------------------ reading

    static NDArray read(Path file) throws IOException {
        try (var ch = FileChannel.open(file, StandardOpenOption.READ)) {
            Header h = readHeader(ch, file);
            long need = dataBytes(h, file), have = ch.size() - h.dataOffset();
            if (have != need)
                throw new IOException(file + ": " + (have < need ? "truncated: " : "has " + (have - need) + " bytes after its data: ")
                        + h.dtype() + Arrays.toString(h.shape()) + " needs " + need + " bytes of data but the file has " + have
                        + " after its " + h.dataOffset() + "-byte header");
            NDArray a = NDArray.zeros(h.dtype(), h.shape());
            MemorySegment data = a.segment();
            ch.position(h.dataOffset());
            for (long off = 0; off < need; off += CHUNK) {
                ByteBuffer b = data.asSlice(off, Math.min(CHUNK, need - off)).asByteBuffer();
                while (b.hasRemaining())
                    if (ch.read(b) < 0) throw new IOException(file + ": truncated while reading its data");
            }
            toNative(data, h.dtype());
            return a;
        }
    }

    private static long dataBytes(Header h, Path file) throws IOException {
        try {
            long n = h.dtype().byteSize();
            for (long d : h.shape()) n = Math.multiplyExact(n, d);
            return n;
        } catch (ArithmeticException e) {
            throw new IOException(file + ": shape " + Arrays.toString(h.shape()) + " is too large (its size overflows 64 bits)");
        }
    }

    private static void toNative(MemorySegment data, DType t) {
        if (ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN || t.byteSize() == 1) return;
        ValueLayout layout = wordLayout(t);
        MemorySegment.copy(data, layout.withOrder(ByteOrder.LITTLE_ENDIAN), 0, data, layout, 0, data.byteSize() / t.byteSize());
    }

    static Header readHeader(FileChannel ch, Path file) throws IOException {
        ByteBuffer start = readExactly(ch, 0, MAGIC.length + 2, file, "its magic and version");
        byte[] magic = new byte[MAGIC.length];
        start.get(magic);
        if (!Arrays.equals(magic, MAGIC))
            throw new IOException(file + ": not a .npy file (it does not start with \\x93NUMPY)");
        int major = start.get() & 0xff, minor = start.get() & 0xff;
        if (major < 1 || major > 3)
            throw new IOException(file + ": .npy version " + major + "." + minor + " is not supported (Gatun reads 1.0, 2.0 and 3.0)");
        int lengthBytes = major == 1 ? 2 : 4;
        ByteBuffer len = readExactly(ch, start.capacity(), lengthBytes, file, "its header length").order(ByteOrder.LITTLE_ENDIAN);
        long headerLength = lengthBytes == 2 ? Short.toUnsignedLong(len.getShort()) : Integer.toUnsignedLong(len.getInt());
        if (headerLength > MAX_HEADER_BYTES)
            throw new IOException(file + ": its header claims " + headerLength + " bytes, more than the " + MAX_HEADER_BYTES
                    + " Gatun accepts (NumPy's default limit too); the file is damaged or not a plain array");
        long headerStart = start.capacity() + lengthBytes;
        ByteBuffer hb = readExactly(ch, headerStart, (int) headerLength, file, "its " + headerLength + "-byte header");
        String header = new String(hb.array(), major == 3 ? StandardCharsets.UTF_8 : StandardCharsets.ISO_8859_1);
        Map<String, Object> dict = HeaderParser.parse(header, file);
        return header(dict, file, header, headerStart + headerLength);
    }

    private static Header header(Map<String, Object> dict, Path file, String text, long dataOffset) throws IOException {
        if (!dict.keySet().equals(java.util.Set.of("descr", "fortran_order", "shape")))
            throw new IOException(file + ": the header " + text.strip() + " must have exactly the keys 'descr', 'fortran_order' and 'shape'");
        if (!(dict.get("descr") instanceof String descr))
            throw new IOException(file + ": 'descr' is not a plain type string in " + text.strip() + " (structured arrays are not supported)");
        if (!(dict.get("fortran_order") instanceof Boolean fortran))
            throw new IOException(file + ": 'fortran_order' is not True or False in " + text.strip());
        if (fortran)
            throw new IOException(file + ": the data is in Fortran (column-major) order, which Gatun does not read;"
                    + " save a C-ordered copy in NumPy: np.save(path, np.ascontiguousarray(a))");
        if (!(dict.get("shape") instanceof long[] shape))
            throw new IOException(file + ": 'shape' is not a tuple of sizes in " + text.strip());
        return new Header(dtypeOf(descr, file), shape, dataOffset);
    }

    private static ByteBuffer readExactly(FileChannel ch, long position, int n, Path file, String what) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(n);
        while (b.hasRemaining()) {
            if (ch.read(b, position + b.position()) < 0)
                throw new IOException(file + ": truncated: the file ends inside " + what + " (" + ch.size() + " bytes in all)");
        }
        return b.flip();
    }

    /**
     * Parses the header's Python dict literal: string keys; values that are strings, {@code True}/{@code False}
     * or tuples of non-negative integers (a shape; Python 2's {@code L} suffix allowed). Nothing is evaluated.
     */
    static final class HeaderParser {
        private final String s;
        private final Path file;
        private int i;

        private HeaderParser(String s, Path file) {
            this.s = s;
            this.file = file;
        }

        static Map<String, Object> parse(String header, Path file) throws IOException {
            var p = new HeaderParser(header, file);
            var out = p.dict();
            p.skipSpace();
            if (p.i != header.length()) throw p.error("unexpected text after the dict");
            return out;
        }

        private Map<String, Object> dict() throws IOException {
            var out = new LinkedHashMap<String, Object>();
            expect('{');
            while (true) {
                skipSpace();
                if (peek() == '}') { i++; return out; }
                String key = string();
                skipSpace();
                expect(':');
                skipSpace();
                out.put(key, value());
                skipSpace();
                if (peek() == ',') i++;
                else if (peek() != '}') throw error("expected ',' or '}'");
            }
        }

        private Object value() throws IOException {
            char c = peek();
            if (c == '\'' || c == '"') return string();
            if (c == '(') return tuple();
            if (s.startsWith("True", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("False", i)) { i += 5; return Boolean.FALSE; }
            if (c == '[') throw error("a list value (structured dtypes are not supported)");
            throw error("expected a string, True, False or a tuple");
        }

        private String string() throws IOException {
            char q = peek();
            if (q != '\'' && q != '"') throw error("expected a quoted string");
            int end = s.indexOf(q, i + 1);
            if (end < 0) throw error("unterminated string");
            String v = s.substring(i + 1, end);
            i = end + 1;
            return v;
        }

        private long[] tuple() throws IOException {
            expect('(');
            List<Long> dims = new ArrayList<>();
            while (true) {
                skipSpace();
                if (peek() == ')') { i++; break; }
                dims.add(integer());
                skipSpace();
                if (peek() == ',') i++;
                else if (peek() != ')') throw error("expected ',' or ')' in the shape");
            }
            return dims.stream().mapToLong(Long::longValue).toArray();
        }

        private long integer() throws IOException {
            int start = i;
            while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
            if (start == i) throw error("expected a non-negative integer in the shape");
            long v;
            try {
                v = Long.parseLong(s.substring(start, i));
            } catch (NumberFormatException e) {
                throw error("a dimension does not fit 64 bits");
            }
            if (i < s.length() && s.charAt(i) == 'L') i++;
            return v;
        }

        private void expect(char c) throws IOException {
            if (peek() != c) throw error("expected '" + c + "'");
            i++;
        }

        private char peek() { return i < s.length() ? s.charAt(i) : '\0'; }

        private void skipSpace() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }

        private IOException error(String what) {
            return new IOException(file + ": bad .npy header at character " + i + ": " + what + " in " + s.strip());
        }
    }
}
