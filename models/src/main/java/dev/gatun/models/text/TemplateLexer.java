package dev.gatun.models.text;

import java.util.ArrayList;
import java.util.List;

/**
 * Splits a chat template into text and tags, and a tag into tokens, as Jinja's lexer does with the settings
 * transformers renders chat templates with: {@code trim_blocks} (the newline right after a block or comment tag is
 * dropped) and {@code lstrip_blocks} (spaces and tabs between a line's start and a block or comment tag are dropped),
 * besides the {@code -} of {@code {%- ... -%}} (all white space on that side dropped) and the {@code +} that
 * keeps it.
 */
final class TemplateLexer {

    enum TokType { NAME, STRING, INT, OP }

    record Tok(TokType type, String text, int at) {
        boolean is(String s) { return (type == TokType.OP || type == TokType.NAME) && text.equals(s); }
    }

    /** A piece of a template: literal text, a {@code {{ }}} ({@code output}) or a {@code {% %}} tag. */
    sealed interface Chunk {
        int at();
    }

    record Text(String text, int at) implements Chunk {}

    record Tag(boolean output, List<Tok> tokens, int at, int end) implements Chunk {}

    private static final String[] OPERATORS = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
            "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

    private final TemplateSource src;
    private final String s;
    private int pos;
    private boolean lineStarting = true;

    private TemplateLexer(TemplateSource src) {
        this.src = src;
        this.s = src.text();
    }

    static List<Chunk> lex(TemplateSource src) { return new TemplateLexer(src).chunks(); }

    private List<Chunk> chunks() {
        List<Chunk> out = new ArrayList<>();
        while (pos < s.length()) {
            int t = nextTagStart(pos);
            if (t < 0) {
                out.add(new Text(s.substring(pos), pos));
                break;
            }
            char kind = s.charAt(t + 1);
            char sign = t + 2 < s.length() && (s.charAt(t + 2) == '-' || s.charAt(t + 2) == '+') ? s.charAt(t + 2) : 0;
            String text = strippedText(s.substring(pos, t), kind, sign);
            if (!text.isEmpty()) out.add(new Text(text, pos));
            pos = t + 2 + (sign != 0 ? 1 : 0);
            if (kind == '#') comment(t);
            else out.add(tag(kind == '{', t));
        }
        return out;
    }

    private int nextTagStart(int from) {
        for (int i = s.indexOf('{', from); i >= 0 && i + 1 < s.length(); i = s.indexOf('{', i + 1)) {
            char c = s.charAt(i + 1);
            if (c == '{' || c == '%' || c == '#') return i;
        }
        return -1;
    }

    /** The text before a tag, with the white space the tag's sign or lstrip_blocks takes away. */
    private String strippedText(String text, char kind, char sign) {
        if (sign == '-') return rstrip(text);
        if (sign == '+' || kind == '{') return text;
        int lineStart = text.lastIndexOf('\n') + 1;
        if ((lineStart > 0 || lineStarting) && lineStart < text.length() && isBlank(text, lineStart)) return text.substring(0, lineStart);
        return text;
    }

    private static boolean isBlank(String t, int from) {
        for (int i = from; i < t.length(); i++) if (!UnicodeChars.isPythonSpace(t.charAt(i))) return false;
        return true;
    }

    private static String rstrip(String t) {
        int end = t.length();
        while (end > 0 && UnicodeChars.isPythonSpace(t.codePointBefore(end))) end -= Character.charCount(t.codePointBefore(end));
        return t.substring(0, end);
    }

    private void comment(int start) {
        int end = s.indexOf("#}", pos);
        if (end < 0) throw src.error(start, "the comment {# is not closed by #}");
        char sign = end > pos && (s.charAt(end - 1) == '-' || s.charAt(end - 1) == '+') ? s.charAt(end - 1) : 0;
        pos = end + 2;
        afterBlockEnd(sign);
    }

    /** Past a block or comment end: its {@code -} eats the white space after it, else trim_blocks one newline. */
    private void afterBlockEnd(char sign) {
        if (sign == '-') {
            while (pos < s.length() && UnicodeChars.isPythonSpace(s.charAt(pos))) pos++;
        } else if (sign != '+' && pos < s.length() && s.charAt(pos) == '\n') {
            pos++;
        }
        lineStarting = s.charAt(pos - 1) == '\n';
    }

