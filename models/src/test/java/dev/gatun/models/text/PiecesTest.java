package dev.gatun.models.text;

import dev.gatun.ir.json.Json;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Splits, pre-tokenizers and normalizers on their own. The expected pieces are the examples the {@code tokenizers}
 * library documents for each kind, or worked out by hand from its definition (noted where so).
 */
class PiecesTest {

    static List<String> texts(List<Piece> pieces) { return pieces.stream().map(Piece::text).toList(); }

    static List<String> split(SplitBehavior b, String text, String delimiter) {
        List<Piece> out = new ArrayList<>();
        b.split(new Piece(text, true), Pattern.compile(delimiter), false, out);
        return texts(out);
    }

    static List<String> pre(PreTokenizer p, String text) {
        List<Piece> out = new ArrayList<>();
        p.apply(new Piece(text, true), out);
        return texts(out);
    }

    @Test
    void splitBehavioursAreTheLibrarysDocumentedOnes() {
        // the library's documentation of SplitDelimiterBehavior, delimiter "-"
        assertThat(split(SplitBehavior.REMOVED, "the-final--countdown", "-")).containsExactly("the", "final", "countdown");
        assertThat(split(SplitBehavior.ISOLATED, "the-final--countdown", "-")).containsExactly("the", "-", "final", "-", "-", "countdown");
        assertThat(split(SplitBehavior.MERGED_WITH_PREVIOUS, "the-final--countdown", "-")).containsExactly("the-", "final-", "-", "countdown");
        assertThat(split(SplitBehavior.MERGED_WITH_NEXT, "the-final--countdown", "-")).containsExactly("the", "-final", "-", "-countdown");
        assertThat(split(SplitBehavior.CONTIGUOUS, "the-final--countdown", "-")).containsExactly("the", "-", "final", "--", "countdown");
        // by hand: a delimiter first and last; nothing but delimiters
        assertThat(split(SplitBehavior.MERGED_WITH_NEXT, "-a-", "-")).containsExactly("-a", "-");
        assertThat(split(SplitBehavior.MERGED_WITH_PREVIOUS, "-a-", "-")).containsExactly("-", "a-");
        assertThat(split(SplitBehavior.REMOVED, "--", "-")).isEmpty();
    }

    @Test
    void anInvertedSplitKeepsTheMatches() {
        List<Piece> out = new ArrayList<>();
        SplitBehavior.REMOVED.split(new Piece("Hey friend!", true), Pattern.compile("\\w+"), true, out);
        assertThat(texts(out)).containsExactly("Hey", "friend");
    }

    @Test
    void onlyAPieceAtTheTextsStartIsMarkedSo() {
        List<Piece> out = new ArrayList<>();
        SplitBehavior.ISOLATED.split(new Piece("a b", true), Pattern.compile(" "), false, out);
        assertThat(out).extracting(Piece::atStart).containsExactly(true, false, false);
        out.clear();
        SplitBehavior.REMOVED.split(new Piece(" b", true), Pattern.compile(" "), false, out);
        assertThat(out).containsExactly(new Piece("b", false));
    }

    @Test
    void metaspaceMarksWordsAsItsSchemeSays() {
        // the library's documented example: "Hey friend" -> "▁Hey", "▁friend"
        assertThat(pre(new PreTokenizer.Metaspace('▁', PreTokenizer.PrependScheme.ALWAYS, true), "Hey friend")).containsExactly("▁Hey", "▁friend");
        assertThat(pre(new PreTokenizer.Metaspace('▁', PreTokenizer.PrependScheme.ALWAYS, false), "Hey friend")).containsExactly("▁Hey▁friend");
        assertThat(pre(new PreTokenizer.Metaspace('▁', PreTokenizer.PrependScheme.NEVER, false), "Hey friend")).containsExactly("Hey▁friend");
        // a text that starts with a space gets no second mark
        assertThat(pre(new PreTokenizer.Metaspace('▁', PreTokenizer.PrependScheme.ALWAYS, false), " Hey")).containsExactly("▁Hey");
        // "first": only the piece at the text's start (not one after an added token)
        var first = new PreTokenizer.Metaspace('▁', PreTokenizer.PrependScheme.FIRST, false);
        List<Piece> out = new ArrayList<>();
        first.apply(new Piece("later", false), out);
        assertThat(texts(out)).containsExactly("later");
        assertThat(pre(first, "start")).containsExactly("▁start");
    }

    @Test
    void digitsWhitespaceAndPunctuationSplitAsDocumented() {
        // the library's documented examples
        assertThat(pre(new PreTokenizer.Digits(true), "Call 123 please")).containsExactly("Call ", "1", "2", "3", " please");
        assertThat(pre(new PreTokenizer.Digits(false), "Call 123 please")).containsExactly("Call ", "123", " please");
        assertThat(pre(new PreTokenizer.Whitespace(), "Hey friend!     How are you?!?")).containsExactly("Hey", "friend", "!", "How", "are", "you", "?!?");
        assertThat(pre(new PreTokenizer.WhitespaceSplit(), "Hey friend!\u00a0 How")).containsExactly("Hey", "friend!", "How");
        assertThat(pre(new PreTokenizer.Punctuation(SplitBehavior.ISOLATED), "Hey friend!?")).containsExactly("Hey friend", "!", "?");
        // a supplementary digit (MATHEMATICAL BOLD DIGIT ONE) is one character, Nd
        assertThat(pre(new PreTokenizer.Digits(true), "x\uD835\uDFCF2")).containsExactly("x", "\uD835\uDFCF", "2");
    }

