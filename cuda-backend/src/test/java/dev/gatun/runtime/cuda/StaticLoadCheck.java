package dev.gatun.runtime.cuda;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Everything the CUDA backend checks of a plan before, or as, it loads it that needs no device: its refusals at load
 * ({@link CudaBackend#refuseOpsWithoutKernels}, {@link CudaBackend#refuseAllToAllOnSharedGpus}, {@link
 * CudaExecutable#refuseGathers}), the NCCL collectives that ranks sharing a GPU refuse ({@link GpuSharing#check}), the
 * user ops without a CUDA source, the products cuBLAS cannot write or take ({@link CudaMatmul}), the flash attention
 * calls outside its kernels' dtypes; and every CUDA source the executable would compile for it (each plan kernel,
 * fused collective, product with epilogues and flash attention program), for nvcc. A plan that passes all of it and
 * whose sources compile fails on the GPU only for what a device alone can say.
 */
final class StaticLoadCheck {
    private StaticLoadCheck() {}

    /** Why the CUDA backend would refuse {@code plan} run by ranks {@code ranksPerGpu} to a GPU; empty where it takes it. */
    static List<String> refusals(Plan plan, int ranksPerGpu) {
        var out = new ArrayList<String>();
        record Check(Runnable run) {}
        for (var c : List.of(new Check(() -> CudaBackend.refuseOpsWithoutKernels(plan)), new Check(() -> CudaBackend.refuseAllToAllOnSharedGpus(plan, ranksPerGpu)))) {
            try {
                c.run().run();
            } catch (dev.gatun.ir.GatunException e) {
                out.add(e.getMessage());
            }
        }
        for (Step s : plan.steps())
            for (Step part : s.parts()) {
                for (var c : part.collectives())
                    if (ranksPerGpu > 1 && plan.worldSize() > 1 && c.call().algorithm() == Algorithm.NCCL)
                        out.add(c.format().strip() + ": NCCL, which ranks sharing a GPU refuse");
                if (part instanceof Step.CallUserOp u && u.op().cudaSource() == null) out.add("user op '" + u.op().name() + "' has no CUDA source");
                if (CudaExecutable.productOf(part) instanceof Step.Matmul m) {
                    DType t = m.a().dtype();
                    if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16 && t != DType.FLOAT64) out.add(m.format().strip() + ": matmul of " + t);
                    var strides = m.output().strides();
                    long last = m.output().shape().sizes().length == 0 ? 1 : m.output().shape().dim(m.output().shape().rank() - 1).size();
                    if (!strides.isEmpty() && last > 1 && !(strides.getLast().isConstant() && strides.getLast().constant() == 1))
                        out.add(m.format().strip() + ": its output's columns are not next to each other, which cuBLAS writes");
                }
                if (part instanceof Step.OpCall o && (o.spec() == dev.gatun.ir.ops.FlashAttention.SPEC || o.spec() == dev.gatun.ir.ops.FlashAttentionBackward.SPEC)) {
                    DType t = o.input(0).dtype();
                    if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16 && t != DType.FLOAT64) out.add(o.format().strip() + ": " + o.spec().name() + " of " + t);
                }
            }
        return out;
    }

    /**
     * Every CUDA source the executable compiles for {@code plan} on an H200: the plan kernels' ({@link CudaCodegen}), and
     * the others (fused collectives, products with epilogues, flash attention programs) by a name that says what each is.
     */
    record Sources(List<KernelSource> kernels, Map<String, String> others) {}

    static Sources sources(Plan plan) {
        var kernels = new ArrayList<KernelSource>();
        for (var k : plan.kernels()) kernels.add(CudaCodegen.generate(k));
        var out = new LinkedHashMap<String, String>();
        String defines = SymmetricKernels.defines(dev.gatun.runtime.ExecutionOptions.Cuda.DEFAULT);
        int batches = 0;
        for (Step s : plan.steps()) {
            if (s instanceof Step.FusedCollective f && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate(f);
                out.put("fused collective " + src.name(), defines + src.source());
            }
            if (s instanceof Step.CollectiveBatch b && b.first().slots() != null && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate("barrier_free_batch_" + batches++, null, b, null);
                out.put("barrier-free batch " + src.name(), defines + src.source());
            }
            if (s instanceof Step.TiledProduct t) {
                var src = TiledProductCodegen.generate(t, dev.gatun.planner.PlanOptions.Target.H200.multiprocessors());
                out.put("tiled product " + src.name(), src.source());
            }
            for (Step part : s.parts())
                if (part instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.FlashAttention.SPEC) {
                    DType t = o.input(0).dtype();
                    long d = o.input(0).shape().dim(3).size();
                    out.putIfAbsent("flash_attention " + t.shortName() + " head size " + d, CudaFlashAttention.source(t, (int) d));
                }
                else if (part instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.FlashAttentionBackward.SPEC) {
                    DType t = o.input(0).dtype();
                    long d = o.input(0).shape().dim(3).size();
                    out.putIfAbsent("flash_attention_backward " + t.shortName() + " head size " + d, CudaFlashAttentionBackward.source(t, (int) d));
                }
        }
        return new Sources(kernels, out);
    }
}
