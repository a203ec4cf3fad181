/**
 * A CUDA library over the Foreign Function &amp; Memory API: the CUDA runtime, driver, NVRTC, cuBLAS and NCCL. It knows
 * nothing of Gatun's compiler (Gatun's CUDA backend, module {@code dev.gatun.runtime.cuda}, is built on it). Only
 * {@code dev.gatun.cuda} is public API; the jextract bindings ({@code dev.gatun.cuda.ffi.*}) and the implementation
 * ({@code dev.gatun.cuda.internal}) stay unexported.
 */
module dev.gatun.cuda {
    exports dev.gatun.cuda;
}
