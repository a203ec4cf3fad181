package dev.gatun.models.text;

import dev.gatun.ir.json.Json;
import dev.gatun.ir.json.JsonSyntaxException;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * One JSON object of a tokenizer file and the path to it ({@code pre_tokenizer.pretokenizers[1]}), so that every
 * refusal names the file, the place in it and what was wrong there.
 */
record JsonNode(Path file, String where, Json.Obj obj) {

    /** The file's top-level object; a file that cannot be read or is not a JSON object is refused naming it. */
    static JsonNode read(Path file) {
        String text;
        try {
            text = Files.readString(file, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new TokenizerException(file + ": cannot be read: " + e, e);
        }
        Json root;
        try {
            root = Json.parse(text.strip());
        } catch (JsonSyntaxException e) {
            throw new TokenizerException(file + ": not JSON: " + e.getMessage(), e);
        }
        if (!(root instanceof Json.Obj o)) throw new TokenizerException(file + ": a JSON " + root.kind() + ", not an object");
        return new JsonNode(file, "", o);
    }

    /** An error about this object (or one of its fields, when {@code what} starts with the field's name). */
    TokenizerException error(String what) {
        return new TokenizerException(file.getFileName() + ": " + (where.isEmpty() ? "" : where + " ") + what + " (" + file + ")");
    }

    private String at(String key) { return where.isEmpty() ? key : where + "." + key; }

    /** The value of a field, or null when it is missing or JSON null. */
    Json get(String key) {
        Json v = obj.get(key);
        return v instanceof Json.Null ? null : v;
    }

    /** The object's {@code type} field. */
    String type() { return string("type"); }

    /** A refusal of this object's {@code type}, listing the ones that are supported. */
    TokenizerException unsupportedType(String kind, String supported) {
        return new TokenizerException(file.getFileName() + ": " + kind + (where.equals(kind) ? "" : " at " + where) + " type '" + type()
                + "' is not supported; supported: " + supported + " (" + file + ")");
    }

    String string(String key) {
        Json v = get(key);
        if (v == null) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is missing (" + file + ")");
        if (!(v instanceof Json.Str s)) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is a JSON " + v.kind() + ", not a string (" + file + ")");
        return s.value();
    }

    /** A string field, or null when it is missing or null. */
    String optString(String key) { return get(key) == null ? null : string(key); }

    boolean bool(String key, boolean orElse) {
        Json v = get(key);
        if (v == null) return orElse;
        if (!(v instanceof Json.Bool b)) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is a JSON " + v.kind() + ", not true or false (" + file + ")");
        return b.value();
    }

    int integer(String key, int orElse) {
        Json v = get(key);
        return v == null ? orElse : integer(v, at(key));
    }

    int integer(Json v, String name) {
        if (!(v instanceof Json.Num n) || !n.isIntegral()) throw new TokenizerException(file.getFileName() + ": field '" + name + "' is " + (v instanceof Json.Num n ? n.text() : "a JSON " + v.kind()) + ", not an integer (" + file + ")");
        long x;
        try {
            x = Long.parseLong(n.text());
        } catch (NumberFormatException e) {
            x = -1;
        }
        if (x < 0 || x > Integer.MAX_VALUE) throw new TokenizerException(file.getFileName() + ": field '" + name + "' is " + n.text() + ", not an integer from 0 to " + Integer.MAX_VALUE + " (" + file + ")");
        return (int) x;
    }

    /** A field that holds an object, or null when it is missing or null. */
    JsonNode optChild(String key) {
        Json v = get(key);
        if (v == null) return null;
        if (!(v instanceof Json.Obj o)) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is a JSON " + v.kind() + ", not an object (" + file + ")");
        return new JsonNode(file, at(key), o);
    }

    JsonNode child(String key) {
        JsonNode c = optChild(key);
        if (c == null) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is missing (" + file + ")");
        return c;
    }

    Json.Arr array(String key) {
        Json v = get(key);
        if (v == null) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is missing (" + file + ")");
        if (!(v instanceof Json.Arr a)) throw new TokenizerException(file.getFileName() + ": field '" + at(key) + "' is a JSON " + v.kind() + ", not an array (" + file + ")");
        return a;
    }

    /** A field that holds an array of objects. */
    List<JsonNode> children(String key) {
        Json.Arr a = array(key);
        List<JsonNode> out = new ArrayList<>(a.size());
        for (int i = 0; i < a.size(); i++) {
            String name = at(key) + "[" + i + "]";
            if (!(a.get(i) instanceof Json.Obj o)) throw new TokenizerException(file.getFileName() + ": field '" + name + "' is a JSON " + a.get(i).kind() + ", not an object (" + file + ")");
            out.add(new JsonNode(file, name, o));
        }
        return out;
    }

    /**
     * A pattern field, {@code {"String": s}} (matched literally) or {@code {"Regex": r}} (Oniguruma syntax, see
     * {@link OnigRegex}).
     */
    Pattern pattern(String key) {
        JsonNode p = child(key);
        String s = p.optString("String");
        if (s != null) return Pattern.compile(s, Pattern.LITERAL);
        String r = p.optString("Regex");
        if (r == null) throw error("field '" + key + "' holds neither \"String\" nor \"Regex\"");
        try {
            return OnigRegex.compile(r);
        } catch (PatternSyntaxException e) {
            throw error("field '" + key + "' holds a regex Java cannot compile: " + e.getDescription() + " at index " + e.getIndex() + " of " + r);
        }
    }
}
