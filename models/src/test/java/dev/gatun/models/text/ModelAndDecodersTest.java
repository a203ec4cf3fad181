package dev.gatun.models.text;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The BPE model's handling of characters outside its vocabulary, added tokens with their flags, post-processors and
 * decoders, on small tokenizers whose right answers can be worked out by hand from the library's definitions.
 */
class ModelAndDecodersTest {

    static Tokenizer tokenizer(Path dir, String json) throws IOException {
        Files.writeString(dir.resolve("tokenizer.json"), json);
        return Tokenizer.load(dir);
    }

    static String bpe(String vocab, String merges, String options) {
        return "{\"type\": \"BPE\", \"vocab\": {" + vocab + "}, \"merges\": [" + merges + "]" + (options.isEmpty() ? "" : ", " + options) + "}";
    }

    @Test
    void unknownCharactersFuseIntoOneUnknownTokenOrNot(@TempDir Path dir) throws IOException {
        String vocab = "\"<unk>\": 0, \"a\": 1";
        var fused = tokenizer(dir, "{\"model\": " + bpe(vocab, "", "\"unk_token\": \"<unk>\", \"fuse_unk\": true") + "}");
        assertThat(fused.encode("axyza", false)).containsExactly(1, 0, 1);
        var apart = tokenizer(dir, "{\"model\": " + bpe(vocab, "", "\"unk_token\": \"<unk>\", \"fuse_unk\": false") + "}");
        assertThat(apart.encode("axyza", false)).containsExactly(1, 0, 0, 0, 1);
        // a supplementary character is one character: one unknown token
        assertThat(apart.encode("a😀a", false)).containsExactly(1, 0, 1);
        // neither an unknown token nor byte fallback: the library drops the character, and so does this
        var none = tokenizer(dir, "{\"model\": " + bpe(vocab, "", "") + "}");
        assertThat(none.encode("axa", false)).containsExactly(1, 1);
    }

    @Test
    void byteFallbackSpellsAMissingCharactersUtf8Bytes(@TempDir Path dir) throws IOException {
        String vocab = "\"<unk>\": 0, \"a\": 1, \"<0xC3>\": 2, \"<0xA9>\": 3";
        var tok = tokenizer(dir, "{\"model\": " + bpe(vocab, "", "\"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true")
                + ", \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}}");
        assertThat(tok.encode("aé", false)).containsExactly(1, 2, 3);   // é is C3 A9
        assertThat(tok.encode("aè", false)).containsExactly(1, 0);      // è is C3 A8: no <0xA8>, so unknown
        assertThat(tok.decode(new int[]{1, 2, 3}, false)).isEqualTo("aé");
        assertThat(tok.decode(new int[]{2, 1}, false)).isEqualTo("\uFFFDa");   // a lone lead byte
    }

    @Test
    void ignoreMergesTakesAWholeWordAndPrefixesMarkInnerCharacters(@TempDir Path dir) throws IOException {
        String vocab = "\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"abc\": 4";
        assertThat(tokenizer(dir, "{\"model\": " + bpe(vocab, "\"a b\"", "") + "}").encode("abc", false)).containsExactly(3, 2);
        assertThat(tokenizer(dir, "{\"model\": " + bpe(vocab, "\"a b\"", "\"ignore_merges\": true") + "}").encode("abc", false)).containsExactly(4);
        String marked = "\"a\": 0, \"##b\": 1, \"##c</w>\": 2, \"ab\": 3";
        var tok = tokenizer(dir, "{\"model\": " + bpe(marked, "[\"a\", \"##b\"]", "\"continuing_subword_prefix\": \"##\", \"end_of_word_suffix\": \"</w>\"") + "}");
        assertThat(tok.encode("abc", false)).containsExactly(3, 2);
    }

