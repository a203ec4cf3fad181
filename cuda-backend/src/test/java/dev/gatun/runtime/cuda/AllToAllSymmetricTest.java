package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The CUDA backend's all_to_all on symmetric memory without a GPU ({@link SymmetricAllToAll}): its source compiles with
 * nvcc beside the symmetric kernels and the fault record; the plans it runs (even and uneven on symmetric memory, ranks
 * sharing a GPU or not) load past the refusals, and the ones it cannot (an uneven one through NCCL, any one through NCCL
 * where ranks share a GPU) are refused naming the step; the plan prints how each moves its rows (push into receive
 * buffers, or pull); a refused count recorded by the kernel reads as {@code AllToAllCounts}' words naming the step.
 */
class AllToAllSymmetricTest {
    static Plan plan(dev.gatun.ir.graph.Graph g, LoweringOptions options) { return Planner.plan(Lowering.lower(g, options)); }

    /** x's rows sent by counts: the receive buffer a graph output (pull) or consumed by the next op (push). */
    static dev.gatun.ir.graph.Graph uneven(int world, boolean receiveIsOutput) {
        var g = Gatun.graph("dispatch").world(world);
        var r = g.input("x", DType.F32, 8, 4).mul(2).allToAll("world", g.input("counts", DType.I64, world), 12);
        g.output("y", receiveIsOutput ? r.values() : r.values().add(1));
        g.output("received", r.counts());
        return g.build();
    }

    static Step.Collective collective(Plan p, boolean uneven) {
        return p.steps().stream().flatMap(s -> s.collectives().stream())
                .filter(c -> c.call().kind() == CollectiveKind.ALL_TO_ALL && c.uneven() == uneven).findFirst().orElseThrow();
    }

    @Test
    void theKernelCompilesWithTheSymmetricKernelsAndTheFaultRecord(@TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        org.junit.jupiter.api.Assumptions.assumeTrue(nvcc != null, "nvcc is not on the PATH");
        String source = SymmetricKernels.defines(dev.gatun.runtime.ExecutionOptions.Cuda.DEFAULT) + SymmetricKernels.SOURCE + DeviceFault.SOURCE
                + SymmetricAllToAll.SOURCE;
        var r = CudaCodegenFixtures.compile(nvcc, dir, "a2a", source);
        assertThat(r.ok()).as(r.log()).isTrue();
        assertThat(r.ptx()).contains(".entry " + SymmetricAllToAll.KERNEL, ".entry " + SymmetricAllToAll.PARTS_KERNEL, ".entry gatun_barrier", ".entry one_shot_f32");
        assertThat(r.ptx()).as("the signal is a release store at system scope").contains("st.release.sys.global.u32");
        assertThat(r.ptx()).as("the refusal traps after the trailing barrier").contains("trap;");
        assertThat(r.ptx()).doesNotContain("multimem");
    }

