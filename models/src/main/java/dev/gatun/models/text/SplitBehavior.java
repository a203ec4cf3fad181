package dev.gatun.models.text;

import java.util.List;
import java.util.function.IntPredicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What a split does with the delimiters it finds, as the {@code tokenizers} library's
 * {@code SplitDelimiterBehavior} does: with delimiter "-" in "the-final--countdown", {@code REMOVED} gives
 * "the", "final", "countdown"; {@code ISOLATED} "the", "-", "final", "-", "-", "countdown"; {@code MERGED_WITH_PREVIOUS}
 * "the-", "final-", "-", "countdown"; {@code MERGED_WITH_NEXT} "the", "-final", "-", "-countdown"; {@code CONTIGUOUS}
 * "the", "-", "final", "--", "countdown". Empty pieces are dropped.
 */
enum SplitBehavior {
    REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS;

    static SplitBehavior of(JsonNode node) {
        String name = node.string("behavior");
        return switch (name) {
            case "Removed" -> REMOVED;
            case "Isolated" -> ISOLATED;
            case "MergedWithPrevious" -> MERGED_WITH_PREVIOUS;
            case "MergedWithNext" -> MERGED_WITH_NEXT;
            case "Contiguous" -> CONTIGUOUS;
            default -> throw node.error("field 'behavior' is '" + name + "'; supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
        };
    }

    /** Splits a piece at the matches of a regex (at what does not match when {@code invert}). */
    void split(Piece piece, Pattern pattern, boolean invert, List<Piece> out) {
        String s = piece.text();
        IntList regions = new IntList();
        Matcher m = pattern.matcher(s);
        int prev = 0;
        while (m.find()) {
            if (m.start() != prev) addRegion(regions, prev, m.start(), invert);
            addRegion(regions, m.start(), m.end(), !invert);
            prev = m.end();
        }
        if (prev != s.length()) addRegion(regions, prev, s.length(), invert);
        apply(piece, regions, out);
    }

    /** Splits a piece at each character that passes the test (each such character a match of its own). */
    void split(Piece piece, IntPredicate delimiter, List<Piece> out) {
        String s = piece.text();
        IntList regions = new IntList();
        int last = 0;
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            int next = i + Character.charCount(cp);
            if (delimiter.test(cp)) {
                if (last < i) addRegion(regions, last, i, false);
                addRegion(regions, i, next, true);
                last = next;
            }
            i = next;
        }
        if (last < s.length()) addRegion(regions, last, s.length(), false);
        apply(piece, regions, out);
    }

    private static void addRegion(IntList regions, int start, int end, boolean match) {
        regions.add(start);
        regions.add(end);
        regions.add(match ? 1 : 0);
    }

    /** Turns the regions (start, end, is-a-match) into pieces as the behavior says. */
    private void apply(Piece piece, IntList r, List<Piece> out) {
        int n = r.size() / 3;
        IntList keep = new IntList();   // start, end pairs
        boolean previousMatch = false;
        if (this == MERGED_WITH_NEXT) {
            // walks backwards: a delimiter joins the piece after it
            IntList rev = new IntList();
            for (int k = n - 1; k >= 0; k--) {
                int start = r.get(3 * k), end = r.get(3 * k + 1);
                boolean match = r.get(3 * k + 2) == 1;
                if (match && !previousMatch && rev.size() > 0) rev.set(rev.size() - 2, start);
                else { rev.add(start); rev.add(end); }
                previousMatch = match;
            }
            for (int k = rev.size() - 2; k >= 0; k -= 2) { keep.add(rev.get(k)); keep.add(rev.get(k + 1)); }
        } else {
            for (int k = 0; k < n; k++) {
                int start = r.get(3 * k), end = r.get(3 * k + 1);
                boolean match = r.get(3 * k + 2) == 1;
                boolean joins = switch (this) {
                    case REMOVED, ISOLATED -> false;
                    case CONTIGUOUS -> match == previousMatch;
                    case MERGED_WITH_PREVIOUS -> match && !previousMatch;
                    case MERGED_WITH_NEXT -> throw new AssertionError();
                };
                if (this == REMOVED && match) { previousMatch = match; continue; }
                if (joins && keep.size() > 0) keep.set(keep.size() - 1, end);
                else { keep.add(start); keep.add(end); }
                previousMatch = match;
            }
        }
        String s = piece.text();
        for (int k = 0; k < keep.size(); k += 2) {
            int start = keep.get(k), end = keep.get(k + 1);
            if (end > start) out.add(new Piece(s.substring(start, end), piece.atStart() && start == 0));
        }
    }
}
