package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * all_to_all ({@code all_to_all_single}) on the host backend's simulated world and in the reference interpreter,
 * against plain loops over each rank's rows: worlds of 1 to 4, even and uneven splits (row counts read at run time:
 * empty parts, everything to one rank, random), f64, f32, bf16 and i64 beyond 2^53, inputs taken by each of the three
 * realization paths (computed, a graph input, a view) and through NCCL's emulation, with random delays; along a mesh
 * axis (ep x tp); random graphs with all_to_alls against the reference; and the
 * refusals: counts past the capacity, negative, or more than a rank holds (at run time, naming the op and the counts),
 * and badly typed graphs (when built).
 */
class AllToAllHostTest {
    private static final List<DType> TYPES = List.of(DType.F64, DType.F32, DType.BF16, DType.I64);

    /** One random case: world, dtype, rows per rank, the row's shape, whether uneven, how the input is made, each rank's counts. */
    record Case(int world, DType type, long rows, long[] row, boolean uneven, int path, long[][] counts, long[][] counts2, long capacity, boolean nccl) {
        long rowElems() { return Arrays.stream(row).reduce(1, (a, b) -> a * b); }

        @Override public String toString() {
            return "world " + world + ", " + type + Arrays.toString(shape(rows)) + (uneven ? ", counts " + Arrays.deepToString(counts) + " then "
                    + Arrays.deepToString(counts2) + ", capacity " + capacity : ", even") + ", path " + (path + 1) + (nccl ? ", nccl" : "");
        }

        long[] shape(long dim0) {
            long[] s = new long[row.length + 1];
            s[0] = dim0;
            System.arraycopy(row, 0, s, 1, row.length);
            return s;
        }

        static Case random(Random rnd, int world) {
            DType t = TYPES.get(rnd.nextInt(TYPES.size()));
            long[] row = new long[rnd.nextInt(3)];
            for (int i = 0; i < row.length; i++) row[i] = 1 + rnd.nextInt(3);
            boolean uneven = rnd.nextBoolean();
            long rows = uneven ? rnd.nextInt(7) : (long) world * rnd.nextInt(4);
            long[][] first = counts(rnd, world, rows, uneven), second = counts(rnd, world, rows, uneven);
            long most = Math.max(most(first), most(second));
            return new Case(world, t, rows, row, uneven, rnd.nextInt(3), first, second, most + rnd.nextInt(3), rnd.nextInt(4) == 0);
        }

        /** Each rank's counts for one call: random, all to one rank, none at all, or empty parts among random ones. */
        static long[][] counts(Random rnd, int world, long rows, boolean uneven) {
            return uneven ? dev.gatun.runtime.testing.RandomCounts.of(rnd, world, rows) : new long[world][world];
        }

        /** The most rows any rank receives. */
        static long most(long[][] counts) {
            long most = 0;
            for (int d = 0; d < counts.length; d++) {
                long got = 0;
                for (long[] k : counts) got += k[d];
                most = Math.max(most, got);
            }
            return most;
        }

        /** The counts of call {@code call} (the second call's differ, so a stale row or count of the first would show). */
        long[][] counts(int call) { return call == 0 ? counts : counts2; }

        Graph graph() {
            var g = Gatun.graph("a2a").world(world);
            Tensor x = switch (path) {
                case 0 -> g.input("x", type, boxed(shape(rows))).mul(2);                                   // computed: path 1
                case 1 -> g.input("x", type, boxed(shape(rows)));                                          // a graph input: path 2
                default -> g.input("x", type, boxed(shape(rows + 1))).slice(0, 1, rows + 1);               // a view: path 3
            };
            if (!uneven) {
                g.output("y", x.allToAll("world"));
            } else {
                Tensor k = g.input("counts", DType.I64, world);
                var r = x.allToAll("world", path == 0 ? k.mul(1) : k, capacity);
                g.output("y", r.values());
                g.output("received", r.counts());
            }
            return g.build();
        }

