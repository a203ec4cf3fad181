package dev.gatun.planner.bench;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One line per plan of a fixed set of 157 graphs: its name, the length and the SHA-256 of everything a plan decides
 * (fingerprint, order choice, printout, slot list, pools, kernel sources). A change meant to make planning faster
 * must leave every line as it was: run this before and after and compare the outputs. The set: 150 random graphs
 * (seeds 1000-1037, 2000-2037, 3000-3037, 4000-4035 at worlds 1 to 4), ladders of 300 and 12,000 layers, mixed 5k and
 * 100k, chains-and-layers 1k, 10k and 30k (world 2 where a graph declares none).
 *
 * <p>{@code java -Xss16m -Xmx6g -cp $CP dev.gatun.planner.bench.PlanDigests > digests.txt}
 */
public final class PlanDigests {
    private PlanDigests() {}

    public static void main(String[] args) throws NoSuchAlgorithmException {
        var graphs = new LinkedHashMap<String, Graph>();
        for (int w = 1; w <= 4; w++)
            for (int s = 0; s < 38 && graphs.size() < 150; s++)
                graphs.put("random-w" + w + "-" + (1000L * w + s), RandomGraphs.generate(1000L * w + s, RandomGraphs.Options.defaults().withWorldSize(w)));
        graphs.put("ladder-300", SyntheticGraphs.ladder(300));
        graphs.put("ladder-12000", SyntheticGraphs.ladder(12_000));
        graphs.put("mixed-5k", SyntheticGraphs.mixed(5_000, 42));
        graphs.put("mixed-100k", SyntheticGraphs.mixed(100_000, 42));
        for (int n : new int[]{1_000, 10_000, 30_000}) graphs.put("synthetic-" + n, SyntheticGraphs.chainsAndLayers(n, 7));
        for (Map.Entry<String, Graph> e : graphs.entrySet()) {
            String text = describe(e.getValue());
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
            System.out.println(e.getKey() + " " + text.length() + " " + HexFormat.of().formatHex(digest));
        }
    }

    private static String describe(Graph g) {
        Integer declared = g.worldSize();
        Plan p;
        try {
            p = dev.gatun.planner.Planner.plan(Lowering.lower(g, LoweringOptions.world(declared != null ? declared : 2)));
        } catch (RuntimeException e) {
            return "refused: " + e;   // a refusal must stay the same refusal
        }
        var sb = new StringBuilder();
        sb.append("fingerprint ").append(p.fingerprint()).append('\n').append("order ").append(p.orderChoice()).append('\n').append(p).append('\n');
        for (var slot : p.slots()) sb.append("slot ").append(slot).append('\n');
        for (var pool : p.pools()) sb.append("pool ").append(pool).append('\n');
        return sb.append("kernels\n").append(p.kernelSources()).toString();
    }
}
