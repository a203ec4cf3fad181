package dev.gatun.ir.json;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A minimal JSON value model for Gatun's own files (graphs now, plans later). Internal: no third-party JSON
 * library, so the IR stays dependency-light and the output is byte-for-byte under our control.
 *
 * <p>Numbers keep their source text so that integers of any size and doubles round-trip exactly; objects keep
 * key order so written files are deterministic.
 */
public sealed interface Json {

    /** A short name of the value's kind, as error messages show it ("object", "string"...). */
    String kind();

    record Obj(Map<String, Json> fields) implements Json {
        public Obj { fields = Collections.unmodifiableMap(new LinkedHashMap<>(fields)); }
        public Json get(String key) { return fields.get(key); }
        @Override public String kind() { return "object"; }
    }

    record Arr(List<Json> items) implements Json {
        public Arr { items = List.copyOf(items); }
        public int size() { return items.size(); }
        public Json get(int i) { return items.get(i); }
        @Override public String kind() { return "array"; }
    }

    record Str(String value) implements Json {
        @Override public String kind() { return "string"; }
    }

    /** A number, kept as its JSON text. */
    record Num(String text) implements Json {
        public static Num of(long v) { return new Num(Long.toString(v)); }

        /** A finite double in its shortest exactly-round-tripping form. */
        public static Num of(double v) {
            if (!Double.isFinite(v)) throw new dev.gatun.ir.GraphException("JSON numbers are finite, got " + v);
            return new Num(Double.toString(v));
        }

        public boolean isIntegral() { return text.indexOf('.') < 0 && text.indexOf('e') < 0 && text.indexOf('E') < 0; }
        public double doubleValue() { return Double.parseDouble(text); }
        @Override public String kind() { return "number"; }
    }

    record Bool(boolean value) implements Json {
        @Override public String kind() { return "boolean"; }
    }

    enum Null implements Json {
        INSTANCE;
        @Override public String kind() { return "null"; }
    }

    static Json of(String s) { return s == null ? Null.INSTANCE : new Str(s); }

    static Json of(boolean b) { return new Bool(b); }

    static Json of(long v) { return Num.of(v); }

    /** Parses a JSON text; a syntax error is a {@link JsonSyntaxException} with line and column. */
    static Json parse(String text) { return new JsonReader(text).readDocument(); }

    /** Pretty, deterministic JSON text: two-space indent, arrays of scalars on one line. */
    static String write(Json value) { return JsonWriter.write(value); }
}
