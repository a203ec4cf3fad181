package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.TestInputs;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.fail;

/**
 * What the tests of a CPU world of sessions share: the random graphs with collectives they run, the simulated world
 * (one session driving every rank) whose outputs are the oracle, an exact comparison, and a raw file format for
 * outputs that come back from rank processes (NumPy has no bf16).
 */
final class CpuWorlds {
    private CpuWorlds() {}

    /**
     * A random graph with collectives for a world of {@code world}: every feature, int64 among the dtypes; for a world
     * of 4, every other seed on a 2x2 mesh (collectives of every kind along each axis, in two slices each).
     */
    static Graph randomGraph(long seed, int world) {
        var opts = RandomGraphs.Options.defaults().withWorldSize(world).withDTypes(DType.F32, DType.F64, DType.F16, DType.BF16, DType.I32, DType.I64);
        if (world == 4 && seed % 2 == 0) opts = opts.withMesh(2, 2);
        return RandomGraphs.generate(seed, opts);
    }

    static List<Map<String, NDArray>> inputs(Graph g, long seed, int world) { return TestInputs.of(g, seed, world); }

    /** The oracle: every rank simulated in one session of the host backend. */
    static List<Map<String, NDArray>> simulated(Graph g, long seed, int world) {
        try (var s = Session.compile(g, CompileOptions.world(world).backend("host"))) {
            return s.runToHost(inputs(g, seed, world));
        }
    }

    /** Every output of every rank the same dtype, shape and bits as the oracle's. */
    static void assertSameBits(String who, Graph g, List<Map<String, NDArray>> expected, List<Map<String, NDArray>> actual) {
        for (int r = 0; r < expected.size(); r++) {
            if (actual.get(r) == null) fail(who + ": rank " + r + " has no outputs");
            if (!actual.get(r).keySet().equals(expected.get(r).keySet()))
                fail(who + ": rank " + r + " outputs " + actual.get(r).keySet() + ", the simulated world " + expected.get(r).keySet());
            for (var e : expected.get(r).entrySet()) {
                NDArray want = e.getValue(), got = actual.get(r).get(e.getKey());
                if (!want.equals(got))
                    fail(who + ": rank " + r + " output '" + e.getKey() + "' differs from the simulated world's: " + want.mismatch(got, 0, 0)
                            + "\nwant " + want + "\ngot  " + got + "\n" + g);
            }
        }
    }

    /**
     * An all-reduce, a user op that ends rank 1's process on the spot ({@code halt}, as a crash would), another
     * all-reduce: rank 0 waits in the second for a rank that is gone.
     */
    static Graph dyingOnRank1() {
        var halt = dev.gatun.ir.graph.UserOp.builder("halt")
                .input(dev.gatun.ir.graph.TensorSpec.of("x", DType.F32, "n")).output(dev.gatun.ir.graph.TensorSpec.of("y", DType.F32, "n"))
                .host((in, out, rank, world) -> {
                    if (rank == 1) Runtime.getRuntime().halt(7);
                    for (long i = 0; i < in.getFirst().numel(); i++) out.getFirst().set(i, in.getFirst().get(i));
                })
                .build();
        var b = dev.gatun.dsl.Gatun.graph("dying").world(2).register(halt);
        b.output("y", b.call1("halt", b.input("x", DType.F32, 8).allReduce(dev.gatun.ir.graph.ReduceOp.SUM)).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        return b.build();
    }

    /** An array as raw bytes: dtype, shape, elements. */
    static void write(NDArray a, Path file) throws IOException {
        try (var o = new DataOutputStream(Files.newOutputStream(file))) {
            o.writeUTF(a.dtype().name());
            o.writeInt(a.shape().length);
            for (long d : a.shape()) o.writeLong(d);
            o.write(a.segment().toArray(ValueLayout.JAVA_BYTE));
        }
    }

    static NDArray read(Path file) throws IOException {
        try (var in = new DataInputStream(Files.newInputStream(file))) {
            DType t = DType.valueOf(in.readUTF());
            long[] shape = new long[in.readInt()];
            for (int i = 0; i < shape.length; i++) shape[i] = in.readLong();
            NDArray a = NDArray.zeros(t, shape);
            a.segment().copyFrom(java.lang.foreign.MemorySegment.ofArray(in.readAllBytes()));
            return a;
        }
    }
}
