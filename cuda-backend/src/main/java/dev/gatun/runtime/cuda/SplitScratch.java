package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Stream;

/**
 * What a kernel that splits its work among blocks keeps between launches: float32 scratch for the slices' partial
 * results and one counter per tile, both device memory of the kernel's owner. The counters are zeroed once, on the
 * stream that orders every launch of the owner; the block (or warp) that counts in last sets its tile's counter back
 * to 0, so every launch, a replay of a CUDA graph included, finds them at zero. Launches of one owner are ordered by
 * its stream, so they share the scratch. Used by {@link CudaAttention}.
 */
record SplitScratch(DeviceBuffer scratch, DeviceBuffer counters) implements AutoCloseable {

    /** {@code floats} of scratch and {@code counters} counters, the counters zeroed on {@code stream}; nothing is kept where either fails. */
    static SplitScratch allocate(Device device, long floats, long counters, Stream stream) {
        DeviceBuffer s = null, c = null;
        try {
            s = device.allocate(Math.max(1, floats) * Float.BYTES);
            c = device.allocate(Math.max(1, counters) * Integer.BYTES);
            c.memsetAsync(0, stream);
            return new SplitScratch(s, c);
        } catch (RuntimeException e) {
            if (c != null) c.close();
            if (s != null) s.close();
            throw e;
        }
    }

    /** Frees both (again: nothing). */
    @Override public void close() {
        try {
            counters.close();
        } finally {
            scratch.close();
        }
    }
}
