package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What {@link CudaCodegen} knows of one kernel while it writes it, shared by the pieces that write its parts
 * ({@link CudaExpressions}, {@link PointwiseBody}, {@link RowBody}, {@link TiledRowBody}, {@link RowFolds}): the
 * kernel and its buffers' element types, the C names of its shape symbols, what its code uses (locals, index digits,
 * half types, {@link DeviceHelpers helpers}), and the body being written, line by line.
 *
 * <p>It also holds the kernel's addressing, which every body shares: how a load moves with the output's index
 * ({@link Access}) or along a row ({@link RowAccess}), the C expressions of a load's or a store's place, and the
 * declarations of the extents and of the index digits a body uses. Symbols whose names the generated code uses itself
 * (or C++ keywords, CUDA built-ins) are renamed {@code sym_<name>}.
 */
final class KernelScope {
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

    final Kernel k;
    final DType[] inTypes, outTypes;
    /** Each shape symbol's C name (its own, or {@code sym_<name>} where that is taken), in sorted order: the ABI's. */
    final Map<String, String> symbolNames = new TreeMap<>();
    /** The {@link DeviceHelpers helpers} the code calls, in the order they are first called: the prelude's order. */
    final Set<String> helpers = new LinkedHashSet<>();
    /** The kernel's output dimensions, and those with the reduced ones after them. */
    final int rank, dims;
    /** The function's body, as the pieces write it. */
    final StringBuilder body = new StringBuilder();
    boolean usesF16, usesBF16;
    /** Iteration dims some load's or store's index uses (their digits are declared). */
    final Set<Integer> usedDims = new TreeSet<>();
    /**
     * Whether half results may come from the fast forms: always where each is rounded at once; where the kernel
     * holds them in float, only if nothing in it casts a value to an integer or bool type or compares values (a
     * float quotient a 1-ulp below an exact 1 would truncate to 0 or compare unequal).
     */
    final boolean fastForms;
    /** Locals some store, later local or the reduction uses (the others are written as comments). */
    final boolean[] usedLocals;
    /** Whether this is a tile function (see {@link CudaCodegen#tile}), not a kernel. */
    final boolean tile;
    /**
     * The kernel's reads of a table through indices ({@link KExpr.Gather}), distinct, in the order of its locals: the
     * number a bad index's fault record carries names one of them ({@link DeviceFault#describe}). A kernel with any
     * takes the executable's fault record after its other parameters ({@link CudaCodegen}).
     */
    final List<KExpr.Gather> gathers;
    /** The index loads of {@link #gathers}: read element by element ({@link Access#GENERAL}), never as vectors. */
    private final Set<KExpr.Load> gatherIndices = new java.util.HashSet<>();

    /** A tile function's block size, given by the launch that calls it (0: the body chooses, as a kernel's does). */
    final int tileBlock;

    /**
     * A pointwise tile function over a batch of runs ({@code gt_count} runs of {@code gt_len} elements, {@code gt_stride}
     * apart from {@code gt_lo}, that {@code gt_count2} times {@code gt_stride2} apart; all the block's threads over all of
     * them at once) instead of one run {@code [gt_lo, gt_hi)}.
     */
    final boolean runs;

    KernelScope(Kernel k, boolean tile) { this(k, tile, 0, false); }

    KernelScope(Kernel k, boolean tile, int tileBlock, boolean runs) {
        this.k = k;
        this.tile = tile;
        this.tileBlock = tileBlock;
        this.runs = tile && runs && !k.isReduction();
        // the kernels and their tile geometry come from the plan: these checks fail on a Gatun bug only
        if (tileBlock < 0 || tileBlock % 32 != 0 || tileBlock > 1024) throw new IllegalStateException("kernel " + k.name() + ": a tile block of " + tileBlock + " threads");
        if (tile && !k.folds().isEmpty()) throw new IllegalStateException("kernel " + k.name() + " folds its rows: it runs on a whole grid, not on a tile");
        this.fastForms = !k.floatIntermediates() || !exactnessMatters(k);
        this.gathers = gathersOf(k);
        for (KExpr.Gather g : gathers) gatherIndices.add(g.index());
        // a tile runs inside another launch, which has no fault record to report a bad index in (the planner never
        // makes a gathering kernel a product's epilogue or a collective's prologue or epilogue: a Gatun bug)
        if (tile && !gathers.isEmpty()) throw new IllegalStateException("kernel " + k.name() + " reads " + gathers.getFirst().op()
                + " through its indices: it runs as a launch of its own, not as a tile");
        inTypes = new DType[k.inputs().size()];
        for (int i = 0; i < inTypes.length; i++) inTypes[i] = k.inputs().get(i).dtype();
        outTypes = new DType[k.stores().size()];
        for (int i = 0; i < outTypes.length; i++) outTypes[i] = k.stores().get(i).buffer().dtype();
        rank = k.ranges().size();
        dims = rank + k.reductionRanges().size();
        if (k.locals().isEmpty() && !k.stores().isEmpty()) throw new IllegalStateException("kernel " + k.name() + " stores but has no locals");
        for (var s : k.stores())
            if (s.local() < 0 || s.local() >= k.locals().size())
                throw new IllegalStateException("kernel " + k.name() + " stores local t" + s.local() + " it does not have");
        nameSymbols();
        for (DType t : inTypes) noteType(t);
        for (DType t : outTypes) noteType(t);
        for (KExpr e : k.locals()) noteTypes(e);
        usedLocals = new boolean[k.locals().size()];
        noteUses();
    }

