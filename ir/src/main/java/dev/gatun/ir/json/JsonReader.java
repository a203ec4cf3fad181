package dev.gatun.ir.json;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A recursive-descent parser for RFC 8259 JSON that reports the line and column of the first error. */
final class JsonReader {
    private static final int MAX_DEPTH = 512; // keeps a hostile file from overflowing the stack

    private final String s;
    private int pos, depth;

    JsonReader(String text) { this.s = text; }

    Json readDocument() {
        skipWs();
        Json v = value();
        skipWs();
        if (pos < s.length()) throw error("expected the end of the document after the top-level value, found " + found());
        return v;
    }

    private Json value() {
        if (pos >= s.length()) throw error("expected a value (object, array, string, number, true, false or null), found the end of the text");
        char c = s.charAt(pos);
        return switch (c) {
            case '{' -> object();
            case '[' -> array();
            case '"' -> new Json.Str(string());
            case 't' -> literal("true", new Json.Bool(true));
            case 'f' -> literal("false", new Json.Bool(false));
            case 'n' -> literal("null", Json.Null.INSTANCE);
            default -> {
                if (c == '-' || (c >= '0' && c <= '9')) yield number();
                throw error("expected a value (object, array, string, number, true, false or null), found " + found());
            }
        };
    }

    private Json object() {
        enter();
        pos++; // '{'
        Map<String, Json> fields = new LinkedHashMap<>();
        skipWs();
        if (peek() == '}') { pos++; depth--; return new Json.Obj(fields); }
        while (true) {
            skipWs();
            if (peek() != '"') throw error("expected a string key in an object, found " + found());
            int keyAt = pos;   // its line and column are counted only for an error: counting each key's would be quadratic
            String key = string();
            if (fields.containsKey(key)) {
                pos = keyAt;
                throw error("duplicate key \"" + key + "\"");
            }
            skipWs();
            expect(':', "':' after the key \"" + key + "\"");
            skipWs();
            fields.put(key, value());
            skipWs();
            if (peek() == ',') { pos++; continue; }
            if (peek() == '}') { pos++; depth--; return new Json.Obj(fields); }
            throw error("expected ',' or '}' in an object, found " + found());
        }
    }

    private Json array() {
        enter();
        pos++; // '['
        List<Json> items = new ArrayList<>();
        skipWs();
        if (peek() == ']') { pos++; depth--; return new Json.Arr(items); }
        while (true) {
            skipWs();
            items.add(value());
            skipWs();
            if (peek() == ',') { pos++; continue; }
            if (peek() == ']') { pos++; depth--; return new Json.Arr(items); }
            throw error("expected ',' or ']' in an array, found " + found());
        }
    }

    private String string() {
        pos++; // opening quote
        var sb = new StringBuilder();
        while (true) {
            if (pos >= s.length()) throw error("expected '\"' to close a string, found the end of the text");
            char c = s.charAt(pos);
            if (c == '"') { pos++; return sb.toString(); }
            if (c < 0x20) throw error("expected an escape sequence instead of a raw control character (code " + (int) c + ") in a string");
            if (c != '\\') { sb.append(c); pos++; continue; }
            pos++;
            if (pos >= s.length()) throw error("expected an escape character after '\\', found the end of the text");
            char e = s.charAt(pos++);
            switch (e) {
                case '"' -> sb.append('"');
                case '\\' -> sb.append('\\');
                case '/' -> sb.append('/');
                case 'b' -> sb.append('\b');
                case 'f' -> sb.append('\f');
                case 'n' -> sb.append('\n');
                case 'r' -> sb.append('\r');
                case 't' -> sb.append('\t');
                case 'u' -> {
                    if (pos + 4 > s.length()) throw error("expected 4 hex digits after \\u");
                    int v = 0;
                    for (int i = 0; i < 4; i++) {
                        int d = Character.digit(s.charAt(pos), 16);
                        if (d < 0) throw error("expected a hex digit in a \\u escape, found " + found());
                        v = v * 16 + d;
                        pos++;
                    }
                    sb.append((char) v);
                }
                default -> { pos--; throw error("expected an escape sequence (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u) after '\\', found " + found()); }
            }
        }
    }

    private Json number() {
        int start = pos;
        if (peek() == '-') pos++;
        if (peek() == '0') pos++;
        else if (isDigit(peek())) while (isDigit(peek())) pos++;
        else throw error("expected a digit in a number, found " + found());
        if (peek() == '.') {
            pos++;
            if (!isDigit(peek())) throw error("expected a digit after the decimal point, found " + found());
            while (isDigit(peek())) pos++;
        }
        if (peek() == 'e' || peek() == 'E') {
            pos++;
            if (peek() == '+' || peek() == '-') pos++;
            if (!isDigit(peek())) throw error("expected a digit in the exponent, found " + found());
            while (isDigit(peek())) pos++;
        }
        return new Json.Num(s.substring(start, pos));
    }

    private Json literal(String word, Json v) {
        if (!s.startsWith(word, pos)) throw error("expected a value (object, array, string, number, true, false or null), found " + found());
        pos += word.length();
        return v;
    }

    private void enter() {
        if (++depth > MAX_DEPTH) throw error("expected at most " + MAX_DEPTH + " levels of nesting");
    }

    private void expect(char c, String what) {
        if (peek() != c) throw error("expected " + what + ", found " + found());
        pos++;
    }

    private void skipWs() {
        while (pos < s.length()) {
            char c = s.charAt(pos);
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') pos++;
            else break;
        }
    }

    private char peek() { return pos < s.length() ? s.charAt(pos) : '\0'; }

    private static boolean isDigit(char c) { return c >= '0' && c <= '9'; }

    private String found() {
        if (pos >= s.length()) return "the end of the text";
        char c = s.charAt(pos);
        if (c < 0x20) return "a control character (code " + (int) c + ")";
        int end = pos + 1;
        while (end < s.length() && end < pos + 12 && Character.isLetterOrDigit(s.charAt(end)) && Character.isLetterOrDigit(c)) end++;
        return "'" + s.substring(pos, end) + "'";
    }

    private int line() { return line(pos); }

    private int line(int at) {
        int l = 1;
        for (int i = 0; i < at && i < s.length(); i++) if (s.charAt(i) == '\n') l++;
        return l;
    }

    private int column() { return column(pos); }

    private int column(int at) {
        int i = Math.min(at, s.length());
        int c = 1;
        while (i > 0 && s.charAt(i - 1) != '\n') { i--; c++; }
        return c;
    }

    private JsonSyntaxException error(String msg) { return new JsonSyntaxException(line(), column(), msg); }
}
