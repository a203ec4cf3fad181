package dev.gatun.models.text;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;

/**
 * Text to token ids and back, as a Hugging Face {@code tokenizer.json} says, in plain Java: the same ids and the same
 * decoded text as the Rust {@code tokenizers} library for the BPE tokenizers decoder models ship: byte-level BPE
 * (GPT-2, Llama 3, Qwen) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma).
 *
 * <p>Encoding runs the library's pipeline: added tokens (such as {@code <|im_start|>}) are split out of the raw text
 * first, each remaining piece is {@linkplain Normalizer normalized}, {@linkplain PreTokenizer pre-tokenized} into
 * pieces and encoded by the {@linkplain BpeModel BPE model}, and the {@linkplain PostProcessor post-processor} adds
 * what a model expects around the text (a BOS) when special tokens are asked for. Decoding maps ids to tokens, drops
 * the special ones when asked, and runs the {@linkplain Decoder decoder}. A component of a kind not implemented here
 * (a WordPiece or Unigram model, a BERT pre-tokenizer...) is refused when the file is loaded, by name, with the
 * kinds that are: never a tokenizer that loads and encodes differently.
 *
 * <p>{@code truncation} and {@code padding} are batch settings of the library's {@code encode}; this one encodes one
 * text in full and pads nothing, so they are ignored. A tokenizer is immutable and safe to share between threads.
 */
public final class Tokenizer {
    private final Path file;
    private final Normalizer normalizer;       // null: none
    private final PreTokenizer preTokenizer;   // null: the whole piece is one word
    private final BpeModel model;
    private final AddedVocabulary added;
    private final PostProcessor postProcessor; // null: none
    private final Decoder decoder;             // null: tokens joined with spaces, as the library does
    private final String[] tokens;             // by id; null where no token has the id
    private final Map<String, Integer> specialTokens;

    private Tokenizer(Path file, JsonNode root) {
        this.file = file;
        JsonNode n = root.optChild("normalizer");
        normalizer = n == null ? null : Normalizer.of(n);
        JsonNode p = root.optChild("pre_tokenizer");
        preTokenizer = p == null ? null : PreTokenizer.of(p);
        model = BpeModel.of(root.child("model"));
        added = AddedVocabulary.of(root, normalizer);
        JsonNode pp = root.optChild("post_processor");
        postProcessor = pp == null ? null : PostProcessor.of(pp);
        JsonNode d = root.optChild("decoder");
        decoder = d == null ? null : Decoder.of(d);
        tokens = tokenTable(model, added);
        Map<String, Integer> specials = new LinkedHashMap<>();
        for (AddedVocabulary.AddedToken t : added.all()) if (t.special()) specials.put(t.content(), t.id());
        specialTokens = Collections.unmodifiableMap(specials);
    }

    /**
     * Reads a {@code tokenizer.json}, or the one in a directory (a model's checkpoint directory holds it beside
     * {@code config.json}).
     *
     * @throws TokenizerException naming the file and the field when it cannot be read or holds a kind of model,
     *                            normalizer, pre-tokenizer, post-processor or decoder this class does not implement
     */
    public static Tokenizer load(Path dirOrFile) {
        Path file = Files.isDirectory(dirOrFile) ? dirOrFile.resolve("tokenizer.json") : dirOrFile;
        if (!Files.isRegularFile(file)) {
            throw new TokenizerException(file + ": no such file" + (Files.isDirectory(dirOrFile)
                    ? " (a Hugging Face tokenizer directory holds tokenizer.json; one with only tokenizer.model, SentencePiece's own format, is not supported)" : ""));
        }
        return new Tokenizer(file, JsonNode.read(file));
    }

    private static String[] tokenTable(BpeModel model, AddedVocabulary added) {
        int max = -1;
        for (int id : model.vocab().values()) max = Math.max(max, id);
        for (AddedVocabulary.AddedToken t : added.all()) max = Math.max(max, t.id());
        String[] table = new String[max + 1];
        for (var e : model.vocab().entrySet()) table[e.getValue()] = e.getKey();
        for (AddedVocabulary.AddedToken t : added.all()) table[t.id()] = t.content();
        return table;
    }

