package dev.gatun.runtime.cuda;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The Llama training step ({@link TrainingPlans}: forward, reverse-mode gradients, AdamW clipped by global norm) as
 * the CUDA backend would load it, without a device: at world 1 and fully sharded over 2 ranks sharing one GPU, in
 * float32 and in bf16 compute over float32 master weights, and in float64 at world 1. Every check the backend makes
 * before touching the GPU ({@link StaticLoadCheck#refusals}) passes, and every CUDA source it would compile for these
 * plans compiles with nvcc (warnings as errors). Every state the step rewrites is written in place by the update's
 * kernel (the planner's state writes: no snapshot, no update_slice). The float64 step fully sharded over ranks that share a GPU is refused
 * by name (its reduce_scatter has no f64 symmetric-memory kernel, and NCCL takes one rank a GPU).
 *
 * <p>Before flash_attention had an f64 kernel on the GPU the world-1 float64 case failed here, naming it.
 */
class TrainingStepLoadsTest {
    record Case(int world, DType master, DType compute) {
        DataParallel mode() { return world == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED; }
        Plan plan() { return TrainingPlans.cudaPlan(TrainingPlans.graph(world, mode(), master, compute, true), TrainingPlans.options(world)); }
        @Override public String toString() { return "world " + world + " " + mode() + " " + master.shortName() + " master, " + compute.shortName() + " compute"; }
    }

    static final List<Case> CASES = List.of(new Case(1, DType.F32, DType.F32), new Case(1, DType.F32, DType.BF16), new Case(2, DType.F32, DType.F32),
            new Case(2, DType.F32, DType.BF16), new Case(1, DType.F64, DType.F64));

    static boolean calls(Plan p, String op) {
        return p.steps().stream().flatMap(s -> s.parts().stream()).anyMatch(s -> s instanceof Step.OpCall o && o.spec().name().equals(op));
    }

    @Test
    void theTrainingStepPassesEveryCheckTheCudaBackendMakesAtLoad() {
        for (Case c : CASES) {
            Plan p = c.plan();
            assertThat(StaticLoadCheck.refusals(p, c.world())).as("%s", c).isEmpty();
            // the step's ops that have kernels of their own: the embedding's lookup and its gradient, the loss's gather, attention
            for (String op : List.of("index_select", "scatter_add", "gather", "flash_attention"))
                assertThat(calls(p, op)).as("%s calls %s", c, op).isTrue();
            // every state's new value written into its slot by the update's kernel (StateWrites): no copy either way
            for (String op : List.of("snapshot", "update_slice"))
                assertThat(calls(p, op)).as("%s calls %s", c, op).isFalse();
            int states = p.states().size();
            assertThat(p.notes()).as("%s", c).first().asString().startsWith("state writes: " + states + " of " + states + " ");
            var kinds = p.steps().stream().flatMap(s -> s.collectives().stream()).map(col -> col.call().kind()).distinct().toList();
            if (c.world() > 1)
                assertThat(kinds).as("%s: the weights gathered, the gradients reduce-scattered, the norm all-reduced", c)
                        .contains(CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE);
            else assertThat(kinds).isEmpty();
        }
    }

    /**
     * The check can fail: fully sharded in float64 over ranks sharing a GPU, the gradients' reduce_scatter would need
     * NCCL (the symmetric-memory kernels take f32, f16 and bf16), which refuses two ranks on one device: refused by name.
     */
    @Test
    void theFloat64FsdpStepOnOneSharedGpuIsRefusedNamingTheReduceScatter() {
        var g = TrainingPlans.graph(2, DataParallel.FULLY_SHARDED, DType.F64, DType.F64, true);
        assertThatThrownBy(() -> TrainingPlans.cudaPlan(g, TrainingPlans.options(2))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("reduce_scatter").hasMessageContaining("f64 has no symmetric-memory kernel").hasMessageContaining("NCCL refuses two ranks on one device");
    }

    /** Each distinct source once: plan kernels in batches of one nvcc run each (a failing batch recompiled one by one to name it), the others alone. */
    @Test
    void everySourceTheBackendWouldCompileForTheStepCompiles(@TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping compile tests");
        var kernels = new LinkedHashMap<String, KernelSource>();
        var others = new LinkedHashMap<String, String>();
        for (Case c : CASES) {
            var s = StaticLoadCheck.sources(c.plan());
            for (KernelSource k : s.kernels()) kernels.putIfAbsent(k.source(), k);
            s.others().forEach((name, src) -> others.putIfAbsent(src, c + ": " + name));
        }
        var failures = new ArrayList<String>();
        var all = new ArrayList<>(kernels.values());
        for (int i = 0; i < all.size(); i += 150) {
            var chunk = all.subList(i, Math.min(all.size(), i + 150));
            var r = CudaCodegenFixtures.compile(nvcc, dir, "training_kernels_" + i, CudaCodegenFixtures.batch(chunk).getKey());
            if (r.ok()) continue;
            for (KernelSource k : chunk) {
                var one = CudaCodegenFixtures.compile(nvcc, dir, k.name(), k.source());
                if (!one.ok()) failures.add("kernel " + k.name() + "\n" + one.log() + "\n" + k.source());
            }
        }
        int n = 0;
        for (var e : others.entrySet()) {
            var r = CudaCodegenFixtures.compile(nvcc, dir, "training_other_" + n++, e.getKey());
            if (!r.ok()) failures.add(e.getValue() + "\n" + r.log());
        }
        assertThat(failures).as("%d kernels and %d other sources", kernels.size(), others.size()).isEmpty();
        assertThat(kernels).hasSizeGreaterThan(50);
        System.out.println("TrainingStepLoadsTest: compiled " + kernels.size() + " kernels and " + others.size() + " other sources: " + others.values());
    }
}
