package dev.gatun.runtime.spi;

import java.util.Arrays;
import java.util.function.IntPredicate;

/**
 * A profiled call's step times from the marks a backend took: one before each timed step and one after the last, a
 * step's time running from its mark to the next one (see {@link dev.gatun.runtime.Profile}).
 */
public final class StepTimes {
    private StepTimes() {}

    /** Microseconds from the mark before step {@code step} to the next mark ({@code next == steps}: the one after the last). */
    public interface Span {
        double micros(int step, int next);
    }

    /** Each of {@code steps} steps' time: the span to the next marked step (or the end), NaN where unmarked. */
    public static double[] between(int steps, IntPredicate marked, Span span) {
        var out = new double[steps];
        Arrays.fill(out, Double.NaN);
        for (int i = 0; i < steps; i++) {
            if (!marked.test(i)) continue;
            int j = i + 1;
            while (j < steps && !marked.test(j)) j++;
            out[i] = span.micros(i, j);
        }
        return out;
    }
}
