package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The all_to_all on symmetric memory ({@link SymmetricAllToAll}) on the GPU, against plain loops over every rank's
 * rows: uneven with row counts only the device reads (random, empty parts, everything to one rank, nothing at all),
 * pushed into receive buffers (a result the graph computes on) and pulled into a graph output, rows of 12 bytes (no
 * 16-byte vectors), 128 bytes and 8 (i64 beyond 2^53); even, pulled; worlds of 2 and 4 ranks sharing one GPU and, where
 * there are GPUs enough, a GPU a rank; 40 calls with new counts each (the barrier's epochs advance), captured in CUDA
 * graphs and replayed, or launched one by one.
 */
@RequiresGpu
class AllToAllSymmetricGpuTest {
    static final long ROWS = 6;

    /** Every all_to_all of the check: uneven f32 pushed, bf16 and i64 pulled (graph outputs), and even f32 pulled. */
    static Graph graph(int world) {
        var g = Gatun.graph("a2a_symm").world(world);
        long cap = ROWS * world;   // room for everything to one rank
        Tensor counts = g.input("counts", DType.I64, world);
        var f = g.input("f", DType.F32, ROWS, 3).mul(2).allToAll("world", counts, cap);
        g.output("f", f.values().add(1));                           // consumed: its receive buffer is in symmetric memory (push)
        g.output("received", f.counts());
        g.output("h", g.input("h", DType.BF16, ROWS, 64).allToAll("world", counts.mul(1), cap).values());   // a graph output: pulled
        g.output("ids", g.input("ids", DType.I64, ROWS).allToAll("world", counts, cap).values());
        g.output("even", g.input("e", DType.F32, 2L * world, 8).mul(2).allToAll("world"));
        return g.build();
    }

    /** Rank r's element i of input {@code name} at call c: exact in bf16 (an integer below 256) and f32. */
    static double value(String name, int rank, int call, long i) {
        return switch (name) {
            case "h" -> (rank * 31 + call * 7 + i) % 256;
            default -> rank * 1000 + call * 10 + (i % 1000) / 4.0;
        };
    }

    /** Every rank's counts at a call: random, everything to one rank, nothing at all, or empty parts among random ones. */
    static long[][] counts(Random rnd, int world) { return dev.gatun.runtime.testing.RandomCounts.of(rnd, world, ROWS); }

    static Map<String, NDArray> inputs(int world, int rank, int call, long[][] counts) {
        var in = new HashMap<String, NDArray>();
        in.put("counts", NDArray.of(counts[rank].clone(), world));
        float[] f = new float[(int) ROWS * 3];
        for (int i = 0; i < f.length; i++) f[i] = (float) value("f", rank, call, i);
        in.put("f", NDArray.of(f, ROWS, 3));
        double[] h = new double[(int) ROWS * 64];
        for (int i = 0; i < h.length; i++) h[i] = value("h", rank, call, i);
        in.put("h", NDArray.of(DType.BF16, h, ROWS, 64));
        long[] ids = new long[(int) ROWS];
        for (int i = 0; i < ids.length; i++) ids[i] = (1L << 60) + rank * 100L + call * 1000L + i;
        in.put("ids", NDArray.of(ids, ROWS));
        float[] e = new float[2 * world * 8];
        for (int i = 0; i < e.length; i++) e[i] = (float) value("e", rank, call, i);
        in.put("e", NDArray.of(e, 2L * world, 8));
        return in;
    }

    /**
     * Rank d's uneven result by plain loops: from each sender s in turn, its rows from sum(counts[s][0..d)) on,
     * counts[s][d] of them, {@code rowElems} elements a row, {@code f(s, element)} each; zero after them up to the capacity.
     */
    static double[] uneven(long[][] counts, int d, int world, int rowElems, java.util.function.BiFunction<Integer, Long, Double> f) {
        double[] want = new double[(int) (ROWS * world) * rowElems];
        int at = 0;
        for (int s = 0; s < world; s++) {
            long first = 0;
            for (int k = 0; k < d; k++) first += counts[s][k];
            for (long i = first * rowElems; i < (first + counts[s][d]) * rowElems; i++) want[at++] = f.apply(s, i);
        }
        return want;
    }

    static void check(int world, int d, int call, long[][] counts, Map<String, NDArray> out) {
        String at = "call " + call + " rank " + d + " counts " + java.util.Arrays.deepToString(counts);
        double[] f = uneven(counts, d, world, 3, (s, i) -> 2 * value("f", s, call, i));
        long got = 0;
        for (int s = 0; s < world; s++) got += counts[s][d];
        for (int i = 0; i < f.length; i++) f[i] += 1;   // the add after it, zero rows included
        assertThat(out.get("f").toDoubleArray()).as("f pushed, " + at).containsExactly(f);
        long[] received = new long[world];
        for (int s = 0; s < world; s++) received[s] = counts[s][d];
        assertThat(out.get("received").toLongArray()).as("received, " + at).containsExactly(received);
        assertThat(out.get("h").toDoubleArray()).as("h pulled, " + at).containsExactly(uneven(counts, d, world, 64, (s, i) -> value("h", s, call, i)));
        long[] ids = new long[(int) (ROWS * world)];
        int k = 0;
        for (int s = 0; s < world; s++) {
            long first = 0;
            for (int j = 0; j < d; j++) first += counts[s][j];
            for (long i = first; i < first + counts[s][d]; i++) ids[k++] = (1L << 60) + s * 100L + call * 1000L + i;
        }
        assertThat(out.get("ids").toLongArray()).as("ids pulled, " + at).containsExactly(ids);
        assertThat(got).isLessThanOrEqualTo(ROWS * world);
        double[] even = new double[2 * world * 8];
        int part = 2 * 8;
        for (int s = 0; s < world; s++)
            for (int i = 0; i < part; i++) even[s * part + i] = 2 * value("e", s, call, (long) d * part + i);
        assertThat(out.get("even").toDoubleArray()).as("even, " + at).containsExactly(even);
    }

    @ParameterizedTest(name = "world {0}, {1} ranks a GPU, graphs {2}")
    @CsvSource({"2, 2, true", "2, 2, false", "4, 4, true", "4, 4, false", "2, 1, true", "4, 1, true"})
    void symmetricAllToAllsMatchPlainLoops(int world, int ranksPerGpu, boolean graphs) {
        assumeTrue(dev.gatun.cuda.Device.count() >= Math.ceilDiv(world, ranksPerGpu), "needs " + Math.ceilDiv(world, ranksPerGpu) + " GPUs");
        run(world, ranksPerGpu, graphs, "cuda");
    }

    /** 40 calls of {@link #graph} on every rank of a world of threads, each checked against plain loops. */
    static void run(int world, int ranksPerGpu, boolean graphs, String backend) {
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var options = CompileOptions.world(world).rank(rv).ranksPerGpu(ranksPerGpu).backend(backend).cudaGraphs(graphs)
                    .timeout(java.time.Duration.ofSeconds(30));
            try (var s = Session.compile(graph(world), options)) {
                String plan = s.plan().toString();
                assertThat(s.plan().steps()).as(plan).noneMatch(st -> st.collectives().stream()
                        .anyMatch(c -> c.call().kind() == CollectiveKind.ALL_TO_ALL && c.call().algorithm() != Algorithm.SYMM_MEM));
                assertThat(plan).contains("push: after a starting barrier", "pull: after a starting barrier");
                var rnd = new Random(42);   // the same counts on every rank
                for (int call = 0; call < 40; call++) {
                    long[][] counts = counts(rnd, world);
                    check(world, rank, call, counts, s.runToHost(inputs(world, rank, call, counts)));
                }
            }
        });
    }
}
