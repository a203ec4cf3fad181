package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.DTypes;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static dev.gatun.runtime.cuda.CudaCodegen.valueType;

/**
 * C expressions of a kernel's values: its locals' declarations, each op of {@link KExpr} as C, conversions between
 * dtypes, literals, and the reductions' combining, starting values and results.
 *
 * <p><b>Arithmetic.</b> Each op's result is rounded to its dtype, as the reference does: f16/bf16 values live in
 * {@code float} variables holding half-representable values (each op computes in float, then rounds through the
 * half type), f32 computes in float, f64 in double, integers in {@code long long} and wrap to their width,
 * division, pow and transcendental functions of integer dtype compute in double and truncate ({@link Domain}).
 * Float-to-integer conversions truncate toward zero through {@code long long} (saturating, NaN to 0, then wrapping,
 * as Java's {@code (int) (long) v}); conversions to bool are {@code != 0}. A kernel that holds its f16/bf16
 * intermediates in float ({@link Kernel#floatIntermediates}, the planner's default) skips the rounding of its ops'
 * and reductions' half results: they stay float values (a kept row too) and are rounded only where stored or cast
 * by the graph. Reductions accumulate in float for f16/bf16/f32, double for f64, {@code long long} for integers and
 * bool; MEAN divides by the count (NaN for an empty range); MAX/MIN propagate NaN.
 *
 * <p>A float result rounded to f16/bf16 at once (or held in float by such a kernel) may come from a faster form
 * whose float error, relative to the value, is far below that rounding (an op after it, a cancellation, may magnify
 * it as it would the rounding): {@code exp} as {@code ex2.approx.f32} of {@code x log2(e)} without flushing
 * subnormals (2 + 1.17|x| float ulps, about 100 at the edge of its range: still under 1/30 of an f16 ulp), division
 * as a multiplication by the correctly rounded reciprocal where divisor and reciprocal are normal (2 ulps). A value
 * that close to a rounding boundary of the half type can round the other way (one half-type ulp); f32 and f64
 * results keep the exact forms, and so does a kernel holding half values in float that casts a value to an integer or
 * bool type or compares values (a quotient one float ulp below an exact 1 would truncate to 0;
 * {@link KernelScope#fastForms}).
 *
 * <p>Multiplications use {@code __fmul_rn}/{@code __dmul_rn}, which the compiler never contracts into an FMA with a
 * following add (an FMA rounds once where the reference rounds twice, which matters under cancellation); compiling
 * with {@code --fmad=false} also keeps the helpers' internal arithmetic uncontracted.
 *
 * <p>A load becomes C through the body's own function ({@code load}): where an element comes from (memory, a
 * register holding the row, a vector) is the body's business; its conversion to the value type is this class's. A
 * read of a table through indices ({@link KExpr.Gather}) is this class's alone: one scalar load of the index and one
 * of the table's element, the index checked first ({@link #GATHER_ROW}).
 */
final class CudaExpressions {
    /** Arithmetic domains: what an op computes in before rounding to its dtype. */
    enum Domain {
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

    private final KernelScope scope;
    private final Kernel k;
    private final DType[] inTypes;

    CudaExpressions(KernelScope scope) {
        this.scope = scope;
        this.k = scope.k;
        this.inTypes = scope.inTypes;
    }

    void locals(int indent, Function<KExpr.Load, String> load) { locals(indent, load, scope.usedLocals); }

    void locals(int indent, Function<KExpr.Load, String> load, boolean[] which) {
        for (int i = 0; i < k.locals().size(); i++) {
            KExpr e = k.locals().get(i);
            if (!which[i]) {
                if (which != scope.usedLocals) continue;
                scope.line(indent, "// t" + i + " = " + k.format(e) + "  (unused)", null);
                continue;
            }
            scope.line(indent, "const " + valueType(e.dtype()) + " t" + i + " = " + strip(expr(e, load)) + ";", "t" + i + " = " + k.format(e));
        }
    }


    /** A C expression of {@code e}'s value type. */
    String expr(KExpr e, Function<KExpr.Load, String> load) {
        return switch (e) {
            case KExpr.Const c -> literal(c.value(), c.dtype());
            case KExpr.Local l -> convert("t" + l.index(), k.held(k.locals().get(l.index()).dtype()), k.held(l.dtype()));
            case KExpr.Reduced r -> convert("rd" + r.reduction(), k.held(k.reductions().get(r.reduction()).dtype()), k.held(r.dtype()));
            case KExpr.Load l -> convert(element(load.apply(l), inTypes[l.input()]), inTypes[l.input()], l.dtype());
            case KExpr.Cast c -> convert(expr(c.x(), load), c.x().dtype(), c.dtype());
            case KExpr.Apply a -> apply(a, load);
            case KExpr.Gather g -> convert(element(gather(g), inTypes[g.input()]), inTypes[g.input()], g.dtype());
        };
    }

