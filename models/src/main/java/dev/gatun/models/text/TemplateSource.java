package dev.gatun.models.text;

/**
 * A chat template's text, after Jinja's newline normalization (every {@code \r\n}, {@code \r} and {@code \n} a
 * {@code \n}, one trailing newline dropped), and where it came from, so that an error can say
 * "chat_template.jinja line 3, column 14".
 */
record TemplateSource(String origin, String text) {

    static TemplateSource of(String origin, String raw) {
        String s = raw.replace("\r\n", "\n").replace('\r', '\n');
        if (s.endsWith("\n")) s = s.substring(0, s.length() - 1);
        return new TemplateSource(origin, s);
    }

    /** "ORIGIN line L, column C" of an offset in the text (both 1-based, columns in characters). */
    String where(int offset) {
        int line = 1, lineStart = 0;
        for (int i = 0; i < offset && i < text.length(); i++) {
            if (text.charAt(i) == '\n') {
                line++;
                lineStart = i + 1;
            }
        }
        return origin + " line " + line + ", column " + (text.codePointCount(lineStart, Math.min(offset, text.length())) + 1);
    }

    TokenizerException error(int offset, String what) { return new TokenizerException(where(offset) + ": " + what); }
}
