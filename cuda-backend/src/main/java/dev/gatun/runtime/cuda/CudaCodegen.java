package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * CUDA C for the planner's fused kernels, computing what the host backend's kernel interpreter computes.
 *
 * <p><b>ABI.</b> {@code extern "C" __global__ void <name>(const IN0* in0, ..., OUT0* out0, ..., long long sym, ...)}:
 * input pointers in {@link Kernel#inputs()} order (each points at the buffer's storage: loads add their own
 * offsets), output pointers in {@link Kernel#stores()} order (each points at element 0 of a row-major output),
 * then one {@code long long} per shape symbol, in {@link KernelSource#symbols()} (sorted) order. Element types:
 * f16 {@code __half}, bf16 {@code __nv_bfloat16}, f32 {@code float}, f64 {@code double}, i8 {@code signed char},
 * i32 {@code int}, i64 {@code long long}, bool {@code bool} (one byte, 0 or 1). No {@code __restrict__}: an output
 * may alias an input, and every element's loads happen before its stores. A row kernel that folds its per-row values
 * takes a pointer per fold after the outputs and a block counter after the symbols ({@link RowFolds}); a
 * {@link #tile tile function} takes its tile's bounds last. A kernel that reads a table through indices
 * ({@link KExpr.Gather}, gather fusion) takes the executable's {@link DeviceFault} record last, as
 * {@code index_select}'s kernel does: {@code int* gt_claim, gatun_fault* gt_fault, int gt_step} (the claim word, the
 * record, its step's number in the plan); each index is checked against the table's rows before the table is read,
 * and a bad one stops the call with {@code index_select}'s fault naming the step. Such a kernel reads its table and
 * indices one element at a time (no 16-byte vectors: the table's rows are picked by data), and has no tile form.
 *
 * <p><b>The pieces.</b> This class is the entry: it checks the kernel's name, has the body written by the piece for
 * the kernel's kind, and writes the function around it (a comment naming the ops and the planner's kernel, the
 * {@link #prelude prelude}, the signature above, the launch bounds from the body's {@link KernelLayout}). What the
 * pieces share of one kernel (its types, symbols, what its code uses, its addressing, the body as written) is its
 * {@link KernelScope}; values become C expressions in {@link CudaExpressions} (how each op rounds, the fast forms
 * of half results), calling the {@link DeviceHelpers helpers}; the bodies:
 * <ul>
 *   <li>{@link PointwiseBody}: a grid-stride loop of one thread per output element, with a 16-byte vector path;</li>
 *   <li>{@link RowBody}: row kernels (reductions with the pointwise work around them), a block per row, the row
 *   held in registers where it fits, each phase's reduction through warp shuffles and shared memory
 *   ({@link PhasePlan} says what each phase evaluates and keeps); or, where the plan says {@code rows[warp]}, a warp
 *   a row, each phase's reduction through warp shuffles alone;</li>
 *   <li>{@link TiledRowBody}: row kernels whose element store is transposed, several rows a block written through
 *   a shared tile;</li>
 *   <li>{@link RowFolds}: after a row kernel's rows, the fold of its per-row values by the last block.</li>
 * </ul>
 *
 * <p>The source needs {@code --include-path=<cuda>/include} (for {@code cuda_fp16.h} / {@code cuda_bf16.h}, which
 * it includes only when a half type occurs), {@code -std=c++17} (the default of NVRTC 12+) and the device's
 * {@code --gpu-architecture}; it must not be compiled with {@code --use_fast_math} (NaN tests, accurate erf/exp),
 * and compiling with {@code --fmad=false} keeps the helpers' internal arithmetic uncontracted (see
 * {@link CudaExpressions}).
 */
final class CudaCodegen {
    private CudaCodegen() {}

    /** A C identifier. */
    static final Pattern IDENT = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*");

    /** The CUDA source of a planner kernel, a row kernel a block a row; dtypes come from its buffers. */
    static KernelSource generate(Kernel k) { return generate(k, null); }

    /**
     * The CUDA source of a planner kernel launched on its own, a row kernel in the form the plan chose for its launch
     * ({@code LaunchChoice.Rows}; null: a block a row).
     */
    static KernelSource generate(Kernel k, LaunchChoice.Rows rows) {
        // the planner names its kernels (op names and a counter): a name that is not a C identifier is a Gatun bug
        if (!IDENT.matcher(k.name()).matches()) throw new IllegalStateException("kernel name is not a C identifier: " + k.name());
        var scope = new KernelScope(k, false);
        return function(scope, body(scope, rows));
    }

    /**
     * A planner kernel as a {@code __device__} function {@code <name>_tile(...)} that runs one block's tile of its
     * loop: elements {@code [gt_lo, gt_hi)} of a pointwise kernel (a multiple of 16 from {@code gt_lo}), rows
     * {@code [gt_lo, gt_hi)} of a row kernel, with the block's threads. Its parameters are the kernel's, in the same
     * order, then {@code gt_lo} and {@code gt_hi}; the code is the kernel's own but for the loop bounds. A fused
     * collective launch ({@link CollectiveCodegen}) calls it between its protocol's phases. Kernels that fold their rows
     * or store transposed need the whole grid and have no tile form.
     *
     * @param source   the function alone: {@link #prelude} gives what it needs before it
     * @param block    the block size a row kernel holding its row in registers is written for, or 0 (any multiple of 32)
     */
    record TileFunction(String name, String source, List<String> helpers, boolean f16, boolean bf16, boolean vectors, List<String> symbols, int block) {}

    static TileFunction tile(Kernel k) { return tile(k, 0, false); }

    /**
     * {@link #tile(Kernel)} for a caller whose blocks are {@code block} threads (0: the function's own choice): a row
     * kernel then spreads each row over that many threads, or loops over it. With {@code runs}, a pointwise kernel's
     * function takes a batch of runs instead of one: {@code gt_lo, gt_len, gt_count, gt_stride, gt_count2, gt_stride2}
     * ({@code gt_count} runs of {@code gt_len} elements, the first from {@code gt_lo}, each {@code gt_stride} after the
     * one before; all that {@code gt_count2} times, {@code gt_stride2} apart), all the block's threads over all of them
     * at once (a few-row product's epilogue: a run a row, or two runs a head a row).
     */
    static TileFunction tile(Kernel k, int block, boolean runs) {
        if (!IDENT.matcher(k.name()).matches()) throw new IllegalStateException("kernel name is not a C identifier: " + k.name());
        var scope = new KernelScope(k, true, block, runs);
        KernelLayout layout = body(scope, null);
        KernelSource s = function(scope, layout);
        return new TileFunction(k.name() + "_tile", s.source(), List.copyOf(scope.helpers), scope.usesF16, scope.usesBF16, layout.vectors(), s.symbols(), s.block());
    }

    /**
     * A launch's parameters that carry kernel {@code k}'s arguments to its tile function {@code f}, each name prefixed
     * with {@code prefix}: its inputs, its stores, its symbols (the ABI above, without the bounds).
     */
    static List<String> tileParams(Kernel k, TileFunction f, String prefix) {
        var out = new ArrayList<String>();
        for (int i = 0; i < k.inputs().size(); i++) out.add("const " + storageType(k.inputs().get(i).dtype()) + "* " + prefix + "in" + i);
        for (int i = 0; i < k.stores().size(); i++) out.add(storageType(k.stores().get(i).buffer().dtype()) + "* " + prefix + "out" + i);
        for (int i = 0; i < f.symbols().size(); i++) out.add("long long " + prefix + "sym" + i);
        return out;
    }

    /** Those parameters' names, in order, as the tile function's leading arguments (the caller adds the bounds). */
    static String tileArgs(Kernel k, TileFunction f, String prefix) {
        var out = new ArrayList<String>();
        for (int i = 0; i < k.inputs().size(); i++) out.add(prefix + "in" + i);
        for (int i = 0; i < k.stores().size(); i++) out.add(prefix + "out" + i);
        for (int i = 0; i < f.symbols().size(); i++) out.add(prefix + "sym" + i);
        return String.join(", ", out);
    }

    /** What generated functions need before them: the half types' headers, the vector type, helpers in this order. */
    static String prelude(boolean f16, boolean bf16, boolean vectors, java.util.Collection<String> helpers) {
        var src = new StringBuilder();
        if (f16) src.append("#include <cuda_fp16.h>\n");
        if (bf16) src.append("#include <cuda_bf16.h>\n");
        if (f16 || bf16) src.append('\n');
        src.append(Programmatic.SOURCE).append('\n');
        if (vectors) src.append("template <typename T, int N> struct alignas(sizeof(T) * N) gt_vec { T e[N]; };\n\n");
        for (String h : helpers) src.append(DeviceHelpers.source(h));
        if (!helpers.isEmpty()) src.append('\n');
        return src.toString();
    }

    /** The C type a value of {@code t} is computed in (half types compute in float). */
    static String valueType(DType t) {
        return switch (t) {
            case BOOL -> "bool";
            case INT8 -> "signed char";
            case INT32 -> "int";
            case INT64 -> "long long";
            case FLOAT16, BFLOAT16, FLOAT32 -> "float";
            case FLOAT64 -> "double";
        };
    }

    /** The C type of a buffer element of {@code t}. */
    static String storageType(DType t) {
        return switch (t) {
            case FLOAT16 -> "__half";
            case BFLOAT16 -> "__nv_bfloat16";
            default -> valueType(t);
        };
    }

    // ------------------------------------------------------------------ the kernel

    /** Writes the kernel's body into {@code scope}'s: the piece for its kind; returns how that laid it out. */
    private static KernelLayout body(KernelScope scope, LaunchChoice.Rows rows) {
        Kernel k = scope.k;
        var ex = new CudaExpressions(scope);
        if (!k.isReduction()) return new PointwiseBody(scope, ex).write();
        var transposing = new TiledRowBody(scope, ex);
        List<Integer> tiled = transposing.transposedStores();
        if (!tiled.isEmpty() && scope.tile) throw new IllegalStateException("kernel " + k.name() + " stores transposed: it runs on a whole grid, not on a tile");
        // the planner gives the warp form only to kernels it fits (LaunchChoices.warpMisfit): anything else is a Gatun bug
        boolean warp = rows != null && rows.warp();
        if (warp && (!tiled.isEmpty() || !k.folds().isEmpty() || !scope.gathers.isEmpty()))
            throw new IllegalStateException("kernel " + k.name() + " has no warp form (it stores transposed, folds its rows or gathers), yet the plan gave it " + rows.describe());
        KernelLayout layout = !tiled.isEmpty() ? transposing.write(tiled) : new RowBody(scope, ex, rows).write();
        if (!k.folds().isEmpty()) new RowFolds(scope, ex).write();
        return layout;
    }

    /** The function around the body: a comment on what it computes, the prelude (a kernel's), the signature. */
    private static KernelSource function(KernelScope scope, KernelLayout layout) {
        Kernel k = scope.k;
        var src = new StringBuilder();
        src.append("// ").append(k.name()).append(": ").append(k.ops().isEmpty() ? "(no ops)" : String.join(", ", k.ops()))
                .append(k.isReduction() ? " (row kernel: " + String.join(", ", k.reductions().stream().map(r -> r.fn().opName()).toList())
                        + layout.describe() + ")" : "").append('\n');
        src.append("// generated by Gatun's CUDA backend from the planner's kernel:\n");
        for (String line : k.source().split("\n")) src.append("//   ").append(line).append('\n');
        if (!scope.tile) src.append(prelude(scope.usesF16, scope.usesBF16, layout.vectors(), scope.helpers));
        if (!scope.gathers.isEmpty()) src.append(DeviceFault.SOURCE).append(CudaExpressions.GATHER_ROW).append('\n');
        if (scope.tile) src.append("__device__ __forceinline__ void ").append(k.name()).append("_tile(\n");
        else src.append("extern \"C\" __global__ void __launch_bounds__(").append(layout.launchBlock()).append(layout.minBlocks()).append(") ").append(k.name()).append("(\n");
        parameters(scope, src);
        // a standalone kernel may be launched programmatically (see Programmatic): it waits for the one before first
        src.append("{\n").append(scope.tile ? "" : "    GATUN_DEPENDENT_START();\n").append(scope.body).append("}\n");
        return new KernelSource(k.name(), src.toString(), List.copyOf(scope.symbolNames.keySet()), k.isReduction(), layout.vectorWidth(),
                k.ranges(), k.reductionRanges(), layout.fixedBlock(), layout.rowsPerBlock(), !k.folds().isEmpty(), layout.persistent());
    }

    /** The parameter list (the ABI above), each parameter with a comment naming what it is. */
    private static void parameters(KernelScope scope, StringBuilder src) {
        Kernel k = scope.k;
        DType[] inTypes = scope.inTypes, outTypes = scope.outTypes;
        var params = new ArrayList<String>();
        var notes = new ArrayList<String>();
        for (int i = 0; i < inTypes.length; i++) {
            params.add("const " + storageType(inTypes[i]) + "* in" + i);
            notes.add(k.inputs().get(i).name() + " (" + inTypes[i] + ")");
        }
        for (int i = 0; i < outTypes.length; i++) {
            var s = k.stores().get(i);
            params.add(storageType(outTypes[i]) + "* out" + i);
            notes.add(s.buffer().name() + " (" + outTypes[i] + ") <- t" + s.local() + (s.perRow() ? " per row" : ""));
        }
        for (int f = 0; f < k.folds().size(); f++) {
            var fold = k.folds().get(f);
            params.add(storageType(fold.buffer().dtype()) + "* fold" + f);
            notes.add(fold.buffer().name() + " (" + fold.buffer().dtype() + ") <- " + fold.fn().opName() + " of " + k.stores().get(fold.of()).buffer().name());
        }
        for (var e : scope.symbolNames.entrySet()) {
            params.add("long long " + e.getValue());
            notes.add("symbol " + e.getKey());
        }
        if (!k.folds().isEmpty()) {
            params.add("unsigned int* gt_done");
            notes.add("blocks done (zero between launches)");
        }
        if (!scope.gathers.isEmpty()) {
            params.add("int* gt_claim");
            notes.add("the fault record's claim word, where a bad index of");
            params.add("gatun_fault* gt_fault");
            notes.add(String.join(", ", scope.gathers.stream().map(KExpr.Gather::op).toList()));
            params.add("int gt_step");
            notes.add("stops the call; the step's number in the plan");
        }
        if (scope.runs) {
            params.add("long long gt_lo");
            notes.add("this block's runs: gt_count runs of gt_len elements from gt_lo,");
            params.add("long long gt_len");
            notes.add("each gt_stride elements after the one before");
            params.add("long long gt_count");
            notes.add("");
            params.add("long long gt_stride");
            notes.add("");
            params.add("long long gt_count2");
            notes.add("and all that gt_count2 times, gt_stride2 apart");
            params.add("long long gt_stride2");
            notes.add("");
        } else if (scope.tile) {
            params.add("long long gt_lo");
            notes.add(k.isReduction() ? "this block's rows: [gt_lo, gt_hi)" : "this block's elements: [gt_lo, gt_hi)");
            params.add("long long gt_hi");
            notes.add("");
        }
        if (params.isEmpty()) src.append("    void)\n");
        for (int i = 0; i < params.size(); i++) {
            String p = "    " + params.get(i) + (i + 1 < params.size() ? "," : ")");
            src.append(p).append(" ".repeat(Math.max(1, 44 - p.length()))).append("// ").append(notes.get(i)).append('\n');
        }
    }
}
