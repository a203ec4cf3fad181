package dev.gatun.models.text;

import dev.gatun.ir.json.Json;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A BPE model as {@code tokenizer.json} describes it ({@code "type": "BPE"}): the vocabulary, the ranked merge rules,
 * and what happens to a character the vocabulary lacks: its UTF-8 bytes as {@code <0xAB>} tokens
 * ({@code byte_fallback}, Llama 2, Mistral, Gemma), else the unknown token (consecutive ones fused into one with
 * {@code fuse_unk}), else, as in the library, nothing. {@code ignore_merges} (Llama 3) takes a piece that is itself
 * in the vocabulary as one token. {@code continuing_subword_prefix} and {@code end_of_word_suffix} mark a word's
 * inner and last characters. Merged words are cached: natural text repeats its words, and a cached one costs a
 * hash lookup.
 */
final class BpeModel {
    private static final int CACHE_CAPACITY = 100_000;
    private static final int CACHE_MAX_WORD = 256;

    private final Map<String, Integer> vocab;
    private final MergeTable merges;
    private final String unkToken;
    private final boolean fuseUnk, byteFallback, ignoreMerges;
    private final String prefix, suffix;
    private final int[] byteIds = new int[256];
    private final int[] charIds = new int[65536];   // the id of each one-character token of the BMP, or -1
    private final Map<String, int[]> cache = new ConcurrentHashMap<>();

    private BpeModel(Map<String, Integer> vocab, MergeTable merges, String unkToken, boolean fuseUnk, boolean byteFallback,
                     boolean ignoreMerges, String prefix, String suffix) {
        this.vocab = vocab;
        this.merges = merges;
        this.unkToken = unkToken;
        this.fuseUnk = fuseUnk;
        this.byteFallback = byteFallback;
        this.ignoreMerges = ignoreMerges;
        this.prefix = prefix;
        this.suffix = suffix;
        for (int b = 0; b < 256; b++) byteIds[b] = vocab.getOrDefault(String.format("<0x%02X>", b), -1);
        java.util.Arrays.fill(charIds, -1);
        for (var e : vocab.entrySet()) if (e.getKey().length() == 1) charIds[e.getKey().charAt(0)] = e.getValue();
    }

    static final String SUPPORTED = "BPE";

    /** The model a {@code tokenizer.json}'s {@code model} object describes; only BPE is supported. */
    static BpeModel of(JsonNode node) {
        String type = node.get("type") == null ? (node.get("merges") != null ? "BPE" : "(none)") : node.type();
        if (!type.equals("BPE")) {
            throw new TokenizerException(node.file().getFileName() + ": model type '" + type + "' is not supported; supported: "
                    + SUPPORTED + " (byte-level as GPT-2, Llama 3 and Qwen use it, or with byte fallback as Llama 2, Mistral and Gemma do) (" + node.file() + ")");
        }
        Json dropout = node.get("dropout");
        if (dropout instanceof Json.Num d && d.doubleValue() != 0)
            throw node.error("field 'dropout' is " + d.text() + ": BPE dropout samples a different encoding each time, which an inference tokenizer does not do; set it to null");
        Map<String, Integer> vocab = vocab(node);
        String prefix = node.optString("continuing_subword_prefix"), suffix = node.optString("end_of_word_suffix");
        return new BpeModel(vocab, merges(node, vocab, prefix), node.optString("unk_token"), node.bool("fuse_unk", false),
                node.bool("byte_fallback", false), node.bool("ignore_merges", false), prefix, suffix);
    }

    private static Map<String, Integer> vocab(JsonNode node) {
        JsonNode v = node.child("vocab");
        Map<String, Integer> vocab = new HashMap<>(v.obj().fields().size() * 2);
        for (var e : v.obj().fields().entrySet()) vocab.put(e.getKey(), node.integer(e.getValue(), "model.vocab." + e.getKey()));
        return vocab;
    }