    /** The distinct {@link KExpr.Gather}s of {@code k}'s locals, in order (the numbering of {@link #gathers}). */
    static List<KExpr.Gather> gathersOf(Kernel k) {
        var out = new ArrayList<KExpr.Gather>();
        for (KExpr e : k.locals()) collectGathers(e, out);
        return List.copyOf(out);
    }

    private static void collectGathers(KExpr e, List<KExpr.Gather> out) {
        switch (e) {
            case KExpr.Gather g -> {
                if (!out.contains(g)) out.add(g);
            }
            case KExpr.Apply a -> a.args().forEach(x -> collectGathers(x, out));
            case KExpr.Cast c -> collectGathers(c.x(), out);
            default -> {}
        }
    }

    /** Gives each shape symbol of the kernel its C name. */
    private void nameSymbols() {
        var syms = new TreeSet<String>();
        k.ranges().forEach(x -> syms.addAll(x.symbols()));
        k.reductionRanges().forEach(x -> syms.addAll(x.symbols()));
        for (KExpr e : k.locals()) collectSymbols(e, syms);
        for (var st : k.stores()) {
            syms.addAll(st.offset().symbols());
            if (st.strides() != null) st.strides().forEach(x -> syms.addAll(x.symbols()));
        }
        for (String s : syms)
            symbolNames.put(s, CudaCodegen.IDENT.matcher(s).matches() && !RESERVED.contains(s) && !RESERVED_FORM.matcher(s).matches() ? s : "sym_" + sanitize(s));
    }

