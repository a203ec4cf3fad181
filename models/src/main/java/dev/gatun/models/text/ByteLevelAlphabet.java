package dev.gatun.models.text;

import java.nio.charset.StandardCharsets;

/**
 * GPT-2's byte-to-character alphabet: each of the 256 byte values is shown as one printable character, so that a
 * byte-level BPE works on text with no control characters or spaces. The printable Latin-1 bytes ({@code !}..{@code ~},
 * {@code ¡}..{@code ¬}, {@code ®}..{@code ÿ}) stand for themselves; the other 68 take U+0100 onwards in byte order
 * (so a space is {@code Ġ} and a newline {@code Ċ}). Byte-level pre-tokenizers write text in it and the byte-level
 * decoder reads it back.
 */
final class ByteLevelAlphabet {
    private static final char[] BYTE_TO_CHAR = new char[256];
    private static final int[] CHAR_TO_BYTE = new int[0x144];

    static {
        java.util.Arrays.fill(CHAR_TO_BYTE, -1);
        int n = 0;
        for (int b = 0; b < 256; b++) {
            boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            char c = printable ? (char) b : (char) (256 + n++);
            BYTE_TO_CHAR[b] = c;
            CHAR_TO_BYTE[c] = b;
        }
    }

    private ByteLevelAlphabet() {}

    /** The character that stands for a byte. */
    static char charOf(int b) { return BYTE_TO_CHAR[b & 0xFF]; }

    /** The text's UTF-8 bytes, each written as its character. */
    static String encode(String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        char[] out = new char[bytes.length];
        for (int i = 0; i < bytes.length; i++) out[i] = BYTE_TO_CHAR[bytes[i] & 0xFF];
        return new String(out);
    }

    /**
     * Appends the bytes a token stands for; a token with any character outside the alphabet (an added token such as
     * {@code <|im_start|>} written in plain text is inside it, but one in Chinese is not) appends its own UTF-8 bytes,
     * as the {@code tokenizers} library does.
     */
    static void appendBytes(String token, java.io.ByteArrayOutputStream out) {
        for (int i = 0; i < token.length(); i++) {
            char c = token.charAt(i);
            if (c >= CHAR_TO_BYTE.length || CHAR_TO_BYTE[c] < 0) {
                out.writeBytes(token.getBytes(StandardCharsets.UTF_8));
                return;
            }
        }
        for (int i = 0; i < token.length(); i++) out.write(CHAR_TO_BYTE[token.charAt(i)]);
    }
}
