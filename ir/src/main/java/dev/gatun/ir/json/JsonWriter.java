package dev.gatun.ir.json;

import java.util.Map;

/**
 * Writes JSON with two-space indentation. Arrays whose items are all scalars stay on one line (shapes,
 * dims, constant values) so graph files read like the text form; everything else gets one item a line.
 */
final class JsonWriter {
    private final StringBuilder out = new StringBuilder();

    private JsonWriter() {}

    static String write(Json v) {
        var w = new JsonWriter();
        w.value(v, 0);
        return w.out.append('\n').toString();
    }

    private void value(Json v, int indent) {
        switch (v) {
            case Json.Obj o -> object(o, indent);
            case Json.Arr a -> array(a, indent);
            case Json.Str s -> quote(s.value());
            case Json.Num n -> out.append(n.text());
            case Json.Bool b -> out.append(b.value());
            case Json.Null n -> out.append("null");
        }
    }

    private void object(Json.Obj o, int indent) {
        if (o.fields().isEmpty()) { out.append("{}"); return; }
        out.append("{\n");
        int i = 0;
        for (Map.Entry<String, Json> e : o.fields().entrySet()) {
            pad(indent + 1);
            quote(e.getKey());
            out.append(": ");
            value(e.getValue(), indent + 1);
            out.append(++i < o.fields().size() ? ",\n" : "\n");
        }
        pad(indent);
        out.append('}');
    }

    private void array(Json.Arr a, int indent) {
        if (a.items().isEmpty()) { out.append("[]"); return; }
        boolean flat = a.items().stream().noneMatch(x -> x instanceof Json.Obj || x instanceof Json.Arr);
        if (flat) {
            out.append('[');
            for (int i = 0; i < a.size(); i++) {
                if (i > 0) out.append(", ");
                value(a.get(i), indent);
            }
            out.append(']');
            return;
        }
        out.append("[\n");
        for (int i = 0; i < a.size(); i++) {
            pad(indent + 1);
            value(a.get(i), indent + 1);
            out.append(i + 1 < a.size() ? ",\n" : "\n");
        }
        pad(indent);
        out.append(']');
    }

    private void pad(int indent) { out.append("  ".repeat(indent)); }

    private void quote(String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
                }
            }
        }
        out.append('"');
    }
}
