package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Expert parallelism ({@link ExpertParallel}) on the host backend, with random delays, against plain float64 loops
 * over the whole experts: random shapes, 1 to 3 choices a token, worlds 1 to 4 along "ep" and ep x tp meshes (each
 * expert's width split along "tp"), routings at random, all to one expert (the others empty), and to the last member
 * only; two calls a session (the second with other routings). The reference interpreter gives the same values. The
 * pairs are ordered by counting up to {@link ExpertParallel#COUNTING_MAX_PAIRS} pairs and by sorting past it: both
 * forms against the same loops (the bound lowered for the test), with empty and skewed experts.
 */
class ExpertParallelTest {
    private record Case(int ep, int tp, int tokens, int hidden, int width, int localExperts, int k, int skew) {
        int experts() { return ep * localExperts; }
        int world() { return ep * tp; }
        long capacity() { return (long) tokens * k * ep; }
    }

    @Test
    void randomLayersAreThePlainLoopsAtEveryMeshShape() {
        var rnd = new Random(2026_11_29);
        int[][] meshes = {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {2, 2}, {1, 2}, {1, 4}};
        int cases = 0;
        for (int[] mesh : meshes)
            for (int i = 0; i < 4; i++) {
                var c = new Case(mesh[0], mesh[1], 1 + rnd.nextInt(6), 2 + rnd.nextInt(5), mesh[1] * (1 + rnd.nextInt(3)),
                        1 + rnd.nextInt(3), 1 + rnd.nextInt(3), i % 3);
                check(c, rnd.nextLong());
                cases++;
            }
        assertThat(cases).isEqualTo(28);
    }

    /**
     * The dispatch's all_to_alls (the rows, their counts, each row's local expert) joined into one barrier pair give the
     * same bits as each with its own pair (PlanOptions.withBatchCollectives(1)): worlds 2 and 4 along "ep" and a 2 x 2
     * mesh, routings at random, all to one expert (the others empty) and to the last member only, with random delays.
     */
    @Test
    void joinedAndSeparateAllToAllsGiveTheSameValues() {
        var rnd = new Random(38);
        int[][] meshes = {{2, 1}, {4, 1}, {2, 2}};
        for (int[] mesh : meshes)
            for (int skew = 0; skew < 3; skew++) {
                var c = new Case(mesh[0], mesh[1], 2 + rnd.nextInt(6), 2 + rnd.nextInt(5), mesh[1] * (1 + rnd.nextInt(3)), 1 + rnd.nextInt(3),
                        1 + rnd.nextInt(3), skew);
                long seed = rnd.nextLong();
                var r = new Random(seed);
                Weights w = weights(c, r);
                Graph graph = graph(c, c.capacity());
                var joined = CompileOptions.world(c.world()).backend("host").randomDelays(seed);
                var apart = joined.planning(joined.planning().withBatchCollectives(1));
                try (var sj = Session.compile(graph, joined); var sa = Session.compile(graph, apart)) {
                    assertThat(sj.plan().steps()).as("%s\n%s", c, sj.plan()).anyMatch(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll j && j.members().size() >= 2);
                    assertThat(sj.explain()).contains(" joined: ");
                    assertThat(sa.plan().steps()).noneMatch(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll);
                    for (int call = 0; call < 2; call++) {
                        Call in = inputs(c, r, w);
                        var got = sj.runToHost(in.in());
                        var want = sa.runToHost(in.in());
                        for (int k = 0; k < c.world(); k++)
                            assertThat(got.get(k).get("y").toDoubleArray()).as("%s call %d rank %d", c, call, k).isEqualTo(want.get(k).get("y").toDoubleArray());
                    }
                }
            }
    }

    @Test
    void tooSmallACapacityFailsTheCallNamingTheCountsNeverTruncates() {
        var c = new Case(2, 1, 4, 3, 2, 1, 2, 1);
        var graph = graph(c, 3);   // every pair to expert 0: member 0 receives 16 rows
        var rnd = new Random(5);
        var w = weights(c, rnd);
        try (var s = Session.compile(graph, CompileOptions.world(2).backend("host"))) {
            assertThatThrownBy(() -> s.runToHost(inputs(c, rnd, w).in())).hasMessageContaining("all_to_all").hasMessageContaining("capacity");
        }
    }

    @Test
    void refusesExpertsThatDoNotSplitEvenly() {
        var g = Gatun.graph("uneven").mesh("ep", 2);
        assertThatThrownBy(() -> ExpertParallel.layer(g, g.input("x", DType.F64, 2, 3), g.input("w", DType.F64, 2, 1),
                g.input("ids", DType.I64, 2, 1), 3, "ep", 2, 4, (rows, ids) -> rows))
                .hasMessageContaining("3 experts do not split evenly over 2 members");
    }

    /** The full experts: gate | up [E, 2F, H] (gate rows first) and down [E, H, F]. */
    private record Weights(double[][][] gateUp, double[][][] down) {}

    private static Weights weights(Case c, Random rnd) {
        int e = c.experts(), f = c.width(), h = c.hidden();
        var gu = new double[e][2 * f][h];
        var dn = new double[e][h][f];
        for (var m : gu) for (var r : m) for (int i = 0; i < h; i++) r[i] = rnd.nextGaussian() * 0.5;
        for (var m : dn) for (var r : m) for (int i = 0; i < f; i++) r[i] = rnd.nextGaussian() * 0.5;
        return new Weights(gu, dn);
    }

    private static Graph graph(Case c, long capacity) {
        GraphBuilder g = c.tp > 1 ? Gatun.graph("ep").mesh("ep", c.ep, "tp", c.tp) : Gatun.graph("ep").mesh("ep", c.ep);
        int fl = c.width() / c.tp, el = c.localExperts, h = c.hidden();
        Tensor gu = g.input("gate_up", DType.F64, el, 2 * fl, h), dn = g.input("down", DType.F64, el, h, fl);
        Tensor y = ExpertParallel.layer(g, g.input("x", DType.F64, c.tokens, h), g.input("w", DType.F64, c.tokens, c.k),
                g.input("ids", DType.I64, c.tokens, c.k), c.experts(), "ep", c.ep, capacity, (rows, ids) -> {
                    long cap = rows.shape().sizes()[0];
                    Tensor both = rows.expertMatmul(gu, ids.reshape(cap, 1));
                    Tensor act = both.slice(2, 0, fl).silu().mul(both.slice(2, fl, 2 * fl));
                    Tensor out = act.expertMatmul(dn, ids.reshape(cap, 1)).reshape(cap, h);
                    return c.tp > 1 ? out.allReduce(ReduceOp.SUM, "tp") : out;
                });
        g.output("y", y);
        return g.build();
    }

    /** One call's inputs by rank, and each ep slice's tokens, routing and router weights. */
    private record Call(List<Map<String, NDArray>> in, List<double[][]> x, List<long[][]> ids, List<double[][]> weights) {}

    /** Rank r = e * tp + t: the tokens and routing of ep slice e, its experts, its share of their width. */
    private static Call inputs(Case c, Random rnd, Weights w) {
        var slices = new ArrayList<double[][]>();
        var routes = new ArrayList<long[][]>();
        var weights = new ArrayList<double[][]>();
        for (int e = 0; e < c.ep; e++) {
            var x = new double[c.tokens][c.hidden()];
            var ids = new long[c.tokens][c.k];
            var wt = new double[c.tokens][c.k];
            for (int n = 0; n < c.tokens; n++) {
                for (int i = 0; i < c.hidden(); i++) x[n][i] = rnd.nextGaussian();
                for (int j = 0; j < c.k; j++) {
                    ids[n][j] = switch (c.skew) {
                        case 0 -> rnd.nextInt(c.experts());
                        case 1 -> 0;                                // one expert takes everything
                        default -> c.experts() - 1 - (j % c.localExperts); // the last member's experts only
                    };
                    wt[n][j] = rnd.nextDouble();
                }
            }
            slices.add(x);
            routes.add(ids);
            weights.add(wt);
        }
        int fl = c.width() / c.tp, el = c.localExperts, h = c.hidden();
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < c.world(); r++) {
            int e = r / c.tp, t = r % c.tp;
            var gu = new double[el * 2 * fl * h];
            var dn = new double[el * h * fl];
            for (int l = 0; l < el; l++) {
                int ex = e * el + l;
                for (int f = 0; f < fl; f++)
                    for (int i = 0; i < h; i++) {
                        gu[(l * 2 * fl + f) * h + i] = w.gateUp[ex][t * fl + f][i];
                        gu[(l * 2 * fl + fl + f) * h + i] = w.gateUp[ex][c.width() + t * fl + f][i];
                    }
                for (int i = 0; i < h; i++) for (int f = 0; f < fl; f++) dn[(l * h + i) * fl + f] = w.down[ex][i][t * fl + f];
            }
            out.add(Map.of("x", NDArray.of(flat(slices.get(e)), c.tokens, h), "w", NDArray.of(flat(weights.get(e)), c.tokens, c.k),
                    "ids", NDArray.of(flatLong(routes.get(e)), c.tokens, c.k),
                    "gate_up", NDArray.of(gu, el, 2 * fl, h), "down", NDArray.of(dn, el, h, fl)));
        }
        return new Call(out, slices, routes, weights);
    }

    private static void check(Case c, long seed) {
        var rnd = new Random(seed);
        Weights w = weights(c, rnd);
        Graph graph = graph(c, c.capacity());
        try (var s = Session.compile(graph, CompileOptions.world(c.world()).backend("host").randomDelays(seed))) {
            for (int call = 0; call < 2; call++) {
                Call in = inputs(c, rnd, w);
                var got = s.runToHost(in.in());
                var reference = ReferenceInterpreter.evaluate(graph, in.in());
                for (int r = 0; r < c.world(); r++) {
                    int e = r / c.tp;
                    double[] want = expected(c, w, in.x().get(e), in.ids().get(e), in.weights().get(e));
                    double[] y = got.get(r).get("y").toDoubleArray(), ref = reference.get(r).get("y").toDoubleArray();
                    for (int i = 0; i < want.length; i++) {
                        double tol = 1e-12 * (1 + Math.abs(want[i]));
                        assertThat(y[i]).as("%s call %d rank %d element %d", c, call, r, i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(tol));
                        assertThat(ref[i]).as("reference: %s call %d rank %d element %d", c, call, r, i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(tol));
                    }
                }
            }
        }
    }

    /** sum_j w[n, j] * down_e(silu(gate_e x) * up_e x) over the whole experts, in float64. */
    private static double[] expected(Case c, Weights w, double[][] x, long[][] ids, double[][] wt) {
        int h = c.hidden(), f = c.width();
        var out = new double[c.tokens * h];
        for (int n = 0; n < c.tokens; n++)
            for (int j = 0; j < c.k; j++) {
                int e = (int) ids[n][j];
                double[] act = new double[f];
                for (int q = 0; q < f; q++) {
                    double gate = 0, up = 0;
                    for (int i = 0; i < h; i++) {
                        gate += w.gateUp[e][q][i] * x[n][i];
                        up += w.gateUp[e][f + q][i] * x[n][i];
                    }
                    act[q] = gate / (1 + Math.exp(-gate)) * up;
                }
                for (int i = 0; i < h; i++) {
                    double d = 0;
                    for (int q = 0; q < f; q++) d += w.down[e][i][q] * act[q];
                    out[n * h + i] += wt[n][j] * d;
                }
            }
        return out;
    }

    private static double[] flat(double[][] a) { return java.util.Arrays.stream(a).flatMapToDouble(java.util.Arrays::stream).toArray(); }

    private static long[] flatLong(long[][] a) { return java.util.Arrays.stream(a).flatMapToLong(java.util.Arrays::stream).toArray(); }

    /**
     * Both ways of ordering the pairs ({@link ExpertParallel#counted} at most a bound of pairs, {@link
     * ExpertParallel#bySort} past it) on either side of the bound (24 here), at world 2 and 3, routings uniform, all
     * to expert 0 and to the last member only: the trivial expert (local expert i scales by i + 1) against float64 loops.
     */
    @Test
    void bothOrderingsOfThePairsGiveThePlainLoops() {
        int bound = 24;   // the rule's bound made small, so the host's plain interpreter stays quick on both sides of it
        for (int world : new int[]{2, 3})
            for (int tokens : new int[]{bound / 2, bound / 2 + 1}) {
                int k = 2, h = 3, local = 2, experts = world * local;
                var g = Gatun.graph("order").mesh("ep", world);
                g.output("y", ExpertParallel.layer(g, g.input("x", DType.F64, tokens, h), g.input("w", DType.F64, tokens, k),
                        g.input("ids", DType.I64, tokens, k), experts, "ep", world, (long) tokens * k * world,
                        (rows, ids) -> rows.mul(ids.add(g.scalar(1, DType.I64)).cast(DType.F64).reshape(rows.shape().sizes()[0], 1)), bound));
                Graph graph = g.build();
                boolean sorts = tokens * k > bound;
                try (var s = Session.compile(graph, CompileOptions.world(world).backend("host"))) {
                    assertThat(s.plan().toString()).as("%d pairs", tokens * k).matches(sorts ? "(?s).*= topk\\(.*" : "(?s)((?!= topk\\().)*");
                    var rnd = new Random(world * 31L + tokens);
                    for (int skew = 0; skew < 3; skew++) {
                        var in = new ArrayList<Map<String, NDArray>>();
                        var xs = new ArrayList<double[]>();
                        var idss = new ArrayList<long[]>();
                        var ws = new ArrayList<double[]>();
                        for (int r = 0; r < world; r++) {
                            double[] x = new double[tokens * h], w = new double[tokens * k];
                            long[] ids = new long[tokens * k];
                            for (int i = 0; i < x.length; i++) x[i] = rnd.nextGaussian();
                            for (int i = 0; i < ids.length; i++) {
                                ids[i] = switch (skew) {
                                    case 0 -> rnd.nextInt(experts);
                                    case 1 -> 0;
                                    default -> experts - 1 - (i % local);
                                };
                                w[i] = rnd.nextDouble();
                            }
                            xs.add(x);
                            idss.add(ids);
                            ws.add(w);
                            in.add(Map.of("x", NDArray.of(x, tokens, h), "w", NDArray.of(w, tokens, k), "ids", NDArray.of(ids, tokens, k)));
                        }
                        var got = s.runToHost(in);
                        for (int r = 0; r < world; r++) {
                            double[] y = got.get(r).get("y").toDoubleArray(), x = xs.get(r), w = ws.get(r);
                            long[] ids = idss.get(r);
                            for (int n = 0; n < tokens; n++)
                                for (int c = 0; c < h; c++) {
                                    double want = 0;
                                    for (int j = 0; j < k; j++) want += w[n * k + j] * (1 + ids[n * k + j] % local) * x[n * h + c];
                                    assertThat(y[n * h + c]).as("world %d, %d tokens, skew %d, rank %d token %d column %d", world, tokens, skew, r, n, c)
                                            .isCloseTo(want, org.assertj.core.data.Offset.offset(1e-12 * (1 + Math.abs(want))));
                                }
                        }
                    }
                }
            }
    }
}