    private Tag tag(boolean output, int start) {
        String end = output ? "}}" : "%}";
        List<Tok> toks = new ArrayList<>();
        while (true) {
            if (pos >= s.length()) throw src.error(start, "the tag " + (output ? "{{" : "{%") + " is not closed by " + end);
            if (s.startsWith("-" + end, pos) || (!output && s.startsWith("+" + end, pos))) {
                char sign = s.charAt(pos);
                pos += 3;
                if (output) afterOutputEnd(sign);
                else afterBlockEnd(sign);
                return new Tag(output, toks, start, pos);
            }
            if (s.startsWith(end, pos)) {
                pos += 2;
                if (output) afterOutputEnd((char) 0);
                else afterBlockEnd((char) 0);
                return new Tag(output, toks, start, pos);
            }
            char c = s.charAt(pos);
            if (UnicodeChars.isPythonSpace(c)) pos++;
            else toks.add(token(c));
        }
    }

    private void afterOutputEnd(char sign) {
        if (sign == '-') while (pos < s.length() && UnicodeChars.isPythonSpace(s.charAt(pos))) pos++;
        lineStarting = s.charAt(pos - 1) == '\n';
    }

    private Tok token(char c) {
        int at = pos;
        if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            while (pos < s.length() && (s.charAt(pos) == '_' || Character.isLetterOrDigit(s.charAt(pos)) && s.charAt(pos) < 128)) pos++;
            return new Tok(TokType.NAME, s.substring(at, pos), at);
        }
        if (c >= '0' && c <= '9') {
            while (pos < s.length() && (Character.isDigit(s.charAt(pos)) && s.charAt(pos) < 128 || s.charAt(pos) == '_')) pos++;
            if (pos < s.length() && (s.charAt(pos) == '.' && pos + 1 < s.length() && Character.isDigit(s.charAt(pos + 1)) || s.charAt(pos) == 'e' || s.charAt(pos) == 'E'))
                throw src.error(at, "a number with a fraction or an exponent is not supported (integers are)");
            return new Tok(TokType.INT, s.substring(at, pos).replace("_", ""), at);
        }
        if (c == '\'' || c == '"') return new Tok(TokType.STRING, string(c), at);
        for (String op : OPERATORS) {
            if (s.startsWith(op, pos)) {
                pos += op.length();
                return new Tok(TokType.OP, op, at);
            }
        }
        throw src.error(at, "unexpected character '" + c + "' in a tag");
    }

    /** A string literal's value: Python's escapes, as Jinja reads them. */
    private String string(char quote) {
        int start = pos++;
        StringBuilder out = new StringBuilder();
        while (true) {
            if (pos >= s.length()) throw src.error(start, "the string literal is not closed by " + quote);
            char c = s.charAt(pos++);
            if (c == quote) return out.toString();
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (pos >= s.length()) throw src.error(start, "the string literal is not closed by " + quote);
            escape(out, start);
        }
    }

    private void escape(StringBuilder out, int start) {
        char e = s.charAt(pos++);
        switch (e) {
            case '\n' -> {}   // a line continuation
            case '\\', '\'', '"' -> out.append(e);
            case 'n' -> out.append('\n');
            case 't' -> out.append('\t');
            case 'r' -> out.append('\r');
            case 'a' -> out.append('\u0007');
            case 'b' -> out.append('\b');
            case 'f' -> out.append('\f');
            case 'v' -> out.append('\u000B');
            case 'x' -> out.appendCodePoint(hex(2, start));
            case 'u' -> out.appendCodePoint(hex(4, start));
            case 'U' -> out.appendCodePoint(hex(8, start));
            case 'N' -> out.appendCodePoint(named(start));
            default -> {
                if (e >= '0' && e <= '7') {
                    int v = e - '0';
                    for (int k = 0; k < 2 && pos < s.length() && s.charAt(pos) >= '0' && s.charAt(pos) <= '7'; k++) v = v * 8 + (s.charAt(pos++) - '0');
                    out.append((char) v);
                } else {
                    out.append('\\').append(e);   // Python keeps an unknown escape as it stands
                }
            }
        }
    }

    private int hex(int digits, int start) {
        if (pos + digits > s.length()) throw src.error(start, "a truncated \\x, \\u or \\U escape in a string literal");
        try {
            int v = Integer.parseUnsignedInt(s.substring(pos, pos + digits), 16);
            if (!Character.isValidCodePoint(v)) throw src.error(start, "the escape in the string literal is not a Unicode character");
            pos += digits;
            return v;
        } catch (NumberFormatException ex) {
            throw src.error(start, "a malformed \\x, \\u or \\U escape in a string literal");
        }
    }

    private int named(int start) {
        int close = s.indexOf('}', pos);
        if (!s.startsWith("{", pos) || close < 0) throw src.error(start, "a malformed \\N{...} escape in a string literal");
        String name = s.substring(pos + 1, close);
        pos = close + 1;
        try {
            return Character.codePointOf(name);
        } catch (IllegalArgumentException ex) {   // the JDK's only lookup of a character name throws for an unknown one
            throw src.error(start, "\\N{" + name + "} names no Unicode character");
        }
    }
}