    /**
     * The token ids of a text.
     *
     * @param addSpecialTokens whether to add what the post-processor adds around a text (Llama's BOS); chat text
     *                         rendered by a {@link ChatTemplate} already holds its special tokens and encodes with false
     */
    public int[] encode(String text, boolean addSpecialTokens) {
        if (text == null) throw new TokenizerException("Tokenizer.encode: the text is null");
        IntList ids = new IntList(text.length() / 3 + 4);
        List<AddedVocabulary.Segment> raw = new ArrayList<>();
        added.splitRaw(text, raw);
        List<AddedVocabulary.Segment> normalized = new ArrayList<>();
        List<Piece> pieces = new ArrayList<>();
        for (AddedVocabulary.Segment s : raw) {
            if (s.isToken()) {
                ids.add(s.id());
                continue;
            }
            normalized.clear();
            added.splitNormalized(normalizer == null ? s.text() : normalizer.apply(s.text()), s.atStart(), normalized);
            for (AddedVocabulary.Segment t : normalized) {
                if (t.isToken()) {
                    ids.add(t.id());
                    continue;
                }
                pieces.clear();
                Piece piece = new Piece(t.text(), t.atStart());
                if (preTokenizer == null) pieces.add(piece);
                else preTokenizer.apply(piece, pieces);
                for (Piece w : pieces) model.encode(w.text(), ids);
            }
        }
        int[] out = ids.toArray();
        return postProcessor == null ? out : postProcessor.apply(out, addSpecialTokens);
    }

    /**
     * The text of some token ids.
     *
     * @param skipSpecialTokens whether to leave out the special tokens ({@code <s>}, {@code <|eot_id|>}...)
     * @throws TokenizerException naming the id and its position when an id is not in the vocabulary
     */
    public String decode(int[] ids, boolean skipSpecialTokens) {
        List<String> list = new ArrayList<>(ids.length);
        for (int i = 0; i < ids.length; i++) {
            int id = ids[i];
            String token = id >= 0 && id < tokens.length ? tokens[id] : null;
            if (token == null) token(id, "Tokenizer.decode: id " + id + " at position " + i);   // throws, naming it
            if (skipSpecialTokens && specialTokens.containsKey(token)) continue;
            list.add(token);
        }
        if (decoder == null) return String.join(" ", list);
        return String.join("", decoder.decode(list));
    }

    /** The id of a token (an added token's text, or a vocabulary entry as the model writes it: {@code Ġthe}, {@code ▁the}). */
    public OptionalInt tokenToId(String token) {
        AddedVocabulary.AddedToken t = added.byContent(token);
        if (t != null) return OptionalInt.of(t.id());
        Integer id = model.vocab().get(token);
        return id == null ? OptionalInt.empty() : OptionalInt.of(id);
    }

    /**
     * The token of an id, as the vocabulary writes it.
     *
     * @throws TokenizerException naming the id when it is not in the vocabulary
     */
    public String idToToken(int id) { return token(id, "Tokenizer.idToToken: id " + id); }

    private String token(int id, String what) {
        if (id < 0 || id >= tokens.length || tokens[id] == null) {
            throw new TokenizerException(what + " is not in the vocabulary of " + file
                    + " (ids 0 to " + (tokens.length - 1) + (id >= 0 && id < tokens.length ? ", with gaps" : "") + ")");
        }
        return tokens[id];
    }

    /** One more than the highest id, the size of an embedding table for this vocabulary (added tokens included). */
    public int vocabSize() { return tokens.length; }

    /** The special tokens (added tokens marked special) and their ids, in the file's order. */
    public Map<String, Integer> specialTokens() { return specialTokens; }

    @Override public String toString() { return "Tokenizer[" + file + ", " + tokens.length + " ids]"; }
}
