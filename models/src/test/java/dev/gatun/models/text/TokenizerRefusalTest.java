package dev.gatun.models.text;

import dev.gatun.ir.GatunException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** What a tokenizer refuses, and that each refusal names the file, the place and what is supported instead. */
class TokenizerRefusalTest {
    static final String BPE = "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";

    static Path write(Path dir, String json) throws IOException {
        Path f = dir.resolve("tokenizer.json");
        Files.writeString(f, json);
        return f;
    }

    static String with(String field, String value) {
        return "{\"model\": " + BPE + ", \"" + field + "\": " + value + "}";
    }

    @Test
    void modelsOtherThanBpeAreRefusedByName(@TempDir Path dir) throws IOException {
        write(dir, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, \"unk_token\": \"[UNK]\"}}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class).isInstanceOf(GatunException.class)
                .hasMessageStartingWith("tokenizer.json: model type 'WordPiece' is not supported; supported: BPE")
                .hasMessageContaining(dir.resolve("tokenizer.json").toString());
        write(dir, "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]], \"unk_id\": 0}}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: model type 'Unigram' is not supported; supported: BPE");
    }

    @Test
    void unknownPreTokenizersAreRefusedByNameWithTheSupportedOnes(@TempDir Path dir) throws IOException {
        write(dir, with("pre_tokenizer", "{\"type\": \"BertPreTokenizer\"}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: pre_tokenizer type 'BertPreTokenizer' is not supported; supported: "
                        + "ByteLevel, Split, Metaspace, Sequence, Digits, Whitespace, WhitespaceSplit, Punctuation");
        write(dir, with("pre_tokenizer", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, {\"type\": \"UnicodeScripts\"}]}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: pre_tokenizer at pre_tokenizer.pretokenizers[1] type 'UnicodeScripts' is not supported");
    }

    @Test
    void unknownNormalizersDecodersAndPostProcessorsAreRefusedByName(@TempDir Path dir) throws IOException {
        write(dir, with("normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}]}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: normalizer at normalizer.normalizers[1] type 'Precompiled' is not supported; supported: "
                        + "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence");
        write(dir, with("decoder", "{\"type\": \"WordPiece\", \"prefix\": \"##\"}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: decoder type 'WordPiece' is not supported; supported: "
                        + "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, Sequence");
        write(dir, with("post_processor", "{\"type\": \"Unheard\"}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: post_processor type 'Unheard' is not supported; supported: TemplateProcessing");
        write(dir, with("post_processor", "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}], \"special_tokens\": {}}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("post_processor.single[0].SpecialToken names the special token '<s>', which 'special_tokens' does not list");
    }

    @Test
    void anIdOutsideTheVocabularyIsNamed(@TempDir Path dir) throws IOException {
        write(dir, with("added_tokens", "[{\"id\": 5, \"content\": \"<s>\", \"special\": true}]"));
        Tokenizer tok = Tokenizer.load(dir);
        assertThat(tok.vocabSize()).isEqualTo(6);
        assertThat(tok.decode(new int[]{0, 1, 5}, true)).isEqualTo("a b");   // no decoder: tokens joined with spaces
        assertThatThrownBy(() -> tok.decode(new int[]{0, 1, 6}, false)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("Tokenizer.decode: id 6 at position 2 is not in the vocabulary of " + dir.resolve("tokenizer.json") + " (ids 0 to 5)");
        assertThatThrownBy(() -> tok.decode(new int[]{-1}, false)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("Tokenizer.decode: id -1 at position 0 is not in the vocabulary");
        assertThatThrownBy(() -> tok.decode(new int[]{4}, false)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("id 4 at position 0 is not in the vocabulary").hasMessageContaining("with gaps");
        assertThatThrownBy(() -> tok.idToToken(3)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("Tokenizer.idToToken: id 3 is not in the vocabulary");
    }

    @Test
    void filesThatCannotBeReadAreRefusedNamingThem(@TempDir Path dir) throws IOException {
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith(dir.resolve("tokenizer.json") + ": no such file").hasMessageContaining("tokenizer.model");
        write(dir, "{\"model\": ");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith(dir.resolve("tokenizer.json") + ": not JSON:");
        write(dir, "{\"normalizer\": null}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: field 'model' is missing");
        write(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: model field 'merges[0]' uses the token \"ab\", which is not in the vocabulary");
        write(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("field 'dropout' is 0.1");
        write(dir, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}");
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageStartingWith("tokenizer.json: field 'model.vocab.a' is a JSON string, not an integer");
        write(dir, with("pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\", \"invert\": false}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("pre_tokenizer field 'pattern' holds a regex Java cannot compile");
        write(dir, with("pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Sideways\", \"invert\": false}"));
        assertThatThrownBy(() -> Tokenizer.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("field 'behavior' is 'Sideways'; supported: Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    }
}
