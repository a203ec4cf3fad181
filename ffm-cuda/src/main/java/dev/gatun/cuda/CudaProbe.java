package dev.gatun.cuda;

import java.util.Map;

/**
 * What {@link Cuda#probe()} found: which libraries loaded (name to path), which did not (name to the loader's
 * message), the driver and runtime versions (as CUDA encodes them, 13000 for 13.0), the device count and, when CUDA
 * cannot be used, the reason.
 *
 * @param available  whether the driver and runtime loaded, initialised and at least one device is present
 * @param reason     why CUDA is unavailable ("" when available)
 * @param libraries  soname to absolute path, for each library that loaded
 * @param failures   soname to reason, for each library that did not
 * @param driverVersion  {@code cuDriverGetVersion}, 0 when unknown
 * @param runtimeVersion {@code cudaRuntimeGetVersion}, 0 when unknown
 * @param deviceCount    number of CUDA devices, 0 when unavailable
 */
public record CudaProbe(boolean available, String reason, Map<String, String> libraries, Map<String, String> failures,
                        int driverVersion, int runtimeVersion, int deviceCount) {

    public CudaProbe {
        libraries = Map.copyOf(libraries);
        failures = Map.copyOf(failures);
    }

    /** One line: {@code available: N device(s), driver 13.0, ...} or {@code unavailable: <reason>}. */
    public String summary() {
        if (!available) {
            return "unavailable: " + reason;
        }
        return "available: " + deviceCount + " device(s), driver " + version(driverVersion) + ", runtime "
                + version(runtimeVersion) + ", libraries " + libraries.keySet()
                + (failures.isEmpty() ? "" : ", missing " + failures.keySet());
    }

    static String version(int v) {
        return v / 1000 + "." + (v % 1000) / 10;
    }

    @Override
    public String toString() {
        return summary() + (failures.isEmpty() ? "" : " " + failures) + " " + libraries;
    }
}
