package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code sample} on the host backend and in the reference interpreter: the draws' distribution against
 * transformers' rule computed here in float64 with sorting and plain loops (temperature, top-k, top-p, min-p, the
 * repetition penalty), each filter's kept set, ties, temperature 0 as argmax, the penalty's signs and repeats, and
 * reproducibility. Each draw is a pure function of (seed, step, column), so every count here is the same on every run.
 */
public class SampleHostTest {
    /** The parameters of one row: temperature, top_k, top_p, min_p, repetition_penalty. */
    record Params(double t, double k, double p, double m, double r) {
        static Params temperature(double t) { return new Params(t, 0, 1, 0, 1); }
        Params topK(double k) { return new Params(t, k, p, m, r); }
        Params topP(double p) { return new Params(t, k, p, m, r); }
        Params minP(double m) { return new Params(t, k, p, m, r); }
        Params penalty(double r) { return new Params(t, k, p, m, r); }
    }

    /** A graph drawing one token from each of {@code rows} rows of {@code cols} logits, a context of {@code h} tokens a row. */
    public static Graph graph(int rows, int cols, DType t, int h, int steps) {
        var g = Gatun.graph("sampling");
        g.output("next", g.input("logits", t, rows, cols).sample(g.input("params", DType.F32, rows, 5), g.input("seeds", DType.I64, rows),
                g.input("steps", DType.I64, steps), g.input("context", DType.I64, rows, h)));
        return g.build();
    }

    /** The inputs: every row the same logits, parameters and context, row b seeded {@code seed0 + b}, all at {@code step}. */
    static Map<String, NDArray> inputs(double[] logits, DType t, Params p, long[] context, int rows, long seed0, long step) {
        int cols = logits.length;
        double[] x = new double[rows * cols], params = new double[rows * 5];
        long[] seeds = new long[rows], ctx = new long[rows * context.length];
        for (int b = 0; b < rows; b++) {
            System.arraycopy(logits, 0, x, b * cols, cols);
            System.arraycopy(new double[]{p.t(), p.k(), p.p(), p.m(), p.r()}, 0, params, b * 5, 5);
            seeds[b] = seed0 + b;
            System.arraycopy(context, 0, ctx, b * context.length, context.length);
        }
        var in = new HashMap<String, NDArray>();
        in.put("logits", NDArray.of(t, x, rows, cols));
        in.put("params", NDArray.of(DType.F32, params, rows, 5));
        in.put("seeds", NDArray.of(seeds, rows));
        in.put("steps", NDArray.of(new long[]{step}, 1));
        in.put("context", NDArray.of(ctx, rows, context.length));
        return in;
    }

    /**
     * transformers' rule in float64, written independently: the penalty (x / r where x &gt; 0, else x * r, once a
     * token), the temperature, top-k (the values at least the k-th largest), top-p (in descending order, a token kept
     * while the mass before it is below p), min-p (a probability at least m times the largest); the softmax over what
     * is kept. Every probability; 0 outside the kept set.
     */
    static double[] expected(double[] logits, Params p, long[] context) {
        int n = logits.length;
        double[] l = logits.clone();
        var seen = new TreeSet<Long>();
        for (long id : context) if (id >= 0 && id < n) seen.add(id);
        for (long id : seen) l[(int) id] = l[(int) id] > 0 ? l[(int) id] / p.r() : l[(int) id] * p.r();
        boolean[] kept = new boolean[n];
        Arrays.fill(kept, true);
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        Arrays.sort(order, (a, b) -> Double.compare(l[b], l[a]));
        if (p.k() >= 1 && p.k() < n) {
            double kth = l[order[(int) p.k() - 1]];
            for (int i = 0; i < n; i++) kept[i] = l[i] >= kth;
        }
        double[] prob = softmax(l, kept, p.t());
        if (p.p() < 1) {
            double before = 0;
            boolean[] next = new boolean[n];
            for (int j = 0; j < n; j++) {
                int i = order[j];
                if (!kept[i]) continue;
                double above = 0;   // the mass of values strictly larger (ties are kept together)
                for (int o = 0; o < n; o++) if (kept[o] && l[o] > l[i]) above += prob[o];
                next[i] = above < p.p();
                before += prob[i];
            }
            assertThat(before).isCloseTo(1.0, org.assertj.core.data.Offset.offset(1e-9));
            kept = next;
            prob = softmax(l, kept, p.t());
        }
        if (p.m() > 0) {
            double most = 0;
            for (double q : prob) most = Math.max(most, q);
            for (int i = 0; i < n; i++) kept[i] = kept[i] && prob[i] >= p.m() * most;
            prob = softmax(l, kept, p.t());
        }
        return prob;
    }

