package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.DTypes;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.regex.Matcher;
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
 * may alias an input, and every element's loads happen before its stores.
 *
 * <p><b>Arithmetic.</b> Each op's result is rounded to its dtype, as the reference does: f16/bf16 values live in
 * {@code float} variables holding half-representable values (each op computes in float, then rounds through the
 * half type), f32 computes in float, f64 in double, integers in {@code long long} and wrap to their width,
 * division, pow and transcendental functions of integer dtype compute in double and truncate. Float-to-integer
 * conversions truncate toward zero through {@code long long} (saturating, NaN to 0, then wrapping, as Java's
 * {@code (int) (long) v}); conversions to bool are {@code != 0}. A kernel that holds its f16/bf16 intermediates in
 * float ({@link Kernel#floatIntermediates}, the planner's default) skips the rounding of its ops' and reductions'
 * half results: they stay float values (a kept row too) and are rounded only where stored or cast by the graph.
 *
 * <p><b>Pointwise kernels</b>: a grid-stride loop of one thread per output element with 64-bit indices. When every
 * load reads either the output's own row-major element or one fixed element (a broadcast), a 16-byte vector path
 * handles {@code 16 / (largest element size)} elements per step whenever all the pointers it touches are aligned
 * (checked in the kernel); the remainder, or everything when misaligned, goes through the scalar loop.
 *
 * <p><b>Row kernels</b> (reductions with the pointwise work around them): one block per row (grid-stride over rows),
 * each thread accumulating its part of the row, then warp shuffles, one partial per warp in shared memory, one
 * barrier, and every thread folds the partials in the same order. A row of constant length that fits is loaded once
 * into registers (16-byte vectors where aligned, about 16 elements a thread) and later phases read it there; weights
 * shared by every row come in as vectors per chunk. A row kernel whose element store is transposed (consecutive rows
 * adjacent in memory) and which needs one pass over the row runs <em>transposing</em>: 8 to 32 rows a block (whole
 * 32-byte sectors of each column), written through a shared tile so every store is coalesced. The block size is a multiple of 32 (see
 * {@link KernelSource#geometry}); any reduction length, including 0, works. Accumulators: float for f16/bf16/f32,
 * double for f64, {@code long long} for integers and bool; MEAN divides by the count (NaN for an empty range);
 * MAX/MIN propagate NaN.
 *
 * <p>A float result rounded to f16/bf16 at once (or held in float by such a kernel) may come from a faster form
 * whose float error, relative to the value, is far below that rounding (an op after it, a cancellation, may magnify
 * it as it would the rounding): {@code exp} as {@code ex2.approx.f32} of {@code x log2(e)} without flushing
 * subnormals (2 + 1.17|x| float ulps, about 100 at the edge of its range: still under 1/30 of an f16 ulp), division
 * as a multiplication by the correctly rounded reciprocal where divisor and reciprocal are normal (2 ulps). A value
 * that close to a rounding boundary of the half type can round the other way (one half-type ulp); f32 and f64
 * results keep the exact forms, and so does a kernel holding half values in float that casts a value to an integer or
 * bool type or compares values (a quotient one float ulp below an exact 1 would truncate to 0).
 *
 * <p>Multiplications use {@code __fmul_rn}/{@code __dmul_rn}, which the compiler never contracts into an FMA with a
 * following add (an FMA rounds once where the reference rounds twice, which matters under cancellation); compiling
 * with {@code --fmad=false} also keeps the helpers' internal arithmetic uncontracted.
 *
 * <p>The source needs {@code --include-path=<cuda>/include} (for {@code cuda_fp16.h} / {@code cuda_bf16.h}, which
 * it includes only when a half type occurs), {@code -std=c++17} (the default of NVRTC 12+) and the device's
 * {@code --gpu-architecture}; it must not be compiled with {@code --use_fast_math} (NaN tests, accurate erf/exp).
 */
final class CudaCodegen {
    private CudaCodegen() {}

    private static final Pattern IDENT = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*");

    /** Names the generated code uses itself, C++ keywords and CUDA built-ins: symbols so named get a prefix. */
    private static final Set<String> RESERVED = Set.of(
            "o", "r", "v", "l", "d", "o_rem", "r_rem", "total", "count", "step", "start", "nvec", "acc", "lane", "warp", "warps",
            "partial", "tid", "aligned", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
            "auto", "bool", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
            "extern", "false", "float", "for", "goto", "if", "inline", "int", "long", "register", "return", "short",
            "signed", "sizeof", "static", "struct", "switch", "true", "typedef", "union", "unsigned", "void",
            "volatile", "while", "class", "new", "delete", "this", "template", "typename", "namespace", "using",
            "operator", "private", "public", "protected", "virtual", "friend", "try", "catch", "throw", "alignas",
            "alignof", "constexpr", "decltype", "noexcept", "nullptr", "static_assert", "thread_local", "explicit",
            "mutable", "export", "asm", "and", "or", "not", "xor", "bitand", "bitor", "compl", "and_eq", "or_eq",
            "xor_eq", "not_eq", "char16_t", "char32_t", "wchar_t", "const_cast", "static_cast", "dynamic_cast",
            "reinterpret_cast", "typeid", "concept", "requires", "co_await", "co_yield", "co_return", "char8_t",
            "consteval", "constinit",
            "exp", "expf", "log", "logf", "sqrt", "sqrtf", "rsqrt", "rsqrtf", "sin", "sinf", "cos", "cosf", "tanh",
            "tanhf", "pow", "powf", "fabs", "fabsf", "erf", "erff", "fmax", "fmaxf", "fmin", "fminf", "min", "max",
            "NAN", "INFINITY");
    private static final Pattern RESERVED_FORM = Pattern.compile("(?:i|n|t|in|out|x|y)\\d+|sym_.*|gt_.*|__.*|_[A-Z].*");

    /** The CUDA source of a planner kernel; dtypes come from its buffers. */
    static KernelSource generate(Kernel k) {
        if (!IDENT.matcher(k.name()).matches()) throw new IllegalArgumentException("kernel name is not a C identifier: " + k.name());
        return new Gen(k).run();
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

    static TileFunction tile(Kernel k) {
        if (!IDENT.matcher(k.name()).matches()) throw new IllegalArgumentException("kernel name is not a C identifier: " + k.name());
        var g = new Gen(k, true);
        KernelSource s = g.run();
        return new TileFunction(k.name() + "_tile", s.source(), List.copyOf(g.helpers), g.usesF16, g.usesBF16, g.vectors, s.symbols(), s.block());
    }

    /** What generated functions need before them: the half types' headers, the vector type, helpers in this order. */
    static String prelude(boolean f16, boolean bf16, boolean vectors, java.util.Collection<String> helpers) {
        var src = new StringBuilder();
        if (f16) src.append("#include <cuda_fp16.h>\n");
        if (bf16) src.append("#include <cuda_bf16.h>\n");
        if (f16 || bf16) src.append('\n');
        src.append(Programmatic.SOURCE).append('\n');
        if (vectors) src.append("template <typename T, int N> struct alignas(sizeof(T) * N) gt_vec { T e[N]; };\n\n");
        for (String h : helpers) src.append(Gen.helperSource(h));
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

    /** Arithmetic domains: what an op computes in before rounding to its dtype. */
    private enum Domain {
        FLOAT("float", DType.FLOAT32), DOUBLE("double", DType.FLOAT64), LONG("long long", DType.INT64);

        final String c;
        final DType type;

        Domain(String c, DType type) { this.c = c; this.type = type; }

        static Domain of(DType t) {
            return switch (t) {
                case FLOAT64 -> DOUBLE;
                case FLOAT16, BFLOAT16, FLOAT32 -> FLOAT;
                default -> LONG;
            };
        }
    }

    private static final class Gen {
        final Kernel k;
        final DType[] inTypes, outTypes;
        final Map<String, String> symbolNames = new TreeMap<>();
        final Set<String> helpers = new LinkedHashSet<>();
        final int rank, dims;
        final StringBuilder body = new StringBuilder();
        boolean usesF16, usesBF16;
        /** Iteration dims some load's index uses; locals some store, later local or the reduction uses. */
        final Set<Integer> usedDims = new TreeSet<>();
        /**
         * Whether half results may come from the fast forms: always where each is rounded at once; where the kernel
         * holds them in float, only if nothing in it casts a value to an integer or bool type or compares values (a
         * float quotient a 1-ulp below an exact 1 would truncate to 0 or compare unequal).
         */
        final boolean fastForms;
        final boolean[] usedLocals;

        /** Whether this is a tile function (see {@link #tile}), not a kernel. */
        final boolean tile;
        /** Whether the code uses {@code gt_vec} (set by {@link #run}). */
        boolean vectors;

        Gen(Kernel k) { this(k, false); }

        Gen(Kernel k, boolean tile) {
            this.k = k;
            this.tile = tile;
            if (tile && !k.folds().isEmpty()) throw new IllegalArgumentException("kernel " + k.name() + " folds its rows: it runs on a whole grid, not on a tile");
            this.fastForms = !k.floatIntermediates() || !exactnessMatters(k);
            inTypes = new DType[k.inputs().size()];
            for (int i = 0; i < inTypes.length; i++) inTypes[i] = k.inputs().get(i).dtype();
            outTypes = new DType[k.stores().size()];
            for (int i = 0; i < outTypes.length; i++) outTypes[i] = k.stores().get(i).buffer().dtype();
            rank = k.ranges().size();
            dims = rank + k.reductionRanges().size();
            if (k.locals().isEmpty() && !k.stores().isEmpty()) throw new IllegalArgumentException("kernel " + k.name() + " stores but has no locals");
            for (var s : k.stores())
                if (s.local() < 0 || s.local() >= k.locals().size())
                    throw new IllegalArgumentException("kernel " + k.name() + " stores local t" + s.local() + " it does not have");
            var syms = new TreeSet<String>();
            k.ranges().forEach(x -> syms.addAll(x.symbols()));
            k.reductionRanges().forEach(x -> syms.addAll(x.symbols()));
            for (KExpr e : k.locals()) collectSymbols(e, syms);
            for (var st : k.stores()) {
                syms.addAll(st.offset().symbols());
                if (st.strides() != null) st.strides().forEach(x -> syms.addAll(x.symbols()));
            }
            for (String s : syms) symbolNames.put(s, IDENT.matcher(s).matches() && !RESERVED.contains(s) && !RESERVED_FORM.matcher(s).matches() ? s : "sym_" + sanitize(s));
            for (DType t : inTypes) noteType(t);
            for (DType t : outTypes) noteType(t);
            for (KExpr e : k.locals()) noteTypes(e);
            usedLocals = new boolean[k.locals().size()];
            for (var s : k.stores()) usedLocals[s.local()] = true;
            if (k.isReduction())
                for (int p = 0; p <= k.reductions().size(); p++) {
                    boolean[] n = k.neededIn(p);
                    for (int i = 0; i < n.length; i++) usedLocals[i] |= n[i];
                }
            for (int i = k.locals().size() - 1; i >= 0; i--) if (usedLocals[i]) markUses(k.locals().get(i));
            // a store through strides needs the digits of its index
            for (var st : k.stores())
                if (st.strides() != null)
                    for (int d = 0; d < st.strides().size(); d++) if (!st.strides().get(d).equals(SymInt.ZERO)) usedDims.add(d);
        }

        private void markUses(KExpr e) {
            switch (e) {
                case KExpr.Local l -> {
                    if (l.index() >= 0 && l.index() < usedLocals.length) usedLocals[l.index()] = true;
                }
                case KExpr.Apply a -> a.args().forEach(this::markUses);
                case KExpr.Cast c -> markUses(c.x());
                case KExpr.Load l -> {
                    // a pointwise kernel indexes contiguous and broadcast loads without the digits of its index, a row
                    // kernel its loads along the row by the element's position in the row
                    if (!k.isReduction() && access(l) != Access.GENERAL) return;
                    boolean alongRow = k.isReduction() && rowAccess(l) != RowAccess.GENERAL;
                    for (int d = 0; d < Math.min(dims, l.strides().size()); d++)
                        if (!l.strides().get(d).equals(SymInt.ZERO) && !(alongRow && d >= rank)) usedDims.add(d);
                }
                default -> {}
            }
        }

        private static String sanitize(String s) { return s.replaceAll("[^A-Za-z0-9_]", "_"); }

        private void noteType(DType t) {
            if (t == DType.FLOAT16) usesF16 = true;
            if (t == DType.BFLOAT16) usesBF16 = true;
        }

        private void noteTypes(KExpr e) {
            noteType(e.dtype());
            switch (e) {
                case KExpr.Apply a -> a.args().forEach(this::noteTypes);
                case KExpr.Cast c -> noteTypes(c.x());
                default -> {}
            }
        }

        private static void collectSymbols(KExpr e, Set<String> out) {
            switch (e) {
                case KExpr.Load l -> {
                    out.addAll(l.offset().symbols());
                    l.strides().forEach(s -> out.addAll(s.symbols()));
                }
                case KExpr.Apply a -> a.args().forEach(x -> collectSymbols(x, out));
                case KExpr.Cast c -> collectSymbols(c.x(), out);
                default -> {}
            }
        }

        // ------------------------------------------------------------------ the kernel

        KernelSource run() {
            int vw = k.isReduction() ? 1 : vectorWidth();
            if (!k.isReduction()) pointwiseBody(vw);
            else {
                List<Integer> tiled = transposedStores();
                if (!tiled.isEmpty() && tile) throw new IllegalArgumentException("kernel " + k.name() + " stores transposed: it runs on a whole grid, not on a tile");
                if (!tiled.isEmpty()) tiledRowBody(tiled);
                else rowBody();
                if (!k.folds().isEmpty()) folds();
            }

            var src = new StringBuilder();
            src.append("// ").append(k.name()).append(": ").append(k.ops().isEmpty() ? "(no ops)" : String.join(", ", k.ops()))
                    .append(k.isReduction() ? " (row kernel: " + String.join(", ", k.reductions().stream().map(r -> r.fn().opName()).toList())
                            + (tileColumns > 0 ? "; transposing: " + tileRows + " rows per block, tiles of " + tileRows + " x " + tileColumns
                                    : rowBlock > 0 ? "; rows held in registers, " + rowBlock + " threads x " + rowChunks + " x " + rowVector : "; rows looped") + ")" : "").append('\n');
            src.append("// generated by Gatun's CUDA backend from the planner's kernel:\n");
            for (String line : k.source().split("\n")) src.append("//   ").append(line).append('\n');
            vectors = vw > 1 || rowVector > 1;
            if (!tile) src.append(prelude(usesF16, usesBF16, vectors, helpers));

            int block = !k.isReduction() ? KernelSource.POINTWISE_BLOCK : tileColumns > 0 ? TILE_THREADS : rowBlock > 0 ? rowBlock : KernelSource.MAX_REDUCTION_BLOCK;
            // a half row held in registers with one float value kept beside it, by blocks of 256 threads or more: at least
            // as many blocks a multiprocessor as 48 registers a thread allow (5 of 256), so enough rows are in flight;
            // measured on an H100, a bf16 softmax over 4096 columns went from 61 registers and 4 blocks to 48 and 5:
            // 32.0 to 29.5 µs (a copy of its bytes: 25.6). Rows without kept values need fewer registers as they are;
            // with more kept values the bound makes the compiler spill (two: 74 bytes a thread).
            String minBlocks = tileColumns == 0 && rowBlock >= 256 && keptValues == 1 && rowVector == 8 ? ", " + 65536 / (48 * rowBlock) : "";
            if (tile) src.append("__device__ __forceinline__ void ").append(k.name()).append("_tile(\n");
            else src.append("extern \"C\" __global__ void __launch_bounds__(").append(block).append(minBlocks).append(") ").append(k.name()).append("(\n");
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
            for (var e : symbolNames.entrySet()) {
                params.add("long long " + e.getValue());
                notes.add("symbol " + e.getKey());
            }
            if (!k.folds().isEmpty()) {
                params.add("unsigned int* gt_done");
                notes.add("blocks done (zero between launches)");
            }
            if (tile) {
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
            // a standalone kernel may be launched programmatically (see Programmatic): it waits for the one before first
            src.append("{\n").append(tile ? "" : "    GATUN_DEPENDENT_START();\n").append(body).append("}\n");
            return new KernelSource(k.name(), src.toString(), List.copyOf(symbolNames.keySet()), k.isReduction(), vw,
                    k.ranges(), k.reductionRanges(), tileColumns > 0 ? TILE_THREADS : Math.max(rowBlock, 0), tileColumns > 0 ? tileRows : 1,
                    !k.folds().isEmpty());
        }

        /** Whether a kernel casts a value to an integer or bool type, or compares values. */
        private static boolean exactnessMatters(Kernel k) {
            for (KExpr e : k.locals()) if (exactnessMatters(e)) return true;
            return false;
        }

        private static boolean exactnessMatters(KExpr e) {
            return switch (e) {
                case KExpr.Cast c -> !c.dtype().isFloating() || exactnessMatters(c.x());
                case KExpr.Apply a -> a.fn().isComparison() || a.args().stream().anyMatch(Gen::exactnessMatters);
                default -> false;
            };
        }

        /** Iteration-space extents n0.. (ranges, then reduction ranges) and the counts. */
        private void extents() {
            for (int d = 0; d < dims; d++) {
                SymInt r = d < rank ? k.ranges().get(d) : k.reductionRanges().get(d - rank);
                line(1, "const long long n" + d + " = " + sym(r) + ";", "i" + d + " < " + r + (d >= rank ? " (reduced)" : ""));
            }
            line(1, "const long long total = " + product(0, rank) + ";", k.isReduction() ? "output elements" : "elements");
            if (tile) line(1, "(void) total;", "a tile's bounds are gt_lo and gt_hi");
            if (k.isReduction()) line(1, "const long long count = " + product(rank, dims) + ";", "elements reduced into each output");
        }

        private String product(int from, int to) {
            if (from == to) return "1";
            var parts = new ArrayList<String>();
            for (int d = from; d < to; d++) parts.add("n" + d);
            return String.join(" * ", parts);
        }

        /**
         * Row-major digits of {@code linear} (which is below the product of the extents) over dims from..to-1; only
         * the digits some load uses are declared.
         */
        private void unravel(int indent, String linear, int from, int to) { unravel(indent, linear, from, to, usedDims); }

        /** The same, declaring the digits in {@code usedDims}. */
        private void unravel(int indent, String linear, int from, int to, Set<Integer> usedDims) {
            int first = to;
            for (int d = from; d < to; d++) if (usedDims.contains(d)) { first = d; break; }
            if (first == to) return;
            if (first == to - 1 && first == from) {
                line(indent, "const long long i" + from + " = " + linear + ";", null);
                return;
            }
            String rem = linear + "_rem";
            line(indent, "long long " + rem + " = " + linear + ";", null);
            for (int d = to - 1; d > first; d--)
                line(indent, (usedDims.contains(d) ? "const long long i" + d + " = " + rem + " % n" + d + "; " : "") + rem + " /= n" + d + ";", null);
            line(indent, "const long long i" + first + " = " + rem + (first == from ? "" : " % n" + first) + ";", null);
        }

        // ------------------------------------------------------------------ pointwise

        /** How a pointwise load addresses memory, relative to the output's row-major index. */
        private enum Access { CONTIGUOUS, BROADCAST, GENERAL }

        private Access access(KExpr.Load l) {
            SymInt rowMajor = SymInt.ONE;
            boolean contiguous = true, broadcast = true;
            for (int d = rank - 1; d >= 0; d--) {
                SymInt r = k.ranges().get(d);
                SymInt s = d < l.strides().size() ? l.strides().get(d) : SymInt.ZERO;
                if (!r.equals(SymInt.ONE)) {
                    if (!s.equals(rowMajor)) contiguous = false;
                    if (!s.equals(SymInt.ZERO)) broadcast = false;
                }
                rowMajor = rowMajor.times(r);
            }
            return broadcast ? Access.BROADCAST : contiguous ? Access.CONTIGUOUS : Access.GENERAL;
        }

        private List<KExpr.Load> loads() {
            var out = new ArrayList<KExpr.Load>();
            for (int i = 0; i < k.locals().size(); i++) if (usedLocals[i]) loads(k.locals().get(i), out);
            return out;
        }

        private static void loads(KExpr e, List<KExpr.Load> out) { KExpr.loads(e, out); }

        /** Elements per 16-byte vector, or 1 where the layout rules the vector path out. */
        private int vectorWidth() {
            if (k.stores().isEmpty() || k.stores().stream().anyMatch(st -> !st.isRowMajor())) return 1;
            int widest = 1;
            for (DType t : outTypes) widest = Math.max(widest, t.byteSize());
            for (KExpr.Load l : loads()) {
                Access a = access(l);
                if (a == Access.GENERAL) return 1;
                if (a == Access.CONTIGUOUS) widest = Math.max(widest, inTypes[l.input()].byteSize());
            }
            int vw = 16 / widest;
            SymInt total = SymInt.ONE;
            for (SymInt r : k.ranges()) total = total.times(r);
            if (vw < 2 || (total.isConstant() && total.constant() < vw)) return 1;
            return vw;
        }

        private void pointwiseBody(int vw) {
            extents();
            if (tile) {
                line(1, "const long long step = blockDim.x;", "this block's threads over its tile [gt_lo, gt_hi)");
                line(1, "const long long tid = threadIdx.x;", null);
            } else {
                line(1, "const long long step = (long long) gridDim.x * blockDim.x;", null);
                line(1, "const long long tid = (long long) blockIdx.x * blockDim.x + threadIdx.x;", null);
            }
            boolean general = loads().stream().anyMatch(l -> access(l) == Access.GENERAL) || k.stores().stream().anyMatch(st -> st.strides() != null);
            String start = "0";
            if (vw > 1) {
                start = "start";
                line(1, "long long start = " + (tile ? "gt_lo" : "0") + ";", null);
                // the contiguous inputs and every output, each read or written as one aligned vector of vw elements
                var checks = new ArrayList<String>();
                for (KExpr.Load l : loads())
                    if (access(l) == Access.CONTIGUOUS) {
                        String base = "in" + l.input() + (l.offset().equals(SymInt.ZERO) ? "" : " + " + sym(l.offset()));
                        String check = aligned(base, inTypes[l.input()], vw);
                        if (!checks.contains(check)) checks.add(check);
                    }
                for (int s = 0; s < outTypes.length; s++) checks.add(aligned("out" + s, outTypes[s], vw));
                if (tile) checks.add("(gt_lo % " + vw + " == 0)");
                body.append("    // 16-byte vectors of ").append(vw).append(" elements when every pointer they touch is aligned\n");
                body.append("    if (").append(String.join("\n        && ", checks)).append(") {\n");
                line(2, "const long long nvec = " + (tile ? "gt_hi" : "total") + " / " + vw + ";", tile ? "gt_lo is a multiple of " + vw : null);
                line(2, "for (long long v = " + (tile ? "gt_lo / " + vw + " + " : "") + "tid; v < nvec; v += step) {", null);
                line(3, "const long long o = v * " + vw + ";", null);
                // one vector load per distinct contiguous load (input and offset)
                var vectorOf = new TreeMap<String, String>();
                int x = 0;
                for (KExpr.Load l : loads()) {
                    if (access(l) != Access.CONTIGUOUS) continue;
                    String base = "in" + l.input() + (l.offset().equals(SymInt.ZERO) ? "" : " + " + sym(l.offset()));
                    if (vectorOf.containsKey(base)) continue;
                    String name = "x" + x++;
                    vectorOf.put(base, name);
                    String vt = "gt_vec<" + storageType(inTypes[l.input()]) + ", " + vw + ">";
                    line(3, "const " + vt + " " + name + " = *reinterpret_cast<const " + vt + "*>(" + base + " + o);", k.inputs().get(l.input()).name());
                }
                for (int s = 0; s < outTypes.length; s++)
                    line(3, "gt_vec<" + storageType(outTypes[s]) + ", " + vw + "> y" + s + ";", null);
                line(3, "#pragma unroll", null);
                line(3, "for (int l = 0; l < " + vw + "; l++) {", null);
                Function<KExpr.Load, String> vecLoad = l -> access(l) == Access.CONTIGUOUS
                        ? vectorOf.get("in" + l.input() + (l.offset().equals(SymInt.ZERO) ? "" : " + " + sym(l.offset()))) + ".e[l]"
                        : "in" + l.input() + "[" + sym(l.offset()) + "]";
                locals(4, vecLoad);
                for (int s = 0; s < outTypes.length; s++) {
                    var st = k.stores().get(s);
                    line(4, "y" + s + ".e[l] = " + store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]) + ";", null);
                }
                line(3, "}", null);
                for (int s = 0; s < outTypes.length; s++) {
                    String vt = "gt_vec<" + storageType(outTypes[s]) + ", " + vw + ">";
                    line(3, "*reinterpret_cast<" + vt + "*>(out" + s + " + o) = y" + s + ";", k.stores().get(s).buffer().name());
                }
                line(2, "}", null);
                line(2, "start = nvec * " + vw + ";", null);
                line(1, "}", null);
                body.append("    // scalar loop: ").append(vw > 1 ? "the tail, or everything when a pointer is misaligned\n" : "\n");
            }
            String begin = start.equals("0") ? (tile ? "gt_lo + tid" : "tid") : "start + tid";
            line(1, "for (long long o = " + begin + "; o < " + (tile ? "gt_hi" : "total") + "; o += step) {", null);
            if (general) unravel(2, "o", 0, rank);
            Function<KExpr.Load, String> scalarLoad = l -> switch (access(l)) {
                case CONTIGUOUS -> "in" + l.input() + "[" + (l.offset().equals(SymInt.ZERO) ? "o" : sym(l.offset()) + " + o") + "]";
                case BROADCAST -> "in" + l.input() + "[" + sym(l.offset()) + "]";
                case GENERAL -> "in" + l.input() + "[" + index(l) + "]";
            };
            locals(2, scalarLoad);
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                line(2, "out" + s + "[" + place(st, "o", 0) + "] = " + store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]) + ";", st.buffer().name());
            }
            line(1, "}", null);
        }

        /**
         * Where a store puts the element: {@code offset + rowMajor} for a row-major store ({@code rowMajor} its row-major
         * number), else offset plus its strides times the index digits from {@code firstDim} on.
         */
        private String place(Kernel.Store st, String rowMajor, int firstDim) {
            var parts = new ArrayList<String>();
            if (!st.offset().equals(SymInt.ZERO)) parts.add(sym(st.offset()));
            if (st.strides() == null) parts.add(rowMajor);
            else
                for (int d = 0; d < st.strides().size(); d++) {
                    SymInt x = st.strides().get(d);
                    if (x.equals(SymInt.ZERO)) continue;
                    parts.add(x.equals(SymInt.ONE) ? "i" + (firstDim + d) : sym(x) + " * i" + (firstDim + d));
                }
            return parts.isEmpty() ? "0" : String.join(" + ", parts);
        }

        private static String aligned(String pointer, DType t, int vw) {
            return "(reinterpret_cast<unsigned long long>(" + pointer + ") % " + (t.byteSize() * vw) + " == 0)";
        }

        // ------------------------------------------------------------------ reduction

        // ------------------------------------------------------------------ row kernels

        /** How a row kernel's load moves along the row. */
        private enum RowAccess {
            /** The same element for the whole row (a per-row value). */
            ROW,
            /** Element {@code r} of the row at {@code base(row) + r}: held in registers, read with vectors. */
            ALONG,
            /** Anything else: indexed by the element's digits. */
            GENERAL
        }

        private RowAccess rowAccess(KExpr.Load l) {
            boolean zero = true, along = true;
            SymInt rowMajor = SymInt.ONE;
            for (int d = dims - 1; d >= rank; d--) {
                SymInt r = k.reductionRanges().get(d - rank);
                SymInt x = d < l.strides().size() ? l.strides().get(d) : SymInt.ZERO;
                if (!r.equals(SymInt.ONE)) {
                    if (!x.equals(SymInt.ZERO)) zero = false;
                    if (!x.equals(rowMajor)) along = false;
                }
                rowMajor = rowMajor.times(r);
            }
            return zero ? RowAccess.ROW : along ? RowAccess.ALONG : RowAccess.GENERAL;
        }

        /** Whether a load's place depends on the row (an input's row), not only on the element (a weight shared by all rows). */
        private boolean movesWithRow(KExpr.Load l) {
            for (int d = 0; d < Math.min(rank, l.strides().size()); d++)
                if (!l.strides().get(d).equals(SymInt.ZERO) && !k.ranges().get(d).equals(SymInt.ONE)) return true;
            return false;
        }

        /** {@code offset + sum(stride_d * i_d)} over the row dimensions only: where the row starts for an ALONG load. */
        private String rowBase(KExpr.Load l) {
            var parts = new ArrayList<String>();
            if (!l.offset().equals(SymInt.ZERO)) parts.add(sym(l.offset()));
            for (int d = 0; d < Math.min(rank, l.strides().size()); d++) {
                SymInt x = l.strides().get(d);
                if (x.equals(SymInt.ZERO)) continue;
                parts.add(x.equals(SymInt.ONE) ? "i" + d : sym(x) + " * i" + d);
            }
            return parts.isEmpty() ? "0" : String.join(" + ", parts);
        }

        /** Threads per block, vectors per thread and elements per vector of a row kept in registers; 0 when looped. */
        private int rowBlock, rowChunks, rowVector = 1;
        /** How many element values a row kernel keeps in registers for later phases (see {@link PhasePlan}). */
        private int keptValues;
        /** Most vectors a thread holds per input; longer rows are looped over. */
        static final int MAX_ROW_CHUNKS = 8;

        /**
         * A row kernel: one block per row (grid-stride over rows). When the row's length is a constant and fits, each
         * thread first loads its elements of every input read along the row into registers (16-byte vectors where
         * aligned), so the phases read registers and the row comes from memory once; otherwise each phase loops over
         * the row reading memory. Each phase folds its reduction, then a tree (warp shuffles, one partial per warp in
         * shared memory, a last shuffle) gives the result to every thread through shared memory; the last phase stores
         * the elements, thread 0 the per-row values.
         */
        private void rowBody() {
            int phases = k.reductions().size();
            var along = new ArrayList<String>();          // distinct ALONG loads: "input|base"
            var alongLoads = new ArrayList<KExpr.Load>();
            int widest = 1;
            // inputs read along the row are held in registers; a weight shared by every row is read from cache instead
            for (KExpr.Load l : loads())
                if (rowAccess(l) == RowAccess.ALONG && movesWithRow(l)) {
                    String key = l.input() + "|" + rowBase(l);
                    if (!along.contains(key)) {
                        along.add(key);
                        alongLoads.add(l);
                        widest = Math.max(widest, inTypes[l.input()].byteSize());
                    }
                }
            for (int s = 0; s < outTypes.length; s++) if (!k.stores().get(s).perRow() && k.stores().get(s).isRowMajor()) widest = Math.max(widest, outTypes[s].byteSize());
            SymInt countSym = SymInt.ONE;
            for (SymInt r : k.reductionRanges()) countSym = countSym.times(r);
            rowBlock = 0;
            if (countSym.isConstant() && countSym.constant() > 0) {
                long count = countSym.constant();
                int vw = 16 / widest;
                if (vw < 2 || count % vw != 0 || alongLoads.isEmpty()) vw = 1;
                long vectors = count / vw;
                if (vectors <= 1024L * MAX_ROW_CHUNKS) {
                    // about 16 elements a thread (4 vectors of f32, 2 of a half type): more threads share a row of
                    // short elements, so each row's chain of phases is as short as a float row's (measured on an H100:
                    // 32 bf16 elements a thread, or 8, are both slower at 4096 columns)
                    int target = Math.clamp(16 / vw, 1, 4);
                    int block = (int) Math.clamp((Math.ceilDiv(vectors, target) + 31) / 32 * 32, 32, 1024);
                    rowVector = vw;
                    rowBlock = block;
                    rowChunks = (int) Math.ceilDiv(vectors, block);
                }
            }
            boolean held = rowBlock > 0;
            // a weight shared by every row (LayerNorm's scale and shift), read along the row as a vector per chunk
            var weights = new ArrayList<String>();
            var weightLoads = new ArrayList<KExpr.Load>();
            if (held && rowVector > 1)
                for (KExpr.Load l : loads())
                    if (rowAccess(l) == RowAccess.ALONG && !movesWithRow(l) && !weights.contains(l.input() + "|" + rowBase(l))) {
                        weights.add(l.input() + "|" + rowBase(l));
                        weightLoads.add(l);
                    }
            extents();
            line(1, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;", "blockDim.x is a multiple of 32");
            for (int p = 0; p < phases; p++) {
                var r = k.reductions().get(p);
                Domain acc = Domain.of(k.locals().get(r.local()).dtype());
                line(1, "__shared__ " + acc.c + " gt_part" + p + "[32];", "reduction r" + p + ": one partial per warp");
            }
            if (tile) line(1, "for (long long o = gt_lo; o < gt_hi; o++) {", "the rows of this block's tile");
            else line(1, "for (long long o = blockIdx.x; o < total; o += gridDim.x) {", "one row per block");
            unravel(2, "o", 0, rank);
            Function<KExpr.Load, String> load;
            if (held) {
                int vw = rowVector;
                String vt = "gt_vec<%s, " + vw + ">";
                for (int q = 0; q < alongLoads.size(); q++) {
                    KExpr.Load l = alongLoads.get(q);
                    line(2, rowArray(inTypes[l.input()], "gt_c" + q), k.inputs().get(l.input()).name() + "'s row, this thread's elements");
                }
                if (vw > 1) {
                    var checks = new ArrayList<String>();
                    for (KExpr.Load l : alongLoads) checks.add(aligned("(in" + l.input() + " + " + rowBase(l) + ")", inTypes[l.input()], vw));
                    line(2, "const bool gt_vectors = " + String.join(" && ", checks.stream().distinct().toList()) + ";", null);
                }
                if (vw > 1 && !weights.isEmpty()) {
                    var checks = new ArrayList<String>();
                    for (KExpr.Load l : weightLoads) checks.add(aligned("(in" + l.input() + " + " + rowBase(l) + ")", inTypes[l.input()], vw));
                    line(2, "const bool gt_wvectors = " + String.join(" && ", checks.stream().distinct().toList()) + ";", "weights shared by the rows, read as vectors too");
                }
                line(2, "#pragma unroll", null);
                line(2, "for (int j = 0; j < " + rowChunks + "; j++) {", "load the row once");
                line(3, "const long long r0 = ((long long) j * " + rowBlock + " + threadIdx.x) * " + vw + ";", null);
                line(3, "if (r0 < count) {", null);
                for (int q = 0; q < alongLoads.size(); q++) {
                    KExpr.Load l = alongLoads.get(q);
                    String base = "in" + l.input() + " + " + rowBase(l) + " + r0";
                    String st = storageType(inTypes[l.input()]);
                    if (vw > 1) {
                        String v = vt.formatted(st);
                        line(4, "if (gt_vectors) gt_c" + q + "[j] = *reinterpret_cast<const " + v + "*>(" + base + ");", null);
                        line(4, "else for (int l = 0; l < " + vw + "; l++) gt_c" + q + "[j].e[l] = (" + base + ")[l];", null);
                    } else {
                        line(4, "gt_c" + q + "[j] = *(" + base + ");", null);
                    }
                }
                line(3, "}", null);
                line(2, "}", null);
                load = l -> switch (rowAccess(l)) {
                    case ALONG -> movesWithRow(l) ? rowElement("gt_c" + along.indexOf(l.input() + "|" + rowBase(l)))
                            : weights.contains(l.input() + "|" + rowBase(l)) ? "gt_w" + weights.indexOf(l.input() + "|" + rowBase(l)) + ".e[l]"
                            : "in" + l.input() + "[" + rowBase(l) + " + r]";
                    case ROW -> "in" + l.input() + "[" + rowBase(l) + "]";
                    case GENERAL -> "in" + l.input() + "[" + index(l) + "]";
                };
            } else {
                load = l -> switch (rowAccess(l)) {
                    case ALONG -> "in" + l.input() + "[" + rowBase(l) + " + r]";
                    case ROW -> "in" + l.input() + "[" + rowBase(l) + "]";
                    case GENERAL -> "in" + l.input() + "[" + index(l) + "]";
                };
            }
            var plan = new PhasePlan(held);
            for (boolean kept : plan.kept) if (kept) keptValues++;
            for (int i = 0; i < plan.kept.length; i++)
                if (plan.kept[i]) line(2, rowArray(k.held(k.locals().get(i).dtype()), "gt_k" + i), "t" + i + " for the later phases, this thread's elements");
            for (int p = 0; p < phases; p++) {
                var r = k.reductions().get(p);
                KExpr folded = k.locals().get(r.local());
                Domain acc = Domain.of(folded.dtype());
                String init = identity(r.fn(), acc);
                line(2, valueType(r.dtype()) + " rd" + p + ";", "r" + p + " = " + r.fn().opName() + " of t" + r.local());
                line(2, "{", null);
                line(3, acc.c + " acc = " + init + ";", null);
                final int phase = p;
                plan.rowLocals(3, phase, load);
                boolean digits = plan.usesDigits(phase, false);
                elementLoop(3, held, digits || plan.readsAlongUncached(phase), digits, () -> weightVectors(plan, phase, weights, weightLoads), () -> {
                    int in = held ? 6 : 4;
                    plan.elementLocals(in, phase, load);
                    line(in, "acc = " + combine(r.fn(), acc, "acc", convert("t" + r.local(), folded.dtype(), acc.type)) + ";", null);
                }, () -> { });
                line(3, "for (int d = 16; d > 0; d >>= 1) acc = " + combine(r.fn(), acc, "acc", "__shfl_down_sync(0xffffffffu, acc, d)") + ";", "within each warp");
                line(3, "if (lane == 0) gt_part" + p + "[warp] = acc;", null);
                line(3, "__syncthreads();", "one barrier: then every thread folds the warps' partials, in the same order");
                line(3, "acc = gt_part" + p + "[0];", null);
                line(3, "for (int w = 1; w < warps; w++) acc = " + combine(r.fn(), acc, "acc", "gt_part" + p + "[w]") + ";", null);
                line(3, "rd" + p + " = " + result(r, acc, "acc") + ";", "rounded to " + k.held(r.dtype()));
                line(2, "}", null);
            }
            boolean elementStores = k.stores().stream().anyMatch(st -> !st.perRow());
            if (elementStores) {
                line(2, "// the row's elements", null);
                line(2, "{", null);
                plan.rowLocals(3, phases, load);
                // row-major stores of a row held in registers go out as vectors, gathered over l
                var vectored = new ArrayList<Integer>();
                for (int s = 0; s < outTypes.length; s++)
                    if (held && rowVector > 1 && !k.stores().get(s).perRow() && k.stores().get(s).isRowMajor()) vectored.add(s);
                Runnable before = () -> {
                    weightVectors(plan, phases, weights, weightLoads);
                    for (int s : vectored) line(5, "gt_vec<" + storageType(outTypes[s]) + ", " + rowVector + "> gt_y" + s + ";", null);
                };
                Runnable after = () -> {
                    for (int s : vectored) {
                        String base = "out" + s + " + o * count + r0";
                        String v = "gt_vec<" + storageType(outTypes[s]) + ", " + rowVector + ">";
                        line(4, "if " + aligned("(" + base + ")", outTypes[s], rowVector) + " *reinterpret_cast<" + v + "*>(" + base + ") = gt_y" + s + ";", k.stores().get(s).buffer().name());
                        line(4, "else for (int l = 0; l < " + rowVector + "; l++) (" + base + ")[l] = gt_y" + s + ".e[l];", null);
                    }
                };
                boolean digits = plan.usesDigits(phases, true);
                elementLoop(2, held, digits || plan.readsAlongUncached(phases) || k.stores().stream().filter(st -> !st.perRow()).count() > vectored.size(),
                        digits, before, () -> {
                    int in = held ? 6 : 4;
                    plan.elementLocals(in, phases, load);
                    for (int s = 0; s < outTypes.length; s++) {
                        var st = k.stores().get(s);
                        if (st.perRow()) continue;
                        String v = store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]);
                        if (vectored.contains(s)) line(in, "gt_y" + s + ".e[l] = " + v + ";", st.buffer().name());
                        else line(in, "out" + s + "[" + place(st, "o * count + r", 0) + "] = " + v + ";", st.buffer().name());
                    }
                }, after);
                line(2, "}", null);
            }
            if (k.stores().stream().anyMatch(Kernel.Store::perRow)) {
                line(2, "if (threadIdx.x == 0) {", "what is one value per row");
                rowStores(3, load, rowStoreNeeds());
                line(2, "}", null);
            }
            line(2, "__syncthreads();", "shared memory is reused by the next row");
            line(1, "}", null);
        }

        /**
         * The folds of the per-row values ({@link Kernel.Fold}), after the rows: each block counts itself done with an
         * acquire-release atomic that publishes its rows' stores; the last one reads every row's value back (from L2, as stored)
         * and folds them in row order through the usual warp and block tree, then sets the counter back to 0 for the
         * next launch. One launch where a second kernel would read the rows' values.
         */
        private void folds() {
            line(1, "__shared__ bool gt_last;", "the folds: the last block to finish folds every row's value");
            // the barrier orders the block's per-row stores before thread 0's count, which releases them at GPU scope
            // (a release is cumulative) and, in the last block, acquires every other block's; no fence in every thread
            line(1, "__syncthreads();", null);
            line(1, "if (threadIdx.x == 0) {", null);
            line(2, "unsigned int gt_before;", null);
            line(2, "asm volatile(\"atom.add.acq_rel.gpu.u32 %0, [%1], 1;\" : \"=r\"(gt_before) : \"l\"(gt_done) : \"memory\");", null);
            line(2, "gt_last = gt_before == gridDim.x - 1;", null);
            line(1, "}", null);
            line(1, "__syncthreads();", "the last block's threads see what its thread 0 acquired");
            line(1, "if (gt_last) {", null);
            line(2, "const int gt_lane = threadIdx.x & 31, gt_warp = threadIdx.x >> 5, gt_warps = (blockDim.x + 31) >> 5;", null);
            for (int f = 0; f < k.folds().size(); f++) {
                var fold = k.folds().get(f);
                int of = fold.of();
                DType rowType = outTypes[of];
                Domain acc = Domain.of(rowType);
                ReduceFn fn = fold.fn(); // a mean accumulates as a sum (combine, identity) and divides in result
                line(2, "{", "fold" + f + " = " + fold.fn().opName() + " of " + k.stores().get(of).buffer().name());
                line(3, "__shared__ " + acc.c + " gt_fold" + f + "[32];", null);
                line(3, acc.c + " acc = " + identity(fn, acc) + ";", null);
                String head = "0";
                if (rowType == DType.FLOAT32) {
                    // f32 values four to a load where aligned: 4096 rows are then four loads a thread, all in flight at once
                    // (one wait on L2, not two); measured on an H100 with the loop-ordering seed's tail
                    head = "gt_head" + f;
                    line(3, "long long " + head + " = 0;", null);
                    line(3, "if ((reinterpret_cast<unsigned long long>(out" + of + ") & 15ull) == 0) {", "four values a load");
                    line(4, head + " = total / 4 * 4;", null);
                    line(4, "#pragma unroll 4", null);
                    line(4, "for (long long v = threadIdx.x; v < total / 4; v += blockDim.x) {", null);
                    line(5, "float4 q = __ldcg(reinterpret_cast<const float4*>(out" + of + ") + v);", null);
                    line(5, "acc = " + combine(fn, acc, combine(fn, acc, combine(fn, acc, combine(fn, acc, "acc", "q.x"), "q.y"), "q.z"), "q.w") + ";", null);
                    line(4, "}", null);
                    line(3, "}", null);
                }
                line(3, "#pragma unroll 8", "8 loads in flight, not one at a time");
                line(3, "for (long long r = " + head + " + threadIdx.x; r < total; r += blockDim.x) acc = " + combine(fn, acc, "acc",
                        convert(foldLoad(rowType, "out" + of + " + r"), rowType, acc.type)) + ";", null);
                line(3, "for (int d = 16; d > 0; d >>= 1) acc = " + combine(fn, acc, "acc", "__shfl_down_sync(0xffffffffu, acc, d)") + ";", null);
                line(3, "if (gt_lane == 0) gt_fold" + f + "[gt_warp] = acc;", null);
                line(3, "__syncthreads();", null);
                line(3, "if (threadIdx.x == 0) {", null);
                line(4, "for (int w = 1; w < gt_warps; w++) acc = " + combine(fn, acc, "acc", "gt_fold" + f + "[w]") + ";", "in the same order every launch");
                line(4, "fold" + f + "[0] = " + store(result(fn, fold.dtype(), acc, "acc", "total"), k.held(fold.dtype()), fold.buffer().dtype()) + ";",
                        fold.buffer().name());
                line(3, "}", null);
                line(3, "__syncthreads();", null);
                line(2, "}", null);
            }
            line(2, "if (threadIdx.x == 0) *gt_done = 0u;", "zero again for the next launch");
            line(1, "}", null);
        }

        /** A value of {@code t} read past the L1 cache (another block stored it), in its value type's C expression. */
        private static String foldLoad(DType t, String pointer) {
            return switch (t) {
                case BFLOAT16 -> "__bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(" + pointer + "))))";
                case FLOAT16 -> "__half2float(__ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(" + pointer + "))))";
                case BOOL -> "(__ldcg(reinterpret_cast<const unsigned char*>(" + pointer + ")) != 0)";
                case INT8 -> "(signed char) __ldcg(reinterpret_cast<const signed char*>(" + pointer + "))";
                case FLOAT32, FLOAT64, INT32, INT64 -> "__ldcg(" + pointer + ")";
            };
        }

        /**
         * A thread's part of a row held in registers: an array of its vectors (8 bf16 values then sit in 4 registers,
         * two to a register, not in 8), or of elements where there are no vectors.
         */
        private String rowArray(DType t, String name) {
            return rowVector > 1 ? "gt_vec<" + storageType(t) + ", " + rowVector + "> " + name + "[" + rowChunks + "];"
                    : storageType(t) + " " + name + "[" + rowChunks + "];";
        }

        /** Element {@code l} of chunk {@code j} of a {@link #rowArray}. */
        private String rowElement(String name) { return rowVector > 1 ? name + "[j].e[l]" : name + "[j]"; }

        /** Loads this chunk's vector of each weight that phase {@code q} reads (its element {@code l} is {@code gt_w<n>.e[l]}). */
        private void weightVectors(PhasePlan plan, int q, List<String> weights, List<KExpr.Load> weightLoads) {
            var used = new TreeSet<Integer>();
            for (int i = 0; i < plan.element.length; i++)
                if (plan.compute[q][i] && plan.element[i])
                    for (KExpr.Load l : loadsOf(k.locals().get(i))) {
                        int w = weights.indexOf(l.input() + "|" + rowBase(l));
                        if (w >= 0) used.add(w);
                    }
            for (int w : used) {
                KExpr.Load l = weightLoads.get(w);
                String v = "gt_vec<" + storageType(inTypes[l.input()]) + ", " + rowVector + ">", base = "in" + l.input() + " + " + rowBase(l) + " + r0";
                line(5, v + " gt_w" + w + ";", k.inputs().get(l.input()).name() + ", this chunk's elements");
                line(5, "if (gt_wvectors) gt_w" + w + " = *reinterpret_cast<const " + v + "*>(" + base + ");", null);
                line(5, "else for (int l = 0; l < " + rowVector + "; l++) gt_w" + w + ".e[l] = (" + base + ")[l];", null);
            }
        }

        /** The reduction's result from its accumulated {@code a}: divided by the count for a mean, rounded to its dtype. */
        private String result(Kernel.Reduction r, Domain acc, String a) { return result(r.fn(), r.dtype(), acc, a, "count"); }

        /** A fold of {@code fn} accumulated in {@code a} over {@code count} values: divided by it for a mean, rounded to {@code dtype}. */
        private String result(ReduceFn fn, DType dtype, Domain acc, String a, String count) {
            if (fn != ReduceFn.MEAN) return convert(a, acc.type, k.held(dtype));
            Domain m = acc == Domain.LONG ? Domain.DOUBLE : acc;
            String x = acc == Domain.LONG ? "(double) " + a : a;
            return convert("(" + count + " == 0 ? " + nan(m) + " : " + x + " / (" + m.c + ") " + count + ")", m.type, k.held(dtype));
        }

        /** The accumulator's starting value for a reduction by {@code fn}. */
        private static String identity(ReduceFn fn, Domain acc) {
            return switch (fn) {
                case SUM, MEAN -> acc == Domain.LONG ? "0LL" : acc == Domain.DOUBLE ? "0.0" : "0.0f";
                case MAX -> acc == Domain.LONG ? "(-9223372036854775807LL - 1)" : negInf(acc);
                case MIN -> acc == Domain.LONG ? "9223372036854775807LL" : posInf(acc);
            };
        }

        // ------------------------------------------------------------------ transposing row kernels

        /** Threads per block of a transposing row kernel; its rows per block and the columns of its tile (0: not one). */
        static final int TILE_THREADS = 256;
        private int tileRows, tileColumns;
        /** Most shared memory the tiles of a transposing row kernel take together. */
        static final int MAX_TILE_BYTES = 36 * 1024;

        /**
         * The element stores a transposing row kernel ({@link #tiledRowBody}) writes through its tiles, or none when this
         * row kernel is not one. A store is transposed when consecutive rows are next to each other in memory (stride 1
         * on the last row dimension) and consecutive elements of a row are not: one block per row would write every
         * element to a memory sector of its own. The kernel is transposing when it has such a store and one pass over
         * the row does: one element dimension, no reduction and no element value reading a reduction's result, every
         * load along the row or once per row.
         */
        private List<Integer> transposedStores() {
            var out = new ArrayList<Integer>();
            if (k.reductionRanges().size() != 1 || rank == 0) return out;
            int[] phase = k.phases();
            for (var r : k.reductions()) if (phase[r.local()] > 0) return out;
            for (var st : k.stores()) if (!st.perRow() && phase[st.local()] > 0) return out;
            for (KExpr.Load l : loads()) if (rowAccess(l) == RowAccess.GENERAL) return out;
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                if (st.perRow() || st.strides() == null) continue;
                SymInt lastRow = st.strides().get(rank - 1), along = st.strides().get(rank);
                if (lastRow.equals(SymInt.ONE) && !along.equals(SymInt.ONE) && !along.equals(SymInt.ZERO) && !k.ranges().get(rank - 1).equals(SymInt.ONE)) out.add(s);
            }
            if (out.isEmpty()) return out;
            // as few rows a block as still write whole 32-byte sectors of each column: more blocks to share the GPU
            // (4096 rows of f32 make 512 blocks of 8 rows, not 128 of 32; measured on an H100: 0.83 of copy, not 0.69)
            int narrowest = 8;
            for (int s : out) narrowest = Math.min(narrowest, outTypes[s].byteSize());
            tileRows = Math.clamp(32 / narrowest, 8, 32);
            for (int e = 8; e >= 1; e /= 2) {
                int columns = 32 * e;
                long bytes = 0;
                for (int s : out) bytes += (long) tileRows * (columns + tilePad(outTypes[s])) * outTypes[s].byteSize();
                if (bytes <= MAX_TILE_BYTES) {
                    tileColumns = columns;
                    return out;
                }
            }
            out.clear();
            return out;
        }

        /**
         * Loads the elements of the pass starting at {@code c} of each input read along the rows into registers, every
         * load in flight at once: the first pass before the loop, each next one while the tile of the last goes out.
         */
        private void tileLoads(int indent, String c, List<KExpr.Load> rowLoads, int per, int passes) {
            if (rowLoads.isEmpty()) return;
            var loadDims = new TreeSet<Integer>();
            for (KExpr.Load l : rowLoads) loadDims.addAll(rowDigits(l));
            line(indent, "#pragma unroll", null);
            line(indent, "for (int m = 0; m < " + per + "; m++) {", "the elements of the pass from " + c + ", all loads in flight at once");
            line(indent + 1, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
            unravel(indent + 1, "o", 0, rank, loadDims);
            line(indent + 1, "#pragma unroll", null);
            line(indent + 1, "for (int e = 0; e < " + passes + "; e++) {", null);
            line(indent + 2, "const long long r = " + c + " + e * 32 + lane;", null);
            for (int q = 0; q < rowLoads.size(); q++)
                line(indent + 2, "if (o < total && r < count) gt_x" + q + "[m][e] = in" + rowLoads.get(q).input() + "[" + rowBase(rowLoads.get(q)) + " + r];", null);
            line(indent + 1, "}", null);
            line(indent, "}", null);
        }

        /** The row digits a load's place uses. */
        private Set<Integer> rowDigits(KExpr.Load l) {
            var out = new TreeSet<Integer>();
            for (int d = 0; d < Math.min(rank, l.strides().size()); d++) if (!l.strides().get(d).equals(SymInt.ZERO)) out.add(d);
            return out;
        }

        /**
         * Elements a tile row is padded by: rows {@code 32 / tileRows} words apart modulo 32 banks, so a warp reading
         * {@code tileRows} rows of {@code 32 / tileRows} columns hits 32 banks (4 bytes for 32 rows).
         */
        private int tilePad(DType t) { return Math.max(1, 4 * (32 / tileRows) / t.byteSize()); }

        /**
         * A transposing row kernel: each block takes {@code tileRows} consecutive rows (8 to 32), each of its 8 warps an
         * eighth of them, and walks the rows
         * together, {@code tileColumns} elements at a time. A warp reads a row's elements at consecutive addresses (lane
         * {@code l} takes elements {@code l, l + 32, ...} of the pass), folds them into the row's reductions and writes the
         * element values of each transposed store into a shared tile of those rows; once the tile is full, each warp writes
         * whole columns of it, the tile's rows at consecutive addresses (at least 32 bytes). Other element stores are written directly.
         * After the last pass, warp shuffles finish each row's reductions and lane 0 writes the per-row values. The row is
         * read once and every store is coalesced.
         */
        private void tiledRowBody(List<Integer> tiled) {
            int phases = k.reductions().size(), per = tileRows / (TILE_THREADS / 32), passes = tileColumns / 32, across = 32 / tileRows;
            extents();
            line(1, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;", "8 warps: warp w takes rows w, w + 8, ... of the block's " + tileRows);
            for (int s : tiled)
                line(1, "__shared__ " + storageType(outTypes[s]) + " gt_tile" + s + "[" + tileRows + "][" + (tileColumns + tilePad(outTypes[s])) + "];",
                        k.stores().get(s).buffer().name() + ": " + tileRows + " rows of " + tileColumns + " elements, padded against bank conflicts");
            boolean[] needed = new boolean[k.locals().size()];
            for (var r : k.reductions()) needed[r.local()] = true;
            for (var st : k.stores()) if (!st.perRow()) needed[st.local()] = true;
            k.withReads(needed);
            // the pass's elements of each input read along the rows, loaded into registers before any is used
            var rows = new ArrayList<String>();
            var rowLoads = new ArrayList<KExpr.Load>();
            for (int i = 0; i < needed.length; i++)
                if (needed[i])
                    for (KExpr.Load l : loadsOf(k.locals().get(i)))
                        if (rowAccess(l) == RowAccess.ALONG && movesWithRow(l) && !rows.contains(l.input() + "|" + rowBase(l))) {
                            rows.add(l.input() + "|" + rowBase(l));
                            rowLoads.add(l);
                        }
            Function<KExpr.Load, String> load = l -> switch (rowAccess(l)) {
                case ALONG -> rows.contains(l.input() + "|" + rowBase(l)) ? "gt_x" + rows.indexOf(l.input() + "|" + rowBase(l)) + "[m][e]"
                        : "in" + l.input() + "[" + rowBase(l) + " + r]";
                case ROW -> "in" + l.input() + "[" + rowBase(l) + "]";
                case GENERAL -> throw new IllegalStateException("a transposing row kernel has no general loads");
            };
            // the digits each part of the kernel indexes by: the rows' for loads, every stored dimension for stores
            var fillDims = new TreeSet<Integer>();
            var flushDims = new TreeSet<Integer>();
            var rowDims = new TreeSet<Integer>();
            for (int i = 0; i < needed.length; i++)
                if (needed[i]) for (KExpr.Load l : loadsOf(k.locals().get(i))) if (!rows.contains(l.input() + "|" + rowBase(l))) fillDims.addAll(rowDigits(l));
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                if (st.strides() == null) continue;
                var into = st.perRow() ? rowDims : tiled.contains(s) ? flushDims : fillDims;
                for (int d = 0; d < st.strides().size(); d++) if (!st.strides().get(d).equals(SymInt.ZERO)) into.add(d);
            }
            line(1, "for (long long o0 = (long long) blockIdx.x * " + tileRows + "; o0 < total; o0 += (long long) gridDim.x * " + tileRows + ") {", tileRows + " rows per block");
            for (int p = 0; p < phases; p++) {
                var r = k.reductions().get(p);
                Domain acc = Domain.of(k.locals().get(r.local()).dtype());
                line(2, acc.c + " acc" + p + "[" + per + "];", "r" + p + " = " + r.fn().opName() + " of t" + r.local() + ", this lane's part, per row");
                line(2, "for (int m = 0; m < " + per + "; m++) acc" + p + "[m] = " + identity(r.fn(), acc) + ";", null);
            }
            for (int q = 0; q < rowLoads.size(); q++)
                line(2, storageType(inTypes[rowLoads.get(q).input()]) + " gt_x" + q + "[" + per + "][" + passes + "];", k.inputs().get(rowLoads.get(q).input()).name() + ": this lane's elements of a pass");
            tileLoads(2, "0", rowLoads, per, passes);
            line(2, "for (long long c0 = 0; c0 < count; c0 += " + tileColumns + ") {", tileColumns + " elements of each row per pass");
            line(3, "#pragma unroll", null);
            line(3, "for (int m = 0; m < " + per + "; m++) {", null);
            line(4, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
            unravel(4, "o", 0, rank, fillDims);
            line(4, "#pragma unroll", null);
            line(4, "for (int e = 0; e < " + passes + "; e++) {", null);
            line(5, "const long long r = c0 + e * 32 + lane;", null);
            line(5, "if (o < total && r < count) {", null);
            if (fillDims.contains(rank)) line(6, "const long long i" + rank + " = r;", null);
            locals(6, load, needed);
            for (int p = 0; p < phases; p++) {
                var r = k.reductions().get(p);
                KExpr folded = k.locals().get(r.local());
                Domain acc = Domain.of(folded.dtype());
                line(6, "acc" + p + "[m] = " + combine(r.fn(), acc, "acc" + p + "[m]", convert("t" + r.local(), folded.dtype(), acc.type)) + ";", null);
            }
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                if (st.perRow()) continue;
                String v = store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]);
                if (tiled.contains(s)) line(6, "gt_tile" + s + "[warp + " + (TILE_THREADS / 32) + " * m][e * 32 + lane] = " + v + ";", st.buffer().name() + ", through the tile");
                else line(6, "out" + s + "[" + place(st, "o * count + r", 0) + "] = " + v + ";", st.buffer().name());
            }
            line(5, "}", null);
            line(4, "}", null);
            line(3, "}", null);
            line(3, "__syncthreads();", "the tile is written");
            tileLoads(3, "c0 + " + tileColumns, rowLoads, per, passes);
            line(3, "#pragma unroll 4", null);
            String column = across == 1 ? "warp + " + (TILE_THREADS / 32) + " * m" : "warp * " + across + " + lane / " + tileRows + " + " + (TILE_THREADS / tileRows) + " * m";
            String tileRow = across == 1 ? "lane" : "lane % " + tileRows;
            line(3, "for (int m = 0; m < " + (tileColumns * tileRows / TILE_THREADS) + "; m++) {", "each warp writes " + across + " column(s) of the tile at a time, " + tileRows + " rows each");
            line(4, "const long long r = c0 + " + column + ", o = o0 + " + tileRow + ";", null);
            line(4, "if (r < count && o < total) {", null);
            unravel(5, "o", 0, rank, flushDims);
            if (flushDims.contains(rank)) line(5, "const long long i" + rank + " = r;", null);
            for (int s : tiled)
                line(5, "out" + s + "[" + place(k.stores().get(s), "o * count + r", 0) + "] = gt_tile" + s + "[" + tileRow + "][" + column + "];", k.stores().get(s).buffer().name());
            line(4, "}", null);
            line(3, "}", null);
            line(3, "__syncthreads();", "read before the next pass writes it");
            line(2, "}", null);
            if (k.stores().stream().anyMatch(Kernel.Store::perRow)) {
                boolean[] rowNeeds = rowStoreNeeds();
                Function<KExpr.Load, String> rowLoad = l -> "in" + l.input() + "[" + rowBase(l) + "]";
                line(2, "#pragma unroll", null);
                line(2, "for (int m = 0; m < " + per + "; m++) {", "each row's reductions, then its per-row values");
                line(3, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
                line(3, "if (o >= total) break;", null);
                for (int p = 0; p < phases; p++) {
                    var r = k.reductions().get(p);
                    Domain acc = Domain.of(k.locals().get(r.local()).dtype());
                    line(3, acc.c + " a" + p + " = acc" + p + "[m];", null);
                    line(3, "for (int d = 16; d > 0; d >>= 1) a" + p + " = " + combine(r.fn(), acc, "a" + p, "__shfl_down_sync(0xffffffffu, a" + p + ", d)") + ";", "across the warp");
                    line(3, "const " + valueType(r.dtype()) + " rd" + p + " = " + result(r, acc, "a" + p) + ";", "lane 0's is the row's");
                }
                for (int i = 0; i < rowNeeds.length; i++) if (rowNeeds[i]) for (KExpr.Load l : loadsOf(k.locals().get(i))) rowDims.addAll(rowDigits(l));
                line(3, "if (lane == 0) {", null);
                unravel(4, "o", 0, rank, rowDims);
                rowStores(4, rowLoad, rowNeeds);
                line(3, "}", null);
                line(2, "}", null);
            }
            line(1, "}", null);
        }

        /** The locals the per-row stores need that are one value per row (what they read, not the row's elements). */
        private boolean[] rowStoreNeeds() {
            boolean[] element = k.perElement(), needs = new boolean[k.locals().size()];
            for (var st : k.stores()) if (st.perRow()) needs[st.local()] = true;
            k.withReads(needs);
            for (int i = 0; i < needs.length; i++) needs[i] &= !element[i];
            return needs;
        }

        /** The per-row values ({@code needs}, from {@link #rowStoreNeeds}) and their stores at the row {@code o}. */
        private void rowStores(int indent, Function<KExpr.Load, String> load, boolean[] needs) {
            locals(indent, load, needs);
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                if (st.perRow()) line(indent, "out" + s + "[" + place(st, "o", 0) + "] = " + store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]) + ";", st.buffer().name());
            }
        }

        /** Most element values a thread keeps in registers for later phases, beyond the row's inputs. */
        static final int MAX_KEPT = 3;

        /**
         * What each phase of a row kernel evaluates: the row values (once per row, before its loop over the elements),
         * the element values (in the loop), and, for a row held in registers, the element values an earlier phase
         * computed and kept (exp(x - max) for softmax's last phase) instead of computing them again.
         */
        private final class PhasePlan {
            final boolean[] element = k.perElement();
            final boolean[] kept = new boolean[k.locals().size()];
            final int[] first = new int[k.locals().size()];
            final boolean[][] compute, fromKept;

            PhasePlan(boolean held) {
                int phases = k.reductions().size(), n = k.locals().size(), keptCount = 0;
                java.util.Arrays.fill(first, -1);
                compute = new boolean[phases + 1][n];
                fromKept = new boolean[phases + 1][n];
                for (int q = 0; q <= phases; q++) {
                    var stack = new java.util.ArrayDeque<Integer>();
                    if (q < phases) stack.push(k.reductions().get(q).local());
                    else for (var st : k.stores()) if (!st.perRow()) stack.push(st.local());
                    while (!stack.isEmpty()) {
                        int i = stack.pop();
                        if (compute[q][i] || fromKept[q][i]) continue;
                        if (held && element[i] && first[i] >= 0 && first[i] < q && costly(k.locals().get(i)) && (kept[i] || keptCount < MAX_KEPT)) {
                            if (!kept[i]) keptCount++;
                            kept[i] = fromKept[q][i] = true;
                            continue;
                        }
                        compute[q][i] = true;
                        boolean[] deps = new boolean[n];
                        Kernel.markReads(k.locals().get(i), deps);
                        for (int d = 0; d < n; d++) if (deps[d]) stack.push(d);
                    }
                    for (int i = 0; i < n; i++) if (compute[q][i] && element[i] && first[i] < 0) first[i] = q;
                }
            }

            /** Worth a register array rather than computing again: a transcendental function or a division. */
            static boolean costly(KExpr e) {
                return switch (e) {
                    case KExpr.Apply a -> switch (a.fn()) {
                        case EXP, LOG, SIN, COS, TANH, SIGMOID, GELU, SILU, POW, DIV, SQRT, RSQRT -> true;
                        default -> a.args().stream().anyMatch(PhasePlan::costly);
                    };
                    case KExpr.Cast c -> costly(c.x());
                    default -> false;
                };
            }

            /** Whether phase q indexes by the element's digits: a load indexed in general, or (last phase) a store through strides. */
            boolean usesDigits(int q, boolean last) {
                for (int i = 0; i < element.length; i++)
                    if (compute[q][i] && element[i] && loadsOf(k.locals().get(i)).stream().anyMatch(l -> rowAccess(l) == RowAccess.GENERAL)) return true;
                if (last) for (var st : k.stores()) if (!st.perRow() && st.strides() != null && digitsAlongRow()) return true;
                return false;
            }

            /** Whether phase q reads along the row from memory element by element (a looped row, or a weight where there are no vectors). */
            boolean readsAlongUncached(int q) {
                for (int i = 0; i < element.length; i++)
                    if (compute[q][i] && element[i] && loadsOf(k.locals().get(i)).stream().anyMatch(l -> rowAccess(l) == RowAccess.ALONG && (rowBlock == 0 || !movesWithRow(l) && rowVector == 1)))
                        return true;
                return false;
            }

            void rowLocals(int indent, int q, Function<KExpr.Load, String> load) {
                for (int i = 0; i < element.length; i++)
                    if (compute[q][i] && !element[i])
                        line(indent, "const " + valueType(k.locals().get(i).dtype()) + " t" + i + " = " + strip(expr(k.locals().get(i), load)) + ";",
                                "t" + i + " = " + k.format(k.locals().get(i)) + " (once per row)");
            }

            void elementLocals(int indent, int q, Function<KExpr.Load, String> load) {
                for (int i = 0; i < element.length; i++) {
                    if (!element[i]) continue;
                    String t = valueType(k.locals().get(i).dtype());
                    // a half value is kept in its storage type (exactly: it is representable), half the registers
                    DType dt = k.held(k.locals().get(i).dtype());
                    String held = rowElement("gt_k" + i);
                    if (fromKept[q][i]) line(indent, "const " + t + " t" + i + " = " + (dt == DType.FLOAT16 ? "__half2float(" + held + ")"
                            : dt == DType.BFLOAT16 ? "__bfloat162float(" + held + ")" : held) + ";", "t" + i + ", kept from phase " + first[i]);
                    else if (compute[q][i]) {
                        line(indent, "const " + t + " t" + i + " = " + strip(expr(k.locals().get(i), load)) + ";", "t" + i + " = " + k.format(k.locals().get(i)));
                        if (kept[i] && first[i] == q) line(indent, held + " = " + store("t" + i, dt, dt) + ";", null);
                    }
                }
            }
        }

        private static List<KExpr.Load> loadsOf(KExpr e) {
            var out = new ArrayList<KExpr.Load>();
            loads(e, out);
            return out;
        }

        /** The loop over this thread's elements of the row: {@code r} is the element's position in the row. */
        /** Whether some load or store of the row indexes by the element's digits (not by its position in the row). */
        private boolean digitsAlongRow() {
            for (int d = rank; d < dims; d++) if (usedDims.contains(d)) return true;
            return false;
        }

        private void elementLoop(int indent, boolean held, boolean needsR, boolean digits, Runnable before, Runnable body, Runnable after) {
            if (held) {
                line(indent, "#pragma unroll", null);
                line(indent, "for (int j = 0; j < " + rowChunks + "; j++) {", null);
                line(indent + 1, "const long long r0 = ((long long) j * " + rowBlock + " + threadIdx.x) * " + rowVector + ";", null);
                line(indent + 1, "if (r0 < count) {", null);
                before.run();
                line(indent + 2, "#pragma unroll", null);
                line(indent + 2, "for (int l = 0; l < " + rowVector + "; l++) {", null);
                if (needsR) line(indent + 3, "const long long r = r0 + l;", null);
                if (digits) unravel(indent + 3, "r", rank, dims);
                body.run();
                line(indent + 2, "}", null);
                after.run();
                line(indent + 1, "}", null);
                line(indent, "}", null);
            } else {
                line(indent, "for (long long r = threadIdx.x; r < count; r += blockDim.x) {", null);
                if (digits) unravel(indent + 1, "r", rank, dims);
                body.run();
                line(indent, "}", null);
            }
        }

        private String combine(ReduceFn fn, Domain d, String a, String b) {
            return switch (fn) {
                case SUM, MEAN -> a + " + " + b;
                case MAX -> helper("max", d) + "(" + a + ", " + b + ")";
                case MIN -> helper("min", d) + "(" + a + ", " + b + ")";
            };
        }

        // ------------------------------------------------------------------ expressions

        private void locals(int indent, Function<KExpr.Load, String> load) { locals(indent, load, usedLocals); }

        private void locals(int indent, Function<KExpr.Load, String> load, boolean[] which) {
            for (int i = 0; i < k.locals().size(); i++) {
                KExpr e = k.locals().get(i);
                if (!which[i]) {
                    if (which != usedLocals) continue;
                    line(indent, "// t" + i + " = " + k.format(e) + "  (unused)", null);
                    continue;
                }
                line(indent, "const " + valueType(e.dtype()) + " t" + i + " = " + strip(expr(e, load)) + ";", "t" + i + " = " + k.format(e));
            }
        }

        /** Index expression {@code offset + sum(stride_d * i_d)}, leaving out zero strides. */
        private String index(KExpr.Load l) {
            var parts = new ArrayList<String>();
            if (!l.offset().equals(SymInt.ZERO)) parts.add(sym(l.offset()));
            for (int d = 0; d < Math.min(dims, l.strides().size()); d++) {
                SymInt s = l.strides().get(d);
                if (s.equals(SymInt.ZERO)) continue;
                parts.add(s.equals(SymInt.ONE) ? "i" + d : sym(s) + " * i" + d);
            }
            return parts.isEmpty() ? "0" : String.join(" + ", parts);
        }

        /** A C expression of {@code e}'s value type. */
        private String expr(KExpr e, Function<KExpr.Load, String> load) {
            return switch (e) {
                case KExpr.Const c -> literal(c.value(), c.dtype());
                case KExpr.Local l -> convert("t" + l.index(), k.held(k.locals().get(l.index()).dtype()), k.held(l.dtype()));
                case KExpr.Reduced r -> convert("rd" + r.reduction(), k.held(k.reductions().get(r.reduction()).dtype()), k.held(r.dtype()));
                case KExpr.Load l -> {
                    DType bt = inTypes[l.input()];
                    String raw = load.apply(l);
                    String v = switch (bt) {
                        case FLOAT16 -> "__half2float(" + raw + ")";
                        case BFLOAT16 -> "__bfloat162float(" + raw + ")";
                        default -> raw;
                    };
                    yield convert(v, bt, l.dtype());
                }
                case KExpr.Cast c -> convert(expr(c.x(), load), c.x().dtype(), c.dtype());
                case KExpr.Apply a -> apply(a, load);
            };
        }

        private String apply(KExpr.Apply a, Function<KExpr.Load, String> load) {
            PointwiseFn fn = a.fn();
            List<KExpr> args = a.args();
            if (args.size() != fn.arity()) throw new IllegalArgumentException(fn + " takes " + fn.arity() + " operands, got " + args.size());
            DType t = a.dtype();
            if (fn == PointwiseFn.WHERE) {
                String c = expr(args.get(0), load);
                String x = convert(expr(args.get(1), load), k.held(args.get(1).dtype()), k.held(t));
                String y = convert(expr(args.get(2), load), k.held(args.get(2).dtype()), k.held(t));
                return "(" + c + " ? " + x + " : " + y + ")";
            }
            if (fn.isComparison()) {
                DType ct = DType.promote(args.get(0).dtype(), args.get(1).dtype());
                Domain d = Domain.of(ct);
                String x = toDomain(expr(args.get(0), load), args.get(0).dtype(), d);
                String y = toDomain(expr(args.get(1), load), args.get(1).dtype(), d);
                String op = switch (fn) {
                    case EQ -> " == "; case NE -> " != "; case LT -> " < "; case LE -> " <= "; case GT -> " > ";
                    default -> " >= ";
                };
                return convert("(" + x + op + y + ")", DType.BOOL, t);
            }
            // the domain: the dtype's, except that integer results of non-integer arithmetic compute in double
            Domain d = Domain.of(t);
            if (d == Domain.LONG) {
                boolean integerOp = switch (fn) {
                    case ADD, SUB, MUL, NEG, ABS, MAXIMUM, MINIMUM, RELU, IDENTITY -> true;
                    default -> false;
                };
                boolean integerArgs = args.stream().noneMatch(x -> x.dtype().isFloating());
                if (!integerOp || !integerArgs) d = Domain.DOUBLE;
            }
            var xs = new ArrayList<String>();
            for (KExpr x : args) xs.add(toDomain(expr(x, load), x.dtype(), d));
            String x = xs.getFirst(), y = xs.size() > 1 ? xs.get(1) : null;
            boolean f = d == Domain.FLOAT;
            String r = switch (fn) {
                case ADD -> "(" + x + " + " + y + ")";
                case SUB -> "(" + x + " - " + y + ")";
                // __fmul_rn/__dmul_rn are never contracted into an FMA with a later add: each op rounds, as the reference
                case MUL -> d == Domain.LONG ? "(" + x + " * " + y + ")" : (f ? "__fmul_rn(" : "__dmul_rn(") + x + ", " + y + ")";
                // a result rounded to f16/bf16 at once may come from faster float arithmetic (see the class comment for
                // its error): the fast exponential and a multiplication by the reciprocal, with the exact forms kept for
                // arguments where those would lose range (subnormal results, huge or tiny divisors)
                case DIV -> f && t.isHalf() && fastForms ? helper("hdiv", d) + "(" + x + ", " + y + ")" : "(" + x + " / " + y + ")";
                case POW -> (f ? "powf(" : "pow(") + x + ", " + y + ")";
                case MAXIMUM -> helper("max", d) + "(" + x + ", " + y + ")";
                case MINIMUM -> helper("min", d) + "(" + x + ", " + y + ")";
                case NEG -> "(-" + x + ")";
                case ABS -> d == Domain.LONG ? helper("abs", d) + "(" + x + ")" : (f ? "fabsf(" : "fabs(") + x + ")";
                case EXP -> f && t.isHalf() && fastForms ? helper("hexp", d) + "(" + x + ")" : (f ? "expf(" : "exp(") + x + ")";
                case LOG -> (f ? "logf(" : "log(") + x + ")";
                case SQRT -> (f ? "sqrtf(" : "sqrt(") + x + ")";
                case RSQRT -> (f ? "rsqrtf(" : "rsqrt(") + x + ")";
                case SIN -> (f ? "sinf(" : "sin(") + x + ")";
                case COS -> (f ? "cosf(" : "cos(") + x + ")";
                case TANH -> (f ? "tanhf(" : "tanh(") + x + ")";
                case SIGMOID -> helper("sigmoid", d) + "(" + x + ")";
                case RELU -> helper("relu", d) + "(" + x + ")";
                case GELU -> helper("gelu", d) + "(" + x + ")";
                case SILU -> {
                    helper("sigmoid", d); // gt_silu calls gt_sigmoid: define that first
                    yield helper("silu", d) + "(" + x + ")";
                }
                case IDENTITY -> x;
                default -> throw new IllegalStateException("unhandled " + fn);
            };
            return convert(r, d.type, k.held(t)); // held in float between the ops where the kernel says so
        }

        /** Converts a value of {@code from} into domain {@code d}'s C type (exactly, for half values into float). */
        private String toDomain(String v, DType from, Domain d) {
            if (Domain.of(from) == d && (d != Domain.LONG || from == DType.INT64)) return v;
            return "(" + d.c + ") " + paren(v);
        }

        /**
         * Converts a value of dtype {@code from} (in its value type) to a value of dtype {@code to}, rounding as the
         * reference does.
         */
        private String convert(String v, DType from, DType to) {
            if (from == to) return v;
            return switch (to) {
                case FLOAT64 -> "(double) " + paren(v);
                case FLOAT32 -> from.isHalf() ? v : "(float) " + paren(v);
                case FLOAT16, BFLOAT16 -> {
                    String f = from.isHalf() || from == DType.FLOAT32 ? strip(v) : "(float) " + paren(v);
                    yield helper(to == DType.FLOAT16 ? "f16" : "bf16", Domain.FLOAT) + "(" + f + ")";
                }
                case INT8, INT32 -> from.isFloating()
                        ? "(" + valueType(to) + ") (long long) " + paren(v)
                        : "(" + valueType(to) + ") " + paren(v);
                case INT64 -> "(long long) " + paren(v);
                case BOOL -> "(" + paren(v) + " != 0)";
            };
        }

        /** The element to store for a value of {@code from} in a buffer of {@code to}. */
        private String store(String v, DType from, DType to) {
            if (!to.isHalf()) return convert(v, from, to);
            // float -> half rounds once; double -> float -> half is what the reference does too
            String f = strip(convert(v, from, DType.FLOAT32));
            return (to == DType.FLOAT16 ? "__float2half_rn(" : "__float2bfloat16_rn(") + f + ")";
        }

        private String literal(double value, DType t) {
            double v = DTypes.round(value, t);
            return switch (t) {
                case BOOL -> v != 0 ? "true" : "false";
                case INT8 -> "(signed char) " + longLiteral((long) v, false);
                case INT32 -> longLiteral((long) v, false);
                case INT64 -> longLiteral((long) v, true);
                case FLOAT64 -> Double.isNaN(v) ? nan(Domain.DOUBLE) : Double.isInfinite(v) ? (v > 0 ? posInf(Domain.DOUBLE) : negInf(Domain.DOUBLE))
                        : v < 0 || (v == 0 && 1 / v < 0) ? "(" + Double.toString(v) + ")" : Double.toString(v);
                case FLOAT32, FLOAT16, BFLOAT16 -> {
                    float f = (float) v;
                    yield Float.isNaN(f) ? nan(Domain.FLOAT) : Float.isInfinite(f) ? (f > 0 ? posInf(Domain.FLOAT) : negInf(Domain.FLOAT))
                            : f < 0 || (f == 0 && 1 / f < 0) ? "(" + Float.toString(f) + "f)" : Float.toString(f) + "f";
                }
            };
        }

        private static String longLiteral(long v, boolean ll) {
            if (v == Long.MIN_VALUE) return "(-9223372036854775807LL - 1)";
            if (v == Integer.MIN_VALUE && !ll) return "(-2147483647 - 1)";
            String s = Long.toString(v) + (ll ? "LL" : "");
            return v < 0 ? "(" + s + ")" : s;
        }

        private static String nan(Domain d) {
            return d == Domain.DOUBLE ? "__longlong_as_double(0x7ff8000000000000LL)" : "__int_as_float(0x7fc00000)";
        }

        private static String posInf(Domain d) {
            return d == Domain.DOUBLE ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
        }

        private static String negInf(Domain d) {
            return d == Domain.DOUBLE ? "(-__longlong_as_double(0x7ff0000000000000LL))" : "(-__int_as_float(0x7f800000))";
        }

        /** A SymInt as a C expression over the symbol parameters. */
        private String sym(SymInt s) {
            String text = s.toString();
            if (s.isConstant()) return s.constant() < 0 ? "(" + text + ")" : text;
            Matcher m = IDENT.matcher(text);
            var sb = new StringBuilder();
            while (m.find()) m.appendReplacement(sb, Matcher.quoteReplacement(symbolNames.getOrDefault(m.group(), m.group())));
            m.appendTail(sb);
            String c = sb.toString();
            return IDENT.matcher(c).matches() ? c : "(" + c + ")";
        }

        private static String paren(String v) {
            if (IDENT.matcher(v).matches() || v.matches("[0-9.eE+]+f?(LL)?") || isWrapped(v)) return v;
            if (v.matches("[A-Za-z_][A-Za-z0-9_]*(\\.e\\[l\\]|\\[[^\\[\\]]*\\])")) return v;
            Matcher call = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*(\\(.*\\))").matcher(v);
            if (call.matches() && isWrapped(call.group(1))) return v;
            return "(" + v + ")";
        }

        /** Strips one pair of outer parentheses enclosing the whole expression. */
        private static String strip(String v) {
            return isWrapped(v) ? v.substring(1, v.length() - 1) : v;
        }

        private static boolean isWrapped(String v) {
            if (v.length() < 2 || v.charAt(0) != '(' || v.charAt(v.length() - 1) != ')') return false;
            int depth = 0;
            for (int i = 0; i < v.length(); i++) {
                char c = v.charAt(i);
                if (c == '(') depth++;
                else if (c == ')' && --depth == 0 && i < v.length() - 1) return false;
            }
            return true;
        }

        // ------------------------------------------------------------------ helpers

        private String helper(String name, Domain d) {
            String key = name + (name.equals("f16") || name.equals("bf16") ? "" : "_" + d.name());
            helpers.add(key);
            return "gt_" + name;
        }

        private static String helperSource(String key) {
            String prefix = "static __device__ __forceinline__ ";
            return switch (key) {
                case "f16" -> prefix + "float gt_f16(float x) { return __half2float(__float2half_rn(x)); }  // round to f16\n";
                case "bf16" -> prefix + "float gt_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }  // round to bf16\n";
                // NaN propagates: one instruction from sm_80 on
                case "max_FLOAT" -> prefix + "float gt_max(float a, float b) {\n#if __CUDA_ARCH__ >= 800\n"
                        + "    float r; asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r;\n#else\n"
                        + "    return a != a ? a : b != b ? b : fmaxf(a, b);\n#endif\n}\n";
                case "min_FLOAT" -> prefix + "float gt_min(float a, float b) {\n#if __CUDA_ARCH__ >= 800\n"
                        + "    float r; asm(\"min.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r;\n#else\n"
                        + "    return a != a ? a : b != b ? b : fminf(a, b);\n#endif\n}\n";
                // for results rounded to a half type at once (see apply)
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

        private void line(int indent, String code, String comment) {
            String s = "    ".repeat(indent) + code;
            body.append(s);
            if (comment != null) body.append(" ".repeat(Math.max(2, 60 - s.length()))).append("// ").append(comment.replace('\n', ' '));
            body.append('\n');
        }
    }
}