    static final String LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

    @Test
    void llama3sRegexSplitsAsOnigurumaDoes() {
        var split = PreTokenizer.of(new JsonNode(Path.of("tokenizer.json"), "pre_tokenizer", (Json.Obj) Json.parse(
                "{\"type\": \"Split\", \"pattern\": {\"Regex\": " + Json.write(new Json.Str(LLAMA3_REGEX)) + "}, \"behavior\": \"Isolated\", \"invert\": false}")));
        // worked out by hand from Oniguruma's semantics: \s is Unicode White_Space, so the first NBSP is a run of
        // space not followed by a non-space (\s+(?!\S)) and the second joins the word; the (?i:...) group takes 'S;
        // \s*[\r\n]+ takes the spaces before newlines with them
        assertThat(pre(split, "a\u00a0\u00a0b")).containsExactly("a", "\u00a0", "\u00a0b");
        assertThat(pre(split, "IT'S 1234 x\u3000\u2003 \n\ny")).containsExactly("IT", "'S", " ", "123", "4", " x", "\u3000\u2003 \n\n", "y");
        assertThat(pre(split, "\uD835\uDD18\uD835\uDD2B!")).containsExactly("\uD835\uDD18\uD835\uDD2B", "!");   // math letters are \p{L}
    }

    @Test
    void byteLevelWritesEachPieceInTheByteAlphabet() {
        // by hand from GPT-2's alphabet: space is Ġ (U+0120); é is bytes C3 A9, both printable Latin-1, so Ã©
        assertThat(pre(new PreTokenizer.ByteLevel(true, true), "Hello world")).containsExactly("ĠHello", "Ġworld");
        assertThat(pre(new PreTokenizer.ByteLevel(false, true), "café's  x")).containsExactly("cafÃ©", "'s", "Ġ", "Ġx");
        assertThat(pre(new PreTokenizer.ByteLevel(false, false), "a b")).containsExactly("aĠb");
    }

    @Test
    void theByteAlphabetIsGpt2s() {
        assertThat(ByteLevelAlphabet.charOf(' ')).isEqualTo('Ġ');
        assertThat(ByteLevelAlphabet.charOf('\n')).isEqualTo('Ċ');
        assertThat(ByteLevelAlphabet.charOf(0)).isEqualTo('\u0100');
        assertThat(ByteLevelAlphabet.charOf(0x7F)).isEqualTo('\u0121');
        assertThat(ByteLevelAlphabet.charOf(0xAD)).isEqualTo('\u0143');
        assertThat(ByteLevelAlphabet.charOf('A')).isEqualTo('A');
        assertThat(ByteLevelAlphabet.charOf(0xFF)).isEqualTo('ÿ');
        assertThat(java.util.stream.IntStream.range(0, 256).map(ByteLevelAlphabet::charOf).distinct().count()).isEqualTo(256);
    }

    @Test
    void normalizersFollowTheLibrarysDefinitions() {
        // character by character: İ is "i̇", and a final Σ is σ (String.toLowerCase would make it ς)
        assertThat(new Normalizer.Lowercase().apply("İSTANBUL ΣΑΣ")).isEqualTo("i\u0307stanbul σασ");
        assertThat(new Normalizer.UnicodeForm(java.text.Normalizer.Form.NFKC).apply("ﬁ①")).isEqualTo("fi1");
        assertThat(new Normalizer.UnicodeForm(java.text.Normalizer.Form.NFC).apply("e\u0301")).isEqualTo("é");
        assertThat(new Normalizer.Prepend("▁").apply("")).isEmpty();
        assertThat(new Normalizer.Prepend("▁").apply("a")).isEqualTo("▁a");
        assertThat(new Normalizer.Strip(true, false).apply("\u3000 a \u00a0")).isEqualTo("a \u00a0");
        assertThat(new Normalizer.Strip(true, true).apply("\u3000 a \u00a0")).isEqualTo("a");
        assertThat(new Normalizer.Sequence(List.of(new Normalizer.Prepend("▁"), new Normalizer.Replace(Pattern.compile(" ", Pattern.LITERAL), "▁"))).apply("a b"))
                .isEqualTo("▁a▁b");
    }

    @Test
    void onigurumaRegexesBecomeJavaOnes() {
        // \p{Han} is a script (Java's \p{IsHan}); \h is a hex digit (Java's would be horizontal space); \p{^L} is \P{L}
        assertThat(OnigRegex.compile("\\p{Han}+").matcher("漢字").matches()).isTrue();
        assertThat(OnigRegex.compile("\\h+").matcher("0aF").matches()).isTrue();
        assertThat(OnigRegex.compile("\\h").matcher(" ").matches()).isFalse();
        assertThat(OnigRegex.compile("[\\h_]+").matcher("a_9").matches()).isTrue();
        assertThat(OnigRegex.compile("\\p{^L}").matcher("1").matches()).isTrue();
        assertThat(OnigRegex.compile("\\p{L}\\\\").matcher("é\\").matches()).isTrue();
        // \s is Unicode White_Space, as in Oniguruma: NBSP, ideographic and em spaces
        assertThat(OnigRegex.compile("\\s+").matcher("\u00a0\u3000\u2003").matches()).isTrue();
    }
}
