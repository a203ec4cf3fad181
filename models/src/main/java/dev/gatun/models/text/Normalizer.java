package dev.gatun.models.text;

import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code tokenizer.json} normalizer: rewrites each piece of input text (the text between added tokens) before it
 * is pre-tokenized. The kinds are those of the Rust {@code tokenizers} library, with its semantics: {@code Prepend}
 * leaves an empty piece empty, {@code Lowercase} maps character by character (no final-sigma rule), {@code Strip}
 * strips Unicode White_Space.
 */
sealed interface Normalizer {

    String SUPPORTED = "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence";

    String apply(String text);

    /** Unicode normalization form NFC, NFD, NFKC or NFKD. */
    record UnicodeForm(java.text.Normalizer.Form form) implements Normalizer {
        @Override public String apply(String text) { return java.text.Normalizer.normalize(text, form); }
    }

    record Lowercase() implements Normalizer {
        @Override public String apply(String text) {
            StringBuilder out = new StringBuilder(text.length());
            text.codePoints().forEach(cp -> {
                if (cp == 0x130) out.append("i\u0307");   // the one character whose lowercase is two
                else out.appendCodePoint(Character.toLowerCase(cp));
            });
            return out.toString();
        }
    }

    record Prepend(String prefix) implements Normalizer {
        @Override public String apply(String text) { return text.isEmpty() ? text : prefix + text; }
    }

    record Replace(Pattern pattern, String content) implements Normalizer {
        @Override public String apply(String text) { return replaceAll(pattern, text, content); }
    }

    record Strip(boolean left, boolean right) implements Normalizer {
        @Override public String apply(String text) {
            int start = 0, end = text.length();
            while (left && start < end && UnicodeChars.isWhiteSpace(text.codePointAt(start))) start += Character.charCount(text.codePointAt(start));
            while (right && end > start && UnicodeChars.isWhiteSpace(text.codePointBefore(end))) end -= Character.charCount(text.codePointBefore(end));
            return text.substring(start, end);
        }
    }

    record Sequence(List<Normalizer> steps) implements Normalizer {
        public Sequence { steps = List.copyOf(steps); }

        @Override public String apply(String text) {
            for (Normalizer n : steps) text = n.apply(text);
            return text;
        }
    }

    /** Every match of the pattern replaced by the content (a literal pattern without the regex machinery). */
    static String replaceAll(Pattern pattern, String text, String content) {
        if ((pattern.flags() & Pattern.LITERAL) != 0) return text.replace(pattern.pattern(), content);
        return pattern.matcher(text).replaceAll(Matcher.quoteReplacement(content));
    }

    /** The normalizer a {@code tokenizer.json} object describes; an unknown kind is refused by name. */
    static Normalizer of(JsonNode node) {
        return switch (node.type()) {
            case "NFC" -> new UnicodeForm(java.text.Normalizer.Form.NFC);
            case "NFD" -> new UnicodeForm(java.text.Normalizer.Form.NFD);
            case "NFKC" -> new UnicodeForm(java.text.Normalizer.Form.NFKC);
            case "NFKD" -> new UnicodeForm(java.text.Normalizer.Form.NFKD);
            case "Lowercase" -> new Lowercase();
            case "Prepend" -> new Prepend(node.string("prepend"));
            case "Replace" -> new Replace(node.pattern("pattern"), node.string("content"));
            case "Strip" -> new Strip(node.bool("strip_left", true), node.bool("strip_right", true));
            case "Sequence" -> new Sequence(node.children("normalizers").stream().map(Normalizer::of).toList());
            default -> throw node.unsupportedType("normalizer", SUPPORTED);
        };
    }
}
