package dev.gatun.models.text;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The added tokens of a {@code tokenizer.json} ({@code added_tokens}): tokens such as {@code <|im_start|>} or
 * {@code <s>} that are found in the text as they stand, before the model sees it, and encode as one id each. As in
 * the library, a token with {@code normalized: false} (every special token of the common models) is found in the
 * raw text, before normalization; one with {@code normalized: true} is found, in its normalized form, in the
 * normalized text. Where several match, the leftmost and then the longest wins. {@code lstrip}/{@code rstrip} take
 * the white space beside a match into it, and {@code single_word} skips a match inside a word.
 */
final class AddedVocabulary {

    /** One added token of {@code tokenizer.json}. */
    record AddedToken(int id, String content, boolean special, boolean normalized, boolean lstrip, boolean rstrip, boolean singleWord) {}

    /** A piece of text, or an added token found in it ({@code id} >= 0). */
    record Segment(String text, int id, boolean atStart) {
        boolean isToken() { return id >= 0; }
    }

    private final Map<Integer, AddedToken> byId = new LinkedHashMap<>();
    private final Map<String, AddedToken> byContent = new HashMap<>();
    private final Trie raw = new Trie(), normalized = new Trie();

    AddedVocabulary(List<AddedToken> tokens, Normalizer normalizer) {
        for (AddedToken t : tokens) {
            byId.put(t.id(), t);
            byContent.put(t.content(), t);
            if (t.normalized()) normalized.add(normalizer == null ? t.content() : normalizer.apply(t.content()), t);
            else raw.add(t.content(), t);
        }
    }

    static AddedVocabulary of(JsonNode root, Normalizer normalizer) {
        List<AddedToken> tokens = new ArrayList<>();
        if (root.get("added_tokens") != null) {
            for (JsonNode t : root.children("added_tokens")) {
                String content = t.string("content");
                if (content.isEmpty()) throw t.error("field 'content' is empty: an added token needs text");
                int id = t.integer("id", -1);
                if (id < 0) throw t.error("field 'id' is missing");
                tokens.add(new AddedToken(id, content,
                        t.bool("special", false), t.bool("normalized", !t.bool("special", false)),
                        t.bool("lstrip", false), t.bool("rstrip", false), t.bool("single_word", false)));
            }
        }
        return new AddedVocabulary(tokens, normalizer);
    }

    AddedToken byId(int id) { return byId.get(id); }

    AddedToken byContent(String content) { return byContent.get(content); }

    Iterable<AddedToken> all() { return byId.values(); }

    /** Splits raw text at the added tokens that are matched before normalization. */
    void splitRaw(String text, List<Segment> out) { split(text, true, raw, out); }

    /** Splits one normalized piece at the added tokens that are matched after normalization. */
    void splitNormalized(String text, boolean atStart, List<Segment> out) { split(text, atStart, normalized, out); }

    /** The library's {@code find_matches}: non-overlapping leftmost-longest matches, adjusted by each token's flags. */
    private static void split(String s, boolean atStart, Trie trie, List<Segment> out) {
        if (s.isEmpty()) return;
        if (trie.isEmpty()) {
            out.add(new Segment(s, -1, atStart));
            return;
        }
        int startOffset = 0;
        for (int i = 0; i < s.length(); ) {
            long m = trie.longestAt(s, i);
            if (m < 0) {
                i++;
                continue;
            }
            int stop = (int) (m >>> 32);
            AddedToken t = trie.token((int) m);
            int start = i;
            i = stop;
            if (t.singleWord() && !isSingleWord(s, start, stop)) continue;
            if (t.lstrip()) start = Math.max(whiteSpaceBefore(s, start), startOffset);
            if (t.rstrip()) stop = whiteSpaceAfter(s, stop);
            if (startOffset < start) out.add(new Segment(s.substring(startOffset, start), -1, atStart && startOffset == 0));
            out.add(new Segment(s.substring(start, stop), t.id(), atStart && start == 0));
            startOffset = stop;
            i = Math.max(i, stop);
        }
        if (startOffset < s.length()) out.add(new Segment(s.substring(startOffset), -1, atStart && startOffset == 0));
    }

    private static boolean isSingleWord(String s, int start, int stop) {
        boolean before = start == 0 || !UnicodeChars.isWordChar(s.codePointBefore(start));
        boolean after = stop == s.length() || !UnicodeChars.isWordChar(s.codePointAt(stop));
        return before && after;
    }

    private static int whiteSpaceBefore(String s, int i) {
        while (i > 0 && UnicodeChars.isWhiteSpace(s.codePointBefore(i))) i -= Character.charCount(s.codePointBefore(i));
        return i;
    }

    private static int whiteSpaceAfter(String s, int i) {
        while (i < s.length() && UnicodeChars.isWhiteSpace(s.codePointAt(i))) i += Character.charCount(s.codePointAt(i));
        return i;
    }

    /** A character trie of the tokens' texts. */
    private static final class Trie {
        private final Node root = new Node();
        private final List<AddedToken> tokens = new ArrayList<>();

        private static final class Node {
            final Map<Character, Node> next = new HashMap<>();
            int token = -1;
        }

        boolean isEmpty() { return tokens.isEmpty(); }

        void add(String text, AddedToken t) {
            if (text.isEmpty()) return;
            Node n = root;
            for (int i = 0; i < text.length(); i++) n = n.next.computeIfAbsent(text.charAt(i), c -> new Node());
            if (n.token < 0) {   // two tokens of one text: the first listed is kept
                n.token = tokens.size();
                tokens.add(t);
            }
        }

        AddedToken token(int index) { return tokens.get(index); }

        /** The longest token starting at {@code i}: its end in the high half and its index in the low, or -1. */
        long longestAt(String s, int i) {
            Node n = root.next.get(s.charAt(i));
            long best = -1;
            int j = i + 1;
            while (n != null) {
                if (n.token >= 0) best = (long) j << 32 | n.token;
                if (j >= s.length()) break;
                n = n.next.get(s.charAt(j++));
            }
            return best;
        }
    }
}