    /** Notes the locals the stores and the phases use, and the index digits their loads and the stores index by. */
    private void noteUses() {
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
            case KExpr.Gather g -> {
                // the table's place is indexed by the element's digits, as a general load's, and so is its index's
                for (int d = 0; d < Math.min(dims, g.strides().size()); d++) if (!g.strides().get(d).equals(SymInt.ZERO)) usedDims.add(d);
                markUses(g.index());
            }
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
            case KExpr.Gather g -> {
                out.addAll(g.offset().symbols());
                g.strides().forEach(s -> out.addAll(s.symbols()));
                out.addAll(g.rowStride().symbols());
                collectSymbols(g.index(), out);
            }
            case KExpr.Apply a -> a.args().forEach(x -> collectSymbols(x, out));
            case KExpr.Cast c -> collectSymbols(c.x(), out);
            default -> {}
        }
    }

    /** Whether a kernel casts a value to an integer or bool type, or compares values. */
    private static boolean exactnessMatters(Kernel k) {
        for (KExpr e : k.locals()) if (exactnessMatters(e)) return true;
        return false;
    }

    private static boolean exactnessMatters(KExpr e) {
        return switch (e) {
            case KExpr.Cast c -> !c.dtype().isFloating() || exactnessMatters(c.x());
            case KExpr.Apply a -> a.fn().isComparison() || a.args().stream().anyMatch(KernelScope::exactnessMatters);
            default -> false;
        };
    }

    // ------------------------------------------------------------------ writing

    /** Appends a line of code at {@code indent} levels, with its comment (if any) from column 60 on. */
    void line(int indent, String code, String comment) {
        String s = "    ".repeat(indent) + code;
        body.append(s);
        if (comment != null) body.append(" ".repeat(Math.max(2, 60 - s.length()))).append("// ").append(comment.replace('\n', ' '));
        body.append('\n');
    }

    /** A SymInt as a C expression over the symbol parameters. */
    String sym(SymInt s) {
        String text = s.toString();
        if (s.isConstant()) return s.constant() < 0 ? "(" + text + ")" : text;
        Matcher m = CudaCodegen.IDENT.matcher(text);
        var sb = new StringBuilder();
        while (m.find()) m.appendReplacement(sb, Matcher.quoteReplacement(symbolNames.getOrDefault(m.group(), m.group())));
        m.appendTail(sb);
        String c = sb.toString();
        return CudaCodegen.IDENT.matcher(c).matches() ? c : "(" + c + ")";
    }

    /** Iteration-space extents n0.. (ranges, then reduction ranges) and the counts. */
    void extents() {
        for (int d = 0; d < dims; d++) {
            SymInt r = d < rank ? k.ranges().get(d) : k.reductionRanges().get(d - rank);
            line(1, "const long long n" + d + " = " + sym(r) + ";", "i" + d + " < " + r + (d >= rank ? " (reduced)" : ""));
        }
        line(1, "const long long total = " + product(0, rank) + ";", k.isReduction() ? "output elements" : "elements");
        if (tile) line(1, "(void) total;", runs ? "a tile's runs are gt_lo, gt_len, gt_count, gt_stride, gt_count2 and gt_stride2" : "a tile's bounds are gt_lo and gt_hi");
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
    void unravel(int indent, String linear, int from, int to) { unravel(indent, linear, from, to, usedDims); }

    /** The same, declaring the digits in {@code usedDims}. */
    void unravel(int indent, String linear, int from, int to, Set<Integer> usedDims) {
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

    // ------------------------------------------------------------------ addressing

    /** How a pointwise load addresses memory, relative to the output's row-major index. */
    enum Access { CONTIGUOUS, BROADCAST, GENERAL }

    Access access(KExpr.Load l) {
        if (gatherIndices.contains(l)) return Access.GENERAL;
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

    /** The loads of the locals the kernel uses, in the locals' order. */
    List<KExpr.Load> loads() {
        var out = new ArrayList<KExpr.Load>();
        for (int i = 0; i < k.locals().size(); i++) if (usedLocals[i]) KExpr.loads(k.locals().get(i), out);
        return out;
    }

    static List<KExpr.Load> loadsOf(KExpr e) {
        var out = new ArrayList<KExpr.Load>();
        KExpr.loads(e, out);
        return out;
    }

    /** How a row kernel's load moves along the row. */
    enum RowAccess {
        /** The same element for the whole row (a per-row value). */
        ROW,
        /** Element {@code r} of the row at {@code base(row) + r}: held in registers, read with vectors. */
        ALONG,
        /** Anything else: indexed by the element's digits. */
        GENERAL
    }

    RowAccess rowAccess(KExpr.Load l) {
        if (gatherIndices.contains(l)) return RowAccess.GENERAL;
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
    boolean movesWithRow(KExpr.Load l) {
        for (int d = 0; d < Math.min(rank, l.strides().size()); d++)
            if (!l.strides().get(d).equals(SymInt.ZERO) && !k.ranges().get(d).equals(SymInt.ONE)) return true;
        return false;
    }

    /** {@code offset + sum(stride_d * i_d)} over the row dimensions only: where the row starts for an ALONG load. */
    String rowBase(KExpr.Load l) {
        var parts = new ArrayList<String>();
        if (!l.offset().equals(SymInt.ZERO)) parts.add(sym(l.offset()));
        for (int d = 0; d < Math.min(rank, l.strides().size()); d++) {
            SymInt x = l.strides().get(d);
            if (x.equals(SymInt.ZERO)) continue;
            parts.add(x.equals(SymInt.ONE) ? "i" + d : sym(x) + " * i" + d);
        }
        return parts.isEmpty() ? "0" : String.join(" + ", parts);
    }

    /** The row digits a load's place uses. */
    Set<Integer> rowDigits(KExpr.Load l) {
        var out = new TreeSet<Integer>();
        for (int d = 0; d < Math.min(rank, l.strides().size()); d++) if (!l.strides().get(d).equals(SymInt.ZERO)) out.add(d);
        return out;
    }

    /** Whether some load or store of the row indexes by the element's digits (not by its position in the row). */
    boolean digitsAlongRow() {
        for (int d = rank; d < dims; d++) if (usedDims.contains(d)) return true;
        return false;
    }

    /** Index expression {@code offset + sum(stride_d * i_d)}, leaving out zero strides. */
    String index(KExpr.Load l) { return index(l.offset(), l.strides()); }

    /** {@code offset + sum(strides_d * i_d)}, leaving out zero strides: a general load's or a gathered row's place. */
    String index(SymInt offset, List<SymInt> strides) {
        var parts = new ArrayList<String>();
        if (!offset.equals(SymInt.ZERO)) parts.add(sym(offset));
        for (int d = 0; d < Math.min(dims, strides.size()); d++) {
            SymInt s = strides.get(d);
            if (s.equals(SymInt.ZERO)) continue;
            parts.add(s.equals(SymInt.ONE) ? "i" + d : sym(s) + " * i" + d);
        }
        return parts.isEmpty() ? "0" : String.join(" + ", parts);
    }

    /**
     * Where a store puts the element: {@code offset + rowMajor} for a row-major store ({@code rowMajor} its row-major
     * number), else offset plus its strides times the index digits from {@code firstDim} on.
     */
    String place(Kernel.Store st, String rowMajor, int firstDim) {
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

    /** The C test that {@code pointer} is aligned for a vector of {@code vw} elements of {@code t}. */
    static String aligned(String pointer, DType t, int vw) {
        return "(reinterpret_cast<unsigned long long>(" + pointer + ") % " + (t.byteSize() * vw) + " == 0)";
    }
}
