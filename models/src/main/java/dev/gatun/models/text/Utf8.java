package dev.gatun.models.text;

/**
 * UTF-8 decoding as the Rust {@code tokenizers} library does it, so that decoded text matches it character for
 * character where the bytes are not valid UTF-8 (a token sequence cut inside a character): {@link #lossy} puts one
 * U+FFFD in place of each maximal ill-formed subpart, as Rust's {@code String::from_utf8_lossy} does, and
 * {@link #strict} says whether the bytes are valid at all ({@code String::from_utf8}), which the byte-fallback decoder
 * needs because it replaces every byte of an invalid run.
 */
final class Utf8 {
    private Utf8() {}

    /** The text of the bytes, one U+FFFD for each maximal ill-formed subpart. */
    static String lossy(byte[] b, int len) {
        StringBuilder out = new StringBuilder(len);
        int i = 0;
        while (i < len) {
            int used = decodeOne(b, i, len, out);
            if (used < 0) {
                out.append('\uFFFD');
                i += -used;
            } else {
                i += used;
            }
        }
        return out.toString();
    }

    /** The text of the bytes, or null when they are not valid UTF-8. */
    static String strict(byte[] b, int len) {
        StringBuilder out = new StringBuilder(len);
        for (int i = 0; i < len; ) {
            int used = decodeOne(b, i, len, out);
            if (used < 0) return null;
            i += used;
        }
        return out.toString();
    }

    /**
     * Decodes the character at {@code i} into {@code out} and returns its byte count, or returns minus the length of
     * the ill-formed subpart that starts there (at least 1) and appends nothing.
     */
    private static int decodeOne(byte[] b, int i, int len, StringBuilder out) {
        int b0 = b[i] & 0xFF;
        if (b0 < 0x80) {
            out.append((char) b0);
            return 1;
        }
        int width, lo = 0x80, hi = 0xBF;
        if (b0 >= 0xC2 && b0 <= 0xDF) width = 2;
        else if (b0 >= 0xE0 && b0 <= 0xEF) {
            width = 3;
            if (b0 == 0xE0) lo = 0xA0;
            if (b0 == 0xED) hi = 0x9F;
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            width = 4;
            if (b0 == 0xF0) lo = 0x90;
            if (b0 == 0xF4) hi = 0x8F;
        } else return -1;
        if (i + 1 >= len) return -1;
        int b1 = b[i + 1] & 0xFF;
        if (b1 < lo || b1 > hi) return -1;
        int cp = (b0 & (0x7F >> width)) << 6 | (b1 & 0x3F);
        for (int k = 2; k < width; k++) {
            if (i + k >= len || (b[i + k] & 0xC0) != 0x80) return -k;
            cp = cp << 6 | (b[i + k] & 0x3F);
        }
        out.appendCodePoint(cp);
        return width;
    }
}
