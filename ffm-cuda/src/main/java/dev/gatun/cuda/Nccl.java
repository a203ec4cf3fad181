package dev.gatun.cuda;

import dev.gatun.cuda.ffi.nccl.nccl;
import dev.gatun.cuda.internal.Errors;
import dev.gatun.cuda.internal.NativeLibraries.Lib;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** NCCL entry points that belong to no communicator: version, unique ids, group calls, {@code ncclMemAlloc}. */
public final class Nccl {
    private Nccl() {}

    /** Element types. */
    public enum DataType {
        INT8(nccl.ncclInt8(), 1), UINT8(nccl.ncclUint8(), 1), INT32(nccl.ncclInt32(), 4), UINT32(nccl.ncclUint32(), 4),
        INT64(nccl.ncclInt64(), 8), UINT64(nccl.ncclUint64(), 8), FLOAT16(nccl.ncclFloat16(), 2),
        FLOAT32(nccl.ncclFloat32(), 4), FLOAT64(nccl.ncclFloat64(), 8), BFLOAT16(nccl.ncclBfloat16(), 2);

        final int code;
        public final int bytes;

        DataType(int code, int bytes) {
            this.code = code;
            this.bytes = bytes;
        }
    }

    /** Reduction operators. */
    public enum RedOp {
        SUM(nccl.ncclSum()), PROD(nccl.ncclProd()), MAX(nccl.ncclMax()), MIN(nccl.ncclMin()), AVG(nccl.ncclAvg());

        final int code;

        RedOp(int code) {
            this.code = code;
        }
    }

    /** nccl.h declares the group calls with an empty (K&R) parameter list, so jextract made them variadic. */
    private static final class Group {
        static final nccl.ncclGroupStart START = nccl.ncclGroupStart.makeInvoker();
        static final nccl.ncclGroupEnd END = nccl.ncclGroupEnd.makeInvoker();
    }

    static void require() {
        Cuda.require(Lib.NCCL);
    }

    /** NCCL's version code, for example 22803 for 2.28.3. */
    public static int version() {
        require();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment v = arena.allocate(ValueLayout.JAVA_INT);
            Errors.nccl(nccl.ncclGetVersion(v), "ncclGetVersion", null);
            return v.get(ValueLayout.JAVA_INT, 0);
        }
    }

    /** A new unique id (on rank 0), to be sent to every other rank. */
    public static NcclUniqueId uniqueId() {
        require();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = arena.allocate(NcclUniqueId.SIZE);
            Errors.nccl(nccl.ncclGetUniqueId(id), "ncclGetUniqueId", null);
            return NcclUniqueId.of(id.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    /** How deep this thread is inside group calls (windows cannot be registered there). */
    private static final ThreadLocal<int[]> GROUP_DEPTH = ThreadLocal.withInitial(() -> new int[1]);

    public static void groupStart() {
        require();
        Errors.nccl(Group.START.apply(), "ncclGroupStart", null);
        GROUP_DEPTH.get()[0]++;
    }

    public static void groupEnd() {
        int[] depth = GROUP_DEPTH.get();
        if (depth[0] > 0) depth[0]--;
        Errors.nccl(Group.END.apply(), "ncclGroupEnd", null);
    }

    /** Whether this thread is between {@link #groupStart} and {@link #groupEnd}. */
    static boolean inGroup() {
        return GROUP_DEPTH.get()[0] > 0;
    }

    /**
     * Whether the loaded libnccl has symmetric windows ({@code ncclCommWindowRegister}, NCCL 2.27 or newer). Never
     * throws for an old library; throws {@link CudaUnavailableException} where CUDA or NCCL is not there at all.
     */
    public static boolean hasWindows() {
        require();
        return RealNcclWindowCalls.SYSTEM.hasWindows();
    }

    /** Runs {@code body} between {@code ncclGroupStart} and {@code ncclGroupEnd} (the end runs even if it throws). */
    public static void group(Runnable body) {
        groupStart();
        boolean ok = false;
        try {
            body.run();
            ok = true;
        } finally {
            if (ok) {
                groupEnd();
            } else {
                try {
                    groupEnd();
                } catch (RuntimeException ignored) {
                    // the body's exception wins
                }
            }
        }
    }

    /**
     * Allocates device memory with {@code ncclMemAlloc} (NCCL 2.19 or newer; suitable for
     * {@link NcclComm#registerWindow}); freed with {@code ncclMemFree} on close.
     */
    public static DeviceBuffer memAlloc(Device device, long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("Nccl.memAlloc: the size must be positive, not " + bytes);
        }
        require();
        device.enter();
        long address = RealNcclWindowCalls.SYSTEM.memAlloc(bytes);
        try {
            return new DeviceBuffer(device, address, bytes, DeviceBuffer.Kind.NCCL);
        } catch (RuntimeException e) { // the device closed meanwhile: free what was allocated
            try {
                RealNcclWindowCalls.SYSTEM.memFree(address);
            } catch (RuntimeException f) {
                e.addSuppressed(f);
            }
            throw e;
        }
    }
}
