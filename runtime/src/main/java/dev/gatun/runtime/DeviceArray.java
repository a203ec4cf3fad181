package dev.gatun.runtime;

import dev.gatun.ir.DType;
import dev.gatun.runtime.spi.DeviceMemory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Objects;
import java.util.StringJoiner;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;

/**
 * An array in a backend's memory: GPU memory on the CUDA backend, host memory on the host backend. This is how data
 * stays where the engine works on it: weights bound once, outputs that feed the next session, inputs read in place.
 *
 * <p>Where arrays come from:
 * <ul>
 *   <li>{@link Session#run(Map)} returns its outputs as device arrays. They live in the session's own memory and are
 *   valid until the session's next call or bind (as the static outputs of a replayed CUDA graph are), whichever thread
 *   makes it: using one afterwards is an error that says so; {@link #copy()} keeps one for longer, and
 *   {@link Session#runCopied(Map)} copies them inside the call, before any other thread's call can run.</li>
 *   <li>{@link Session#toDevice(NDArray)} copies a host array into memory the session owns.</li>
 *   <li>{@link Session#wrap} views memory another library allocated, with a stated owner.</li>
 * </ul>
 *
 * <p>Every array is an {@link AutoCloseable} with an idempotent {@link #close()}: closing an array the session owns
 * frees it once the work reading it is done; closing an output or a wrapped array only lets go of it. Closing the
 * session closes what it owns. A closed array, or an output past its call, is refused by name wherever it is used.
 *
 * <p>Reading an output ({@link #toHost()}, {@link #copyTo}, {@link #copy()}) checks it and copies it in one step that
 * no call of its session comes between, whatever threads call the session: the values are its own call's, or the read
 * throws saying which later call overwrote it. {@link #address()} is a moment's answer: using the pointer elsewhere is
 * ordered by its {@link #stream()}, not by the session's calls.
 *
 * <p>{@link #address()} and {@link #stream()} are for interop with other CUDA libraries: the pointer of the first
 * element and the stream whose work writes it (wait on that stream before reading the memory elsewhere).
 */
public final class DeviceArray implements ArrayLike, AutoCloseable {
    private final DType dtype;
    private final long[] shape;
    private final long[] strides;
    private final long offset;
    private final long numel;
    private final DeviceMemory memory;
    private final boolean owned;
    /** Whether close() closes the memory: owned memory is freed, wrapped memory's release action runs. */
    private final boolean closesMemory;
    private final Supplier<String> expired;
    /** An output's call, as its session counts them: reads hold the session's call lock (null for other arrays). */
    private final CallLock.Stamp stamp;
    private final String origin;
    private final AtomicBoolean closed = new AtomicBoolean();

    private DeviceArray(DType dtype, long[] shape, long[] strides, long offset, DeviceMemory memory, boolean owned,
                        boolean closesMemory, Supplier<String> expired, CallLock.Stamp stamp, String origin) {
        this.dtype = Objects.requireNonNull(dtype, "dtype");
        this.shape = shape.clone();
        this.strides = strides.clone();
        this.offset = offset;
        this.numel = NDArray.numel(this.shape);
        this.memory = Objects.requireNonNull(memory, "memory");
        this.owned = owned;
        this.closesMemory = closesMemory;
        this.expired = expired;
        this.stamp = stamp;
        this.origin = origin;
        long extent = extentElements(this.shape, this.strides, offset);
        if (extent * dtype.byteSize() > memory.byteSize())
            throw new GatunRuntimeException(origin + ": " + describe(dtype, this.shape) + " needs " + extent * dtype.byteSize()
                    + " bytes but its memory holds " + memory.byteSize());
    }

    /**
     * An array the caller of this method (a backend) owns through {@code memory}: row-major, starting at its first byte;
     * closing the array closes the memory.
     */
    public static DeviceArray owned(DType dtype, long[] shape, DeviceMemory memory, String origin) {
        return new DeviceArray(dtype, shape, contiguousStrides(shape), 0, memory, true, true, null, null, origin);
    }

    /**
     * A view of memory the array does not own ({@code offset} and {@code strides} in elements), valid while
     * {@code expired} returns null; otherwise it returns why the view may no longer be used.
     */
    public static DeviceArray view(DType dtype, long[] shape, long[] strides, long offset, DeviceMemory memory,
                                   Supplier<String> expired, String origin) {
        return new DeviceArray(dtype, shape, strides, offset, memory, false, false, expired, null, origin);
    }

