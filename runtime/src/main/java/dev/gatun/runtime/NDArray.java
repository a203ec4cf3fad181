package dev.gatun.runtime;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.HostTensor;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Random;
import java.util.StringJoiner;

/**
 * A host tensor: dtype, shape and row-major contiguous elements in a {@link MemorySegment}. This is what users
 * pass to a graph and get back from it. Element access goes through doubles ({@link #get}, {@link #set}) or, exact
 * for every integer dtype and bool (an int64 beyond 2^53 too), through longs ({@link #getLong}, {@link #setLong});
 * writes round to the dtype (float16 and bfloat16 round to nearest even, floats becoming integers truncate toward
 * zero, integers wrap to their width as Java's {@code (int)} and {@code (byte)} do), as {@link DTypes} says.
 *
 * <p>Memory comes from an automatic arena unless a segment is wrapped, so arrays need no closing.
 *
 * <p>For weights and test data: {@link #saveNpy}/{@link #loadNpy} read and write NumPy's {@code .npy} files,
 * {@link #slice}, {@link #chunk}, {@link #shard} and {@link #concat} cut and join arrays (copies) the way tensor
 * parallelism splits a weight over ranks, and {@link #randn} draws normal values. With {@code rank} of {@code world}:
 *
 * <pre>{@code
 * NDArray w = NDArray.randn(DType.F32, 42, 256, 1024);  // or NDArray.loadNpy(path) of what np.save wrote
 * NDArray mine = w.shard(1, rank, world);               // this rank's columns: f32[256, 1024 / world]
 * List<NDArray> parts = w.chunk(world, 1);              // every rank's, in order: torch.chunk(w, world, 1)
 * NDArray back = NDArray.concat(1, parts);              // equals w
 * double first = mine.get(0, 0);                        // an element; getLong for exact integers
 * float[] values = mine.toFloatArray();                 // row-major
 * }</pre>
 */
public final class NDArray implements HostTensor, ArrayLike {
    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED;
    private static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED;
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED;
    private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED;

    private final DType dtype;
    private final long[] shape;
    private final long numel;
    private final MemorySegment data;
    /** Whether {@code data} was allocated by {@link #zeros} in an automatic arena (see {@link #ownsMemory}). */
    private final boolean owned;

    private NDArray(DType dtype, long[] shape, MemorySegment data, boolean owned) {
        this.owned = owned;
        this.dtype = Objects.requireNonNull(dtype, "dtype");
        this.shape = shape.clone();
        this.numel = numel(this.shape);
        this.data = data;
        if (data.byteSize() < numel * dtype.byteSize())
            throw new GatunRuntimeException("a segment of " + data.byteSize() + " bytes cannot hold " + dtype + Arrays.toString(shape)
                    + " (" + numel * dtype.byteSize() + " bytes)");
    }

    // ------------------------------------------------------------------ factories

    public static NDArray zeros(DType dtype, long... shape) {
        long bytes = Math.max(1, numel(shape) * dtype.byteSize());
        return new NDArray(dtype, shape, Arena.ofAuto().allocate(bytes, Math.max(8, dtype.byteSize())), true);
    }

    /** Views an existing segment (not copied): the caller keeps it alive and must not free it while in use. */
    public static NDArray wrap(DType dtype, MemorySegment segment, long... shape) { return new NDArray(dtype, shape, segment, false); }

    public static NDArray full(DType dtype, double value, long... shape) {
        var a = zeros(dtype, shape);
        for (long i = 0; i < a.numel; i++) a.set(i, value);
        return a;
    }

    public static NDArray scalar(DType dtype, double value) { return full(dtype, value); }