    /**
     * The merges, as "a b" strings (older files; a "#version" line skipped) or [a, b] pairs; each part and the merged
     * token must be in the vocabulary.
     */
    private static MergeTable merges(JsonNode node, Map<String, Integer> vocab, String prefix) {
        Json.Arr list = node.array("merges");
        IntList left = new IntList(list.size()), right = new IntList(list.size()), made = new IntList(list.size());
        int prefixLen = prefix == null ? 0 : prefix.length();
        for (int i = 0; i < list.size(); i++) {
            String a, b;
            Json m = list.get(i);
            if (m instanceof Json.Str s && s.value().startsWith("#version")) continue;
            if (m instanceof Json.Str s && s.value().indexOf(' ') > 0 && s.value().indexOf(' ') == s.value().lastIndexOf(' ')) {
                int sp = s.value().indexOf(' ');
                a = s.value().substring(0, sp);
                b = s.value().substring(sp + 1);
            } else if (m instanceof Json.Arr pair && pair.size() == 2 && pair.get(0) instanceof Json.Str x && pair.get(1) instanceof Json.Str y) {
                a = x.value();
                b = y.value();
            } else {
                throw node.error("field 'merges[" + i + "]' is not a pair of tokens (\"a b\" or [\"a\", \"b\"])");
            }
            String merged = a + (b.length() >= prefixLen ? b.substring(prefixLen) : b);
            left.add(id(node, vocab, a, i));
            right.add(id(node, vocab, b, i));
            made.add(id(node, vocab, merged, i));
        }
        return new MergeTable(left.toArray(), right.toArray(), made.toArray());
    }

    private static int id(JsonNode node, Map<String, Integer> vocab, String token, int rank) {
        Integer id = vocab.get(token);
        if (id == null) throw node.error("field 'merges[" + rank + "]' uses the token \"" + token + "\", which is not in the vocabulary");
        return id;
    }

    Map<String, Integer> vocab() { return vocab; }

    /** Appends the ids of one pre-tokenized piece. */
    void encode(String word, IntList out) {
        if (word.isEmpty()) return;
        if (ignoreMerges) {
            Integer id = vocab.get(word);
            if (id != null) {
                out.add(id);
                return;
            }
        }
        int[] ids = cache.get(word);
        if (ids == null) {
            ids = BpeWord.merge(symbols(word), merges);
            if (word.length() < CACHE_MAX_WORD && cache.size() < CACHE_CAPACITY) cache.put(word, ids);
        }
        out.addAll(ids);
    }

    /** The word's characters as token ids, before any merge (the library's {@code merge_word}). */
    private int[] symbols(String w) {
        IntList sym = new IntList(w.length());
        int unkId = -1;   // a pending unknown token, fused with the next when fuse_unk
        boolean plain = prefix == null && suffix == null;
        for (int i = 0; i < w.length(); ) {
            int cp = w.codePointAt(i);
            int end = i + Character.charCount(cp);
            if (plain && cp < 65536 && charIds[cp] >= 0) {   // the common case, without a substring and a hash lookup
                if (unkId >= 0) { sym.add(unkId); unkId = -1; }
                sym.add(charIds[cp]);
                i = end;
                continue;
            }
            String s = w.substring(i, end);
            if (i > 0 && prefix != null) s = prefix + s;
            if (end == w.length() && suffix != null) s = s + suffix;
            i = end;
            Integer id = vocab.get(s);
            if (id != null) {
                if (unkId >= 0) { sym.add(unkId); unkId = -1; }
                sym.add(id);
                continue;
            }
            if (byteFallback && addBytes(s, sym)) continue;
            if (unkToken != null) {
                if (unkId >= 0 && !fuseUnk) sym.add(unkId);
                unkId = unkId >= 0 && fuseUnk ? unkId : unkId();
            }
        }
        if (unkId >= 0) sym.add(unkId);
        return sym.toArray();
    }

    private boolean addBytes(String s, IntList sym) {
        byte[] bytes = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        for (byte b : bytes) if (byteIds[b & 0xFF] < 0) return false;
        for (byte b : bytes) sym.add(byteIds[b & 0xFF]);
        return true;
    }

    private int unkId() {
        Integer id = vocab.get(unkToken);
        if (id == null) throw new TokenizerException("tokenizer.json: model.unk_token \"" + unkToken + "\" is not in the vocabulary, and the text holds a character the vocabulary lacks");
        return id;
    }
}
