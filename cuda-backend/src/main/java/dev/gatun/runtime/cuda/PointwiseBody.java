package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.cuda.KernelScope.Access;

import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.function.Function;

import static dev.gatun.runtime.cuda.CudaCodegen.storageType;
import static dev.gatun.runtime.cuda.KernelScope.aligned;

/**
 * The body of a pointwise kernel: a grid-stride loop of one thread per output element with 64-bit indices. When every
 * load reads either the output's own row-major element or one fixed element (a broadcast), a 16-byte vector path
 * handles {@code 16 / (largest element size)} elements per step whenever all the pointers it touches are aligned
 * (checked in the kernel); the remainder, or everything when misaligned, goes through the scalar loop. As a tile
 * function ({@link CudaCodegen#tile}) the block's threads loop over the elements {@code [gt_lo, gt_hi)} instead.
 *
 * <p>A load that walks the output's innermost dimension element for element but its rows with strides of its own
 * (an {@link #inner} load: a slice of each row, as a SwiGLU's {@code x[:, :h]} and {@code x[:, h:]}, or rows of a wider
 * buffer) joins the vector path too where every vector stays inside one row: the innermost extent and every other
 * stride a whole number of vectors. Each vector's indices are unravelled once (not once an element, with its 64-bit
 * divisions), and the load is one 16-byte vector at its first element. Measured on an H200 before it: the prefill's
 * bf16 SwiGLU over [512, 16384] read and wrote 25 MB at 1.19 TB/s, element by element.
 */
final class PointwiseBody {
    private final KernelScope scope;
    private final CudaExpressions ex;
    private final Kernel k;
    private final DType[] inTypes, outTypes;
    private final int rank;
    private final boolean tile, runs;
    private final StringBuilder body;

    PointwiseBody(KernelScope scope, CudaExpressions ex) {
        this.scope = scope;
        this.ex = ex;
        k = scope.k;
        inTypes = scope.inTypes;
        outTypes = scope.outTypes;
        rank = scope.rank;
        tile = scope.tile;
        runs = scope.runs;
        body = scope.body;
    }

    /** Writes the body into the scope's; returns its layout. */
    KernelLayout write() {
        int vw = vectorWidth();
        write(vw);
        return KernelLayout.pointwise(vw);
    }

    /** Elements per 16-byte vector, or 1 where the layout rules the vector path out. */
    private int vectorWidth() {
        if (k.stores().isEmpty() || k.stores().stream().anyMatch(st -> !st.isRowMajor())) return 1;
        int widest = 1;
        boolean anyInner = false;
        for (DType t : outTypes) widest = Math.max(widest, t.byteSize());
        for (KExpr.Load l : scope.loads()) {
            Access a = scope.access(l);
            if (a == Access.GENERAL) {
                if (tile || runs || k.gathers() || innermost() < 0 || !inner(l, 1)) return 1;
                anyInner = true;
            }
            if (a != Access.BROADCAST) widest = Math.max(widest, inTypes[l.input()].byteSize());
        }
        int vw = 16 / widest;
        SymInt total = SymInt.ONE;
        for (SymInt r : k.ranges()) total = total.times(r);
        if (vw < 2 || (total.isConstant() && total.constant() < vw)) return 1;
        if (anyInner) {
            if (k.ranges().get(innermost()).constant() % vw != 0) return 1;
            for (KExpr.Load l : scope.loads())
                if (scope.access(l) == Access.GENERAL && !inner(l, vw)) return 1;
        }
        return vw;
    }

    /** The output's innermost dimension of more than one element, when its extent is a constant; else -1. */
    private int innermost() {
        for (int d = rank - 1; d >= 0; d--) {
            SymInt r = k.ranges().get(d);
            if (r.equals(SymInt.ONE)) continue;
            return r.isConstant() ? d : -1;
        }
        return -1;
    }