    /** A buffer element {@code raw} of {@code t} in its value type (half types widen to float, exactly). */
    private static String element(String raw, DType t) {
        return switch (t) {
            case FLOAT16 -> "__half2float(" + raw + ")";
            case BFLOAT16 -> "__bfloat162float(" + raw + ")";
            default -> raw;
        };
    }

    /**
     * The table's element a {@link KExpr.Gather} reads, one scalar load whatever the body does with its other inputs:
     * its index read at the element's digits (the index is a general load, {@link KernelScope#access}), checked against
     * the table's rows by {@link #GATHER_ROW} before the table is read, so a bad index stops the call and nothing is
     * read outside the table or written from it.
     */
    private String gather(KExpr.Gather g) {
        KExpr.Load ix = g.index();
        String at = scope.index(ix);
        String row = "gt_row((long long) in" + ix.input() + "[" + at + "], " + g.rows() + "LL, " + at + ", " + scope.gathers.indexOf(g)
                + ", gt_claim, gt_fault, gt_step)";
        String base = scope.index(g.offset(), g.strides());
        return "in" + g.input() + "[" + (base.equals("0") ? "" : base + " + ") + scope.sym(g.rowStride()) + " * " + row + "]";
    }

    /**
     * What a kernel that gathers includes after {@link DeviceFault#SOURCE}: the check of one index against the table's
     * rows. A bad one fills the executable's fault record as {@code index_select}'s kernel does (code
     * {@link DeviceFault#INDEX_SELECT}: the index, its position in the indices, the rows; last, which of the kernel's
     * gathers it was) and traps.
     */
    static final String GATHER_ROW = """
            // a row of a table picked by an index: the index where 0 <= v < rows, else the call stops (fault record, trap)
            __device__ __forceinline__ long long gt_row(long long v, long long rows, long long at, int which, int* claim, gatun_fault* fault, int step) {
                if (v < 0 || v >= rows) gatun_fail(claim, fault, CODE, step, v, at, rows, which);
                return v;
            }
            """.replace("CODE", Integer.toString(DeviceFault.INDEX_SELECT));

    private String apply(KExpr.Apply a, Function<KExpr.Load, String> load) {
        PointwiseFn fn = a.fn();
        List<KExpr> args = a.args();
        if (args.size() != fn.arity()) throw new IllegalStateException(fn + " takes " + fn.arity() + " operands, got " + args.size());
        DType t = a.dtype();
        if (fn == PointwiseFn.WHERE) {
            String c = expr(args.get(0), load);
            String x = convert(expr(args.get(1), load), k.held(args.get(1).dtype()), k.held(t));
            String y = convert(expr(args.get(2), load), k.held(args.get(2).dtype()), k.held(t));
            return "(" + c + " ? " + x + " : " + y + ")";
        }
        if (fn.isComparison()) return comparison(fn, args, t, load);
        Domain d = domain(fn, args, t);
        var xs = new ArrayList<String>();
        for (KExpr x : args) xs.add(toDomain(expr(x, load), x.dtype(), d));
        String x = xs.getFirst(), y = xs.size() > 1 ? xs.get(1) : null;
        return convert(arithmetic(fn, d, t, x, y), d.type, k.held(t)); // held in float between the ops where the kernel says so
    }

