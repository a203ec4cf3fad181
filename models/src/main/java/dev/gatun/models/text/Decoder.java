package dev.gatun.models.text;

import java.io.ByteArrayOutputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * A {@code tokenizer.json} decoder: turns the tokens of some ids back into text. Each step maps a list of token
 * strings to a new list (the library's {@code decode_chain}) and the last list is joined. The kinds and their
 * semantics, odd corners included, are the Rust {@code tokenizers} library's: the Metaspace decoder drops every
 * {@code ▁} of the first token (after a Fuse, of all the text), not just the first; invalid UTF-8 from ByteFallback
 * becomes one U+FFFD per byte, from ByteLevel one per ill-formed subpart.
 */
sealed interface Decoder {

    String SUPPORTED = "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, Sequence";

    List<String> decode(List<String> tokens);

    /** Byte-level: every token's characters read back as the bytes they stand for, the bytes read as UTF-8. */
    record ByteLevel() implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream();
            for (String t : tokens) ByteLevelAlphabet.appendBytes(t, bytes);
            return List.of(Utf8.lossy(bytes.toByteArray(), bytes.size()));
        }
    }

    /** Each token's pattern matches replaced by {@code content}. */
    record Replace(Pattern pattern, String content) implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (String t : tokens) out.add(Normalizer.replaceAll(pattern, t, content));
            return out;
        }
    }

    /** Runs of {@code <0xAB>} tokens read as UTF-8 (an invalid run: one U+FFFD per byte). */
    record ByteFallback() implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            byte[] run = new byte[16];
            int n = 0;
            for (String t : tokens) {
                int b = byteOf(t);
                if (b >= 0) {
                    if (n == run.length) run = java.util.Arrays.copyOf(run, n * 2);
                    run[n++] = (byte) b;
                    continue;
                }
                flush(run, n, out);
                n = 0;
                out.add(t);
            }
            flush(run, n, out);
            return out;
        }

        private static int byteOf(String t) {
            if (t.length() != 6 || !t.startsWith("<0x") || t.charAt(5) != '>') return -1;
            int hi = Character.digit(t.charAt(3), 16), lo = Character.digit(t.charAt(4), 16);
            return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
        }

        private static void flush(byte[] run, int n, List<String> out) {
            if (n == 0) return;
            String s = Utf8.strict(run, n);
            if (s != null) out.add(s);
            else for (int i = 0; i < n; i++) out.add("\uFFFD");
        }
    }

    /** All the tokens joined into one. */
    record Fuse() implements Decoder {
        @Override public List<String> decode(List<String> tokens) { return List.of(String.join("", tokens)); }
    }

    /** Up to {@code start} leading and {@code stop} trailing {@code content} characters cut from each token. */
    record Strip(int content, int start, int stop) implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (String t : tokens) {
                int[] cps = t.codePoints().toArray();
                int from = 0, to = cps.length;
                for (int i = 0; i < Math.min(start, cps.length) && cps[i] == content; i++) from = i + 1;
                for (int i = 0; i < stop && cps.length - i - 1 >= 0 && cps[cps.length - i - 1] == content; i++) to = cps.length - i - 1;
                out.add(to > from ? new String(cps, from, to - from) : "");
            }
            return out;
        }
    }

    /** {@code replacement} back to a space, except in the first token, where it is dropped (unless never prepended). */
    record Metaspace(int replacement, PreTokenizer.PrependScheme scheme) implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (int i = 0; i < tokens.size(); i++) {
                boolean drop = i == 0 && scheme != PreTokenizer.PrependScheme.NEVER;
                StringBuilder sb = new StringBuilder();
                tokens.get(i).codePoints().forEach(c -> {
                    if (c != replacement) sb.appendCodePoint(c);
                    else if (!drop) sb.append(' ');
                });
                out.add(sb.toString());
            }
            return out;
        }
    }

    /** The end-of-word suffix to a space (to nothing in the last token). */
    record BpeSuffix(String suffix) implements Decoder {
        @Override public List<String> decode(List<String> tokens) {
            List<String> out = new ArrayList<>(tokens.size());
            for (int i = 0; i < tokens.size(); i++) out.add(tokens.get(i).replace(suffix, i == tokens.size() - 1 ? "" : " "));
            return out;
        }
    }

    record Sequence(List<Decoder> steps) implements Decoder {
        public Sequence { steps = List.copyOf(steps); }

        @Override public List<String> decode(List<String> tokens) {
            for (Decoder d : steps) tokens = d.decode(tokens);
            return tokens;
        }
    }

    /** The decoder a {@code tokenizer.json} object describes; an unknown kind is refused by name. */
    static Decoder of(JsonNode node) {
        return switch (node.type()) {
            case "ByteLevel" -> new ByteLevel();
            case "Replace" -> new Replace(node.pattern("pattern"), node.string("content"));
            case "ByteFallback" -> new ByteFallback();
            case "Fuse" -> new Fuse();
            case "Strip" -> new Strip(oneChar(node, "content"), node.integer("start", 0), node.integer("stop", 0));
            case "Metaspace" -> {
                PreTokenizer.Metaspace m = PreTokenizer.metaspace(node);
                yield new Metaspace(m.replacement(), m.scheme());
            }
            case "BPEDecoder" -> new BpeSuffix(node.get("suffix") == null ? "</w>" : node.string("suffix"));
            case "Sequence" -> new Sequence(node.children("decoders").stream().map(Decoder::of).toList());
            default -> throw node.unsupportedType("decoder", SUPPORTED);
        };
    }

    private static int oneChar(JsonNode node, String key) {
        String s = node.string(key);
        if (s.codePointCount(0, s.length()) != 1) throw node.error("field '" + key + "' is \"" + s + "\", not one character");
        return s.codePointAt(0);
    }
}
