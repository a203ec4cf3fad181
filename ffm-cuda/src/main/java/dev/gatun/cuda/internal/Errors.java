package dev.gatun.cuda.internal;

import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.NcclException;
import dev.gatun.cuda.ffi.cublas.cublas;
import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.ffi.nccl.nccl;
import dev.gatun.cuda.ffi.nvrtc.nvrtc;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Turns status codes into {@link CudaException}s with the library's own name and text for the error. */
public final class Errors {
    private Errors() {}

    /** Reads a NUL-terminated C string; {@code null} pointers give "". */
    public static String cString(MemorySegment p) {
        if (p == null || p.equals(MemorySegment.NULL)) {
            return "";
        }
        return p.reinterpret(1L << 20).getString(0);
    }

    public static void cudart(int rc, String call) {
        if (rc != 0) {
            throw new CudaException(call, rc, cString(cudart.cudaGetErrorName(rc)), cString(cudart.cudaGetErrorString(rc)));
        }
    }

    public static void driver(int rc, String call) {
        if (rc != 0) {
            throw driverException(rc, call);
        }
    }

    public static CudaException driverException(int rc, String call) {
        String name = "CUresult " + rc;
        String text = "";
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            if (driver.cuGetErrorName(rc, p) == 0) {
                name = cString(p.get(ValueLayout.ADDRESS, 0));
            }
            if (driver.cuGetErrorString(rc, p) == 0) {
                text = cString(p.get(ValueLayout.ADDRESS, 0));
            }
        }
        return new CudaException(call, rc, name, text);
    }

    public static void nvrtc(int rc, String call) {
        if (rc != 0) {
            String s = cString(nvrtc.nvrtcGetErrorString(rc));
            throw new CudaException(call, rc, s, s);
        }
    }

    public static void cublas(int rc, String call) {
        if (rc != 0) {
            throw new CudaException(call, rc, cString(cublas.cublasGetStatusName(rc)), cString(cublas.cublasGetStatusString(rc)));
        }
    }

    public static void cublasLt(int rc, String call) {
        if (rc != 0) {
            throw new CudaException(call, rc, cString(cublas.cublasLtGetStatusName(rc)), cString(cublas.cublasLtGetStatusString(rc)));
        }
    }

    /** Checks an NCCL result; {@code comm} may be NULL. */
    public static void nccl(int rc, String call, MemorySegment comm) {
        if (rc != 0 && rc != nccl.ncclInProgress()) {
            throw new NcclException(call, rc, cString(nccl.ncclGetErrorString(rc)),
                    cString(nccl.ncclGetLastError(comm == null ? MemorySegment.NULL : comm)));
        }
    }
}
