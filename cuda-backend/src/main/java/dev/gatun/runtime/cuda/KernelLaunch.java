package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;

import java.util.List;
import java.util.Map;

/**
 * One launch of a built-in program's entry point, as data: its name, grid ({@code grid} blocks along x, {@code gridY}
 * along y), block, dynamic shared memory and arguments (addresses and sizes). {@link CudaTopK},
 * {@link CudaGatherScatter} and {@link CudaExpertMatmul} decide their launches in plain functions that make these, so a
 * test without a GPU runs exactly those launches on an emulation of the kernels' source (KernelEmulationTest), and
 * {@link #launch} makes them on the device.
 */
record KernelLaunch(String kernel, int grid, int gridY, int block, int sharedBytes, List<Object> args) {
    KernelLaunch {
        args = List.copyOf(args);
    }

    /** A launch of a one-dimensional grid without dynamic shared memory. */
    KernelLaunch(String kernel, int grid, int block, List<Object> args) { this(kernel, grid, 1, block, 0, args); }

    /** Launches it from {@code kernels} (by entry point name) on {@code stream}, programmatically where asked. */
    void launch(Map<String, Kernel> kernels, boolean programmatic, Stream stream) {
        Kernel k = kernels.get(kernel);
        if (k == null) throw new IllegalStateException("no kernel " + kernel + " was loaded");
        Programmatic.launch(k, programmatic, new LaunchConfig(Dim3.of(grid, gridY), Dim3.of(block), sharedBytes, stream), args.toArray());
    }
}
