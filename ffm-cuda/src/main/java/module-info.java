/**
 * Gatun's CUDA layer: CUDA runtime, driver, NVRTC, cuBLAS and NCCL through the Foreign Function &amp; Memory API,
 * and the CUDA backend that runs plans on it. Only {@code dev.gatun.cuda} is public API; the jextract bindings
 * ({@code dev.gatun.cuda.ffi.*}), the implementation ({@code dev.gatun.cuda.internal}) and the backend
 * ({@code dev.gatun.runtime.cuda}, found through the runtime's service loader) stay unexported.
 */
module dev.gatun.cuda {
    requires dev.gatun.runtime;

    exports dev.gatun.cuda;

    provides dev.gatun.runtime.spi.Backend with dev.gatun.runtime.cuda.CudaBackend;
}
