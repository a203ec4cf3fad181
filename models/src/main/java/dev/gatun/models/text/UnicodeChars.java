package dev.gatun.models.text;

/**
 * The character classes the {@code tokenizers} library takes from Rust, written out because Java's own differ:
 * Rust's {@code char::is_whitespace} is the Unicode White_Space property (Java's {@code Character.isWhitespace}
 * leaves out the no-break spaces), {@code char::is_numeric} is every Number category, and the regex {@code \w} is
 * Alphabetic, marks, decimal digits, connector punctuation and the joiners.
 */
final class UnicodeChars {
    private UnicodeChars() {}

    /** Unicode's White_Space property (Rust's {@code char::is_whitespace}, Oniguruma's and Java's Unicode {@code \s}). */
    static boolean isWhiteSpace(int cp) {
        return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680
                || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F
                || cp == 0x3000;
    }

    /** Rust's {@code char::is_numeric}: general category Nd, Nl or No. */
    static boolean isNumeric(int cp) {
        int t = Character.getType(cp);
        return t == Character.DECIMAL_DIGIT_NUMBER || t == Character.LETTER_NUMBER || t == Character.OTHER_NUMBER;
    }

    /** The Rust regex {@code \w}: Alphabetic, a mark, a decimal digit, connector punctuation or a joiner. */
    static boolean isWordChar(int cp) {
        if (Character.isAlphabetic(cp) || cp == 0x200C || cp == 0x200D) return true;
        int t = Character.getType(cp);
        return t == Character.NON_SPACING_MARK || t == Character.ENCLOSING_MARK || t == Character.COMBINING_SPACING_MARK
                || t == Character.DECIMAL_DIGIT_NUMBER || t == Character.CONNECTOR_PUNCTUATION;
    }

    /** ASCII punctuation or a Unicode punctuation category (the Punctuation pre-tokenizer's test). */
    static boolean isPunctuation(int cp) {
        if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
        int t = Character.getType(cp);
        return t == Character.CONNECTOR_PUNCTUATION || t == Character.DASH_PUNCTUATION || t == Character.START_PUNCTUATION
                || t == Character.END_PUNCTUATION || t == Character.INITIAL_QUOTE_PUNCTUATION
                || t == Character.FINAL_QUOTE_PUNCTUATION || t == Character.OTHER_PUNCTUATION;
    }

    /** Python's {@code str.isspace} for one character (what Jinja's {@code trim} strips). */
    static boolean isPythonSpace(int cp) {
        return isWhiteSpace(cp) || (cp >= 0x1C && cp <= 0x1F);
    }
}
