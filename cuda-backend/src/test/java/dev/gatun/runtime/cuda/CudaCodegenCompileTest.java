package dev.gatun.runtime.cuda;

import dev.gatun.runtime.cuda.CudaCodegenFixtures.Case;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Every generated source compiles with {@code nvcc -ptx -arch=sm_90} (warnings are errors): the hand-built kernels
 * (every op at every dtype, every reduction, every cast, layouts and constants) and the distinct kernels of a few
 * hundred planned random graphs. Sources are checked in batches (one nvcc run for many, each in its own namespace);
 * a failing batch is recompiled source by source to name the culprit. A sample also compiles on its own, exactly as
 * generated, which checks that each source includes the headers it needs. Skipped where nvcc is absent.
 */
class CudaCodegenCompileTest {
    /** Random graphs to plan; raise with -Dgatun.codegen.graphs=N. */
    static final int GRAPHS = Integer.getInteger("gatun.codegen.graphs", 200);
    static final int BATCH = 150;

    static Path nvcc;

    @BeforeAll
    static void findNvcc() {
        nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping compile tests");
    }

    @Test
    void symmetricCollectivesCompileWithAndWithoutTheComparisonFence(@TempDir Path dir) throws Exception {
        var fence = dev.gatun.runtime.ExecutionOptions.Cuda.DEFAULT;
        for (var settings : List.of(fence, fence.withBarrierFreeBackoffNs(200), new dev.gatun.runtime.ExecutionOptions.Cuda("/usr/local/cuda", false, true, 8, 0))) {
            String variant = SymmetricKernels.defines(settings);
            var r = CudaCodegenFixtures.compile(nvcc, dir, "symm_" + variant.length(), variant + SymmetricKernels.SOURCE);
            assertThat(r.ok()).as(r.log()).isTrue();
            for (String k : List.of("one_shot_f32", "one_shot_multi_bf16", "two_shot_bf16", "reduce_scatter_f16", "all_gather_f32", "gatun_barrier",
                    "barrier_free_f32", "barrier_free_f16", "barrier_free_bf16"))
                assertThat(r.ptx()).contains(".entry " + k);
            assertThat(r.ptx().contains("membar.sys") || r.ptx().contains("fence.sc.sys")).as(variant).isEqualTo(settings.fenceSc());
            assertThat(r.ptx().contains("nanosleep")).as(variant).isEqualTo(settings.barrierFreeBackoffNs() > 0);
        }
    }

    @Test
    void theIndexSelectArgmaxAndGemvKernelsCompile(@TempDir Path dir) throws Exception {
        var r = CudaCodegenFixtures.compile(nvcc, dir, "index_select", CudaIndexSelect.SOURCE);
        assertThat(r.ok()).as(r.log()).isTrue();
        assertThat(r.ptx()).contains(".entry gatun_index_select(", "trap;");
        var u = CudaCodegenFixtures.compile(nvcc, dir, "update_slice", CudaUpdateSlice.SOURCE);
        assertThat(u.ok()).as(u.log()).isTrue();
        assertThat(u.ptx()).contains(".entry gatun_update_slice(", "trap;", "ld.global.v4.u32");
        var at = CudaCodegenFixtures.compile(nvcc, dir, "attention", CudaAttention.SOURCE);
        assertThat(at.ok()).as(at.log()).isTrue();
        for (int p : CudaAttention.CUTS)
            for (int d : CudaAttention.HEAD_SIZES)
                assertThat(at.ptx()).contains(".entry attention_f16_" + d + "_p" + p + "(", ".entry attention_bf16_" + d + "_p" + p + "(")
                        .contains(d <= 64 ? ".entry attention_f32_" + d + "_p" + p + "(" : ".entry");
        assertThat(at.ptx()).contains("trap;", "atom.acq_rel.gpu.global.add.u32");
        var a = CudaCodegenFixtures.compile(nvcc, dir, "argmax", CudaArgmax.SOURCE);
        assertThat(a.ok()).as(a.log()).isTrue();
        assertThat(a.ptx()).contains(".entry argmax_f32(", ".entry argmax_bf16(", ".entry argmax_f64(", ".entry argmax_f16(");
        var v = CudaCodegenFixtures.compile(nvcc, dir, "gemv", CudaGemv.SOURCE);
        assertThat(v.ok()).as(v.log()).isTrue();
        for (String t : List.of("f32", "f16", "bf16"))
            for (int m : new int[]{1, 2, 4, 8}) assertThat(v.ptx()).contains(".entry gemv_fma_" + t + "_" + m + "(");
        assertThat(v.ptx()).contains(".entry gemv_mma_f16(", ".entry gemv_mma_bf16(", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "ld.global.cs.v4");
    }

