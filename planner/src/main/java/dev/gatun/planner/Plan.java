package dev.gatun.planner;

import dev.gatun.ir.ByteSize;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.planner.kernel.Kernel;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * An executable plan: an immutable list of {@link Step}s, its pools, kernels and CUDA-graph partitions.
 * Deterministic for a given graph, options and world size; {@link #fingerprint()} hashes its canonical text
 * so ranks can check they run the same plan. {@link #toString()} prints it one line a step.
 */
public final class Plan {
    private final LoweredGraph lowered;
    private final List<Pool> pools;
    private final List<Step> steps;
    private final Map<String, Placement> placements;
    private final List<Kernel> kernels;
    private final List<Partition> partitions;
    private final String order;
    private final long plainPeak, chosenPeak;
    private final String fingerprint;
    private volatile String text;          // the printout, made on first use: at a million nodes it is ~100 MB

    /** Where a storage buffer lives: a pool and offset, or a per-call dynamic allocation. */
    public record Placement(String buffer, String pool, long offset, long bytes) {
        public boolean isDynamic() { return pool == null; }
    }

    /** Steps {@code [first, last]} (indices into {@link #steps()}) that a CUDA graph can capture and replay. */
    public record Partition(int index, int first, int last) {}

    Plan(LoweredGraph lowered, List<Pool> pools, List<Step> steps, Map<String, Placement> placements, List<Kernel> kernels,
         List<Partition> partitions, String order, long plainPeak, long chosenPeak) {
        this.lowered = lowered;
        this.pools = List.copyOf(pools);
        this.steps = List.copyOf(steps);
        this.placements = Collections.unmodifiableMap(new LinkedHashMap<>(placements));
        this.kernels = List.copyOf(kernels);
        this.partitions = List.copyOf(partitions);
        this.order = order;
        this.plainPeak = plainPeak;
        this.chosenPeak = chosenPeak;
        var digest = new Fingerprint.Digest();
        canonical(digest);
        this.fingerprint = digest.hex();
    }

    public String name() { return lowered.graph().name(); }
    public int worldSize() { return lowered.worldSize(); }
    public LoweredGraph lowered() { return lowered; }
    public List<Pool> pools() { return pools; }
    public List<Step> steps() { return steps; }
    public List<Kernel> kernels() { return kernels; }
    public List<Partition> partitions() { return partitions; }

    /** Placement of a storage buffer; null for graph inputs that are not path-2 (they live in the caller's memory). */
    public Placement placement(String buffer) { return placements.get(buffer); }

    public Map<String, Placement> placements() { return placements; }

    public Buffer buffer(String name) { return lowered.buffer(name); }

    /** Output name to the buffer holding it. */
    public Map<String, String> outputs() {
        var m = new LinkedHashMap<String, String>();
        lowered.outputs().forEach((k, v) -> m.put(k, v.name()));
        return m;
    }

    public Pool pool(String name) {
        for (Pool p : pools) if (p.name().equals(name)) return p;
        throw new IllegalArgumentException("plan '" + name() + "' has no pool " + name);
    }

    /** The order heuristic chosen, and the estimated peaks of it and of the plain order. */
    public String orderChoice() { return order + " (estimated peak " + ByteSize.format(chosenPeak) + ", plain order " + ByteSize.format(plainPeak) + ")"; }

    public long estimatedPeak() { return chosenPeak; }
    public long plainOrderPeak() { return plainPeak; }

    /** SHA-256 of the plan's canonical text, in hex. */
    public String fingerprint() { return fingerprint; }

    /** Every kernel as pseudo-code. */
    public String kernelSources() {
        var sb = new StringBuilder();
        for (Kernel k : kernels) sb.append(k.source()).append("\n\n");
        return sb.toString().strip();
    }

    /** Why each collective took its path (from lowering). */
    public String explain() { return lowered.explain(); }

    /**
     * Everything that decides what the plan computes: world, groups, constants, steps and kernels. Written
     * straight into the digest: the text is the same as "header + body + '\n' + kernelSources()" but never
     * held as one string.
     */
    private void canonical(Fingerprint.Digest out) {
        out.append("world=").append(String.valueOf(lowered.worldSize())).append("\n");
        lowered.graph().groups().values().forEach(g -> out.append("group ").append(String.valueOf(g)).append("\n"));
        for (Buffer b : lowered.buffers())
            if (b instanceof dev.gatun.ir.lower.ConstantBuffer c) out.append(b.name()).append(" = ").append(java.util.Arrays.toString(c.values())).append("\n");
        body(out);
        out.append("\n");
        // kernelSources() is the sources joined by blank lines, stripped: the trailing separator is dropped, and
        // the leading and trailing white space of the whole (only possible inside the first or last source)
        var strip = new Fingerprint.Stripping(out);
        for (Kernel k : kernels) strip.append(k.source()).append("\n\n");
        strip.finish();
    }

    private String body() {
        var sb = new StringBuilder();
        body(new Fingerprint.Text(sb));
        return sb.toString();
    }

    private void body(Fingerprint.Sink sb) {
        for (Pool p : pools) {
            sb.append("  ").append(pad(p.declaration(), 72)).append("# max-live ").append(ByteSize.format(p.maxLive()));
            if (p.kind() != Pool.Kind.COMM && p.kind() != Pool.Kind.SYMM_INPUTS) sb.append(", ").append(p.kind().name().toLowerCase());
            sb.append("\n");
        }
        // partitions are disjoint and in step order: walk them alongside the steps
        int begins = 0, ends = 0;
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            while (begins < partitions.size() && partitions.get(begins).first() < i) begins++;
            while (ends < partitions.size() && partitions.get(ends).last() < i) ends++;
            if (s instanceof Step.AllocPool) continue;
            for (int p = begins; p < partitions.size() && partitions.get(p).first() == i; p++)
                sb.append("  # --- capture partition ").append(String.valueOf(partitions.get(p).index())).append(" begins\n");
            sb.append("  ").append(s.format()).append("\n");
            for (int p = ends; p < partitions.size() && partitions.get(p).last() == i; p++)
                sb.append("  # --- capture partition ").append(String.valueOf(partitions.get(p).index())).append(" ends\n");
        }
        sb.append("  return ").append(String.join(", ", outputs().entrySet().stream().map(e -> e.getKey() + "=" + e.getValue()).toList()));
    }

    private static String pad(String s, int w) { return s.length() >= w ? s + "   " : s + " ".repeat(w - s.length()); }

    @Override public String toString() {
        String t = text;
        if (t == null) text = t = body();
        return "plan \"" + name() + "\"  world=" + worldSize() + "  fingerprint=" + fingerprint.substring(0, 16) + "\n" + t;
    }
}