    private static double[] softmax(double[] l, boolean[] kept, double t) {
        double top = Double.NEGATIVE_INFINITY, sum = 0;
        for (int i = 0; i < l.length; i++) if (kept[i]) top = Math.max(top, l[i]);
        double[] e = new double[l.length];
        for (int i = 0; i < l.length; i++) if (kept[i]) sum += e[i] = Math.exp((l[i] - top) / t);
        for (int i = 0; i < l.length; i++) e[i] /= sum;
        return e;
    }

    /** How often each column is drawn over {@code calls} calls (steps 0, 1, ...) of {@code rows} rows each. */
    static long[] counts(Session s, double[] logits, Params p, long[] context, int rows, int calls) {
        long[] c = new long[logits.length];
        for (int k = 0; k < calls; k++) {
            NDArray next = s.runToHost(inputs(logits, DType.F32, p, context, rows, 1000L * k, k)).get("next");
            for (int b = 0; b < rows; b++) c[(int) next.getLong(b)]++;
        }
        return c;
    }

    static final double[] EIGHT = {2.0, 1.5, 1.2, 0.7, 0.1, -0.4, -1.0, -2.5};

    /**
     * 20000 draws from eight logits under each filter and all together: no draw outside the kept set, and Pearson's
     * chi-square over the kept set below 30 (the 0.9999 quantile at 7 degrees of freedom is 29.9; the draws are
     * fixed, so this is no flaky bound, and a rule off by a filter or a temperature gives hundreds).
     */
    @Test
    void theDrawsFollowTransformersDistributionUnderEveryFilter() {
        int rows = 4000, calls = 5;
        long[] context = {0, 5, 5, 8};   // 8 is outside the vocabulary; the cases without a penalty ignore them all
        var cases = new java.util.LinkedHashMap<String, Params>();
        cases.put("temperature 1", Params.temperature(1));
        cases.put("temperature 0.6, top-k 5", Params.temperature(0.6).topK(5));
        cases.put("temperature 1.3, top-p 0.8", Params.temperature(1.3).topP(0.8));
        cases.put("min-p 0.15", Params.temperature(1).minP(0.15));
        cases.put("penalty 1.5 on 0 (positive) and 5 (negative)", Params.temperature(1).penalty(1.5));
        cases.put("all of them", new Params(0.9, 6, 0.9, 0.05, 1.2));
        try (var s = Session.compile(graph(rows, EIGHT.length, DType.F32, context.length, 1), CompileOptions.world(1).backend("host"))) {
            for (var e : cases.entrySet()) {
                double[] want = expected(EIGHT, e.getValue(), context);
                long[] got = counts(s, EIGHT, e.getValue(), context, rows, calls);
                double chi = 0, n = (double) rows * calls;
                int kept = 0;
                for (int v = 0; v < EIGHT.length; v++) {
                    if (want[v] == 0) {
                        assertThat(got[v]).as("%s: column %d is filtered out", e.getKey(), v).isZero();
                        continue;
                    }
                    kept++;
                    chi += Math.pow(got[v] - n * want[v], 2) / (n * want[v]);
                }
                assertThat(kept).as(e.getKey()).isGreaterThan(2);
                assertThat(chi).as("%s: chi-square of %s against %s", e.getKey(), Arrays.toString(got), Arrays.toString(want)).isLessThan(30);
            }
        }
    }

    /** The set of columns drawn over many draws of a row: the kept set, every member of which is likely enough to show. */
    static TreeSet<Integer> drawn(double[] logits, Params p, int calls) {
        int rows = 1000;
        try (var s = Session.compile(graph(rows, logits.length, DType.F32, 1, 1), CompileOptions.world(1).backend("host"))) {
            long[] c = counts(s, logits, p, new long[]{-1}, rows, calls);
            var out = new TreeSet<Integer>();
            for (int v = 0; v < c.length; v++) if (c[v] > 0) out.add(v);
            return out;
        }
    }

    /** The columns of the {@code k} largest values, by sorting. */
    static TreeSet<Integer> largest(double[] x, int k) {
        Integer[] order = new Integer[x.length];
        for (int i = 0; i < x.length; i++) order[i] = i;
        Arrays.sort(order, (a, b) -> Double.compare(x[b], x[a]));
        return new TreeSet<>(Arrays.asList(order).subList(0, k));
    }

