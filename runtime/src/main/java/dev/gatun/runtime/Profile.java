package dev.gatun.runtime;

import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * How long each step of a plan took in one call ({@link Session#profile}): the plan's own steps, as it prints them, each
 * with the time its device spent on it. On a GPU each captured partition is captured once more with an event before
 * every step and replayed, so the device runs the steps back to back as in any call and a step's time is the device's,
 * not the host's launch gap (steps outside partitions, and every step of a distributed plan, run one by one and include
 * it); on the host backend it is wall time. Steps that only keep the plan's books (pools, placements, releases) have no
 * time.
 *
 * <pre>{@code
 * System.out.println(session.profile(inputs).top(10));   // the ten slowest steps, with their share of the call
 * }</pre>
 *
 * @param plan    the plan that ran
 * @param device  where the timed rank ran ("cuda:0", "host")
 * @param micros  per step of {@link Plan#steps()}: microseconds, NaN for a bookkeeping step
 */
public record Profile(Plan plan, String device, double[] micros) {
    public Profile {
        if (micros.length != plan.steps().size())
            throw new GatunRuntimeException("Profile: a profile of plan '" + plan.name() + "' needs " + plan.steps().size() + " step times, not " + micros.length);
        micros = micros.clone();
    }

    /** Microseconds per step of {@link Plan#steps()} (NaN for a bookkeeping step): a copy. */
    @Override public double[] micros() { return micros.clone(); }

    /**
     * One timed step: its index in the plan, its printed form, its time, and the bytes of the buffers it reads and
     * writes ({@link #bytes}; NaN where a size is symbolic).
     */
    public record Entry(int step, String text, double micros, double bytes) {
        /** The bytes moved over the time: GB/s (NaN where the bytes are unknown). */
        public double gigabytesPerSecond() { return bytes / (micros * 1e3); }
    }

    /** Every step that did work, in plan order. */
    public List<Entry> entries() {
        var out = new ArrayList<Entry>();
        for (int i = 0; i < micros.length; i++)
            if (!Double.isNaN(micros[i])) out.add(new Entry(i, plan.steps().get(i).format(), micros[i], bytes(i)));
        return out;
    }

    /**
     * The bytes of the buffers step {@code step} reads and writes, each buffer once: what a step that streams its
     * operands moves, and an upper bound for one that reads part of a buffer (attention reads a cache up to its
     * position). NaN where a buffer's size is symbolic, or for a bookkeeping step.
     */
    public double bytes(int step) {
        Step s = plan.steps().get(step);
        if (!timed(s)) return Double.NaN;
        var seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<dev.gatun.planner.PlanBuffer, Boolean>());
        double total = 0;
        for (var list : List.of(s.reads(), s.writes()))
            for (var b : list) {
                if (!seen.add(b)) continue;
                if (!b.type().shape().isStatic()) return Double.NaN;
                total += b.type().byteSize();
            }
        return total;
    }

    /** The sum over the timed steps, in microseconds. */
    public double totalMicros() {
        double t = 0;
        for (double m : micros) if (!Double.isNaN(m)) t += m;
        return t;
    }

    /** Time by kind of step (launch, matmul, collective, ...), largest first. */
    public Map<String, Double> byKind() {
        var sums = new LinkedHashMap<String, Double>();
        for (int i = 0; i < micros.length; i++)
            if (!Double.isNaN(micros[i])) sums.merge(plan.steps().get(i).kind(), micros[i], Double::sum);
        var out = new LinkedHashMap<String, Double>();
        sums.entrySet().stream().sorted(Map.Entry.<String, Double>comparingByValue().reversed()).forEach(e -> out.put(e.getKey(), e.getValue()));
        return out;
    }

    /**
     * The {@code n} slowest steps as a table (step, µs, share of the call, GB/s moved, the step as printed), after the
     * totals by kind.
     */
    public String top(int n) { return top(n, Double.NaN); }

    /**
     * {@link #top(int)} with each step's GB/s as a fraction of {@code peakGBs}, the device's memory bandwidth (4,800 for
     * an H200): how far each launch is from the roofline of a step that only streams memory.
     */
    public String top(int n, double peakGBs) {
        double total = totalMicros();
        var sb = new StringBuilder(String.format(Locale.ROOT, "profile of plan '%s' on %s: %.1f µs in %d steps%n", plan.name(), device, total, entries().size()));
        byKind().forEach((k, v) -> sb.append(String.format(Locale.ROOT, "  %-12s %10.1f µs  %5.1f%%%n", k, v, 100 * v / total)));
        entries().stream().sorted(Comparator.comparingDouble(Entry::micros).reversed()).limit(n).forEach(e -> {
            String text = e.text().lines().findFirst().orElse("");
            if (text.length() > 110) text = text.substring(0, 107) + "...";
            double gbs = e.gigabytesPerSecond();
            String rate = Double.isNaN(gbs) ? "        -" : String.format(Locale.ROOT, "%9.0f", gbs);
            String roof = Double.isNaN(peakGBs) || Double.isNaN(gbs) ? "" : String.format(Locale.ROOT, " %4.0f%%", 100 * gbs / peakGBs);
            sb.append(String.format(Locale.ROOT, "  #%-5d %9.1f µs %5.1f%% %s GB/s%s  %s%n", e.step(), e.micros(), 100 * e.micros() / total, rate, roof, text));
        });
        return sb.toString().stripTrailing();
    }

    /** Every timed step, in plan order. */
    @Override public String toString() { return top(Integer.MAX_VALUE); }

    /** Whether a step does work on the device (anything but the plan's bookkeeping). */
    public static boolean timed(Step s) {
        return !(s instanceof Step.AllocPool || s instanceof Step.Place || s instanceof Step.Release);
    }
}
