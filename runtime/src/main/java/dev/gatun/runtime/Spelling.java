package dev.gatun.runtime;

import java.util.Collection;
import java.util.Locale;

/**
 * "Did you mean" for names a user typed: the declared name closest to a misspelled one by edit distance, so an
 * error can point at {@code x} when the call said {@code xx}.
 */
final class Spelling {
    private Spelling() {}

    /**
     * The candidate nearest to {@code typed} (Levenshtein distance, ignoring case), or null when none is near:
     * at most a third of the longer name's length, and at least one edit allowed.
     */
    static String closest(String typed, Collection<String> candidates) {
        String best = null;
        int bestDistance = Integer.MAX_VALUE;
        for (String c : candidates) {
            int d = distance(typed.toLowerCase(Locale.ROOT), c.toLowerCase(Locale.ROOT));
            if (d < bestDistance) {
                best = c;
                bestDistance = d;
            }
        }
        if (best == null) return null;
        int allowed = Math.max(1, Math.max(typed.length(), best.length()) / 3);
        return bestDistance <= allowed ? best : null;
    }

    /** Insertions, deletions and substitutions that turn {@code a} into {@code b}. */
    static int distance(String a, String b) {
        int[] prev = new int[b.length() + 1], cur = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) prev[j] = j;
        for (int i = 1; i <= a.length(); i++) {
            cur[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int substitute = prev[j - 1] + (a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1);
                cur[j] = Math.min(substitute, Math.min(prev[j], cur[j - 1]) + 1);
            }
            int[] t = prev;
            prev = cur;
            cur = t;
        }
        return prev[b.length()];
    }
}