        /** Each rank's x (the input as given: the view's case has one more row first) and counts. */
        List<Map<String, NDArray>> inputs(Random rnd, int call) {
            var out = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) {
                long n = (path == 2 ? rows + 1 : rows) * rowElems();
                NDArray x = type == DType.I64 ? NDArray.of(rnd.longs(n, -(1L << 60), 1L << 60).toArray(), shape(path == 2 ? rows + 1 : rows))
                        : NDArray.of(type, rnd.doubles(n).map(v -> (v - 0.5) * Math.pow(10, rnd.nextInt(9) - 4)).toArray(), shape(path == 2 ? rows + 1 : rows));
                var in = new HashMap<String, NDArray>();
                in.put("x", x);
                if (uneven) in.put("counts", NDArray.of(counts(call)[r].clone(), world));
                out.add(in);
            }
            return out;
        }

        CompileOptions options(long seed) {
            var o = CompileOptions.world(world).backend("host").randomDelays(seed + 1);
            return nccl ? o.symmetricMemory(false) : o;
        }
    }

    static Object[] boxed(long[] s) { return Arrays.stream(s).boxed().toArray(); }

    /**
     * Where rank d's received elements come from, by plain loops: part d of every rank's rows in rank order, packed, as
     * {sending rank, element of its x} pairs (the rows after them are zero).
     */
    static List<long[]> received(Case c, long[][] counts, int d) {
        long e = c.rowElems(), skip = c.path == 2 ? e : 0;
        var from = new java.util.ArrayList<long[]>();
        for (int s = 0; s < c.world; s++) {
            long first = 0, n;
            if (c.uneven) {
                for (int k = 0; k < d; k++) first += counts[s][k];
                n = counts[s][d];
            } else {
                first = d * (c.rows / c.world);
                n = c.rows / c.world;
            }
            for (long i = first * e; i < (first + n) * e; i++) from.add(new long[]{s, skip + i});
        }
        return from;
    }

    /** Rank d's expected rows as doubles (computed inputs, path 0, are twice the input). */
    static double[] expectedDoubles(Case c, long[][] counts, List<Map<String, NDArray>> in, int d) {
        double[] want = new double[Math.toIntExact((c.uneven ? c.capacity : c.rows) * c.rowElems())];
        int at = 0;
        for (long[] f : received(c, counts, d)) want[at++] = in.get((int) f[0]).get("x").get(f[1]) * (c.path == 0 ? 2 : 1);
        return want;
    }

    /** Rank d's expected rows as longs, exact. */
    static long[] expectedLongs(Case c, long[][] counts, List<Map<String, NDArray>> in, int d) {
        long[] want = new long[Math.toIntExact((c.uneven ? c.capacity : c.rows) * c.rowElems())];
        int at = 0;
        for (long[] f : received(c, counts, d)) want[at++] = in.get((int) f[0]).get("x").getLong(f[1]) * (c.path == 0 ? 2 : 1);
        return want;
    }

    static void check(String who, Case c, int call, List<Map<String, NDArray>> in, List<Map<String, NDArray>> out) {
        long[][] counts = c.counts(call);
        for (int d = 0; d < c.world; d++) {
            NDArray y = out.get(d).get("y");
            assertThat(y.shape()).as("%s rank %d shape", who, d).containsExactly(c.shape(c.uneven ? c.capacity : c.rows));
            if (c.type == DType.I64) assertThat(y.toLongArray()).as("%s rank %d", who, d).containsExactly(expectedLongs(c, counts, in, d));
            else assertThat(y.toDoubleArray()).as("%s rank %d", who, d).containsExactly(expectedDoubles(c, counts, in, d));
            if (c.uneven) {
                long[] got = new long[c.world];
                for (int s = 0; s < c.world; s++) got[s] = counts[s][d];
                assertThat(out.get(d).get("received").toLongArray()).as("%s rank %d received counts", who, d).containsExactly(got);
            }
        }
    }

    @Property(tries = 60)
    void randomAllToAllsMatchPlainLoopsOnTheHostAndInTheReference(@ForAll @IntRange(min = 1, max = 4) int world,
                                                                   @ForAll @IntRange(min = 0, max = 100_000) int seed) {
        var rnd = new Random(seed);
        Case c = Case.random(rnd, world);
        Graph g = c.graph();
        var in = List.of(c.inputs(rnd, 0), c.inputs(rnd, 1));
        for (int call = 0; call < 2; call++) check("reference " + c, c, call, in.get(call), ReferenceInterpreter.evaluate(g, in.get(call)));
        try (var s = Session.compile(g, c.options(seed))) {
            for (int call = 0; call < 2; call++) check("host call " + call + " " + c, c, call, in.get(call), s.runToHost(in.get(call)));
        }
    }

    /**
     * Random graphs whose collectives include all_to_alls (even, and uneven with constant counts; along mesh axes too)
     * give the reference interpreter's values on the host backend, symmetric and through NCCL, with random delays.
     */
    @Test
    void randomGraphsWithAllToAllsMatchTheReference() {
        for (long seed = 0; seed < 80; seed++) {
            int world = 1 + (int) (seed % 4);
            var opts = dev.gatun.ir.testing.RandomGraphs.Options.defaults().withWorldSize(world).withAllToAll(true);
            if (world == 4 && seed % 8 == 3) opts = opts.withMesh(2, 2).staticOnly();
            var co = CompileOptions.world(world).backend("host").randomDelays(seed % 3 == 0 ? seed + 1 : 0);
            HostDifferentialTest.check(seed, opts, seed % 5 == 0 ? co.symmetricMemory(false) : co);
        }
    }

    /**
     * All_to_alls that read only graph inputs: rows and each row's i64 metadata by the same counts, another f32 tensor
     * by its own counts, and one even all_to_all. The schedule places them together and the planner joins them (one
     * barrier pair).
     */
    static Graph independent(int world, DType type, long rows, long rows2, long capacity, long capacity2) {
        var g = Gatun.graph("joined").world(world);
        Tensor counts = g.input("counts", DType.I64, world), counts2 = g.input("counts2", DType.I64, world);
        g.output("rows", g.input("x", type, rows, 3).allToAll("world", counts, capacity).values());
        g.output("meta", g.input("meta", DType.I64, rows, 1).allToAll("world", counts, capacity).values());
        g.output("other", g.input("z", DType.F32, rows2, 2).allToAll("world", counts2, capacity2).values());
        g.output("even", g.input("e", DType.BF16, 2L * world, 2).allToAll("world"));
        return g.build();
    }

    /**
     * Joined all_to_alls give what each with its own barrier pair gives (PlanOptions.withBatchCollectives(1)) and what
     * the reference interpreter gives, bit for bit: worlds 2 and 4, random counts (empty parts, everything to one rank,
     * none at all), two calls a session with other counts, random delays.
     */
    @Test
    void joinedAllToAllsGiveWhatTheyGiveApartAndTheReference() {
        var rnd = new Random(38);
        int joinedParts = 0;
        for (int trial = 0; trial < 24; trial++) {
            int world = trial % 2 == 0 ? 2 : 4;
            DType type = TYPES.get(rnd.nextInt(TYPES.size()));
            long rows = rnd.nextInt(7), rows2 = rnd.nextInt(5);
            long[][][] counts = new long[2][][], counts2 = new long[2][][];
            for (int call = 0; call < 2; call++) {
                counts[call] = Case.counts(rnd, world, rows, true);
                counts2[call] = Case.counts(rnd, world, rows2, true);
            }
            long capacity = Math.max(Case.most(counts[0]), Case.most(counts[1])) + rnd.nextInt(2);
            long capacity2 = Math.max(Case.most(counts2[0]), Case.most(counts2[1]));
            Graph g = independent(world, type, rows, rows2, capacity, capacity2);
            var joined = CompileOptions.world(world).backend("host").randomDelays(trial + 1);
            var apart = joined.planning(joined.planning().withBatchCollectives(1));
            try (var sj = Session.compile(g, joined); var sa = Session.compile(g, apart)) {
                var step = sj.plan().steps().stream().filter(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll)
                        .map(st -> (dev.gatun.planner.Step.JoinedAllToAll) st).findFirst().orElseThrow(() -> new AssertionError(sj.plan().toString()));
                joinedParts = Math.max(joinedParts, step.members().size());
                assertThat(sa.plan().steps()).noneMatch(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll);
                for (int call = 0; call < 2; call++) {
                    var in = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < world; r++) {
                        long n = rows * 3;
                        NDArray x = type == DType.I64 ? NDArray.of(rnd.longs(n, -(1L << 60), 1L << 60).toArray(), rows, 3)
                                : NDArray.of(type, rnd.doubles(n).map(v -> v - 0.5).toArray(), rows, 3);
                        in.add(Map.of("x", x, "meta", NDArray.of(rnd.longs(rows).toArray(), rows, 1),
                                "z", NDArray.of(DType.F32, rnd.doubles(rows2 * 2).toArray(), rows2, 2),
                                "e", NDArray.of(DType.BF16, rnd.doubles(4L * world).toArray(), 2L * world, 2),
                                "counts", NDArray.of(counts[call][r].clone(), world), "counts2", NDArray.of(counts2[call][r].clone(), world)));
                    }
                    var got = sj.runToHost(in);
                    var want = sa.runToHost(in);
                    var ref = ReferenceInterpreter.evaluate(g, in);
                    for (int r = 0; r < world; r++)
                        for (String out : List.of("rows", "meta", "other", "even")) {
                            String what = "trial " + trial + " world " + world + " " + type + " call " + call + " rank " + r + " " + out;
                            assertThat(got.get(r).get(out).toByteArray()).as(what + " (apart)").isEqualTo(want.get(r).get(out).toByteArray());
                            assertThat(got.get(r).get(out).toByteArray()).as(what + " (reference)").isEqualTo(ref.get(r).get(out).toByteArray());
                        }
                }
            }
        }
        assertThat(joinedParts).as("the most parts joined").isGreaterThanOrEqualTo(3);
    }

    /** A part of a joined step whose counts are past its capacity fails the call naming that part and the counts. */
    @Test
    void aJoinedPartsRefusedCountsNameThatPart() {
        var g = Gatun.graph("joined").world(3);
        Tensor counts = g.input("counts", DType.I64, 3);
        g.output("a", g.input("x", DType.F32, 4, 2).allToAll("world", counts, 12).values());
        g.output("b", g.input("y", DType.F32, 4, 2).allToAll("world", counts, 5).values());
        Graph graph = g.build();
        try (var s = Session.compile(graph, CompileOptions.world(3).backend("host"))) {
            assertThat(s.plan().steps()).anyMatch(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll);
            var in = new ArrayList<Map<String, NDArray>>();
            long[][] k = {{1, 1, 1}, {2, 2, 0}, {1, 3, 0}};   // rank 1 would receive 6 rows: fine for a (12), not for b (5)
            for (long[] c : k) in.add(Map.of("x", NDArray.full(DType.F32, 1, 4, 2), "y", NDArray.full(DType.F32, 2, 4, 2), "counts", NDArray.of(c.clone(), 3)));
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("capacity=5")
                    .hasMessageContaining("rank 1 would receive 6 rows ([1, 2, 3] from ranks [0, 1, 2]) but the capacity is 5 rows");
        }
    }

    /** Rank r sends r + 1 rows to every rank: rank d receives 1 + 2 + 3 = 6 rows into a capacity of 5. */
    static Graph overCapacity() {
        var g = Gatun.graph("over").world(3);
        var r = g.input("x", DType.F32, 4, 2).allToAll("world", g.input("counts", DType.I64, 3), 5);
        g.output("y", r.values());
        return g.build();
    }

    static List<Map<String, NDArray>> countsOf(long[][] counts, long rows) {
        var in = new ArrayList<Map<String, NDArray>>();
        for (long[] k : counts) in.add(Map.of("x", NDArray.full(DType.F32, 1, rows, 2), "counts", NDArray.of(k.clone(), k.length)));
        return in;
    }

    @Test
    void aCountPastTheCapacityIsRefusedAtRunTimeNamingTheOpAndTheCounts() {
        var in = countsOf(new long[][]{{1, 1, 1}, {2, 2, 0}, {1, 3, 0}}, 4);   // rank 1 would receive 1 + 2 + 3 = 6
        for (boolean symmetric : new boolean[]{true, false}) {
            try (var s = Session.compile(overCapacity(), CompileOptions.world(3).backend("host").symmetricMemory(symmetric))) {
                assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class)
                        .hasMessageContaining("all_to_all." + (symmetric ? "symm_mem" : "nccl"))
                        .hasMessageContaining("rank 1 would receive 6 rows ([1, 2, 3] from ranks [0, 1, 2]) but the capacity is 5 rows");
            }
        }
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(overCapacity(), in)).isInstanceOf(GraphException.class)
                .hasMessageContaining("all_to_all(").hasMessageContaining("rank 1 would receive 6 rows");
    }

    @Test
    void aNegativeCountOrMoreRowsThanARankHoldsIsRefused() {
        try (var s = Session.compile(overCapacity(), CompileOptions.world(3).backend("host"))) {
            assertThatThrownBy(() -> s.runToHost(countsOf(new long[][]{{1, 0, 0}, {0, -1, 0}, {0, 0, 0}}, 4)))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("rank 1 sends -1 rows to rank 1 (its counts [0, -1, 0])");
            assertThatThrownBy(() -> s.runToHost(countsOf(new long[][]{{1, 0, 0}, {0, 0, 0}, {2, 2, 1}}, 4)))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("rank 2's counts [2, 2, 1] add up to 5 rows, but its input has 4");
            // the same session runs counts that fit afterwards
            var ok = s.runToHost(countsOf(new long[][]{{1, 1, 1}, {0, 2, 0}, {1, 0, 1}}, 4));
            assertThat(ok.get(1).get("y").toFloatArray()).containsExactly(1, 1, 1, 1, 1, 1, 0, 0, 0, 0);
        }
    }

    @Test
    void badlyTypedAllToAllsAreRefusedWhenBuilt() {
        var g = Gatun.graph("bad").world(2);
        var x = g.input("x", DType.F32, 3, 2);
        assertThatThrownBy(() -> x.allToAll("world")).isInstanceOf(GraphException.class)
                .hasMessageContaining("all_to_all('x' f32[3,2]): dimension 0 of size 3 is not divisible by the size 2 of group 'world'")
                .hasMessageContaining("x.allToAll(group, counts, capacity)");
        assertThatThrownBy(() -> x.allToAll("world", g.input("c", DType.I32, 2), 4)).isInstanceOf(GraphException.class)
                .hasMessageContaining("must be an i64 vector of 2 row counts");
        assertThatThrownBy(() -> x.allToAll("world", g.input("c3", DType.I64, 3), 4)).isInstanceOf(GraphException.class)
                .hasMessageContaining("must be an i64 vector of 2 row counts");
        assertThatThrownBy(() -> x.allToAll("world", g.input("k", DType.I64, 2), -1)).isInstanceOf(GraphException.class)
                .hasMessageContaining("capacity");
        var sub = Gatun.graph("sub").world(4).group("pair", 0, 1);
        assertThatThrownBy(() -> sub.input("x", DType.F32, 4).allToAll("pair")).isInstanceOf(GraphException.class)
                .hasMessageContaining("all_to_all('x' f32[4]): group 'pair' [0, 1] leaves out ranks [2, 3]");
    }

    /**
     * Expert parallelism beside tensor parallelism: a mesh ep=2 x tp=2 (ranks {0, 2} and {1, 3} along "ep"), tokens sent
     * along "ep" by each rank's own counts, then summed along "tp": each slice exchanges among its own ranks only.
     */
    @Test
    void anUnevenAllToAllAlongAMeshAxisStaysInItsSlice() {
        var g = Gatun.graph("ep").mesh("ep", 2, "tp", 2);
        var r = g.input("x", DType.F64, 4, 3).allToAll("ep", g.input("counts", DType.I64, 2), 5);
        g.output("y", r.values());
        g.output("sum", r.values().allReduce(dev.gatun.ir.graph.ReduceOp.SUM, "tp"));
        long[][] counts = {{1, 3}, {0, 2}, {4, 0}, {2, 2}};
        var in = new ArrayList<Map<String, NDArray>>();
        for (int rank = 0; rank < 4; rank++) {
            double[] x = new double[12];
            for (int i = 0; i < 12; i++) x[i] = 100 * rank + i;
            in.add(Map.of("x", NDArray.of(x, 4, 3), "counts", NDArray.of(counts[rank].clone(), 2)));
        }
        int[][] slices = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};   // each rank's slice of "ep"
        double[][] want = new double[4][15];
        for (int d = 0; d < 4; d++) {
            int me = slices[d][0] == d ? 0 : 1, at = 0;
            for (int s : slices[d]) {
                long from = me == 0 ? 0 : counts[s][0];
                for (long row = from; row < from + counts[s][me]; row++)
                    for (int e = 0; e < 3; e++) want[d][at++] = 100 * s + row * 3 + e;
            }
        }
        var reference = ReferenceInterpreter.evaluate(g.build(), in);
        try (var s = Session.compile(g.build(), CompileOptions.world(4).backend("host").randomDelays(3))) {
            var out = s.runToHost(in);
            for (int d = 0; d < 4; d++) {
                assertThat(out.get(d).get("y").toDoubleArray()).as("rank %d", d).containsExactly(want[d]);
                assertThat(reference.get(d).get("y").toDoubleArray()).as("reference rank %d", d).containsExactly(want[d]);
                int peer = d ^ 1;   // its "tp" partner
                double[] sum = new double[15];
                for (int i = 0; i < 15; i++) sum[i] = want[d][i] + want[peer][i];
                assertThat(out.get(d).get("sum").toDoubleArray()).as("rank %d sum", d).containsExactly(sum);
            }
        }
    }

    @Test
    void anUnevenAllToAllSurvivesJson() {
        Graph g = overCapacity();
        String json = GraphJson.toJson(g);
        assertThat(json).contains("\"capacity\": 5");
        Graph back = GraphJson.fromJson(json);
        assertThat(back.nodes().stream().map(n -> n.format()).toList()).isEqualTo(g.nodes().stream().map(n -> n.format()).toList());
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"capacity\": 5", "\"capacity\": -2"))).isInstanceOf(GraphException.class)
                .hasMessageContaining("capacity -2 is negative");
        var plain = Gatun.graph("plain").world(2);
        plain.output("y", plain.input("x", DType.F32, 2).allGather("world"));
        String gathered = GraphJson.toJson(plain.build());
        assertThatThrownBy(() -> GraphJson.fromJson(gathered.replace("\"group\": \"world\"", "\"group\": \"world\", \"capacity\": 3")))
                .isInstanceOf(GraphException.class).hasMessageContaining("field 'capacity' belongs to an uneven all_to_all, not to all_gather");
    }
}
