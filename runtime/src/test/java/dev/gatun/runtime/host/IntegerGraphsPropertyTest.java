package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Seeded random chains of integer ops (int64 and int32, mixed, with casts between them, values at the extremes and
 * beyond 2^53) evaluated by the host backend and by the reference interpreter, both checked against an evaluation of
 * the same chain in plain Java {@code long} arithmetic here (int32 results wrapped as {@code (int)}): the oracle is
 * neither evaluator. The host backend fuses such chains into one kernel with its row reductions, so this covers the
 * kernel interpreter's integer lane end to end.
 */
class IntegerGraphsPropertyTest {

    static final int ROWS = 3, COLS = 4, N = ROWS * COLS;

    /** A node of the chain: its tensor and its values computed by plain Java. */
    record Value(Tensor t, DType dtype, long[] v) {}

    @Property(tries = 40)
    void hostAndReferenceComputeWhatPlainLongArithmeticDoes(@ForAll long seed) {
        var rnd = new Random(seed);
        GraphBuilder g = Gatun.graph("ints");
        var inputs = new HashMap<String, NDArray>();
        var values = new ArrayList<Value>();
        for (int i = 0; i < 3; i++) {
            DType t = rnd.nextInt(3) == 0 ? DType.I32 : DType.I64;
            long[] v = new long[N];
            for (int k = 0; k < N; k++) v[k] = wrap(interesting(rnd), t);
            NDArray a = NDArray.zeros(t, ROWS, COLS);
            for (int k = 0; k < N; k++) a.setLong(k, v[k]);
            inputs.put("x" + i, a);
            values.add(new Value(g.input("x" + i, t, ROWS, COLS), t, v));
        }
        int steps = 3 + rnd.nextInt(8);
        for (int s = 0; s < steps; s++) values.add(step(rnd, values));
        Value last = values.getLast(), other = values.get(values.size() - 2);
        g.output("last", last.t());
        g.output("sum", last.t().sum(1));
        g.output("max", last.t().max(1));
        g.output("min", last.t().min(0));
        g.output("lt", other.t().lt(last.t()));
        var graph = g.build();

        Map<String, NDArray> host;
        try (var session = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            host = session.runToHost(inputs);
        }
        Map<String, NDArray> reference = new ReferenceInterpreter(graph).run(inputs);
        long[] sum = new long[ROWS], max = new long[ROWS], min = new long[COLS];
        java.util.Arrays.fill(max, Long.MIN_VALUE);
        java.util.Arrays.fill(min, Long.MAX_VALUE);
        boolean[] lt = new boolean[N];
        for (int k = 0; k < N; k++) {
            sum[k / COLS] += last.v()[k];
            max[k / COLS] = Math.max(max[k / COLS], last.v()[k]);
            min[k % COLS] = Math.min(min[k % COLS], last.v()[k]);
            lt[k] = other.v()[k] < last.v()[k];
        }
        for (var out : List.of(host, reference)) {
            String who = (out == host ? "host" : "reference") + ", seed " + seed + ", " + steps + " steps";
            assertThat(out.get("last").toLongArray()).as(who + " last").containsExactly(last.v());
            assertThat(out.get("sum").toLongArray()).as(who + " sum").containsExactly(sum);
            assertThat(out.get("max").toLongArray()).as(who + " max").containsExactly(max);
            assertThat(out.get("min").toLongArray()).as(who + " min").containsExactly(min);
            assertThat(out.get("lt").toBooleanArray()).as(who + " lt").containsExactly(lt);
        }
    }

    /** One random op on earlier nodes, with its values by plain Java arithmetic. */
    private static Value step(Random rnd, List<Value> values) {
        Value a = values.get(rnd.nextInt(values.size())), b = values.get(rnd.nextInt(values.size()));
        DType t = a.dtype() == DType.I64 || b.dtype() == DType.I64 ? DType.I64 : DType.I32;   // PyTorch's promotion
        long[] r = new long[N];
        int op = rnd.nextInt(11);
        long s = rnd.nextInt(7) - 3;
        Tensor out = switch (op) {
            case 0 -> a.t().add(b.t());
            case 1 -> a.t().sub(b.t());
            case 2 -> a.t().mul(b.t());
            case 3 -> a.t().maximum(b.t());
            case 4 -> a.t().minimum(b.t());
            case 5 -> a.t().gt(b.t()).where(a.t(), b.t());
            case 6 -> a.t().neg();
            case 7 -> a.t().abs();
            case 8 -> a.t().mul(s).add(1);
            case 9 -> a.t().cast(a.dtype() == DType.I64 ? DType.I32 : DType.I64);
            default -> a.t().sub(a.t().max(true, 1));
        };
        DType rt = switch (op) {
            case 6, 7, 8, 10 -> a.dtype();
            case 9 -> a.dtype() == DType.I64 ? DType.I32 : DType.I64;
            default -> t;
        };
        for (int k = 0; k < N; k++) {
            long x = a.v()[k], y = b.v()[k];
            r[k] = wrap(switch (op) {
                case 0 -> x + y;
                case 1 -> x - y;
                case 2 -> x * y;
                case 3 -> Math.max(x, y);
                case 4 -> Math.min(x, y);
                case 5 -> x > y ? x : y;
                case 6 -> -x;
                case 7 -> Math.abs(x);
                case 8 -> x * s + 1;
                case 9 -> x;
                default -> x - rowMax(a.v(), k / COLS);
            }, rt);
        }
        return new Value(out, rt, r);
    }

    private static long rowMax(long[] v, int row) {
        long m = Long.MIN_VALUE;
        for (int j = 0; j < COLS; j++) m = Math.max(m, v[row * COLS + j]);
        return m;
    }

    private static long wrap(long v, DType t) { return t == DType.I32 ? (int) v : v; }

    /** Mostly values where doubles and narrow integers go wrong: the extremes, around 2^53 and 2^31, any long. */
    private static long interesting(Random rnd) {
        return switch (rnd.nextInt(6)) {
            case 0 -> Long.MAX_VALUE - rnd.nextInt(3);
            case 1 -> Long.MIN_VALUE + rnd.nextInt(3);
            case 2 -> (rnd.nextBoolean() ? 1 : -1) * ((1L << 53) + rnd.nextInt(5));
            case 3 -> Integer.MAX_VALUE + (long) rnd.nextInt(5) - 2;
            case 4 -> rnd.nextInt(21) - 10;
            default -> rnd.nextLong();
        };
    }
}
