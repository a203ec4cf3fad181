package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Fused collective launches ({@link CollectiveCodegen}) compile with {@code nvcc -ptx -arch=sm_90}, warnings as errors:
 * the seeds' graph and all-reduce + residual + RMSNorm with each all-reduce algorithm that fuses, f32, bf16 and f16,
 * and the tensor-parallel Llama decoder's layers.
 */
class CollectiveCodegenCompileTest {
    static Path nvcc;

    @BeforeAll
    static void findNvcc() {
        nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping compile tests");
    }

    static Graph seeds(DType t) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", t, 64, 64);
        g.output("d", x.add(1).allReduce(SUM).add(x.add(2).allReduce(SUM)).add(x.add(3).allReduce(SUM)).allReduce(SUM));
        return g.build();
    }

    static Graph arNorm(int tokens, int hidden, DType t) {
        var g = Gatun.graph("ar_norm");
        Tensor x = g.input("x", t, tokens, hidden), residual = g.input("residual", t, tokens, hidden), w = g.input("w", t, hidden);
        Tensor h = x.allReduce(SUM).add(residual);
        g.output("y", h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()).mul(w));
        g.output("h", h);
        return g.build();
    }

    /** Every fused launch (and barrier-free batch) of {@code g}'s plan at world 2. */
    static List<CollectiveCodegen.FusedSource> fused(Graph g, Algorithm a) {
        var lowering = LoweringOptions.world(2);
        if (a != null) lowering = lowering.withForcedAllReduce(a);
        Plan p = Planner.plan(Lowering.lower(g, lowering));
        var out = new ArrayList<CollectiveCodegen.FusedSource>();
        for (Step s : p.steps()) {
            if (s instanceof Step.FusedCollective f) out.add(CollectiveCodegen.generate(f));
            if (s instanceof Step.CollectiveBatch b && b.first().slots() != null) out.add(CollectiveCodegen.generate("batch", null, b, null));
        }
        return out;
    }

    @Test
    void fusedLaunchesCompile(@TempDir Path dir) throws Exception {
        var sources = new ArrayList<CollectiveCodegen.FusedSource>();
        for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
            for (DType t : List.of(DType.F32, DType.BF16, DType.F16)) sources.addAll(fused(seeds(t), a));
            sources.addAll(fused(arNorm(8, 4096, DType.BF16), a));
            sources.addAll(fused(arNorm(256, 8192, DType.BF16), a));
        }
        // the tensor-parallel decoder's layers: the product's copy in, the residual add and RMSNorm after
        var llama = new dev.gatun.models.llama.LlamaConfig(2048, 1, 32, 8, 8192, 1000, 500000.0, 1e-5, true);
        sources.addAll(fused(dev.gatun.models.llama.LlamaDecoder.decode(llama, 64, 2, DType.BF16), null));
        assertThat(sources).hasSizeGreaterThanOrEqualTo(14);
        int i = 0;
        for (var s : sources) {
            var r = CudaCodegenFixtures.compile(nvcc, dir, "fused" + i++, s.source());
            assertThat(r.ok()).as(s.source() + "\n" + r.log()).isTrue();
            assertThat(r.ptx()).contains(".entry " + s.name());
        }
    }
}