    /**
     * Whether load {@code l} steps one element along the output's innermost dimension and a whole number of
     * {@code vw}-element vectors along every other: then {@code vw} consecutive outputs of a row read {@code vw}
     * consecutive elements, starting where the vector's first element reads.
     */
    private boolean inner(KExpr.Load l, int vw) {
        int last = innermost();
        for (int d = 0; d < rank; d++) {
            if (k.ranges().get(d).equals(SymInt.ONE)) continue;
            SymInt s = d < l.strides().size() ? l.strides().get(d) : SymInt.ZERO;
            if (d == last ? !s.equals(SymInt.ONE) : !s.isConstant() || s.constant() % vw != 0) return false;
        }
        return true;
    }

    /** Where a vector-path load of {@code l} starts: its base pointer plus the output's element's offset. */
    private String vectorBase(KExpr.Load l) {
        return scope.access(l) == Access.CONTIGUOUS ? start(l) + " + o" : "in" + l.input() + " + (" + scope.index(l) + ")";
    }

    /** Load {@code l}'s input at its constant offset: where its elements start, the pointer its alignment is checked on. */
    private String start(KExpr.Load l) {
        return "in" + l.input() + (l.offset().equals(SymInt.ZERO) ? "" : " + " + scope.sym(l.offset()));
    }

    /** The loop over the kernel's (or the tile's) elements: a vector path where it has one, then the scalar loop. */
    private void write(int vw) {
        scope.extents();
        if (tile) {
            scope.line(1, "const long long step = blockDim.x;", "this block's threads over its tile [gt_lo, gt_hi)");
            scope.line(1, "const long long tid = threadIdx.x;", null);
        } else {
            scope.line(1, "const long long step = (long long) gridDim.x * blockDim.x;", null);
            scope.line(1, "const long long tid = (long long) blockIdx.x * blockDim.x + threadIdx.x;", null);
        }
        if (runs) {
            scope.line(1, "const long long gt_inner = gt_len * gt_count, gt_n = gt_inner * gt_count2;", "the elements of all the runs");
            scope.line(1, "long long start = 0;", null);
        }
        if (vw > 1) vectorPath(vw);
        scalarLoop(vw > 1);
    }

    /** The element {@code j} of a batch of runs stands for: {@code o}. */
    private static final String RUN_ELEMENT = "const long long o = gt_lo + j / gt_inner * gt_stride2 + j % gt_inner / gt_len * gt_stride + j % gt_len;";

