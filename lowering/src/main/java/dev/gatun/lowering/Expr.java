package dev.gatun.lowering;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;

import java.util.List;

/**
 * The body of a loop over an iteration space: loads (strided indexing into a buffer's storage), scalar
 * constants, elementwise functions and casts. Index variables are the iteration dimensions i0, i1, ...
 */
public sealed interface Expr {
    DType dtype();

    /**
     * Reads {@code storage} (a buffer that owns memory, never a view) at
     * {@code offset + sum(strides[k] * i_k)}; {@code strides} has one entry per iteration dimension.
     */
    record Load(Buffer storage, SymInt offset, List<SymInt> strides, DType dtype) implements Expr {
        public Load {
            strides = List.copyOf(strides);
            if (storage instanceof ViewBuffer) throw new IllegalArgumentException("loads address storage, not views");
        }
    }

    record Constant(double value, DType dtype) implements Expr {}

    /** {@code fn} applied to {@code args} (already cast to the computation type); the result has {@code dtype}. */
    record Apply(PointwiseFn fn, List<Expr> args, DType dtype) implements Expr {
        public Apply { args = List.copyOf(args); }
    }

    record Cast(Expr x, DType dtype) implements Expr {}

    /** Readable C-like text of the expression, used by plan printouts. */
    static String format(Expr e) {
        return switch (e) {
            case Load l -> l.storage().name() + "[" + index(l.offset(), l.strides()) + "]";
            case Constant c -> c.value() == Math.rint(c.value()) && Math.abs(c.value()) < 1e15 ? Long.toString((long) c.value()) + ".0" : Double.toString(c.value());
            case Cast c -> "(" + c.dtype() + ") " + format(c.x());
            case Apply a -> switch (a.fn()) {
                case ADD -> "(" + format(a.args().get(0)) + " + " + format(a.args().get(1)) + ")";
                case SUB -> "(" + format(a.args().get(0)) + " - " + format(a.args().get(1)) + ")";
                case MUL -> "(" + format(a.args().get(0)) + " * " + format(a.args().get(1)) + ")";
                case DIV -> "(" + format(a.args().get(0)) + " / " + format(a.args().get(1)) + ")";
                case WHERE -> "(" + format(a.args().get(0)) + " ? " + format(a.args().get(1)) + " : " + format(a.args().get(2)) + ")";
                default -> a.fn().opName() + "(" + String.join(", ", a.args().stream().map(Expr::format).toList()) + ")";
            };
        };
    }

    /** {@code offset + s0*i0 + s1*i1 ...}, leaving out zero strides. */
    static String index(SymInt offset, List<SymInt> strides) {
        var sb = new StringBuilder();
        for (int k = 0; k < strides.size(); k++) {
            SymInt s = strides.get(k);
            if (s.equals(SymInt.ZERO)) continue;
            if (!sb.isEmpty()) sb.append(" + ");
            if (s.equals(SymInt.ONE)) sb.append('i').append(k);
            else if (s.isConstant()) sb.append(s).append("*i").append(k);
            else sb.append('(').append(s).append(")*i").append(k);
        }
        if (!offset.equals(SymInt.ZERO)) sb.insert(0, sb.isEmpty() ? offset.toString() : offset + " + ");
        return sb.isEmpty() ? "0" : sb.toString();
    }
}