    /**
     * Top-k keeps exactly the k largest (a high temperature makes the rest likely, were they kept); top-p and min-p keep
     * exactly the set computed here by sorting; a tie with the k-th largest is kept with it.
     */
    @Test
    void eachFilterKeepsExactlyItsSet() {
        var rnd = new java.util.Random(11);
        double[] x = new double[40];
        for (int i = 0; i < x.length; i++) x[i] = rnd.nextDouble() * 4 - 2;
        for (int k : new int[]{1, 3, 7})
            assertThat(drawn(x, Params.temperature(50).topK(k), 4)).as("top-k %d", k).isEqualTo(largest(x, k)).hasSize(k);
        for (var p : List.of(Params.temperature(1).topP(0.5), Params.temperature(2).topP(0.3), Params.temperature(1).minP(0.3), Params.temperature(3).minP(0.6),
                new Params(2, 12, 0.7, 0.2, 1))) {
            double[] want = expected(x, p, new long[]{-1});
            var set = new TreeSet<Integer>();
            for (int v = 0; v < want.length; v++) if (want[v] > 0) set.add(v);
            assertThat(set).as("%s", p).hasSizeBetween(2, 30);
            for (int v : set) assertThat(want[v]).as("%s: column %d is likely enough to be seen", p, v).isGreaterThan(0.004);
            assertThat(drawn(x, p, 4)).as("%s", p).isEqualTo(set);
        }
        // ties with the k-th largest are kept: top-2 of three equal largest keeps all three
        double[] ties = {3, 1, 3, 1, 3};
        assertThat(drawn(ties, Params.temperature(1).topK(2), 2)).containsExactly(0, 2, 4);
        // top-p at 0 (or below) keeps the largest alone
        assertThat(drawn(x, Params.temperature(5).topP(0), 1)).isEqualTo(largest(x, 1));
    }

