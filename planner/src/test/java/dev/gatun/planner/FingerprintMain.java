package dev.gatun.planner;

import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;

import java.util.ArrayList;
import java.util.List;

/** Prints one line per fixed seeded random graph: "seed world fingerprint". Run in a second JVM by FingerprintTest. */
public final class FingerprintMain {
    private FingerprintMain() {}

    static final long[] SEEDS = {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987, 1597, 2584, 4181, 6765, 10946};

    static List<String> lines() {
        var out = new ArrayList<String>();
        for (long seed : SEEDS) {
            int world = 1 + (int) (seed % 4);
            var g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(world).withMaxNodes(32));
            var plan = Planner.plan(Lowering.lower(g, LoweringOptions.world(world)));
            out.add(seed + " " + world + " " + plan.fingerprint());
        }
        out.add("seeds " + SeedsPlanTest.plan(2).fingerprint());
        return out;
    }

    public static void main(String[] args) {
        lines().forEach(System.out::println);
    }
}
