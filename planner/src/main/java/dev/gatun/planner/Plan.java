package dev.gatun.planner;

import dev.gatun.ir.CompilationException;

import dev.gatun.ir.ByteSize;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
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
    private final List<PlanBuffer> buffers;
    private final List<Pool> pools;
    private final List<Step> steps;
    private final List<Kernel> kernels;
    private final List<Partition> partitions;
    private final List<Slot> slots;
    private final List<PlanBuffer> inputs, states;
    private final Map<String, PlanBuffer> outputs;
    private final double[][] constants;
    private final PlanOptions options;
    /** The planner's decisions worth a line of their own ({@link #notes()}). */
    private final List<String> notes;
    private final String order;
    private final long plainPeak, chosenPeak;
    private volatile String fingerprint;   // made on first use: hashing the canonical text is a sixth of planning a large graph
    private final Launches launches;
    /** Each step's and part's launch choices ({@link LaunchChoices}), by identity; plain launches are absent. */
    private final Map<Step, LaunchChoice> choices;
    private volatile Map<String, PlanBuffer> byName;
    private volatile String text;          // the printout, made on first use: at a million nodes it is ~100 MB

    /** Whether a plan's own kernels are programmatic dependent launches, and why ({@link #launches()}). */
    public record Launches(boolean programmatic, String why) {
        /** One line for the plan: "launches: programmatic (one rank, ...)", or nothing where they are plain. */
        String describe() { return programmatic ? "launches: programmatic (" + why + ")" : ""; }
    }

    /** Steps {@code [first, last]} (indices into {@link #steps()}) that a CUDA graph can capture and replay. */
    public record Partition(int index, int first, int last) {}

    /**
     * The planner's history of one pool slot (one per {@link Step.Place}), in indices into {@link #steps()}: the
     * buffer holds bytes {@code [offset, offset + bytes)} of {@code pool} from step {@code first} (its writer; for a
     * path-2 input its copy, for a constant the start; for a receive buffer peers write, the step after its group's last
     * barrier before the writing collective) to step {@code last}. {@code localLast} is its last use on
     * this rank; {@code crossRankLast}, for a slot peers read, the step whose barrier tells that every rank has
     * finished reading it (-1: no peer reads it). {@code reuses} names the earlier occupant of the slot.
     */
    public record Slot(PlanBuffer buffer, String pool, long offset, long bytes, int first, int last, int localLast, int crossRankLast,
                       String reuses, boolean inPlace) {}

    Plan(LoweredGraph lowered, List<PlanBuffer> buffers, List<Pool> pools, List<Step> steps, List<Kernel> kernels,
         List<Partition> partitions, List<Slot> slots, String order, long plainPeak, long chosenPeak, PlanOptions options) {
        this(lowered, buffers, pools, steps, kernels, partitions, slots, order, plainPeak, chosenPeak, options, List.of());
    }

    Plan(LoweredGraph lowered, List<PlanBuffer> buffers, List<Pool> pools, List<Step> steps, List<Kernel> kernels,
         List<Partition> partitions, List<Slot> slots, String order, long plainPeak, long chosenPeak, PlanOptions options, List<String> notes) {
        this.notes = List.copyOf(notes);
        this.lowered = lowered;
        this.buffers = List.copyOf(buffers);
        this.pools = List.copyOf(pools);
        this.steps = List.copyOf(steps);
        this.kernels = List.copyOf(kernels);
        this.partitions = List.copyOf(partitions);
        this.slots = List.copyOf(slots);
        this.options = options;
        this.order = order;
        this.plainPeak = plainPeak;
        this.chosenPeak = chosenPeak;
        var lb = lowered.buffers();
        this.constants = new double[buffers.size()][];
        for (int i = 0; i < lb.size(); i++) if (lb.get(i) instanceof ConstantBuffer c) constants[i] = c.values();
        var ins = new ArrayList<PlanBuffer>();
        var sts = new ArrayList<PlanBuffer>();
        // a lowered buffer's plan buffer is the one of its id (the table follows the lowered order)
        lowered.inputs().values().forEach(in -> (in.isState() ? sts : ins).add(this.buffers.get(in.id())));
        this.inputs = List.copyOf(ins);
        this.states = List.copyOf(sts);
        var outs = new LinkedHashMap<String, PlanBuffer>();
        lowered.outputs().forEach((k, v) -> outs.put(k, this.buffers.get(v.id())));
        this.outputs = Collections.unmodifiableMap(outs);
        this.launches = ProductKernels.launches(this.steps, lowered.worldSize(), options.programmaticLaunch(), options.target());
        this.choices = LaunchChoices.of(this.steps, launches, options);
    }

    public String name() { return lowered.graph().name(); }

    /**
     * The planner's decisions printed under the pools (after the graph's own notes): which states' new values are written
     * straight into their slots and which keep their snapshot and update_slice, and why ({@code StateWrites}); which
     * adjacent all_to_alls stayed apart, and why ({@code CollectivePasses}).
     */
    public List<String> notes() { return notes; }

    /**
     * Whether this plan's own kernels are programmatic dependent launches, and why ({@code ProductKernels}): printed
     * under the pools where they are, and a backend that has such launches uses them exactly then.
     */
    public Launches launches() { return launches; }
    public int worldSize() { return lowered.worldSize(); }

    /**
     * How step {@code s} (a step of this plan, or a part of one) is launched, as the planner decided it
     * ({@code LaunchChoices}, printed on the step's line): a backend with such launches makes exactly these.
     */
    public LaunchChoice choice(Step s) { return choices.getOrDefault(s, LaunchChoice.PLAIN); }

    /** The lowered graph this plan was made from: for tools and pictures; backends read the plan's own types only. */
    public LoweredGraph lowered() { return lowered; }

    /** The process groups of the graph, by name. */
    public Map<String, ProcessGroup> groups() { return lowered.graph().groups(); }

    /** The buffer table: {@code buffers().get(id)} is the buffer of that id. */
    public List<PlanBuffer> buffers() { return buffers; }
    public PlanBuffer buffer(int id) { return buffers.get(id); }

    /** A buffer by name, for tools and tests (backends address buffers by id). */
    public PlanBuffer buffer(String name) {
        var m = byName;
        if (m == null) {
            m = new java.util.HashMap<>(buffers.size() * 2);
            for (PlanBuffer b : buffers) m.putIfAbsent(b.name(), b);
            byName = m;
        }
        PlanBuffer b = m.get(name);
        if (b == null) throw new CompilationException("plan '" + name() + "' has no buffer named '" + name + "'");
        return b;
    }

    public List<Pool> pools() { return pools; }
    public List<Step> steps() { return steps; }
    public List<Kernel> kernels() { return kernels; }
    public List<Partition> partitions() { return partitions; }

    /** The slot history: each placed buffer's slot and when it holds it, as the planner decided. */
    public List<Slot> slots() { return slots; }
    public PlanOptions options() { return options; }

    /** The graph's inputs passed to a call (every input but the states), in the graph's order. */
    public List<PlanBuffer> inputs() { return inputs; }

    /** The graph's states ({@link PlanBuffer.Kind#STATE}), each placed in the state pool; never passed to a call. */
    public List<PlanBuffer> states() { return states; }

    /** The input passed to a call named {@code name}, or null when the graph has none of that name. */
    public PlanBuffer input(String name) { return named(inputs, name); }

    /** The state named {@code name}, or null when the graph has none of that name. */
    public PlanBuffer state(String name) { return named(states, name); }

    private static PlanBuffer named(List<PlanBuffer> buffers, String name) {
        for (PlanBuffer b : buffers) if (b.input().equals(name)) return b;
        return null;
    }

    /** Output name to the buffer holding it. */
    public Map<String, PlanBuffer> outputs() { return outputs; }

    /** The values of a constant buffer. */
    public double[] constant(PlanBuffer b) {
        double[] v = constants[b.id()];
        if (v == null) throw new CompilationException(b.name() + " is not a constant of plan '" + name() + "'");
        return v.clone();
    }

    /** The pool slot of a buffer's storage, by the buffer's name; null where it has none (see {@link PlanBuffer#placement()}). */
    public PlanBuffer.Placement placement(String buffer) { return buffer(buffer).placement(); }

    public Pool pool(String name) {
        for (Pool p : pools) if (p.name().equals(name)) return p;
        throw new CompilationException("plan '" + name() + "' has no pool " + name);
    }

    /**
     * What a pool holds at its fullest: the first step at which its live slots add up to their most ({@link Pool#maxLive()}
     * for the chosen order), and those slots, largest first. A slot is live from its {@link Slot#first()} step to its
     * {@link Slot#last()}, both included.
     */
    public record Peak(Pool pool, int step, long bytes, List<Slot> live) {
        /** The peak's step, then the {@code n} largest live slots: size, type, the step that writes it and the last that reads it. */
        public String describe(List<Step> steps, int n) {
            var sb = new StringBuilder(String.format(java.util.Locale.ROOT, "%s's peak: %s in %d slots at step #%d (%s)%n", pool.name(),
                    ByteSize.format(bytes), live.size(), step, firstLine(steps.get(step))));
            for (Slot s : live.subList(0, Math.min(n, live.size())))
                sb.append(String.format(java.util.Locale.ROOT, "    %-10s %12s %-22s from #%d (%s) to #%d%n", s.buffer().name(), ByteSize.format(s.bytes()),
                        s.buffer().type(), s.first(), firstLine(steps.get(s.first())), s.last()));
            if (live.size() > n) {
                long rest = live.subList(n, live.size()).stream().mapToLong(Slot::bytes).sum();
                sb.append(String.format(java.util.Locale.ROOT, "    and %d more, %s%n", live.size() - n, ByteSize.format(rest)));
            }
            return sb.toString();
        }

        private static String firstLine(Step s) {
            String f = s.format().strip();
            int nl = f.indexOf('\n');
            if (nl >= 0) f = f.substring(0, nl);
            return f.length() > 60 ? f.substring(0, 57) + "..." : f;
        }
    }

    /** The peak of pool {@code name} (see {@link Peak}); a pool with no slots peaks at step 0 with nothing live. */
    public Peak peak(String name) {
        Pool pool = pool(name);
        long[] delta = new long[steps.size() + 1];
        for (Slot s : slots)
            if (s.pool().equals(name)) {
                delta[s.first()] += s.bytes();
                delta[Math.min(s.last(), steps.size() - 1) + 1] -= s.bytes();
            }
        long live = 0, most = 0;
        int at = 0;
        for (int i = 0; i < steps.size(); i++) {
            live += delta[i];
            if (live > most) { most = live; at = i; }
        }
        int step = at;
        var liveSlots = slots.stream().filter(s -> s.pool().equals(name) && s.first() <= step && step <= s.last())
                .sorted(java.util.Comparator.comparingLong(Slot::bytes).reversed()).toList();
        return new Peak(pool, step, most, liveSlots);
    }

    /** The order heuristic chosen, and the estimated peaks of it and of the plain order. */
    public String orderChoice() { return order + " (estimated peak " + ByteSize.format(chosenPeak) + ", plain order " + ByteSize.format(plainPeak) + ")"; }

    public long estimatedPeak() { return chosenPeak; }
    public long plainOrderPeak() { return plainPeak; }

    /** SHA-256 of the plan's canonical text, in hex (made on the first call; a plan never changes). */
    public String fingerprint() {
        String f = fingerprint;
        if (f == null) {
            var digest = new Fingerprint.Digest();
            canonical(digest);
            fingerprint = f = digest.hex();
        }
        return f;
    }

    /** Every kernel as pseudo-code. */
    public String kernelSources() {
        var sb = new StringBuilder();
        for (Kernel k : kernels) sb.append(k.source()).append("\n\n");
        return sb.toString().strip();
    }

    /**
     * Why each collective took its path (from lowering), which all_to_alls the planner joined into one barrier pair and
     * which adjacent ones stayed apart, and why; each attention's cut and each row kernel's form ({@code LaunchChoices}).
     */
    public String explain() {
        var sb = new StringBuilder(lowered.explain());
        for (Step s : steps)
            if (s instanceof Step.JoinedAllToAll j)
                sb.append("\n  ").append(j.name()).append(": ").append(String.join(", ", j.members().stream().map(c -> c.output().name()).toList()))
                        .append(" joined: ").append(j.why());
        for (String note : notes) if (note.contains(" not joined with ")) sb.append("\n  ").append(note);
        for (int i = 0; i < steps.size(); i++)
            if (choice(steps.get(i)).attention() instanceof LaunchChoice.Attention a) sb.append("\n  attention at step ").append(i).append(": ").append(a.why());
        for (int i = 0; i < steps.size(); i++)
            if (choice(steps.get(i)).rows() instanceof LaunchChoice.Rows r) sb.append("\n  rows at step ").append(i).append(" (").append(steps.get(i).label()).append("): ").append(r.why());
        return sb.toString();
    }

    /**
     * Everything that decides what the plan computes: world, groups, constants, steps and kernels. Written
     * straight into the digest: the text is the same as "header + body + '\n' + kernelSources()" but never
     * held as one string.
     */
    private void canonical(Fingerprint.Digest out) {
        out.append("world=").append(String.valueOf(lowered.worldSize())).append("\n");
        lowered.graph().groups().values().forEach(g -> out.append("group ").append(String.valueOf(g)).append("\n"));
        for (PlanBuffer b : buffers)
            if (constants[b.id()] != null) out.append(b.name()).append(" = ").append(java.util.Arrays.toString(constants[b.id()])).append("\n");
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
        for (String note : lowered.graph().notes()) sb.append("  # ").append(note).append("\n");   // choices made in the graph (recomputation)
        for (String note : notes) sb.append("  # ").append(note).append("\n");   // the planner's (state writes)
        if (launches.programmatic()) sb.append("  # ").append(launches.describe()).append("\n");
        if (!options.gatherFusion()) sb.append("  # gather fusion: off (PlanOptions.withGatherFusion(false))\n");
        if (!choices.isEmpty() && !options.target().equals(PlanOptions.Target.H200)) sb.append("  # ").append(options.target().describe()).append("\n");
        // partitions are disjoint and in step order: walk them alongside the steps
        int begins = 0, ends = 0;
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            while (begins < partitions.size() && partitions.get(begins).first() < i) begins++;
            while (ends < partitions.size() && partitions.get(ends).last() < i) ends++;
            if (s instanceof Step.AllocPool) continue;
            for (int p = begins; p < partitions.size() && partitions.get(p).first() == i; p++)
                sb.append("  # --- capture partition ").append(String.valueOf(partitions.get(p).index())).append(" begins\n");
            sb.append("  ").append(withChoice(s.format(), choice(s))).append("\n");
            for (int p = ends; p < partitions.size() && partitions.get(p).last() == i; p++)
                sb.append("  # --- capture partition ").append(String.valueOf(partitions.get(p).index())).append(" ends\n");
        }
        sb.append("  return ").append(String.join(", ", outputs.entrySet().stream().map(e -> e.getKey() + "=" + e.getValue().name()).toList()));
    }

    /** A step's text with its launch choices at the end of its first line ("# launch: ..."), where it has any. */
    static String withChoice(String format, LaunchChoice c) {
        String d = c.describe();
        if (d.isEmpty()) return format;
        int nl = format.indexOf('\n');
        return nl < 0 ? format + "   # launch: " + d : format.substring(0, nl) + "   # launch: " + d + format.substring(nl);
    }

    private static String pad(String s, int w) { return s.length() >= w ? s + "   " : s + " ".repeat(w - s.length()); }

    @Override public String toString() {
        String t = text;
        if (t == null) text = t = body();
        return "plan \"" + name() + "\"  world=" + worldSize() + "  fingerprint=" + fingerprint().substring(0, 16) + "\n" + t;
    }
}