    /**
     * Temperature 0 (or any temperature not above 0) is argmax of the penalized logits, whatever the filters say, on the
     * host and in the reference: small integers, so ties everywhere, in f32, bf16 and f16.
     */
    @Test
    void temperatureZeroIsArgmax() {
        var rnd = new java.util.Random(5);
        int rows = 16, cols = 33;
        for (DType t : List.of(DType.F32, DType.BF16, DType.F16)) {
            double[] x = new double[rows * cols], params = new double[rows * 5];
            for (int i = 0; i < x.length; i++) x[i] = rnd.nextInt(7) - 3;
            long[] seeds = new long[rows], context = new long[rows * 2];
            for (int b = 0; b < rows; b++) {
                double[] p = {b % 2 == 0 ? 0 : -1, b % 3, b % 4 == 0 ? 1 : 0.3, b % 5 == 0 ? 0 : 0.5, b < 8 ? 1 : 2};
                System.arraycopy(p, 0, params, b * 5, 5);
                seeds[b] = rnd.nextLong();
                context[2 * b] = rnd.nextInt(cols);
                context[2 * b + 1] = rnd.nextInt(cols);
            }
            // the expected: the penalty (2 for rows 8 and up, exact on small integers), then the first largest
            double[] pen = x.clone();
            for (int b = 8; b < rows; b++)
                for (long id : new TreeSet<>(List.of(context[2 * b], context[2 * b + 1]))) {
                    int i = b * cols + (int) id;
                    pen[i] = pen[i] > 0 ? pen[i] / 2 : pen[i] * 2;
                }
            long[] want = ArgmaxHostTest.firstLargest(pen, cols);
            var in = Map.of("logits", NDArray.of(t, x, rows, cols), "params", NDArray.of(DType.F32, params, rows, 5), "seeds", NDArray.of(seeds, rows),
                    "steps", NDArray.of(new long[]{7}, 1), "context", NDArray.of(context, rows, 2));
            Graph g = graph(rows, cols, t, 2, 1);
            try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                assertThat(s.plan().toString()).contains("= sample(logits, params, seeds, steps, context)");
                NDArray got = s.runToHost(in).get("next"), ref = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("next");
                for (int b = 0; b < rows; b++) {
                    assertThat(got.getLong(b)).as("%s row %d", t, b).isEqualTo(want[b]);
                    assertThat(ref.getLong(b)).as("%s row %d, reference", t, b).isEqualTo(want[b]);
                }
            }
        }
    }

    /**
     * The repetition penalty as transformers applies it: a positive logit divided, a negative one multiplied, a token
     * penalized once however often the context holds it, ids outside the vocabulary ignored (temperature 0: the
     * argmax of the penalized values shows it).
     */
    @Test
    void theRepetitionPenaltyDividesPositivesMultipliesNegativesOnceAToken() {
        record Case(double[] logits, long[] context, double r, long want, String why) {}
        var cases = List.of(
                new Case(new double[]{3.0, 2.8}, new long[]{0, -1}, 1.05, 0, "once: 3 / 1.05 = 2.857 is above 2.8"),
                new Case(new double[]{3.0, 2.8}, new long[]{0, 0}, 1.05, 0, "twice in the context is still once (3 / 1.1025 would be below 2.8)"),
                new Case(new double[]{3.0, 2.9}, new long[]{0, 2}, 1.2, 1, "3 / 1.2 = 2.5 is below 2.9; id 2 is outside the vocabulary"),
                new Case(new double[]{-1.0, -1.1}, new long[]{0, -1}, 1.2, 1, "a negative logit is multiplied: -1.2 is below -1.1"),
                new Case(new double[]{-1.0, -1.1}, new long[]{1, -1}, 0.8, 1, "a penalty below 1 favours the token: -1.1 * 0.8 = -0.88"),
                new Case(new double[]{0.0, -0.1}, new long[]{0, -1}, 5, 0, "0 stays 0"));
        for (var c : cases) {
            var in = inputs(c.logits(), DType.F32, Params.temperature(0).penalty(c.r()), c.context(), 1, 0, 0);
            Graph g = graph(1, 2, DType.F32, 2, 1);
            try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                assertThat(s.runToHost(in).get("next").getLong(0)).as(c.why()).isEqualTo(c.want());
                assertThat(ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("next").getLong(0)).as(c.why()).isEqualTo(c.want());
            }
        }
    }

    /**
     * The same seed and step draw the same tokens in another session and in the reference; another seed or step draws
     * others; a row's draw does not depend on its row (rows of one seed agree); steps given one a row equal one step for
     * all. Random logits in f32, bf16 and f16, every filter on.
     */
    @Test
    void theSameSeedAndStepDrawTheSameTokens() {
        var rnd = new java.util.Random(3);
        int rows = 64, cols = 100;
        for (DType t : List.of(DType.F32, DType.BF16, DType.F16)) {
            double[] x = new double[cols];
            for (int i = 0; i < cols; i++) x[i] = rnd.nextGaussian() * 2;
            var p = new Params(1.1, 40, 0.95, 0.01, 1.3);
            long[] context = {3, 17, 17, 99};
            var in = inputs(x, t, p, context, rows, 42, 9);
            Graph g = graph(rows, cols, t, 4, 1);
            long[] first = tokens(g, in), again = tokens(g, in);
            assertThat(again).isEqualTo(first);
            NDArray ref = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("next");
            for (int b = 0; b < rows; b++) assertThat(ref.getLong(b)).as("%s row %d: the reference", t, b).isEqualTo(first[b]);
            assertThat(Arrays.stream(first).distinct().count()).as("64 seeds draw several tokens").isGreaterThan(5);
            var other = tokens(g, inputs(x, t, p, context, rows, 42, 10));
            assertThat(other).as("another step").isNotEqualTo(first);
            // every row seeded 42: the same token in every row, the first row's of the call above
            var same = inputs(x, t, p, context, rows, 42, 9);
            long[] all42 = new long[rows];
            Arrays.fill(all42, 42);
            same.put("seeds", NDArray.of(all42, rows));
            for (long token : tokens(g, same)) assertThat(token).isEqualTo(first[0]);
            // steps one a row, each the 9 of the call above
            Graph perRow = graph(rows, cols, t, 4, rows);
            var rowSteps = new HashMap<>(in);
            long[] nine = new long[rows];
            Arrays.fill(nine, 9);
            rowSteps.put("steps", NDArray.of(nine, rows));
            assertThat(tokens(perRow, rowSteps)).isEqualTo(first);
        }
    }

    private static long[] tokens(Graph g, Map<String, NDArray> in) {
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            NDArray next = s.runToHost(in).get("next");
            long[] out = new long[(int) next.numel()];
            for (int i = 0; i < out.length; i++) out[i] = next.getLong(i);
            return out;
        }
    }

    /** Non-finite logits: a NaN wins as in argmax, +inf wins, a row of -inf is argmax's (its first), at any temperature. */
    @Test
    void nonFiniteRowsAreArgmaxs() {
        double inf = Double.POSITIVE_INFINITY;
        var rows = List.of(new double[]{1, Double.NaN, 2, Double.NaN}, new double[]{1, 2, inf, inf}, new double[]{-inf, -inf, -inf, -inf},
                new double[]{-inf, 0.5, -inf, -inf});
        long[] want = {1, 2, 0, 1};
        for (int i = 0; i < rows.size(); i++) {
            var in = inputs(rows.get(i), DType.F32, Params.temperature(1), new long[]{-1}, 3, 0, 0);
            for (long token : tokens(graph(3, 4, DType.F32, 1, 1), in)) assertThat(token).as("row %s", Arrays.toString(rows.get(i))).isEqualTo(want[i]);
        }
    }

    @Test
    void badOperandsAreRefusedNamingTheOperand() {
        var g = Gatun.graph("bad");
        var logits = g.input("logits", DType.F32, 2, 10);
        var params = g.input("params", DType.F32, 2, 5);
        var seeds = g.input("seeds", DType.I64, 2);
        var step = g.input("step", DType.I32, 1);
        var context = g.input("context", DType.I64, 2, 3);
        assertThatThrownBy(() -> g.input("wide", DType.F64, 2, 10).sample(params, seeds, step, context)).isInstanceOf(GraphException.class)
                .hasMessageContaining("they must be f32, f16 or bf16 (cast them to f32 first)");
        assertThatThrownBy(() -> g.input("flat", DType.F32, 20).sample(params, seeds, step, context)).hasMessageContaining("they are [B, V]");
        assertThatThrownBy(() -> logits.sample(g.input("p4", DType.F32, 2, 4), seeds, step, context))
                .hasMessageContaining("the parameters 'p4' are f32[2,4]; they must be f32[2,5] (a row's temperature, top_k, top_p, min_p, repetition_penalty)");
        assertThatThrownBy(() -> logits.sample(params, g.input("s32", DType.I32, 2), step, context)).hasMessageContaining("the seeds 's32' are i32[2]; they must be i64[2] (one a row)");
        assertThatThrownBy(() -> logits.sample(params, seeds, g.input("three", DType.I64, 3), context)).hasMessageContaining("they are one value or one a row ([2])");
        assertThatThrownBy(() -> logits.sample(params, seeds, g.input("fstep", DType.F32, 1), context)).hasMessageContaining("they must be i32 or i64");
        assertThatThrownBy(() -> logits.sample(params, seeds, step, g.input("c1", DType.I64, 3, 3))).hasMessageContaining("it is [2, H]");
        assertThatThrownBy(() -> logits.sample(params, seeds, step, g.input("cf", DType.F32, 2, 3))).hasMessageContaining("it must be i32 or i64");
        g.output("next", logits.sample(params, seeds, step, context));
        Graph built = g.build();
        assertThat(GraphJson.fromJson(GraphJson.toJson(built)).toString()).isEqualTo(built.toString());
        assertThat(built.toString()).contains("sample(");
    }

    /** Helpers for the tests of other modules (the GPU test compares the CUDA backend's draws with the host's). */
    public static List<Map<String, NDArray>> randomCalls(int rows, int cols, DType t, long seed, int calls) {
        var rnd = new java.util.Random(seed);
        var out = new ArrayList<Map<String, NDArray>>();
        for (int k = 0; k < calls; k++) {
            double[] x = new double[rows * cols], params = new double[rows * 5];
            long[] seeds = new long[rows], context = new long[rows * 8];
            for (int i = 0; i < x.length; i++) x[i] = rnd.nextGaussian() * 3;
            for (int b = 0; b < rows; b++) {
                double[] p = {b % 7 == 0 ? 0 : 0.3 + rnd.nextDouble(), b % 3 == 0 ? 0 : 1 + rnd.nextInt(50), b % 4 == 0 ? 1 : 0.5 + rnd.nextDouble() / 2,
                        b % 5 == 0 ? 0 : rnd.nextDouble() / 10, b % 2 == 0 ? 1 : 1 + rnd.nextDouble()};
                System.arraycopy(p, 0, params, b * 5, 5);
                seeds[b] = rnd.nextLong();
                for (int j = 0; j < 8; j++) context[b * 8 + j] = rnd.nextInt(cols + 2) - 1;
            }
            out.add(Map.of("logits", NDArray.of(t, x, rows, cols), "params", NDArray.of(DType.F32, params, rows, 5), "seeds", NDArray.of(seeds, rows),
                    "steps", NDArray.of(new long[]{k}, 1), "context", NDArray.of(context, rows, 8)));
        }
        return out;
    }
}