    /** topk (every dtype but bool), gather (every element size) and scatter_add (every dtype but bool), with their traps. */
    @Test
    void theTopkGatherAndScatterAddKernelsCompile(@TempDir Path dir) throws Exception {
        var t = CudaCodegenFixtures.compile(nvcc, dir, "topk", CudaTopK.SOURCE);
        assertThat(t.ok()).as(t.log()).isTrue();
        assertThat(CudaTopK.ENTRIES).hasSize(dev.gatun.ir.DType.values().length - 1);
        for (String e : CudaTopK.ENTRIES.values()) assertThat(t.ptx()).contains(".entry " + e + "(");
        var g = CudaCodegenFixtures.compile(nvcc, dir, "gather_scatter", CudaGatherScatter.SOURCE);
        assertThat(g.ok()).as(g.log()).isTrue();
        assertThat(CudaGatherScatter.SCATTER_ADD).hasSize(dev.gatun.ir.DType.values().length - 1);
        for (String e : CudaGatherScatter.GATHER.values()) assertThat(g.ptx()).contains(".entry " + e + "(");
        for (String e : CudaGatherScatter.SCATTER_ADD.values()) assertThat(g.ptx()).contains(".entry " + e + "(");
        assertThat(g.ptx()).contains(".entry scatter_check(", "trap;");
        // the sums are plain adds, each rounded: no fused multiply-add, no atomic add (the trap's claim is a compare-and-swap)
        assertThat(g.ptx()).doesNotContain("atom.global.add", "red.global.add", "fma.rn").contains("atom.global.cas");
    }

    /**
     * expert_matmul's program: the one-row GEMV's entry with an indexed weight base at f32, f16 and bf16; its weight
     * streamed by 16-byte loads past the caches, the id's trap, no stack frame and no spills.
     */
    @Test
    void theExpertMatmulKernelsCompileWithoutSpills(@TempDir Path dir) throws Exception {
        var r = CudaCodegenFixtures.compile(nvcc, dir, "expert_matmul", CudaExpertMatmul.SOURCE);
        assertThat(r.ok()).as(r.log()).isTrue();
        for (String e : CudaExpertMatmul.ENTRIES.values()) assertThat(r.ptx()).contains(".entry " + e + "(");
        assertThat(r.ptx()).contains("ld.global.cs.v4", "trap;", "atom.global.cas");
        var c = CudaCodegenFixtures.cubin(nvcc, dir, "expert_matmul_cubin", CudaExpertMatmul.SOURCE);
        assertThat(c.ok()).as(c.log()).isTrue();
        for (String e : CudaExpertMatmul.ENTRIES.values()) assertThat(c.log()).contains(e);
        assertThat(c.log()).as("spills").doesNotContainPattern("[1-9][0-9]* bytes spill").doesNotContainPattern("[1-9][0-9]* bytes stack frame");
    }