    @Test
    void addedTokensHonourTheirFlags(@TempDir Path dir) throws IOException {
        var tok = tokenizer(dir, """
                {"added_tokens": [
                   {"id": 10, "content": "<L>", "special": true, "normalized": false, "lstrip": true},
                   {"id": 11, "content": "<R>", "special": false, "normalized": false, "rstrip": true},
                   {"id": 12, "content": "ab", "special": false, "normalized": false, "single_word": true},
                   {"id": 13, "content": "<lower>", "special": false, "normalized": true}],
                 "normalizer": {"type": "Lowercase"},
                 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, " ": 2, "c": 3, "<": 4, ">": 5, "l": 6, "o": 7, "w": 8,
                           "e": 9, "r": 14, "L": 15, "R": 16}, "merges": []}}
                """);
        assertThat(tok.encode("a  <L>b", false)).containsExactly(0, 10, 1);          // lstrip takes the spaces
        assertThat(tok.encode("<R>  c", false)).containsExactly(11, 3);              // rstrip takes the spaces
        assertThat(tok.encode("ab cab", false)).containsExactly(12, 2, 3, 0, 1);     // the second "ab" is inside a word
        assertThat(tok.encode("<LOWER>", false)).containsExactly(13);                // found after normalization
        assertThat(tok.encode("<L><l>", false)).containsExactly(10, 4, 6, 5);        // found before it, as it stands
        assertThat(tok.specialTokens()).isEqualTo(Map.of("<L>", 10));
        assertThat(tok.decode(new int[]{10, 11, 0}, true)).isEqualTo("<R> a");       // only the special one skipped
        assertThat(tok.tokenToId("<R>")).hasValue(11);
        assertThat(tok.tokenToId("c")).hasValue(3);
        assertThat(tok.tokenToId("zz")).isEmpty();
    }

    @Test
    void postProcessorsAddTheirTokensOnlyWhenAsked(@TempDir Path dir) throws IOException {
        String model = bpe("\"<s>\": 0, \"</s>\": 1, \"a\": 2", "", "");
        var template = tokenizer(dir, "{\"model\": " + model + ", \"post_processor\": {\"type\": \"TemplateProcessing\", "
                + "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}], "
                + "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]}, \"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\": [\"</s>\"]}}}}");
        assertThat(template.encode("aa", true)).containsExactly(0, 2, 2, 1);
        assertThat(template.encode("aa", false)).containsExactly(2, 2);
        var roberta = tokenizer(dir, "{\"model\": " + model + ", \"post_processor\": {\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 1], \"cls\": [\"<s>\", 0]}}");
        assertThat(roberta.encode("a", true)).containsExactly(0, 2, 1);
    }

    @Test
    void decodersFollowTheLibrarysDefinitions() {
        assertThat(new Decoder.ByteFallback().decode(List.of("<0xE2>", "<0x82>", "a", "<0xC3>", "<0xA9>", "<0xZZ>")))
                .containsExactly("\uFFFD", "\uFFFD", "a", "é", "<0xZZ>");
        // a token outside the byte alphabet is its own UTF-8; E2 82 (a cut €) is one ill-formed subpart: one U+FFFD
        assertThat(new Decoder.ByteLevel().decode(List.of("Ġcaf", "Ã©", "<|x|>", "日本"))).containsExactly(" café<|x|>日本");
        assertThat(new Decoder.ByteLevel().decode(List.of("âĤ", "A"))).containsExactly("\uFFFDA");
        assertThat(new Decoder.Strip(' ', 1, 1).decode(List.of("  a  ", "", "b"))).containsExactly(" a ", "", "b");
        assertThat(new Decoder.Metaspace('▁', PreTokenizer.PrependScheme.ALWAYS).decode(List.of("▁Hey▁you", "▁friend"))).containsExactly("Heyyou", " friend");
        assertThat(new Decoder.Metaspace('▁', PreTokenizer.PrependScheme.NEVER).decode(List.of("▁Hey", "▁friend"))).containsExactly(" Hey", " friend");
        assertThat(new Decoder.Replace(Pattern.compile("▁", Pattern.LITERAL), " ").decode(List.of("▁a▁", "b"))).containsExactly(" a ", "b");
        assertThat(new Decoder.BpeSuffix("</w>").decode(List.of("hello</w>", "wor", "ld</w>"))).containsExactly("hello ", "wor", "ld");
        assertThat(new Decoder.Sequence(List.of(new Decoder.ByteFallback(), new Decoder.Fuse())).decode(List.of("a", "<0x41>", "b"))).containsExactly("aAb");
    }
}
