/**
 * Gatun's CUDA backend: runs a plan on NVIDIA GPUs through the CUDA library of {@code dev.gatun.cuda} (kernel code
 * generation and NVRTC, the symmetric heap and its collectives, cuBLAS and NCCL calls, CUDA graph capture). Nothing
 * is exported: the runtime finds the backend through its service loader.
 */
module dev.gatun.runtime.cuda {
    requires dev.gatun.runtime;
    requires dev.gatun.cuda;

    provides dev.gatun.runtime.spi.Backend with dev.gatun.runtime.cuda.CudaBackend;
}