    /** flash_attention's programs: both forms at every dtype (f64 too) and head size a plan can give them, no spills. */
    @Test
    void theFlashAttentionProgramsCompileWithoutSpills(@TempDir Path dir) throws Exception {
        for (var t : List.of(dev.gatun.ir.DType.F32, dev.gatun.ir.DType.BF16, dev.gatun.ir.DType.F16, dev.gatun.ir.DType.F64))
            for (int d : new int[]{4, 16, 32, 64, 80, 128, 256}) {
                String name = "flash_" + t + "_" + d, form = CudaFlashAttention.form(t, d);
                var r = CudaCodegenFixtures.compile(nvcc, dir, name, CudaFlashAttention.source(t, d));
                assertThat(r.ok()).as(name + "\n" + r.log()).isTrue();
                assertThat(r.ptx()).contains(".entry flash_" + form + "(");
                if (form.equals("mma")) assertThat(r.ptx()).contains("mma.sync.aligned.m16n8k16.row.col.f32");
                // f64 in double throughout: its tiles and products in f64, no float product (double exp's own range
                // reduction uses a few float instructions, exactly)
                if (t == dev.gatun.ir.DType.F64)
                    assertThat(r.ptx()).as(name).contains("fma.rn.f64", "st.shared.f64").doesNotContain("fma.rn.f32", "st.shared.f32");
                var c = CudaCodegenFixtures.cubin(nvcc, dir, name + "_cubin", CudaFlashAttention.source(t, d));
                assertThat(c.ok()).as(c.log()).isTrue();
                assertThat(c.log()).as(name + " spills").contains("0 bytes spill stores");
            }
    }

    /**
     * flash_attention_backward's programs: every form at every dtype and head size a plan can give them, every entry
     * point there, the tensor-core form on mma.sync with float32 atomics for dq, the tiled rows form on vector reads of
     * shared memory, no spills.
     */
    @Test
    void theFlashAttentionBackwardProgramsCompileWithoutSpills(@TempDir Path dir) throws Exception {
        for (var t : List.of(dev.gatun.ir.DType.F32, dev.gatun.ir.DType.BF16, dev.gatun.ir.DType.F16, dev.gatun.ir.DType.F64))
            for (int d : new int[]{4, 7, 32, 64, 80, 128, 256}) {
                String name = "flash_backward_" + t + "_" + d, form = CudaFlashAttentionBackward.form(t, d);
                String source = CudaFlashAttentionBackward.source(t, d);
                var r = CudaCodegenFixtures.compile(nvcc, dir, name, source);
                assertThat(r.ok()).as(name + "\n" + r.log()).isTrue();
                for (String e : CudaFlashAttentionBackward.entries(form)) assertThat(r.ptx()).contains(".entry " + e + "(");
                if (form.equals("mma")) assertThat(r.ptx()).contains("mma.sync.aligned.m16n8k16.row.col.f32", "ldmatrix.sync.aligned.m8n8.x4.trans", "atom.global.add.f32");
                if (t == dev.gatun.ir.DType.F64) assertThat(r.ptx()).as(name).contains("fma.rn.f64");
                // the tiled rows form reads its shared tiles four elements at a time
                if (form.equals("rows")) assertThat(r.ptx()).as(name).contains(t == dev.gatun.ir.DType.F64 ? "ld.shared.v2.f64" : "ld.shared.v4.f32");
                var c = CudaCodegenFixtures.cubin(nvcc, dir, name + "_cubin", source);
                assertThat(c.ok()).as(c.log()).isTrue();
                // ptxas spills a few bytes of the simple form's dk/dv kernel at head size 4 (its loops fully unrolled); no case that matters
                if (!form.equals("simple") || d >= 16)
                    assertThat(c.log()).as(name + " spills").doesNotContainPattern("[1-9][0-9]* bytes spill").doesNotContainPattern("[1-9][0-9]* bytes stack frame");
            }
    }

