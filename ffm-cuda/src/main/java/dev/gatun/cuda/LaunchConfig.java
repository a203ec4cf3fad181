package dev.gatun.cuda;

/**
 * How to launch a kernel: grid and block dimensions, dynamic shared memory in bytes and the stream ({@code null}
 * means the device's legacy default stream).
 */
public record LaunchConfig(Dim3 grid, Dim3 block, int sharedMemBytes, Stream stream) {
    public LaunchConfig {
        if (grid == null || block == null) {
            throw new IllegalArgumentException("grid and block are required");
        }
        if (sharedMemBytes < 0) {
            throw new IllegalArgumentException("negative shared memory");
        }
        if (block.volume() > 1024) {
            throw new IllegalArgumentException("a block has at most 1024 threads, asked for " + block.volume());
        }
    }

    /** A 1-D launch on the default stream. */
    public static LaunchConfig of(int gridX, int blockX) {
        return new LaunchConfig(Dim3.of(gridX), Dim3.of(blockX), 0, null);
    }

    /** Enough blocks of {@code blockX} threads to cover {@code n} elements. */
    public static LaunchConfig cover(long n, int blockX) {
        long blocks = Math.max(1, (n + blockX - 1) / blockX);
        return of(Math.toIntExact(blocks), blockX);
    }

    public LaunchConfig withStream(Stream s) { return new LaunchConfig(grid, block, sharedMemBytes, s); }

    public LaunchConfig withSharedMem(int bytes) { return new LaunchConfig(grid, block, bytes, stream); }
}
