package dev.gatun.planner;

import dev.gatun.ir.DType;

import java.util.ArrayList;
import java.util.List;

/**
 * Two choices a backend used to make on its own, made here and printed: which kernel takes each product, and whether
 * the plan's kernels are programmatic dependent launches.
 *
 * <p><b>The few-row product.</b> A product of at most {@link #rows} rows by a weight lying transposed (a decode step's
 * linear layer, {@code x @ w.mT}) has a kernel of its own on the GPU, a GEMV that streams the weight once; anything else
 * goes to the library's GEMM. The two sum in different orders, so which one runs can change a greedy token: the plan
 * says which ({@code # gemv} on the step, {@link Step.Matmul#gemv}). The GEMV takes: a static shape, one product (no
 * batch), float16 or bfloat16 at 1 to 8 rows or float32 at one row (measured: past that the library is faster), rows
 * of a whole number of 16-byte vectors, and both operands at 16-byte aligned addresses: a placed buffer's address is
 * known here (slots are at least 16-byte aligned), and an input the plan reads where the caller's array lies is staged
 * by the backend when it does not lie so aligned.
 *
 * <p><b>Programmatic launches.</b> A kernel launched programmatically may start while the one before it ends; Gatun's
 * kernels wait for it before touching memory, and the GEMV loads its first weights before that wait when no step of the
 * call writes the weight. That pays where the chain of launches is all Gatun's ({@link #launches}, measured on the
 * Llama decode step: 1.128 to 1.043 ms a token at batch 1, 1.324 to 1.182 ms a step at batch 8); a library GEMM or a
 * collective in the chain breaks it (at batch 8 with the library's products the mode cost 6%).
 */
final class ProductKernels {
    private ProductKernels() {}

    /** The most rows of {@code t} the few-row kernel takes: 8 of the 16-bit types, one of float32, none of any other. */
    static int rows(DType t) {
        return switch (t) {
            case FLOAT16, BFLOAT16 -> 8;
            case FLOAT32 -> 1;
            default -> 0;
        };
    }

    /**
     * {@code steps} with each product's kernel chosen, inside joined launches too. A product with epilogues that the
     * few-row kernel does not take (the library's GEMM has none) is the product, then its epilogues, each a launch, the
     * first of them saying why.
     */
    static List<Step> choose(List<Step> steps) {
        var out = new ArrayList<Step>(steps.size());
        for (Step s : steps)
            switch (s) {
                case Step.Matmul m -> out.add(chosen(m));
                case Step.TiledProduct t when fewRows(t.product()) != null -> {
                    out.add(chosen(t.product()));
                    String why = "not an epilogue of the product before it: the library's GEMM takes that product (" + fewRows(t.product()) + ")";
                    for (int i = 0; i < t.epilogues().size(); i++) out.add(i == 0 ? t.epilogues().get(i).withNote(why) : t.epilogues().get(i));
                }
                case Step.TiledProduct t -> out.add(t.withProduct(chosen(t.product())));
                default -> out.add(s);
            }
        return out;
    }

    private static Step.Matmul chosen(Step.Matmul m) { return m.withGemv(fewRows(m) == null); }

    /** Null where the few-row kernel takes {@code m}; else why not. */
    static String fewRows(Step.Matmul m) {
        DType t = m.a().dtype();
        if (!m.a().shape().isStatic() || !m.b().shape().isStatic() || !m.output().shape().isStatic()) return "a shape is symbolic";
        if (m.b().dtype() != t) return "the operands are of different types";
        if (m.transA() || !m.transB()) return "the right operand does not lie transposed";
        long[] a = m.a().shape().sizes(), out = m.output().shape().sizes();
        if (a.length < 2 || m.b().shape().rank() < 2) return "an operand is not a matrix";
        long batches = 1;
        for (int d = 0; d < out.length - 2; d++) batches *= out[d];
        if (batches != 1) return "a batch of " + batches + " products";
        long rows = a[a.length - 2], k = a[a.length - 1];
        if (rows < 1 || rows > rows(t)) return rows + " rows of " + t + ", not 1 to " + rows(t);
        if (k < 1 || k * t.byteSize() % 16 != 0) return "rows of " + k * t.byteSize() + " bytes, not whole 16-byte vectors";
        if (!aligned(m.a()) || !aligned(m.b())) return "an operand does not lie 16-byte aligned";
        return null;
    }

    /** Whether {@code b} starts 16-byte aligned: its slot's offset and its view's (an unplaced input is staged where it is not). */
    private static boolean aligned(PlanBuffer b) {
        var at = b.storage().placement();
        long view = b.isView() ? (b.offset().isConstant() ? b.offset().constant() * b.dtype().byteSize() : -1) : 0;
        return view >= 0 && view % 16 == 0 && (at == null || at.offset() % 16 == 0);
    }

    /** The decision for {@code steps} of a plan of {@code world} ranks. */
    static Plan.Launches launches(List<Step> steps, int world, PlanOptions.ProgrammaticLaunch mode, PlanOptions.Target target) {
        if (mode != PlanOptions.ProgrammaticLaunch.OFF && !target.programmaticLaunches())
            return new Plan.Launches(false, "the target GPU has none (compute capability below 9.0)");
        return switch (mode) {
            case ON -> new Plan.Launches(true, "asked for");
            case OFF -> new Plan.Launches(false, "asked for");
            case AUTO -> pays(steps, world);
        };
    }

    /**
     * Programmatic launches pay in a chain of short kernels whose products are Gatun's GEMV by weights no step writes (a
     * decode step). A collective between them is launched as always and the kernel after it waits for its end, so it
     * breaks nothing: measured on two H200s, the Llama-3.2-1B-shape decode step at TP 2 took 0.908 ms a token with
     * them and 1.006 without (TP 1 0.945 and 0.949: the same), the same tokens.
     */
    private static Plan.Launches pays(List<Step> steps, int world) {
        boolean any = false;
        for (Step s : steps) {
            for (Step p : s.parts()) {
                if (!(p instanceof Step.Matmul m)) continue;
                any = true;
                if (!m.gemv()) return new Plan.Launches(false, m.output().name() + "'s product is the library's, which breaks the chain");
                var kind = m.b().storage().kind();
                if (kind != PlanBuffer.Kind.INPUT && kind != PlanBuffer.Kind.CONSTANT)
                    return new Plan.Launches(false, m.output().name() + "'s weight is computed in the call");
            }
        }
        return any ? new Plan.Launches(true, world == 1 ? "every product the GEMV by a weight no step writes"
                : "every product the GEMV by a weight no step writes; the collectives launched as always")
                : new Plan.Launches(false, "no product");
    }
}