    /** A comparison of two values, in the domain of their promoted type. */
    private String comparison(PointwiseFn fn, List<KExpr> args, DType t, Function<KExpr.Load, String> load) {
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

    /** The domain an op of result type {@code t} computes in: the dtype's, except that integer results of non-integer arithmetic compute in double. */
    private static Domain domain(PointwiseFn fn, List<KExpr> args, DType t) {
        Domain d = Domain.of(t);
        if (d == Domain.LONG) {
            boolean integerOp = switch (fn) {
                case ADD, SUB, MUL, NEG, ABS, MAXIMUM, MINIMUM, RELU, IDENTITY -> true;
                default -> false;
            };
            boolean integerArgs = args.stream().noneMatch(x -> x.dtype().isFloating());
            if (!integerOp || !integerArgs) d = Domain.DOUBLE;
        }
        return d;
    }

    /** The op {@code fn} of {@code x} (and {@code y}), both in domain {@code d}, for a result of type {@code t}: a value of the domain. */
    private String arithmetic(PointwiseFn fn, Domain d, DType t, String x, String y) {
        boolean f = d == Domain.FLOAT;
        return switch (fn) {
            case ADD -> "(" + x + " + " + y + ")";
            case SUB -> "(" + x + " - " + y + ")";
            // __fmul_rn/__dmul_rn are never contracted into an FMA with a later add: each op rounds, as the reference
            case MUL -> d == Domain.LONG ? "(" + x + " * " + y + ")" : (f ? "__fmul_rn(" : "__dmul_rn(") + x + ", " + y + ")";
            // a result rounded to f16/bf16 at once may come from faster float arithmetic (see the class comment for
            // its error): the fast exponential and a multiplication by the reciprocal, with the exact forms kept for
            // arguments where those would lose range (subnormal results, huge or tiny divisors)
            case DIV -> f && t.isHalf() && scope.fastForms ? helper("hdiv", d) + "(" + x + ", " + y + ")" : "(" + x + " / " + y + ")";
            case POW -> (f ? "powf(" : "pow(") + x + ", " + y + ")";
            case MAXIMUM -> helper("max", d) + "(" + x + ", " + y + ")";
            case MINIMUM -> helper("min", d) + "(" + x + ", " + y + ")";
            case NEG -> "(-" + x + ")";
            case ABS -> d == Domain.LONG ? helper("abs", d) + "(" + x + ")" : (f ? "fabsf(" : "fabs(") + x + ")";
            case EXP -> f && t.isHalf() && scope.fastForms ? helper("hexp", d) + "(" + x + ")" : (f ? "expf(" : "exp(") + x + ")";
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
    String convert(String v, DType from, DType to) {
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
    String store(String v, DType from, DType to) {
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


    static String nan(Domain d) {
        return d == Domain.DOUBLE ? "__longlong_as_double(0x7ff8000000000000LL)" : "__int_as_float(0x7fc00000)";
    }

    static String posInf(Domain d) {
        return d == Domain.DOUBLE ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
    }

    static String negInf(Domain d) {
        return d == Domain.DOUBLE ? "(-__longlong_as_double(0x7ff0000000000000LL))" : "(-__int_as_float(0x7f800000))";
    }


    private static String paren(String v) {
        if (CudaCodegen.IDENT.matcher(v).matches() || v.matches("[0-9.eE+]+f?(LL)?") || isWrapped(v)) return v;
        if (v.matches("[A-Za-z_][A-Za-z0-9_]*(\\.e\\[l\\]|\\[[^\\[\\]]*\\])")) return v;
        Matcher call = Pattern.compile("[A-Za-z_][A-Za-z0-9_]*(\\(.*\\))").matcher(v);
        if (call.matches() && isWrapped(call.group(1))) return v;
        return "(" + v + ")";
    }

    /** Strips one pair of outer parentheses enclosing the whole expression. */
    static String strip(String v) {
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

    // ------------------------------------------------------------------ reductions

    String combine(ReduceFn fn, Domain d, String a, String b) {
        return switch (fn) {
            case SUM, MEAN -> a + " + " + b;
            case MAX -> helper("max", d) + "(" + a + ", " + b + ")";
            case MIN -> helper("min", d) + "(" + a + ", " + b + ")";
        };
    }

    /** The reduction's result from its accumulated {@code a}: divided by the count for a mean, rounded to its dtype. */
    String result(Kernel.Reduction r, Domain acc, String a) { return result(r.fn(), r.dtype(), acc, a, "count"); }

    /** A fold of {@code fn} accumulated in {@code a} over {@code count} values: divided by it for a mean, rounded to {@code dtype}. */
    String result(ReduceFn fn, DType dtype, Domain acc, String a, String count) {
        if (fn != ReduceFn.MEAN) return convert(a, acc.type, k.held(dtype));
        Domain m = acc == Domain.LONG ? Domain.DOUBLE : acc;
        String x = acc == Domain.LONG ? "(double) " + a : a;
        return convert("(" + count + " == 0 ? " + nan(m) + " : " + x + " / (" + m.c + ") " + count + ")", m.type, k.held(dtype));
    }

    /** The accumulator's starting value for a reduction by {@code fn}. */
    static String identity(ReduceFn fn, Domain acc) {
        return switch (fn) {
            case SUM, MEAN -> acc == Domain.LONG ? "0LL" : acc == Domain.DOUBLE ? "0.0" : "0.0f";
            case MAX -> acc == Domain.LONG ? "(-9223372036854775807LL - 1)" : negInf(acc);
            case MIN -> acc == Domain.LONG ? "9223372036854775807LL" : posInf(acc);
        };
    }

    // ------------------------------------------------------------------ helpers

    private String helper(String name, Domain d) {
        String key = name + (name.equals("f16") || name.equals("bf16") ? "" : "_" + d.name());
        scope.helpers.add(key);
        return "gt_" + name;
    }
}