    /** Values rounded to {@code dtype}; {@code values.length} must be the shape's element count. */
    public static NDArray of(DType dtype, double[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(dtype, shape);
        for (int i = 0; i < values.length; i++) a.set(i, values[i]);
        return a;
    }

    public static NDArray of(float[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.FLOAT32, shape);
        MemorySegment.copy(values, 0, a.data, F32, 0, values.length);
        return a;
    }

    public static NDArray of(double[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.FLOAT64, shape);
        MemorySegment.copy(values, 0, a.data, F64, 0, values.length);
        return a;
    }

    public static NDArray of(int[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.INT32, shape);
        MemorySegment.copy(values, 0, a.data, I32, 0, values.length);
        return a;
    }

    public static NDArray of(long[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.INT64, shape);
        MemorySegment.copy(values, 0, a.data, I64, 0, values.length);
        return a;
    }

    /** int8 values. */
    public static NDArray of(byte[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.INT8, shape);
        MemorySegment.copy(values, 0, a.data, ValueLayout.JAVA_BYTE, 0, values.length);
        return a;
    }

    public static NDArray of(boolean[] values, long... shape) {
        checkCount(values.length, shape);
        var a = zeros(DType.BOOL, shape);
        for (int i = 0; i < values.length; i++) a.data.set(ValueLayout.JAVA_BYTE, i, (byte) (values[i] ? 1 : 0));
        return a;
    }

    /**
     * Seeded random values: floating uniform in [-1, 1), integers uniform in [-10, 10], bools fair coins.
     * The same seed gives the same array on every JVM.
     */
    public static NDArray random(DType dtype, long seed, long... shape) {
        var a = zeros(dtype, shape);
        var rnd = new Random(seed);
        for (long i = 0; i < a.numel; i++) {
            a.set(i, switch (dtype.kind()) {
                case FLOAT -> rnd.nextDouble() * 2 - 1;
                case INT -> rnd.nextInt(21) - 10;
                case BOOL -> rnd.nextBoolean() ? 1 : 0;
            });
        }
        return a;
    }

    /**
     * Seeded standard normal values (mean 0, variance 1, from {@link Random#nextGaussian()}, whose algorithm Java
     * specifies, so the same seed gives the same array on every JVM), rounded to a floating {@code dtype}: the
     * usual initialization of weights, like {@code torch.randn}.
     */
    public static NDArray randn(DType dtype, long seed, long... shape) {
        if (!dtype.isFloating())
            throw new GatunRuntimeException("randn: normal values need a floating dtype, not " + dtype
                    + "; use random(" + dtype + ", seed, shape) for uniform integers");
        var a = zeros(dtype, shape);
        var rnd = new Random(seed);
        for (long i = 0; i < a.numel; i++) a.set(i, rnd.nextGaussian());
        return a;
    }

    // ------------------------------------------------------------------ .npy files

    /**
     * Writes NumPy's {@code .npy} format (what {@code np.save} writes, byte for byte), readable by
     * {@code np.load(file)} and {@code torch.from_numpy(np.load(file))}. bfloat16 is refused (NumPy has no such
     * dtype): save {@code a.to(DType.F32)}, which is exact.
     */
    public void saveNpy(Path file) throws IOException { Npy.write(this, file); }

    /**
     * Reads a {@code .npy} file of float32/64/16, int8/32/64 or bool (NumPy's {@code <f4 <f8 <f2 |i1 <i4 <i8 |b1});
     * versions 1.0 to 3.0. Fortran order, big-endian data, other dtypes, truncated data and oversized headers are
     * refused with the file and the reason.
     */
    public static NDArray loadNpy(Path file) throws IOException { return Npy.read(file); }

    // ------------------------------------------------------------------ accessors

    @Override public DType dtype() { return dtype; }
    @Override public long[] shape() { return shape.clone(); }
    @Override public long numel() { return numel; }
    public int rank() { return shape.length; }
    public long byteSize() { return numel * dtype.byteSize(); }

    /** The elements' memory (row-major, native byte order). */
    public MemorySegment segment() { return data.asSlice(0, byteSize()); }

    /**
     * Whether this array's memory is its own: made by one of this class's factories (not {@link #wrap}), it is freed
     * only by the garbage collector, once nothing refers to this array or its {@link #segment()}. A GPU backend may
     * keep such memory page-locked for fast copies while it holds a reference to the array; it cannot do so with
     * wrapped memory, which its owner may free at any time.
     */
    public boolean ownsMemory() { return owned; }

    /**
     * A row-major copy of the strided view {@code offset + sum(strides[k] * i_k)} (in elements) of {@code src}: how
     * backends read an output that is a view of some storage.
     */
    public static NDArray gather(MemorySegment src, DType dtype, long[] shape, long offset, long[] strides) {
        NDArray out = zeros(dtype, shape);
        for (long i = 0; i < out.numel; i++) {
            long rem = i, p = offset;
            for (int k = shape.length - 1; k >= 0; k--) {
                p += (rem % shape[k]) * strides[k];
                rem /= shape[k];
            }
            Elements.copy(src, p, out.data, i, dtype);
        }
        return out;
    }

    /** The element at a row-major linear index, as a double. */
    @Override public double get(long index) {
        Objects.checkIndex(index, numel);
        return Elements.get(data, dtype, index);
    }

    /**
     * The element at a multi-dimensional index (one index per dimension; negative counts from the end). With a
     * single argument on a tensor of rank other than 1 the argument is a linear index ({@link #get(long)}).
     */
    public double get(long... idx) { return get(linear(idx)); }

    private long linear(long[] idx) {
        if (idx.length != shape.length)
            throw new IndexOutOfBoundsException("index " + Arrays.toString(idx) + " has " + idx.length + " entries for shape " + Arrays.toString(shape));
        long lin = 0;
        for (int d = 0; d < idx.length; d++) {
            long i = idx[d] < 0 ? idx[d] + shape[d] : idx[d];
            if (i < 0 || i >= shape[d])
                throw new IndexOutOfBoundsException("index " + Arrays.toString(idx) + " is outside shape " + Arrays.toString(shape) + " in dimension " + d);
            lin = lin * shape[d] + i;
        }
        return lin;
    }

    /** Writes a value, rounded to the dtype. */
    @Override public void set(long index, double value) {
        Objects.checkIndex(index, numel);
        Elements.set(data, dtype, index, value);
    }

    /**
     * The element at a row-major linear index as a long: exact for the integer dtypes and bool (an int64 beyond 2^53
     * too, where {@link #get(long)} rounds); a floating element truncates toward zero as a cast to int64 does.
     */
    @Override public long getLong(long index) {
        Objects.checkIndex(index, numel);
        return Elements.getLong(data, dtype, index);
    }

    /** As {@link HostTensor#copyTo}; the bytes themselves where {@code to} is an array of this dtype. */
    @Override public void copyTo(long from, HostTensor to, long at, long count) {
        if (!(to instanceof NDArray o) || o.dtype != dtype) {
            HostTensor.super.copyTo(from, to, at, count);
            return;
        }
        Objects.checkFromIndexSize(from, count, numel);
        Objects.checkFromIndexSize(at, count, o.numel);
        long e = dtype.byteSize();
        MemorySegment.copy(data, from * e, o.data, at * e, count * e);
    }

    /** {@link #getLong(long)} at a multi-dimensional index, as {@link #get(long...)} takes it. */
    public long getLong(long... idx) { return getLong(linear(idx)); }

    /** Writes an integer exactly: wrapped to an integer dtype's width, non-zero for bool, rounded once to a floating dtype. */
    @Override public void setLong(long index, long value) {
        Objects.checkIndex(index, numel);
        Elements.setLong(data, dtype, index, value);
    }

    // ------------------------------------------------------------------ conversions

    public double[] toDoubleArray() {
        double[] out = new double[toIntSize()];
        for (int i = 0; i < out.length; i++) out[i] = get(i);
        return out;
    }

    public float[] toFloatArray() {
        float[] out = new float[toIntSize()];
        for (int i = 0; i < out.length; i++) out[i] = (float) get(i);
        return out;
    }

    /** Elements as ints, as a cast to int32 gives them: integers wrap, floating values truncate toward zero. */
    public int[] toIntArray() {
        int[] out = new int[toIntSize()];
        for (int i = 0; i < out.length; i++) out[i] = (int) longAt(i);
        return out;
    }

    /** Elements as longs, exact for every integer dtype and bool; floating values truncate toward zero. */
    public long[] toLongArray() {
        long[] out = new long[toIntSize()];
        if (dtype == DType.INT64) MemorySegment.copy(data, I64, 0, out, 0, out.length);
        else for (int i = 0; i < out.length; i++) out[i] = longAt(i);
        return out;
    }

    /** Elements as bytes, as a cast to int8 gives them. */
    public byte[] toByteArray() {
        byte[] out = new byte[toIntSize()];
        for (int i = 0; i < out.length; i++) out[i] = (byte) longAt(i);
        return out;
    }

    /** Elements as booleans: non-zero is true (NaN too, as in PyTorch). */
    public boolean[] toBooleanArray() {
        boolean[] out = new boolean[toIntSize()];
        for (int i = 0; i < out.length; i++) out[i] = DTypes.isExact(dtype) ? longAt(i) != 0 : get(i) != 0;
        return out;
    }

    /** Element i as a long: exact for integers, a floating value truncated as a cast to int64. */
    private long longAt(long i) { return Elements.getLong(data, dtype, i); }

    /**
     * A copy in another dtype (values round as a cast does, integers exactly: they wrap to a narrower integer dtype and
     * round once to a floating one); in the same dtype, one bulk copy of the bytes.
     */
    public NDArray to(DType other) {
        var a = zeros(other, shape);
        if (other == dtype) {
            MemorySegment.copy(segment(), 0, a.segment(), 0, byteSize());
            return a;
        }
        for (long i = 0; i < numel; i++) Elements.convert(data, dtype, i, a.data, other, i);
        return a;
    }

    public NDArray copy() { return to(dtype); }

    // ------------------------------------------------------------------ slicing and sharding

    /**
     * A copy of the indices {@code [start, end)} of dimension {@code dim}, like {@code a[:, start:end]} in NumPy;
     * negative {@code dim}, {@code start} and {@code end} count from the end. A copy, not a view: an NDArray is always
     * contiguous, so writes to the result never reach this array.
     */
    public NDArray slice(int dim, long start, long end) {
        int d = checkDim(dim, "slice");
        long size = shape[d];
        long s = start < 0 ? start + size : start, e = end < 0 ? end + size : end;
        if (s < 0 || e > size || s > e)
            throw new IndexOutOfBoundsException("slice(dim " + dim + ", " + start + ", " + end + "): [" + s + ", " + e
                    + ") is not inside dimension " + d + " of " + describe() + " (size " + size + ")");
        long[] outShape = shape.clone();
        outShape[d] = e - s;
        NDArray out = zeros(dtype, outShape);
        long inner = numel(Arrays.copyOfRange(shape, d + 1, shape.length)) * dtype.byteSize();
        long outer = numel(Arrays.copyOfRange(shape, 0, d));
        long block = (e - s) * inner;
        for (long o = 0; o < outer; o++)
            MemorySegment.copy(data, (o * size + s) * inner, out.data, o * block, block);
        return out;
    }

    /**
     * {@code chunks} equal copies along {@code dim}, in order: the arguments of {@code torch.chunk(input, chunks, dim)}
     * and of the DSL's {@code Tensor.chunk(n, dim)}, the count first, then the dimension ({@code w.chunk(world, 1)} cuts
     * a weight's columns over the ranks). Unlike {@code torch.chunk} the size must divide evenly: an uneven split of a
     * weight is almost always a mistake in a tensor-parallel layout ({@link #slice} takes any range).
     *
     * <p>This method used to take {@code (dim, parts)}. A call written in that order is refused, naming the order,
     * wherever the two readings differ on a vector or a matrix (a count below 1 or a dimension the array lacks); on
     * arrays of rank 3 and more both readings can be valid, so such calls must be checked by hand.
     */
    public List<NDArray> chunk(int chunks, int dim) {
        String op = "chunk(chunks " + chunks + ", dim " + dim + ") of " + describe();
        String order = "; the arguments are (chunks, dim), the number of parts first as in torch.chunk (NDArray.chunk used to take (dim, parts))";
        if (chunks < 1) throw new GatunRuntimeException(op + ": " + chunks + " chunks asked for; the number of chunks must be at least 1" + order);
        int d = dim < 0 ? dim + shape.length : dim;
        if (d < 0 || d >= shape.length)
            throw new GatunRuntimeException(op + ": dimension " + dim + " does not exist (rank " + shape.length + ")" + order);
        if (shape[d] % chunks != 0)
            throw new GatunRuntimeException(op + ": dimension " + d + " has size " + shape[d] + ", which " + chunks
                    + " chunks do not divide; use a number of chunks that divides " + shape[d] + ", or slice(dim, start, end) for unequal parts" + order);
        long step = shape[d] / chunks;
        var out = new ArrayList<NDArray>(chunks);
        for (int p = 0; p < chunks; p++) out.add(slice(d, p * step, (p + 1) * step));
        return out;
    }

    /**
     * Rank {@code rank}'s part of this array split evenly over {@code worldSize} ranks along {@code dim}: for a
     * tensor-parallel linear layer {@code y = x W} with {@code W} of shape {@code [in, out]}, {@code shard(1, r, n)}
     * is the column-parallel weight of rank r and {@code shard(0, r, n)} the row-parallel one. A copy.
     */
    public NDArray shard(int dim, int rank, int worldSize) {
        int d = checkDim(dim, "shard");
        String op = "shard(dim " + dim + ", rank " + rank + ", worldSize " + worldSize + ")";
        long step = evenPart(d, worldSize, op);
        if (rank < 0 || rank >= worldSize) throw new IndexOutOfBoundsException(op + ": rank must be in [0, " + worldSize + ")");
        return slice(d, rank * step, (rank + 1) * step);
    }

    /** Joins arrays along {@code dim} (the inverse of {@link #chunk}): same dtype, same sizes in the other dimensions. */
    public static NDArray concat(int dim, List<NDArray> parts) {
        if (parts.isEmpty()) throw new GatunRuntimeException("concat: no arrays to join");
        NDArray first = parts.getFirst();
        int d = first.checkDim(dim, "concat");
        long[] outShape = first.shape.clone();
        outShape[d] = 0;
        for (NDArray p : parts) {
            if (p.dtype != first.dtype || p.shape.length != first.shape.length || !sameExcept(p.shape, first.shape, d))
                throw new GatunRuntimeException("concat(dim " + dim + "): " + p.describe() + " does not match " + first.describe()
                        + " (same dtype and the same sizes outside dimension " + d + " are needed)");
            outShape[d] += p.shape[d];
        }
        NDArray out = zeros(first.dtype, outShape);
        long inner = numel(Arrays.copyOfRange(outShape, d + 1, outShape.length)) * first.dtype.byteSize();
        long outer = numel(Arrays.copyOfRange(outShape, 0, d));
        long offset = 0;
        for (long o = 0; o < outer; o++) {
            for (NDArray p : parts) {
                long block = p.shape[d] * inner;
                MemorySegment.copy(p.data, o * block, out.data, offset, block);
                offset += block;
            }
        }
        return out;
    }

    private static boolean sameExcept(long[] a, long[] b, int d) {
        for (int k = 0; k < a.length; k++) if (k != d && a[k] != b[k]) return false;
        return true;
    }

    private int checkDim(int dim, String op) {
        int d = dim < 0 ? dim + shape.length : dim;
        if (d < 0 || d >= shape.length)
            throw new IndexOutOfBoundsException(op + ": dimension " + dim + " does not exist in " + describe()
                    + (shape.length == 0 ? " (a scalar has no dimensions)" : " (rank " + shape.length + ")"));
        return d;
    }

    private long evenPart(int d, int parts, String op) {
        if (parts <= 0) throw new GatunRuntimeException(op + ": the number of parts must be positive");
        if (shape[d] % parts != 0)
            throw new GatunRuntimeException(op + ": dimension " + d + " of " + describe() + " has size " + shape[d]
                    + ", which " + parts + " does not divide; pad it to a multiple of " + parts + " or split over a number of ranks that divides " + shape[d]);
        return shape[d] / parts;
    }

    /** {@code f32[2,3]}. */
    private String describe() {
        var dims = new StringJoiner(",", "[", "]");
        for (long s : shape) dims.add(Long.toString(s));
        return dtype.shortName() + dims;
    }

    // ------------------------------------------------------------------ comparison

    /**
     * Same shape and every element within {@code atol + rtol * |other|} (NumPy's rule); NaNs compare equal to
     * NaNs and infinities to infinities of the same sign. Dtypes may differ.
     */
    public boolean allClose(NDArray other, double rtol, double atol) { return mismatch(other, rtol, atol) == null; }

    /** {@link #allClose(NDArray, double, double)} with rtol 1e-5 and atol 1e-8, as in NumPy. */
    public boolean allClose(NDArray other) { return allClose(other, 1e-5, 1e-8); }

    /**
     * Why this array is not close to {@code other} (the first differing element), or null when it is. Two integer
     * arrays compare their exact values (int64 beyond 2^53 too).
     */
    public String mismatch(NDArray other, double rtol, double atol) {
        if (!Arrays.equals(shape, other.shape)) return "shapes differ: " + Arrays.toString(shape) + " vs " + Arrays.toString(other.shape);
        boolean exact = DTypes.isExact(dtype) && DTypes.isExact(other.dtype);
        for (long i = 0; i < numel; i++) {
            String why = exact ? mismatch(longAt(i), other.longAt(i), rtol, atol) : mismatch(get(i), other.get(i), rtol, atol);
            if (why != null) return "element " + i + " " + Arrays.toString(unravel(i)) + ": " + why;
        }
        return null;
    }

    private static String mismatch(double a, double b, double rtol, double atol) {
        if (close(a, b, rtol, atol)) return null;
        return a + " vs " + b + " (|diff| " + Math.abs(a - b) + " > " + (atol + rtol * Math.abs(b)) + ")";
    }

    /** Integers: the difference without overflow or rounding before it is compared. */
    private static String mismatch(long a, long b, double rtol, double atol) {
        if (a == b) return null;
        long d = a - b;
        boolean overflow = ((a ^ b) & (a ^ d)) < 0;   // then |a - b| >= 2^63, which a double holds well enough
        double diff = overflow ? Math.abs((double) a - (double) b) : Math.abs((double) d), bound = atol + rtol * Math.abs((double) b);
        return diff <= bound ? null : a + " vs " + b + " (|diff| " + (overflow ? Double.toString(diff) : Long.toString(Math.abs(d))) + " > " + bound + ")";
    }

    private static boolean close(double a, double b, double rtol, double atol) {
        if (Double.isNaN(a) || Double.isNaN(b)) return Double.isNaN(a) && Double.isNaN(b);
        if (Double.isInfinite(a) || Double.isInfinite(b)) return a == b;
        return Math.abs(a - b) <= atol + rtol * Math.abs(b);
    }

    /** Exact equality: dtype, shape and every element's bits. */
    @Override public boolean equals(Object o) {
        if (!(o instanceof NDArray a) || a.dtype != dtype || !Arrays.equals(a.shape, shape)) return false;
        return segment().mismatch(a.segment()) == -1;
    }

    @Override public int hashCode() {
        int h = Objects.hash(dtype, Arrays.hashCode(shape));
        for (long i = 0; i < Math.min(numel, 16); i++) h = 31 * h + Double.hashCode(get(i));
        return h;
    }

    /**
     * The dtype, the shape and the values laid out as NumPy prints them: rank 0 and 1 on one line
     * ({@code NDArray f32[3] [1.0, 2.0, 3.0]}), higher ranks one row a line after the header
     * ({@code NDArray f32[2,2]\n[[1.0, 2.0],\n [3.0, 4.0]]}), values padded to one width. Arrays of more than
     * {@value ArrayFormat#THRESHOLD} elements show the first and last {@value ArrayFormat#EDGE} entries of each
     * dimension around {@code ...}, and only those elements are read.
     */
    @Override public String toString() {
        String values = new ArrayFormat(this).format();
        return "NDArray " + describe() + (shape.length >= 2 ? "\n" : " ") + values;
    }

    /** Element {@code index} as {@link #toString} shows it (integers exactly). */
    String formatValue(long index) {
        if (dtype == DType.BOOL) return longAt(index) != 0 ? "true" : "false";
        if (dtype.isIntegral()) return Long.toString(longAt(index));
        double v = get(index);
        return dtype == DType.FLOAT64 ? Double.toString(v) : Float.toString((float) v);
    }

    // ------------------------------------------------------------------ helpers

    /** The multi-dimensional index of a linear one. */
    public long[] unravel(long index) {
        long[] idx = new long[shape.length];
        for (int d = shape.length - 1; d >= 0; d--) {
            if (shape[d] == 0) return idx;
            idx[d] = index % shape[d];
            index /= shape[d];
        }
        return idx;
    }

    static long numel(long[] shape) {
        long n = 1;
        for (long s : shape) {
            if (s < 0) throw new GatunRuntimeException("negative dimension in shape " + Arrays.toString(shape));
            n = Math.multiplyExact(n, s);
        }
        return n;
    }

    private static void checkCount(int count, long[] shape) {
        if (count != numel(shape))
            throw new GatunRuntimeException(count + " values do not fill shape " + Arrays.toString(shape) + " (" + numel(shape) + " elements)");
    }

    private int toIntSize() {
        if (numel > Integer.MAX_VALUE - 8) throw new IllegalStateException("an array of " + numel + " elements does not fit a Java array");
        return (int) numel;
    }
}