    /**
     * The vector path: where every pointer it touches is aligned, the elements up to the last whole vector, each
     * thread a vector of {@code vw} elements at a time; then {@code start} is where the scalar loop takes over.
     */
    private void vectorPath(int vw) {
        if (!runs) scope.line(1, "long long start = " + (tile ? "gt_lo" : "0") + ";", null);
        body.append("    // 16-byte vectors of ").append(vw).append(" elements when every pointer they touch is aligned\n");
        body.append("    if (").append(String.join("\n        && ", alignmentChecks(vw))).append(") {\n");
        if (runs) {
            scope.line(2, "const long long nvec = gt_n / " + vw + ", lv = gt_len / " + vw + ", iv = gt_inner / " + vw + ";", "whole vectors: every run starts and ends on one");
            scope.line(2, "for (long long v = tid; v < nvec; v += step) {", null);
            scope.line(3, "const long long o = gt_lo + v / iv * gt_stride2 + v % iv / lv * gt_stride + v % lv * " + vw + ";", null);
        } else {
            scope.line(2, "const long long nvec = " + (tile ? "gt_hi" : "total") + " / " + vw + ";", tile ? "gt_lo is a multiple of " + vw : null);
            scope.line(2, "for (long long v = " + (tile ? "gt_lo / " + vw + " + " : "") + "tid; v < nvec; v += step) {", null);
            scope.line(3, "const long long o = v * " + vw + ";", null);
            if (scope.loads().stream().anyMatch(l -> scope.access(l) == Access.GENERAL)) scope.unravel(3, "o", 0, rank);   // the vector's first element
        }
        // one vector load per distinct load (input and place)
        var vectorOf = new TreeMap<String, String>();
        int x = 0;
        for (KExpr.Load l : scope.loads()) {
            if (scope.access(l) == Access.BROADCAST) continue;
            String base = vectorBase(l);
            if (vectorOf.containsKey(base)) continue;
            String name = "x" + x++;
            vectorOf.put(base, name);
            String vt = "gt_vec<" + storageType(inTypes[l.input()]) + ", " + vw + ">";
            scope.line(3, "const " + vt + " " + name + " = *reinterpret_cast<const " + vt + "*>(" + base + ");", k.inputs().get(l.input()).name());
        }
        for (int s = 0; s < outTypes.length; s++)
            scope.line(3, "gt_vec<" + storageType(outTypes[s]) + ", " + vw + "> y" + s + ";", null);
        scope.line(3, "#pragma unroll", null);
        scope.line(3, "for (int l = 0; l < " + vw + "; l++) {", null);
        Function<KExpr.Load, String> vecLoad = l -> scope.access(l) != Access.BROADCAST
                ? vectorOf.get(vectorBase(l)) + ".e[l]"
                : "in" + l.input() + "[" + scope.sym(l.offset()) + "]";
        ex.locals(4, vecLoad);
        for (int s = 0; s < outTypes.length; s++) {
            var st = k.stores().get(s);
            scope.line(4, "y" + s + ".e[l] = " + ex.store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]) + ";", null);
        }
        scope.line(3, "}", null);
        for (int s = 0; s < outTypes.length; s++) {
            String vt = "gt_vec<" + storageType(outTypes[s]) + ", " + vw + ">";
            scope.line(3, "*reinterpret_cast<" + vt + "*>(out" + s + " + o) = y" + s + ";", k.stores().get(s).buffer().name());
        }
        scope.line(2, "}", null);
        scope.line(2, runs ? "start = gt_n;" : "start = nvec * " + vw + ";", null);
        scope.line(1, "}", null);
        body.append("    // scalar loop: the tail, or everything when a pointer is misaligned\n");
    }

    /** The contiguous inputs and every output, each read or written as one aligned vector of vw elements. */
    private List<String> alignmentChecks(int vw) {
        var checks = new ArrayList<String>();
        for (KExpr.Load l : scope.loads())
            if (scope.access(l) != Access.BROADCAST) {   // an inner load's other strides are whole vectors: its start decides
                String check = aligned(start(l), inTypes[l.input()], vw);
                if (!checks.contains(check)) checks.add(check);
            }
        for (int s = 0; s < outTypes.length; s++) checks.add(aligned("out" + s, outTypes[s], vw));
        if (tile) checks.add("(gt_lo % " + vw + " == 0)");
        if (runs) checks.add("(gt_len % " + vw + " == 0) && (gt_stride % " + vw + " == 0) && (gt_stride2 % " + vw + " == 0)");
        return checks;
    }

    /** The scalar loop: one element at a time, from {@code start} where a vector path went before it. */
    private void scalarLoop(boolean afterVectors) {
        boolean general = scope.loads().stream().anyMatch(l -> scope.access(l) == Access.GENERAL) || k.stores().stream().anyMatch(st -> st.strides() != null);
        if (runs) {
            scope.line(1, "for (long long j = start + tid; j < gt_n; j += step) {", null);
            scope.line(2, RUN_ELEMENT, null);
        } else {
            String begin = !afterVectors ? (tile ? "gt_lo + tid" : "tid") : "start + tid";
            scope.line(1, "for (long long o = " + begin + "; o < " + (tile ? "gt_hi" : "total") + "; o += step) {", null);
        }
        if (general) scope.unravel(2, "o", 0, rank);
        Function<KExpr.Load, String> scalarLoad = l -> switch (scope.access(l)) {
            case CONTIGUOUS -> "in" + l.input() + "[" + (l.offset().equals(SymInt.ZERO) ? "o" : scope.sym(l.offset()) + " + o") + "]";
            case BROADCAST -> "in" + l.input() + "[" + scope.sym(l.offset()) + "]";
            case GENERAL -> "in" + l.input() + "[" + scope.index(l) + "]";
        };
        ex.locals(2, scalarLoad);
        for (int s = 0; s < outTypes.length; s++) {
            var st = k.stores().get(s);
            scope.line(2, "out" + s + "[" + scope.place(st, "o", 0) + "] = " + ex.store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]) + ";", st.buffer().name());
        }
        scope.line(1, "}", null);
    }

}