    @Test
    void symmetricAllToAllsLoadPastTheRefusalsAlsoWhereRanksShareAGpu() {
        for (boolean output : new boolean[]{true, false}) {
            var p = plan(uneven(2, output), LoweringOptions.world(2));
            var c = collective(p, true);
            assertThat(c.call().algorithm()).isEqualTo(Algorithm.SYMM_MEM);
            assertThat(collective(p, false).call().algorithm()).as("the received counts' even all_to_all").isEqualTo(Algorithm.SYMM_MEM);
            assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
            assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(p, 2)).doesNotThrowAnyException();
            assertThat(DeviceFault.needed(p)).as("the uneven all_to_all records refused counts").isTrue();
        }
        var e = Gatun.graph("even").world(4);
        e.output("y", e.input("x", DType.BF16, 8, 4).allToAll("world"));
        var even = plan(e.build(), LoweringOptions.world(4));
        assertThat(collective(even, false).call().algorithm()).isEqualTo(Algorithm.SYMM_MEM);
        assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(even, 4)).doesNotThrowAnyException();
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(even)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(even)).as("an even all_to_all never refuses").isFalse();
    }

    @Test
    void anUnevenAllToAllThroughNcclIsRefusedNamingTheStepAndAnyThroughNcclWhereRanksShareAGpu() {
        var p = plan(uneven(2, false), LoweringOptions.world(2).withSymmetricMemory(false));
        assertThat(collective(p, true).call().algorithm()).isEqualTo(Algorithm.NCCL);
        assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(p)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("plan 'dispatch'").hasMessageContaining("all_to_all.nccl with row counts read at run time")
                .hasMessageContaining("capacity=12").hasMessageContaining("symmetricMemory(true)");
        var e = Gatun.graph("even").world(2);
        e.output("y", e.input("x", DType.F32, 8, 4).allToAll("world"));
        var even = plan(e.build(), LoweringOptions.world(2).withSymmetricMemory(false));
        assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(even, 1)).doesNotThrowAnyException();
        assertThatThrownBy(() -> new CudaBackend().load(even, CompileOptions.world(2).ranksPerGpu(2))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("all_to_all.nccl(x, \"world\")").hasMessageContaining("NCCL refuses 2 ranks on one device");
    }

    /** The kernel keeps each member's offsets in shared memory: a group past its 32 members is refused at load, by name. */
    @Test
    void aSymmetricAllToAllOfMoreThanThirtyTwoMembersIsRefusedAtLoad() {
        for (int world : new int[]{SymmetricAllToAll.MAX_WORLD, SymmetricAllToAll.MAX_WORLD + 1}) {
            var e = Gatun.graph("wide").world(world);
            e.output("y", e.input("x", DType.F32, world, 2).mul(2).allToAll("world"));
            var p = plan(e.build(), LoweringOptions.world(world));
            assertThat(collective(p, false).call().algorithm()).isEqualTo(Algorithm.SYMM_MEM);
            if (world <= SymmetricAllToAll.MAX_WORLD) assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
            else assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(p)).isInstanceOf(CompilationException.class)
                    .hasMessageContaining("plan 'wide'").hasMessageContaining("all_to_all.symm_mem(")
                    .hasMessageContaining("at most " + SymmetricAllToAll.MAX_WORLD + " members and group \"world\" has " + world).hasMessageContaining("symmetricMemory(false)");
        }
    }

    @Test
    void thePlanSaysWhetherTheRowsArePushedOrPulled() {
        var push = plan(uneven(2, false), LoweringOptions.world(2));
        var c = collective(push, true);
        assertThat(c.output().isSymmetric()).isTrue();
        assertThat(c.format()).contains("all_to_all.symm_mem(", "senders write into receive buffer " + c.output().name(),
                "push: after a starting barrier each member writes its rows into the others' receive buffers");
        assertThat(collective(push, false).format()).contains("pull: after a starting barrier each member reads its part of every member's rows");
        var pull = plan(uneven(2, true), LoweringOptions.world(2));
        assertThat(collective(pull, true).output().isSymmetric()).isFalse();
        assertThat(collective(pull, true).format()).contains("pull: after a starting barrier").doesNotContain("push:");
        var nccl = plan(uneven(2, true), LoweringOptions.world(2).withSymmetricMemory(false));
        assertThat(collective(nccl, true).format()).doesNotContain("pull:", "push:");
    }

    @Test
    void aRefusedCountReadsAsTheHostsRuleNamingTheStep() {
        var p = plan(uneven(2, false), LoweringOptions.world(2));
        var c = collective(p, true);
        int step = p.steps().indexOf(c);
        assertThat(step).isNotNegative();
        try (var arena = Arena.ofConfined()) {
            var r = arena.allocate(DeviceFault.RECORD_BYTES, 8);
            r.set(ValueLayout.JAVA_INT, 0, DeviceFault.ALL_TO_ALL);
            r.set(ValueLayout.JAVA_INT, 4, step);
            long[] v = {3, 1, 13, 12};   // receiver 1 would get 13 rows, the capacity is 12
            for (int i = 0; i < 4; i++) r.set(ValueLayout.JAVA_LONG, 8 + 8L * i, v[i]);
            assertThat(DeviceFault.describe(r, p)).startsWith("step " + step + " (").contains("all_to_all.symm_mem(")
                    .contains("member 1 of group \"world\" would receive 13 rows but the capacity is 12 rows")
                    .contains("raise the capacity of allToAll(group, counts, capacity)").contains("nothing is truncated");
            r.set(ValueLayout.JAVA_LONG, 8, 1);
            r.set(ValueLayout.JAVA_LONG, 16, 0);
            r.set(ValueLayout.JAVA_LONG, 24, -2);
            r.set(ValueLayout.JAVA_LONG, 32, 1);
            assertThat(DeviceFault.describe(r, p)).contains("member 0 of group \"world\" sends -2 rows to member 1; a row count is never negative");
            r.set(ValueLayout.JAVA_LONG, 8, 2);
            r.set(ValueLayout.JAVA_LONG, 24, Long.MAX_VALUE);
            r.set(ValueLayout.JAVA_LONG, 32, 8);
            assertThat(DeviceFault.describe(r, p)).contains("member 0 of group \"world\"'s counts add up to at least " + Long.MAX_VALUE
                    + " rows, but its input has 8");
        }
    }

    /**
     * The GPU tests run the joined kernel: AllToAllSymmetricGpuTest's graph (at worlds 2 and 4, ranks sharing a GPU or
     * not) has all_to_alls the schedule places together (the even one and the pulled bf16 rows), joined into one step;
     * the MoE graphs (AllToAllGpuTest's layer, the Mixtral decoders) join pushed parts (ExpertParallelPlanTest).
     */
    @Test
    void theGpuTestsGraphsRunJoinedAllToAlls() {
        for (int world : new int[]{2, 4})
            for (int perGpu : new int[]{1, world}) {
                var options = CompileOptions.world(world).ranksPerGpu(perGpu);
                var p = Planner.plan(Lowering.lower(AllToAllSymmetricGpuTest.graph(world), options.lowering()), options.planning());
                var joined = p.steps().stream().filter(s -> s instanceof Step.JoinedAllToAll).map(s -> (Step.JoinedAllToAll) s).toList();
                assertThat(joined).as("%s", p).isNotEmpty();
                assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
            }
    }

    /**
     * Joined all_to_alls (one launch, one barrier pair): the step can stop the call, and the kernel's record names the
     * part that refused its counts (kind + 256 x part), which reads as that part's step line and the host rule's words.
     */
    @Test
    void aRefusedCountOfAJoinedAllToAllNamesThePart() {
        var g = Gatun.graph("dispatch").world(2);
        var counts = g.input("counts", DType.I64, 2);
        var rows = g.input("x", DType.F32, 8, 4).allToAll("world", counts, 12);
        var ids = g.input("meta", DType.I64, 8, 1).allToAll("world", counts, 12);
        g.output("y", rows.values().mul(ids.values().cast(DType.F32)));
        var p = plan(g.build(), LoweringOptions.world(2));
        var joined = p.steps().stream().filter(s -> s instanceof Step.JoinedAllToAll).map(s -> (Step.JoinedAllToAll) s).findFirst().orElseThrow();
        assertThat(DeviceFault.needed(p)).isTrue();
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
        int step = p.steps().indexOf(joined);
        var second = joined.members().get(1);
        try (var arena = Arena.ofConfined()) {
            var r = arena.allocate(DeviceFault.RECORD_BYTES, 8);
            r.set(ValueLayout.JAVA_INT, 0, DeviceFault.ALL_TO_ALL);
            r.set(ValueLayout.JAVA_INT, 4, step);
            long[] v = {3 + 256, 1, 13, 12};   // part 1: receiver 1 would get 13 rows, the capacity is 12
            for (int i = 0; i < 4; i++) r.set(ValueLayout.JAVA_LONG, 8 + 8L * i, v[i]);
            assertThat(DeviceFault.describe(r, p)).startsWith("step " + step + " (" + second.output().name() + " = all_to_all.symm_mem(" + second.input().name())
                    .contains("member 1 of group \"world\" would receive 13 rows but the capacity is 12 rows");
            r.set(ValueLayout.JAVA_LONG, 8, 3);   // part 0
            assertThat(DeviceFault.describe(r, p)).startsWith("step " + step + " (" + joined.first().output().name() + " = all_to_all.symm_mem(");
        }
    }

    /**
     * Mixtral's reference at ep 2 with the ranks sharing a GPU (the options DecoderReferencesGpuTest compiles with): every
     * all_to_all of the prefill and the decode step is on symmetric memory, the uneven ones pushed into receive
     * buffers, and the CUDA backend's load-time refusals pass.
     */
    @Test
    void mixtralsExpertParallelPlansAtEpTwoOnOneGpuRunEveryAllToAllOnSymmetricMemory() throws Exception {
        var ref = DecoderReferencesGpuTest.Reference.load("mixtral");
        try (var ckpt = dev.gatun.models.llama.LlamaCheckpoint.open(ref.dir())) {
            var c = ckpt.config();
            var ep = dev.gatun.models.llama.Parallelism.experts(2, 1);
            var options = CompileOptions.world(2).ranksPerGpu(2);
            int len = ref.prompt().length;
            for (var g : java.util.List.of(dev.gatun.models.llama.LlamaPrefill.graph(c, len, ep, DType.F32),
                    dev.gatun.models.llama.LlamaDecoder.prefill(c, 1, len, len + 16, ep, DType.F32, new dev.gatun.models.llama.LlamaDecoder.Form(false, true)),
                    dev.gatun.models.llama.LlamaDecoder.decode(c, 1, len + 16, ep, DType.F32, dev.gatun.models.llama.LlamaDecoder.Form.GREEDY))) {
                var p = Planner.plan(Lowering.lower(g, options.lowering()), options.planning());
                var all = p.steps().stream().flatMap(st -> st.collectives().stream()).filter(x -> x.call().kind() == CollectiveKind.ALL_TO_ALL).toList();
                assertThat(all).as(g.name()).isNotEmpty().allMatch(x -> x.call().algorithm() == Algorithm.SYMM_MEM);
                assertThat(all.stream().filter(x -> x.uneven() && x.output().storage().isSymmetric()).count()).as(g.name() + ": three a layer (as ExpertParallelDecoderTest counts them), pushed")
                        .isEqualTo(3L * c.layers());
                assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).as(g.name()).doesNotThrowAnyException();
                assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(p, 2)).as(g.name()).doesNotThrowAnyException();
            }
        }
    }
}