    /** Row kernels that fold their per-row values after the rows (the last block's tail), at several row types. */
    @Test
    void kernelsWithFoldsCompile(@TempDir Path dir) throws Exception {
        var g = dev.gatun.dsl.Gatun.graph("folds");
        g.output("m", g.input("x", dev.gatun.ir.DType.BF16, 300, 5000).max(-1).mean());
        g.output("s", g.input("y", dev.gatun.ir.DType.I32, 33, 100).sum(-1).sum());
        g.output("t", g.input("z", dev.gatun.ir.DType.F16, 64, 64, 8).sum(-1).max());
        var none = g.input("e", dev.gatun.ir.DType.F32, 0, 8); // one row kernel, two folds
        g.output("z0", none.sum(-1).sum());
        g.output("zm", none.max(-1).mean());
        var plans = List.of(dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g.build(), dev.gatun.lowering.LoweringOptions.world(1))),
                dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(NormWorkloads.loopOrder(dev.gatun.ir.DType.BF16, 4096, 1000),
                        dev.gatun.lowering.LoweringOptions.world(1))));
        int folds = 0;
        for (var plan : plans)
            for (var k : plan.kernels()) {
                var src = CudaCodegen.generate(k);
                assertThat(src.counter()).isEqualTo(!k.folds().isEmpty());
                if (!src.counter()) continue;
                folds++;
                var r = CudaCodegenFixtures.compile(nvcc, dir, k.name(), src.source());
                assertThat(r.ok()).as(r.log()).isTrue();
                assertThat(r.ptx()).contains("atom.add.acq_rel.gpu.u32");
                // (with no rows at all the compiler drops the loop that reads them back)
                if (!k.ranges().contains(dev.gatun.ir.SymInt.of(0))) assertThat(r.ptx()).contains("ld.global.cg");
            }
        assertThat(folds).isEqualTo(5);
    }

    @Test
    void handBuiltKernelsCompile(@TempDir Path dir) throws Exception {
        var cases = CudaCodegenFixtures.handBuilt();
        assertThat(cases).hasSizeGreaterThan(150);
        compileAll(dir, "hand", cases);
    }

    @Test
    void plannedRandomKernelsCompile(@TempDir Path dir) throws Exception {
        // the planner's kernels themselves, every phase and store (the cases' specs keep a row kernel's first reduction only)
        var sources = CudaCodegenFixtures.plannedSources(0, GRAPHS);
        assertThat(sources).hasSizeGreaterThan(GRAPHS / 2);
        assertThat(sources).as("random graphs give reductions").anyMatch(KernelSource::reduction);
        assertThat(sources).as("and vector paths").anyMatch(c -> c.vectorWidth() > 1);
        assertThat(sources).as("and symbolic shapes").anyMatch(c -> !c.symbols().isEmpty());
        compileSources(dir, "planned", sources);
    }

    /**
     * Row kernels as the planner makes them from the row programs (softmax, norms with weights, sibling reductions,
     * the loop-ordering seed's transposing kernel, ...), every phase and store as planned, at every floating dtype and
     * at shapes that take each path: rows held in registers as vectors, looped rows, partial tiles.
     */
    @Test
    void rowProgramKernelsCompile(@TempDir Path dir) throws Exception {
        long[][] shapes = {{4, 16}, {33, 1000}, {64, 4096}, {3, 20000}, {6, 1, 12}, {130, 257}};
        var sources = new ArrayList<KernelSource>();
        var seen = new java.util.HashSet<String>();
        for (var c : dev.gatun.runtime.testing.RowPrograms.cases(17, 66, List.of(dev.gatun.ir.DType.FLOAT32, dev.gatun.ir.DType.BFLOAT16,
                dev.gatun.ir.DType.FLOAT16, dev.gatun.ir.DType.FLOAT64), shapes))
            for (var k : dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(c.graph(), dev.gatun.lowering.LoweringOptions.world(1))).kernels()) {
                KernelSource src = CudaCodegen.generate(k);
                if (seen.add(src.source())) sources.add(src);
            }
        assertThat(sources).as("transposing row kernels among them").anyMatch(x -> x.source().contains("gt_tile"));
        assertThat(sources).as("and weights read as vectors").anyMatch(x -> x.source().contains("gt_wvectors"));
        assertThat(sources).as("and rows of several phases").anyMatch(x -> x.source().contains("gt_part1"));
        compileSources(dir, "row programs", sources);
    }

    /**
     * Kernels of pointwise ops computed through a concatenation (one kernel storing every part at its slice) and through a
     * reshape (a loop over the source's shape reading it through its strides, or reordered to its producer's), at f32
     * and bf16: the plan shapes the two fusion rules make generate and compile.
     */
    @Test
    void kernelsThroughConcatenationsAndReshapesCompile(@TempDir Path dir) throws Exception {
        var sources = new ArrayList<KernelSource>();
        for (var t : List.of(dev.gatun.ir.DType.FLOAT32, dev.gatun.ir.DType.BFLOAT16)) {
            var graphs = new ArrayList<dev.gatun.ir.graph.Graph>();
            var g = dev.gatun.dsl.Gatun.graph("cat_plus");
            g.output("y", g.cat(0, g.input("a", t, 16, 64).add(1), g.input("b", t, 16, 64).sin(), g.input("c", t, 16, 64)).mul(3).add(10));
            graphs.add(g.build());
            var h = dev.gatun.dsl.Gatun.graph("heads");
            h.output("y", h.input("x", t, 2, 6, 4, 64).mul(2).permute(0, 2, 1, 3).reshape(8, 6, 64).exp().add(1));
            graphs.add(h.build());
            var v = dev.gatun.dsl.Gatun.graph("view");
            v.output("y", v.input("x", t, 6, 64).mul(2).t().reshape(8, 8, 6).exp());
            graphs.add(v.build());
            for (var graph : graphs)
                for (var k : dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(graph, dev.gatun.lowering.LoweringOptions.world(1))).kernels())
                    sources.add(CudaCodegen.generate(k));
        }
        assertThat(sources).as("one kernel a graph").hasSize(6);
        compileSources(dir, "through", sources);
    }

    /**
     * Row kernels narrowed to a block of their columns (fusion class 4: an RMSNorm, then the RoPE of the same heads, at
     * prefill and decode shapes, with a row held in registers and one looped over) in float32 and bf16 compile.
     */
    @Test
    void narrowedRowKernelsCompile(@TempDir Path dir) throws Exception {
        var sources = new ArrayList<KernelSource>();
        for (var t : List.of(dev.gatun.ir.DType.FLOAT32, dev.gatun.ir.DType.BFLOAT16))
            for (long[] shape : List.of(new long[]{2, 5, 4, 64}, new long[]{1, 1, 16, 128}, new long[]{1, 128, 1, 131072})) {
                var g = dev.gatun.dsl.Gatun.graph("rms_rope");
                int d = (int) shape[3];
                var x = g.input("x", t, shape[0], shape[1], shape[2], d);
                var n = x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("w", t, d));
                var cos = g.input("cos", t, shape[1], 1, d);
                var sin = g.input("sin", t, shape[1], 1, d);
                g.output("normed", n.mul(2));   // a wide member stored at each block
                var x1 = n.slice(-1, 0, d / 2);
                var x2 = n.slice(-1, d / 2, d);
                g.output("y", x1.mul(cos.slice(-1, 0, d / 2)).sub(x2.mul(sin.slice(-1, 0, d / 2)))
                        .cat(-1, x2.mul(cos.slice(-1, d / 2, d)).add(x1.mul(sin.slice(-1, d / 2, d)))));
                for (var k : dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g.build(), dev.gatun.lowering.LoweringOptions.world(1))).kernels())
                    sources.add(CudaCodegen.generate(k));
            }
        assertThat(sources).as("one kernel a graph").hasSize(6);
        compileSources(dir, "narrowed", sources);
    }

    /**
     * The kernels around a tied embedding's gradient (issue 39): the head's gradient computed transposed, the lookup's
     * scattered into it, cast to f32 and its squared norm summed in chunks of a vocabulary's 128256 row sums (then folded),
     * in bf16 over f32 as the training step does, and a cross-entropy of bf16 logits cast to f32 with its gradient, compile;
     * the chunked norm is two launches, the second with a fold.
     */
    @Test
    void vocabularyGradientKernelsCompile(@TempDir Path dir) throws Exception {
        var sources = new ArrayList<KernelSource>();
        var g = dev.gatun.dsl.Gatun.graph("tied_grad");
        var bf = dev.gatun.ir.DType.BFLOAT16;
        var table = g.input("table", bf, 128256, 64);
        var h = table.indexSelect(0, g.input("tokens", dev.gatun.ir.DType.I32, 64)).tanh();
        var loss = h.matmul(table.t()).cast(dev.gatun.ir.DType.F32).mul(g.input("c", dev.gatun.ir.DType.F32, 64, 128256)).sum();
        var d = g.grad(loss, table)[0].cast(dev.gatun.ir.DType.F32);
        g.output("norm", d.mul(d).sum());
        g.output("d", d.mul(2));
        var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g.build(), dev.gatun.lowering.LoweringOptions.world(1)));
        assertThat(plan.lowered().decisions()).anyMatch(x -> x.contains("computed transposed")).anyMatch(x -> x.contains("computed as scatter_add("))
                .anyMatch(x -> x.contains("chunks of 334"));
        assertThat(plan.kernels()).anyMatch(k -> !k.folds().isEmpty() && k.reductionRanges().size() == 1 && k.reductionRanges().getFirst().equals(dev.gatun.ir.SymInt.of(334)));
        for (var k : plan.kernels()) sources.add(CudaCodegen.generate(k));
        // the cross-entropy of bf16 logits cast to f32, and its gradient: the kernels on each side of the exponentials
        var ce = dev.gatun.dsl.Gatun.graph("ce_head");
        var hs = ce.input("h", bf, 64, 64);
        var ceLoss = hs.matmul(ce.input("w", bf, 128256, 64).t()).cast(dev.gatun.ir.DType.F32).crossEntropy(ce.input("t", dev.gatun.ir.DType.I64, 64));
        ce.output("loss", ceLoss);
        ce.output("dh", ce.grad(ceLoss, hs)[0]);
        for (var k : dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(ce.build(), dev.gatun.lowering.LoweringOptions.world(1))).kernels())
            sources.add(CudaCodegen.generate(k));
        compileSources(dir, "vocabulary", sources);
    }

    @Test
    void sourcesCompileOnTheirOwn(@TempDir Path dir) throws Exception {
        var all = new ArrayList<Case>(CudaCodegenFixtures.special());
        all.addAll(CudaCodegenFixtures.planned(0, 20));
        // one of each kind: f16, bf16, f64, reduction, vector, symbolic, plus the special layouts
        var sample = new ArrayList<Case>(CudaCodegenFixtures.special());
        for (Predicate<KernelSource> p : List.<Predicate<KernelSource>>of(
                s -> s.source().contains("cuda_fp16.h"), s -> s.source().contains("cuda_bf16.h"), s -> s.source().contains("double"),
                KernelSource::reduction, s -> s.vectorWidth() > 1, s -> !s.symbols().isEmpty()))
            CudaCodegenFixtures.handBuilt().stream().filter(c -> p.test(c.generate())).findFirst().ifPresent(sample::add);
        var failures = new ArrayList<String>();
        for (Case c : sample) {
            KernelSource s = c.generate();
            var r = CudaCodegenFixtures.compile(nvcc, dir, s.name(), s.source());
            if (!r.ok()) failures.add(s.name() + ":\n" + r.log() + "\n" + s.source());
            else assertThat(r.ptx()).contains(".entry " + s.name() + "(");
        }
        assertThat(failures).as(String.join("\n\n", failures)).isEmpty();
    }

    private static void compileAll(Path dir, String label, List<Case> cases) throws Exception {
        compileSources(dir, label, cases.stream().map(Case::generate).toList());
    }

    private static void compileSources(Path dir, String label, List<KernelSource> all) throws Exception {
        var failures = new ArrayList<String>();
        for (int from = 0; from < all.size(); from += BATCH) {
            var sources = all.subList(from, Math.min(all.size(), from + BATCH));
            var unit = CudaCodegenFixtures.batch(sources);
            var r = CudaCodegenFixtures.compile(nvcc, dir, label + "_" + from, unit.getKey());
            if (r.ok()) {
                for (String name : unit.getValue()) assertThat(r.ptx()).contains(".entry " + name + "(");
                continue;
            }
            // find the culprits
            for (KernelSource s : sources) {
                var one = CudaCodegenFixtures.compile(nvcc, dir, s.name(), s.source());
                if (!one.ok()) failures.add(s.name() + ":\n" + one.log() + "\n" + s.source());
            }
            if (failures.isEmpty()) failures.add("batch " + r.source() + " failed but every source compiles alone:\n" + r.log());
        }
        System.out.printf("%s: %d kernel sources compiled with nvcc (%d reductions, %d with a vector path, %d symbolic)%n", label, all.size(),
                all.stream().filter(KernelSource::reduction).count(), all.stream().filter(x -> x.vectorWidth() > 1).count(),
                all.stream().filter(x -> !x.symbols().isEmpty()).count());
        assertThat(failures).as(failures.size() + " sources fail to compile; first:\n" + (failures.isEmpty() ? "" : failures.getFirst())).isEmpty();
    }
}
