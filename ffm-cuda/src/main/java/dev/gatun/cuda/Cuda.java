package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.NativeLibraries;
import dev.gatun.cuda.internal.NativeLibraries.Lib;
import dev.gatun.cuda.internal.NativeLibraries.LoadResult;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Entry point: loads the CUDA libraries (once), reports what is there, and guards GPU features.
 *
 * <p>{@link #probe()} never throws; every other GPU feature throws {@link CudaUnavailableException} with the
 * probe's reason where CUDA (or the library it needs) is unavailable.
 */
public final class Cuda {
    /** The oldest driver API version the bindings were generated for (CUDA 13.0). */
    public static final int MIN_DRIVER_VERSION = 13000;

    private static volatile CudaProbe probe;

    private Cuda() {}

    /** Loads the libraries if not done yet, initialises the driver and reports. Never throws. */
    public static CudaProbe probe() {
        CudaProbe p = probe;
        if (p == null) {
            synchronized (Cuda.class) {
                p = probe;
                if (p == null) {
                    p = doProbe(NativeLibraries.loadAll());
                    probe = p;
                }
            }
        }
        return p;
    }

    /** Whether at least one CUDA device can be used. */
    public static boolean isAvailable() {
        return probe().available();
    }

    /** Throws {@link CudaUnavailableException} unless CUDA is available. */
    public static void requireAvailable() {
        CudaProbe p = probe();
        if (!p.available()) {
            throw new CudaUnavailableException(p.reason());
        }
    }

    /** Throws unless CUDA and the given optional library (nvrtc, cublas, nccl...) are available. */
    static void require(Lib lib) {
        requireAvailable();
        LoadResult r = NativeLibraries.loadAll().get(lib);
        if (!r.loaded()) {
            throw new CudaUnavailableException(r.error());
        }
    }

    /** Builds a probe from library load results; package-private for tests. */
    static CudaProbe doProbe(Map<Lib, LoadResult> results) {
        Map<String, String> libs = new LinkedHashMap<>();
        Map<String, String> failures = new LinkedHashMap<>();
        String reason = "";
        for (LoadResult r : results.values()) {
            if (r.loaded()) {
                libs.put(r.lib().soname, r.path());
            } else {
                failures.put(r.lib().soname, r.error());
                if (r.lib().essential && reason.isEmpty()) {
                    reason = r.error();
                }
            }
        }
        if (!reason.isEmpty()) {
            return new CudaProbe(false, reason, libs, failures, 0, 0, 0);
        }
        int driverVersion = 0;
        int runtimeVersion = 0;
        int count = 0;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
            int rc = driver.cuDriverGetVersion(out);
            if (rc == 0) {
                driverVersion = out.get(ValueLayout.JAVA_INT, 0);
            }
            if (cudart.cudaRuntimeGetVersion(out) == 0) {
                runtimeVersion = out.get(ValueLayout.JAVA_INT, 0);
            }
            if (driverVersion != 0 && driverVersion < MIN_DRIVER_VERSION) {
                reason = "driver too old: it supports CUDA " + CudaProbe.version(driverVersion) + ", Gatun needs "
                        + CudaProbe.version(MIN_DRIVER_VERSION) + " or newer";
            } else {
                rc = driver.cuInit(0);
                if (rc != 0) {
                    reason = "cuInit failed: " + dev.gatun.cuda.internal.Errors.driverException(rc, "cuInit").getMessage();
                } else if ((rc = driver.cuDeviceGetCount(out)) != 0) {
                    reason = "cuDeviceGetCount failed: " + rc;
                } else {
                    count = out.get(ValueLayout.JAVA_INT, 0);
                    if (count == 0) {
                        reason = "no CUDA device";
                    }
                }
            }
        } catch (Throwable t) { // a missing symbol or a loader problem must not escape the probe
            reason = "driver initialisation failed: " + t;
        }
        return new CudaProbe(reason.isEmpty(), reason, libs, failures, driverVersion, runtimeVersion, count);
    }
}
