/**
 * Gatun's CUDA layer: CUDA runtime, driver, NVRTC, cuBLAS and NCCL through the Foreign Function &amp; Memory API.
 * Only {@code dev.gatun.cuda} is public API; the jextract bindings ({@code dev.gatun.cuda.ffi.*}) and the
 * implementation ({@code dev.gatun.cuda.internal}) stay unexported.
 */
module dev.gatun.cuda {
    exports dev.gatun.cuda;
}
