package dev.gatun.models.text;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * A {@code tokenizer.json} pre-tokenizer: splits a normalized piece of text into the pieces the model encodes one by
 * one (BPE merges never cross a piece boundary), and may rewrite them (the byte-level step writes each piece's
 * UTF-8 bytes in GPT-2's byte alphabet; Metaspace writes spaces as {@code ▁}). The kinds and their semantics are the
 * Rust {@code tokenizers} library's.
 */
sealed interface PreTokenizer {

    String SUPPORTED = "ByteLevel, Split, Metaspace, Sequence, Digits, Whitespace, WhitespaceSplit, Punctuation";

    /** GPT-2's split: contractions, letters, digits, other symbols, each with one leading space, and runs of space. */
    Pattern GPT2_REGEX = Pattern.compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
            Pattern.UNICODE_CHARACTER_CLASS);

    /** Splits (and rewrites) one piece, adding the results to {@code out}. */
    void apply(Piece piece, List<Piece> out);

    /**
     * Byte-level: a space before a piece that lacks one ({@code add_prefix_space}), GPT-2's split
     * ({@code use_regex}), then each piece in the byte alphabet.
     */
    record ByteLevel(boolean addPrefixSpace, boolean useRegex) implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) {
            if (addPrefixSpace && !piece.text().startsWith(" ")) piece = new Piece(" " + piece.text(), piece.atStart());
            List<Piece> parts;
            if (useRegex) {
                parts = new ArrayList<>();
                SplitBehavior.ISOLATED.split(piece, GPT2_REGEX, false, parts);
            } else {
                parts = List.of(piece);
            }
            for (Piece p : parts) out.add(new Piece(ByteLevelAlphabet.encode(p.text()), p.atStart()));
        }
    }

    /** A split at a pattern's matches (or between them, {@code invert}), the matches kept as {@code behavior} says. */
    record Split(Pattern pattern, SplitBehavior behavior, boolean invert) implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) { behavior.split(piece, pattern, invert, out); }
    }

    /** SentencePiece's word boundary: spaces become {@code replacement}, one put in front as the scheme says. */
    enum PrependScheme { ALWAYS, FIRST, NEVER }

    record Metaspace(int replacement, PrependScheme scheme, boolean split) implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) {
            String rep = Character.toString(replacement);
            String s = piece.text().replace(" ", rep);
            boolean prepend = switch (scheme) {
                case ALWAYS -> true;
                case FIRST -> piece.atStart();
                case NEVER -> false;
            };
            if (prepend && !s.startsWith(rep)) s = rep + s;
            Piece p = new Piece(s, piece.atStart());
            if (split) SplitBehavior.MERGED_WITH_NEXT.split(p, cp -> cp == replacement, out);
            else out.add(p);
        }
    }

    record Sequence(List<PreTokenizer> steps) implements PreTokenizer {
        public Sequence { steps = List.copyOf(steps); }

        @Override public void apply(Piece piece, List<Piece> out) {
            List<Piece> current = List.of(piece);
            for (PreTokenizer step : steps) {
                List<Piece> next = new ArrayList<>();
                for (Piece p : current) step.apply(p, next);
                current = next;
            }
            out.addAll(current);
        }
    }

    /** Digits apart from the rest: each on its own ({@code individual_digits}) or as runs. */
    record Digits(boolean individual) implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) {
            (individual ? SplitBehavior.ISOLATED : SplitBehavior.CONTIGUOUS).split(piece, UnicodeChars::isNumeric, out);
        }
    }

    /** Runs of word characters and runs of other non-space characters; spaces dropped. */
    record Whitespace() implements PreTokenizer {
        static final Pattern WORDS = Pattern.compile("\\w+|[^\\w\\s]+", Pattern.UNICODE_CHARACTER_CLASS);

        @Override public void apply(Piece piece, List<Piece> out) { SplitBehavior.REMOVED.split(piece, WORDS, true, out); }
    }

    /** A split at White_Space characters, which are dropped. */
    record WhitespaceSplit() implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) { SplitBehavior.REMOVED.split(piece, UnicodeChars::isWhiteSpace, out); }
    }

    /** Punctuation characters apart from the rest, kept as {@code behavior} says. */
    record Punctuation(SplitBehavior behavior) implements PreTokenizer {
        @Override public void apply(Piece piece, List<Piece> out) { behavior.split(piece, UnicodeChars::isPunctuation, out); }
    }

    /** The pre-tokenizer a {@code tokenizer.json} object describes; an unknown kind is refused by name. */
    static PreTokenizer of(JsonNode node) {
        return switch (node.type()) {
            case "ByteLevel" -> new ByteLevel(node.bool("add_prefix_space", true), node.bool("use_regex", true));
            case "Split" -> new Split(node.pattern("pattern"), SplitBehavior.of(node), node.bool("invert", false));
            case "Metaspace" -> metaspace(node);
            case "Sequence" -> new Sequence(node.children("pretokenizers").stream().map(PreTokenizer::of).toList());
            case "Digits" -> new Digits(node.bool("individual_digits", false));
            case "Whitespace" -> new Whitespace();
            case "WhitespaceSplit" -> new WhitespaceSplit();
            case "Punctuation" -> new Punctuation(node.get("behavior") == null ? SplitBehavior.ISOLATED : SplitBehavior.of(node));
            default -> throw node.unsupportedType("pre_tokenizer", SUPPORTED);
        };
    }

    /** Metaspace's fields, with the older {@code add_prefix_space} read as the library reads it. */
    static Metaspace metaspace(JsonNode node) {
        String rep = node.string("replacement");
        if (rep.codePointCount(0, rep.length()) != 1) throw node.error("field 'replacement' is \"" + rep + "\", not one character");
        String scheme = node.optString("prepend_scheme");
        PrependScheme s = switch (scheme == null ? "always" : scheme) {
            case "always" -> PrependScheme.ALWAYS;
            case "first" -> PrependScheme.FIRST;
            case "never" -> PrependScheme.NEVER;
            default -> throw node.error("field 'prepend_scheme' is '" + scheme + "'; supported: always, first, never");
        };
        if (!node.bool("add_prefix_space", true)) {
            if (s != PrependScheme.NEVER && scheme != null) throw node.error("fields 'add_prefix_space' (false) and 'prepend_scheme' ('" + scheme + "') disagree");
            s = PrependScheme.NEVER;
        }
        return new Metaspace(rep.codePointAt(0), s, node.bool("split", true));
    }
}
