package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.nio.file.Path;
import java.util.Map;

/**
 * One rank process of a CPU world, for {@link CpuWorldProcessesTest}: the world, the rank and the transport come from
 * the environment (gatun-run's RANK, WORLD_SIZE, GATUN_RENDEZVOUS..., and GATUN_HOST_TRANSPORT), exactly as a user's
 * program would get them; the program itself only says {@code CompileOptions.world(n)}.
 * <ul>
 *   <li>{@code graphs FIRST COUNT DIR}: the random graphs of seeds FIRST.. on this rank's inputs, each output written
 *   to {@code DIR/SEED-RANK-NAME.bin};</li>
 *   <li>{@code dying}: {@link CpuWorlds#dyingOnRank1()}, whose rank 1 ends its process in the middle of the call.</li>
 * </ul>
 */
public final class CpuWorldRankMain {
    public static void main(String[] args) throws Exception {
        int world = Integer.parseInt(System.getenv("WORLD_SIZE")), rank = Integer.parseInt(System.getenv("RANK"));
        var opts = CompileOptions.world(world).backend("host");
        if (args[0].equals("dying")) {
            try (var s = Session.compile(CpuWorlds.dyingOnRank1(), opts)) {
                s.runToHost(Map.of("x", NDArray.full(DType.F32, 1, 8)));
            }
            return;
        }
        long first = Long.parseLong(args[1]), count = Long.parseLong(args[2]);
        Path dir = Path.of(args[3]);
        for (long seed = first; seed < first + count; seed++) {
            Graph g = CpuWorlds.randomGraph(seed, world);
            try (var s = Session.compile(g, opts)) {
                if (!s.ranks().equals(java.util.List.of(rank))) throw new IllegalStateException("rank " + rank + " drives " + s.ranks());
                var out = s.runToHost(CpuWorlds.inputs(g, seed, world).get(rank));
                for (var e : out.entrySet()) CpuWorlds.write(e.getValue(), dir.resolve(seed + "-" + rank + "-" + e.getKey() + ".bin"));
            }
        }
        System.out.println("rank " + rank + " ran " + count + " graphs");
    }
}
