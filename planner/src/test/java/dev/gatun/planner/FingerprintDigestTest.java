package dev.gatun.planner;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

class FingerprintDigestTest {

    @Test
    void piecewiseDigestEqualsTheDigestOfTheWholeText() {
        var pieces = List.of("world=2\n", "  é ü ß ", "x".repeat(70_000), "\uD83D\uDE00 emoji\n", "", "end");
        var d = new Fingerprint.Digest();
        pieces.forEach(d::append);
        assertThat(d.hex()).isEqualTo(Fingerprint.of(String.join("", pieces)));
    }

    @Test
    void strippingMatchesStringStripAcrossPieces() {
        List<List<String>> cases = List.of(
                List.of("  kernel a\n", "\n\n", "kernel b\n\n"),
                List.of("\n\n", "   ", "a", " \t", "\n", "b", "\n\n"),
                List.of("   ", "\n"),
                List.of(),
                List.of("a b  c", "  d "),
                List.of("\u2003x\u2003", "\u2003"));
        for (var pieces : cases) {
            var sb = new StringBuilder();
            var strip = new Fingerprint.Stripping(new Fingerprint.Text(sb));
            pieces.forEach(strip::append);
            strip.finish();
            assertThat(sb.toString()).as(pieces.toString()).isEqualTo(String.join("", pieces).strip());
        }
    }
}
