package dev.gatun.models.text;

import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Properties against independent computations: the heap-ordered merge loop against the textbook one (merge the
 * lowest-ranked adjacent pair, the leftmost of equals, until none is left), lossy UTF-8 against the Unicode
 * standard's practice as Java's decoder follows it, and byte-level encoding as lossless on any text.
 */
class TokenizerPropertiesTest {

    /** Random merge rules over base ids 0..3: rule r makes token 4 + r from two tokens that exist before it. */
    record Rules(int[] left, int[] right) {}

    @Provide
    Arbitrary<Rules> rules() {
        return Arbitraries.integers().between(0, 40).flatMap(n -> Arbitraries.randomValue(random -> {
            List<Long> seen = new ArrayList<>();
            int[] l = new int[n], r = new int[n];
            int count = 0;
            for (int k = 0; k < n; k++) {
                int a = random.nextInt(4 + count), b = random.nextInt(4 + count);
                long key = (long) a << 32 | b;
                if (seen.contains(key)) continue;   // one rule a pair
                seen.add(key);
                l[count] = a;
                r[count] = b;
                count++;
            }
            return new Rules(Arrays.copyOf(l, count), Arrays.copyOf(r, count));
        }));
    }

    @Provide
    Arbitrary<int[]> words() {
        return Arbitraries.integers().between(0, 3).array(int[].class).ofMaxSize(40);
    }

    @Property(tries = 300)
    void theMergeLoopMergesAsTheTextbookDoes(@ForAll("rules") Rules rules, @ForAll("words") int[] word) {
        int n = rules.left().length;
        int[] made = new int[n];
        for (int r = 0; r < n; r++) made[r] = 4 + r;
        MergeTable table = new MergeTable(rules.left(), rules.right(), made);
        assertThat(BpeWord.merge(word.clone(), table)).containsExactly(textbook(word, rules));
    }

    private static int[] textbook(int[] word, Rules rules) {
        List<Integer> sym = new ArrayList<>();
        for (int s : word) sym.add(s);
        while (true) {
            int bestRank = Integer.MAX_VALUE, bestPos = -1;
            for (int i = 0; i + 1 < sym.size(); i++) {
                for (int r = 0; r < rules.left().length; r++) {
                    if (rules.left()[r] == sym.get(i) && rules.right()[r] == sym.get(i + 1) && r < bestRank) {
                        bestRank = r;
                        bestPos = i;
                    }
                }
            }
            if (bestPos < 0) return sym.stream().mapToInt(Integer::intValue).toArray();
            sym.set(bestPos, 4 + bestRank);
            sym.remove(bestPos + 1);
        }
    }

    @Property(tries = 2000)
    void lossyUtf8AgreesWithJavasDecoderAwayFromSurrogateEncodings(@ForAll("bytes") byte[] bytes) {
        // Java's decoder departs from the standard's practice only for ED A0..BF (encoded surrogates), one U+FFFD for
        // the three bytes where the standard (and Rust) has one per byte; those are checked by example below
        boolean surrogateLead = false;
        for (byte b : bytes) surrogateLead |= (b & 0xFF) == 0xED;
        if (surrogateLead) return;
        assertThat(Utf8.lossy(bytes, bytes.length)).isEqualTo(new String(bytes, StandardCharsets.UTF_8));
        String strict = Utf8.strict(bytes, bytes.length);
        if (strict != null) assertThat(strict).isEqualTo(new String(bytes, StandardCharsets.UTF_8));
        else assertThat(new String(bytes, StandardCharsets.UTF_8)).contains("\uFFFD");
    }

    @Provide
    Arbitrary<byte[]> bytes() {
        Arbitrary<Byte> interesting = Arbitraries.of((byte) 0x41, (byte) 0x80, (byte) 0xBF, (byte) 0xC0, (byte) 0xC2, (byte) 0xDF,
                (byte) 0xE0, (byte) 0xA0, (byte) 0xEF, (byte) 0xF0, (byte) 0x90, (byte) 0xF4, (byte) 0x8F, (byte) 0xF5, (byte) 0xE2, (byte) 0x82);
        return Arbitraries.oneOf(interesting, Arbitraries.bytes()).array(byte[].class).ofMaxSize(10);
    }

    @net.jqwik.api.Example
    void lossyUtf8FollowsTheStandardsExamples() {
        // Unicode 15, chapter 3, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
        byte[] b = {0x61, (byte) 0xF1, (byte) 0x80, (byte) 0x80, (byte) 0xE1, (byte) 0x80, (byte) 0xC2, 0x62, (byte) 0x80, 0x63, (byte) 0x80, (byte) 0xBF, 0x64};
        assertThat(Utf8.lossy(b, b.length)).isEqualTo("a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
        // an encoded surrogate (ED A0 80) is three ill-formed bytes
        byte[] s = {(byte) 0xED, (byte) 0xA0, (byte) 0x80, 0x41};
        assertThat(Utf8.lossy(s, s.length)).isEqualTo("\uFFFD\uFFFD\uFFFDA");
        assertThat(Utf8.strict(s, s.length)).isNull();
    }

    @Provide
    Arbitrary<String> texts() {
        Arbitrary<Integer> cp = Arbitraries.oneOf(
                Arbitraries.integers().between(0x20, 0x7E),
                Arbitraries.of(0x0A, 0x09, 0xA0, 0x3000, 0x2003, 0x200D, 0x0301),
                Arbitraries.integers().between(0, 0x10FFFF).filter(c -> c < 0xD800 || c > 0xDFFF));
        return cp.list().ofMaxSize(30).map(l -> {
            StringBuilder sb = new StringBuilder();
            l.forEach(sb::appendCodePoint);
            return sb.toString();
        });
    }

    static final Tokenizer GPT2 = Tokenizer.load(References.dir("gpt2_bytelevel"));
    static final Tokenizer LLAMA3 = Tokenizer.load(References.dir("llama3_bytelevel"));
    static final Tokenizer LLAMA2 = Tokenizer.load(References.dir("llama2_sentencepiece"));

    @Property(tries = 300)
    void byteLevelEncodingIsLosslessOnAnyText(@ForAll("texts") String text, @ForAll("specialsInside") String special) {
        String s = text + special + text;
        assertThat(GPT2.decode(GPT2.encode(s, false), false)).isEqualTo(s);
        int[] withBos = LLAMA3.encode(s, true);
        assertThat(withBos[0]).isEqualTo(0);
        assertThat(LLAMA3.decode(withBos, true)).isEqualTo(s.replace("<|begin_of_text|>", "").replace("<|eot_id|>", ""));
    }

    @Provide
    Arbitrary<String> specialsInside() { return Arbitraries.of("", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>"); }

    @Property(tries = 300)
    void byteFallbackEncodingIsLosslessOnTextWithoutItsMarks(@ForAll("texts") String text) {
        String s = text.replace("▁", "");
        // Prepend + Replace, then decoded by Replace, ByteFallback, Fuse and Strip of the one prepended space
        assertThat(LLAMA2.decode(LLAMA2.encode(s, true), true)).isEqualTo(s);
    }

}