    /**
     * A row-major view of memory another owner allocated (a wrapped pointer): it does not expire, and closing the array
     * closes {@code memory}, which runs the owner's release action instead of freeing anything.
     */
    public static DeviceArray borrowed(DType dtype, long[] shape, DeviceMemory memory, String origin) {
        return new DeviceArray(dtype, shape, contiguousStrides(shape), 0, memory, false, true, null, null, origin);
    }

    /** This output of a backend's call as its session hands it out: stamped with the call, named {@code origin}. */
    DeviceArray asOutput(CallLock.Stamp stamp, String origin) {
        return new DeviceArray(dtype, shape, strides, offset, memory, false, false, expired, stamp, origin);
    }

    /** Whether this is an output of the session whose calls {@code calls} orders. */
    boolean isOutputOf(CallLock calls) { return stamp != null && stamp.lock() == calls; }

    /** The call of the session that made this output, or null for an array that is no session's output. */
    CallLock.Stamp stamp() { return stamp; }

    @Override public DType dtype() { return dtype; }
    @Override public long[] shape() { return shape.clone(); }
    @Override public long numel() { return numel; }

    /** Element strides, one per dimension. */
    public long[] strides() { return strides.clone(); }

    public int ndim() { return shape.length; }

    public long byteSize() { return numel * dtype.byteSize(); }

    /** Row-major and dense: what a plan reads in place. */
    public boolean isContiguous() { return Arrays.equals(strides, contiguousStrides(shape)); }

    /** "cuda:0", "host", ... */
    public String device() { return memory.device(); }

    /** Where the array came from ("output 'y' of session 'mlp', call 3", "toDevice", "wrapped pointer"). */
    public String origin() { return origin; }

    /** The address of the first element: a device pointer on the CUDA backend. */
    public long address() {
        checkUsable("address()");
        return memory.address() + offset * dtype.byteSize();
    }

    /** The {@code cudaStream_t} whose work writes this array (0 on the host backend): order other CUDA work after it. */
    public long stream() {
        checkUsable("stream()");
        return memory.stream();
    }

    /**
     * A row-major host copy; waits for the work that writes the array. An output is checked and copied in one step
     * that no call of its session comes between: its own call's values, or an error saying it was overwritten.
     */
    public NDArray toHost() {
        return reading("toHost()", () -> {
            NDArray out = NDArray.zeros(dtype, shape);
            read(out);
            return out;
        });
    }

    /** Copies the array into {@code dst} (same dtype and shape); waits for the work that writes the array. */
    public void copyTo(NDArray dst) {
        reading("copyTo()", () -> {
            read(dst);
            return null;
        });
    }

    /**
     * Checks the array may be used, then runs {@code read}: for an output, with its session's call lock held shared,
     * so the check and the read are one step with respect to the session's calls (see {@link CallLock}).
     */
    private <T> T reading(String use, Supplier<T> read) {
        Supplier<T> checked = () -> {
            checkUsable(use);
            return read.get();
        };
        return stamp == null ? checked.get() : stamp.read(checked, why -> new GatunRuntimeException("DeviceArray." + use + ": " + origin + " " + why));
    }

