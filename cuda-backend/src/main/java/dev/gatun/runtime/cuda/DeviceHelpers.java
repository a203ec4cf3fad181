package dev.gatun.runtime.cuda;

/**
 * The device functions generated code calls ({@code gt_max}, {@code gt_sigmoid}, ...), each defined once in a
 * source's {@link CudaCodegen#prelude prelude}: {@link CudaExpressions} notes a helper's key ({@code <name>_<domain>},
 * or {@code f16}/{@code bf16}) in {@link KernelScope#helpers} when it first calls it, in an order that defines a
 * helper before one that calls it ({@code gt_silu} calls {@code gt_sigmoid}).
 */
final class DeviceHelpers {
    private DeviceHelpers() {}

    /** The definition of the helper {@code key}. */
    static String source(String key) {
        String prefix = "static __device__ __forceinline__ ";
        return switch (key) {
            // a warp-a-row kernel's row between phases: the compiler may not keep what an earlier phase computed from it
            // (bf16 converted to float, exponentials), which would hold 4 times the row's registers; costs no instruction
            case "opaque" -> "template <typename V> " + prefix + "void gt_opaque(V& v) {  // v may have changed: what is computed from it is computed again\n"
                    + "#ifdef __CUDA_ARCH__\n"
                    + "    if constexpr (sizeof(V) % 4 == 0) {\n"
                    + "        unsigned* w = reinterpret_cast<unsigned*>(&v);\n"
                    + "        #pragma unroll\n"
                    + "        for (int i = 0; i < (int) (sizeof(V) / 4); i++) asm volatile(\"\" : \"+r\"(w[i]));\n"
                    + "    } else if constexpr (sizeof(V) == 2) asm volatile(\"\" : \"+h\"(*reinterpret_cast<unsigned short*>(&v)));\n"
                    + "#endif\n"
                    + "}\n";
            case "f16" -> prefix + "float gt_f16(float x) { return __half2float(__float2half_rn(x)); }  // round to f16\n";
            case "bf16" -> prefix + "float gt_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }  // round to bf16\n";
            // NaN propagates: one instruction from sm_80 on
            case "max_FLOAT" -> prefix + "float gt_max(float a, float b) {\n#if __CUDA_ARCH__ >= 800\n"
                    + "    float r; asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r;\n#else\n"
                    + "    return a != a ? a : b != b ? b : fmaxf(a, b);\n#endif\n}\n";
            case "min_FLOAT" -> prefix + "float gt_min(float a, float b) {\n#if __CUDA_ARCH__ >= 800\n"
                    + "    float r; asm(\"min.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r;\n#else\n"
                    + "    return a != a ? a : b != b ? b : fminf(a, b);\n#endif\n}\n";
            // for results rounded to a half type at once (see CudaExpressions)
            case "hexp_FLOAT" -> prefix + "float gt_hexp(float a) {  // 2^(a log2(e)) by the fast unit, subnormal results kept (no ftz)\n"
                    + "    float r; asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(r) : \"f\"(a * 1.44269504088896341f)); return r;\n}\n";
            case "hdiv_FLOAT" -> prefix + "float gt_hdiv(float a, float b) {  // by the reciprocal where it and b are normal\n"
                    + "    const float r = __frcp_rn(b);\n"
                    + "    return fabsf(b) >= 1.17549435e-38f && fabsf(r) >= 1.17549435e-38f ? __fmul_rn(a, r) : a / b;\n}\n";
            case "max_DOUBLE" -> prefix + "double gt_max(double a, double b) { return a != a ? a : b != b ? b : fmax(a, b); }\n";
            case "min_DOUBLE" -> prefix + "double gt_min(double a, double b) { return a != a ? a : b != b ? b : fmin(a, b); }\n";
            case "max_LONG" -> prefix + "long long gt_max(long long a, long long b) { return a > b ? a : b; }\n";
            case "min_LONG" -> prefix + "long long gt_min(long long a, long long b) { return a < b ? a : b; }\n";
            case "abs_LONG" -> prefix + "long long gt_abs(long long a) { return a < 0 ? -a : a; }\n";
            case "relu_FLOAT" -> prefix + "float gt_relu(float a) { return a != a ? a : a > 0.0f ? a : 0.0f; }  // relu(NaN) = NaN, relu(-0) = 0\n";
            case "relu_DOUBLE" -> prefix + "double gt_relu(double a) { return a != a ? a : a > 0.0 ? a : 0.0; }\n";
            case "relu_LONG" -> prefix + "long long gt_relu(long long a) { return a > 0 ? a : 0; }\n";
            case "sigmoid_FLOAT" -> prefix + "float gt_sigmoid(float a) { if (a >= 0.0f) return 1.0f / (1.0f + expf(-a)); float e = expf(a); return e / (1.0f + e); }\n";
            case "sigmoid_DOUBLE" -> prefix + "double gt_sigmoid(double a) { if (a >= 0.0) return 1.0 / (1.0 + exp(-a)); double e = exp(a); return e / (1.0 + e); }\n";
            case "gelu_FLOAT" -> prefix + "float gt_gelu(float a) { return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f)); }  // exact (erf) form\n";
            case "gelu_DOUBLE" -> prefix + "double gt_gelu(double a) { return 0.5 * a * (1.0 + erf(a / 1.4142135623730951)); }\n";
            case "silu_FLOAT" -> prefix + "float gt_silu(float a) { return a * gt_sigmoid(a); }\n";
            case "silu_DOUBLE" -> prefix + "double gt_silu(double a) { return a * gt_sigmoid(a); }\n";
            default -> throw new IllegalStateException("no helper " + key);
        };
    }
}