    /** The copy into {@code dst}, once the array was checked. */
    private void read(NDArray dst) {
        if (dst.dtype() != dtype || !Arrays.equals(dst.shape(), shape))
            throw new GatunRuntimeException("copyTo: " + describe(dtype, shape) + " (" + origin + ") cannot be copied into "
                    + describe(dst.dtype(), dst.shape()));
        if (numel == 0) return;
        if (isContiguous()) {
            memory.read(offset * dtype.byteSize(), dst, byteSize());
            return;
        }
        long extent = extentElements(shape, strides, offset);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(extent * dtype.byteSize(), 16);
            memory.read(0, host, host.byteSize());
            MemorySegment.copy(NDArray.gather(host, dtype, shape, offset, strides).segment(), 0, dst.segment(), 0, byteSize());
        }
    }

    /**
     * Writes {@code src} (same dtype and shape) into this contiguous array, after the work queued before on it, as a
     * static input's new contents are written before a call that reads it in place ({@code Session.bindInPlace}).
     * An output of a call may not be written (the next call overwrites it): {@link #copy()} it first.
     */
    public void copyFrom(NDArray src) {
        if (expired != null) throw new GatunRuntimeException("copyFrom: " + origin + " is an output of a call, which the next call overwrites; copy() it first");
        checkUsable("copyFrom()");
        if (src.dtype() != dtype || !Arrays.equals(src.shape(), shape))
            throw new GatunRuntimeException("copyFrom: " + describe(src.dtype(), src.shape()) + " cannot be copied into " + describe(dtype, shape)
                    + " (" + origin + ")");
        if (!isContiguous()) throw new GatunRuntimeException("copyFrom: " + origin + " is a strided view; write into a contiguous array");
        if (numel > 0) memory.write(offset * dtype.byteSize(), src.segment(), byteSize());
    }

    /** A row-major copy in new memory of the same device, owned by the caller: what keeps an output past its call. */
    public DeviceArray copy() {
        return reading("copy()", () -> {
            if (isContiguous())
                return owned(dtype, shape, memory.copy(offset * dtype.byteSize(), Math.max(1, byteSize())), "copy of " + origin);
            // a strided view is laid out row-major through the host (rare: outputs that are transposed views)
            NDArray host = NDArray.zeros(dtype, shape);
            read(host);
            DeviceMemory m = memory.copy(0, Math.max(1, byteSize()));
            try {
                m.write(0, host.segment(), byteSize());
            } catch (RuntimeException e) {
                m.close();
                throw e;
            }
            return owned(dtype, shape, m, "copy of " + origin);
        });
    }

    /** The backend's memory: for backends, which read and order work on it. */
    public DeviceMemory memory() { return memory; }

    /** The element offset of the first element inside {@link #memory()}. */
    public long offset() { return offset; }

    /** Whether closing frees the memory (arrays made by toDevice, copy, bind). */
    public boolean isOwned() { return owned; }

    /**
     * Null when the array may be used, else why not (closed, an output of an earlier call, a closed session). For an
     * output this is a moment's answer where other threads call its session: reading it ({@link #toHost()}) checks again.
     */
    public String whyUnusable() {
        if (closed.get()) return origin + " was closed";
        String why = memory.whyUnusable();
        if (why == null && stamp != null) why = stamp.whyStale();
        if (why == null && expired != null) why = expired.get();
        return why == null ? null : origin + " " + why;
    }

    /** Throws, naming {@code use}, when the array may no longer be used. */
    public void checkUsable(String use) {
        String why = whyUnusable();
        if (why != null) throw new GatunRuntimeException("DeviceArray." + use + ": " + why);
    }

    public boolean isClosed() { return closed.get(); }

    /**
     * Frees memory this array owns once the work reading it is done, runs a wrapped array's release action, lets go of
     * an output. Idempotent.
     */
    @Override public void close() {
        if (closed.compareAndSet(false, true) && closesMemory) memory.close();
    }

    /** The header and the first few values (only those are read from the device). */
    @Override public String toString() {
        String head = "DeviceArray " + describe(dtype, shape) + " on " + device() + " (" + origin + ")";
        try {
            return reading("toString()", () -> head + " " + firstValues());
        } catch (GatunRuntimeException e) {
            String why = whyUnusable();
            return head + " [unusable: " + (why != null ? why : e.getMessage()) + "]";
        }
    }

    /** "[1.0, 2.0, ...]": the first few values, once the array was checked. */
    private String firstValues() {
        int k = (int) Math.min(numel, 6);
        if (k == 0) return "[]";
        NDArray few;
        if (isContiguous()) {
            few = NDArray.zeros(dtype, k);
            memory.read(offset * dtype.byteSize(), few.segment(), (long) k * dtype.byteSize());
        } else if (numel <= 4096) {
            few = NDArray.zeros(dtype, shape);
            read(few);
        } else return "[a strided view: toHost() reads it]";
        var values = new StringJoiner(", ", "[", numel > k ? ", ...]" : "]");
        for (int i = 0; i < k; i++) values.add(few.formatValue(i));
        return values.toString();
    }

    static String describe(DType dtype, long[] shape) {
        var dims = new StringJoiner(",", "[", "]");
        for (long s : shape) dims.add(Long.toString(s));
        return dtype.shortName() + dims;
    }

    static long[] contiguousStrides(long[] shape) {
        long[] s = new long[shape.length];
        long st = 1;
        for (int d = shape.length - 1; d >= 0; d--) {
            s[d] = st;
            st *= Math.max(1, shape[d]);
        }
        return s;
    }

    /** One past the last element a view touches, in elements from the memory's start (0 for an empty view). */
    static long extentElements(long[] shape, long[] strides, long offset) {
        long last = offset;
        for (int d = 0; d < shape.length; d++) {
            if (shape[d] == 0) return 0;
            last += (shape[d] - 1) * strides[d];
        }
        return last + 1;
    }
}
