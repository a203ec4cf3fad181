package dev.gatun.models.text;

import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * An Oniguruma regex of a {@code tokenizer.json} (the Rust library compiles them with Oniguruma) as a Java
 * {@link Pattern}. The syntaxes agree on what tokenizer regexes use, given Unicode character classes (Oniguruma's
 * {@code \s}, {@code \w}, {@code \d} are Unicode-aware, Java's only with {@code UNICODE_CHARACTER_CLASS}); where they
 * differ the text is rewritten: Oniguruma's {@code \h}/{@code \H} are hexadecimal digits (Java's would be horizontal
 * white space), its {@code \p{Han}} names a script that Java writes {@code \p{IsHan}}, and its {@code \p{^L}} is
 * Java's {@code \P{L}}.
 */
final class OnigRegex {
    private OnigRegex() {}

    static Pattern compile(String onig) {
        return Pattern.compile(toJava(onig), Pattern.UNICODE_CHARACTER_CLASS);
    }

    static String toJava(String r) {
        StringBuilder out = new StringBuilder(r.length() + 8);
        int classDepth = 0;
        for (int i = 0; i < r.length(); i++) {
            char c = r.charAt(i);
            if (c != '\\' || i + 1 >= r.length()) {
                if (c == '[') classDepth++;
                else if (c == ']' && classDepth > 0) classDepth--;
                out.append(c);
                continue;
            }
            char e = r.charAt(++i);
            if (e == 'h') out.append(classDepth > 0 ? "0-9a-fA-F" : "[0-9a-fA-F]");
            else if (e == 'H' && classDepth == 0) out.append("[^0-9a-fA-F]");
            else if (e == 'H') throw new PatternSyntaxException("\\H inside a character class has no Java equivalent here", r, i);
            else if ((e == 'p' || e == 'P') && i + 1 < r.length() && r.charAt(i + 1) == '{' && r.indexOf('}', i) > 0) {
                int close = r.indexOf('}', i);
                String name = r.substring(i + 2, close);
                boolean negated = name.startsWith("^");
                if (negated) name = name.substring(1);
                out.append('\\').append(negated == (e == 'p') ? 'P' : 'p').append('{').append(javaProperty(name)).append('}');
                i = close;
            } else {
                out.append('\\').append(e);
            }
        }
        return out.toString();
    }

    /** The name as Java knows the property: as it stands if Java takes it, else with the "Is" of scripts and binary properties. */
    private static String javaProperty(String name) {
        for (String candidate : new String[]{name, "Is" + name}) {
            try {
                Pattern.compile("\\p{" + candidate + "}", Pattern.UNICODE_CHARACTER_CLASS);
                return candidate;
            } catch (PatternSyntaxException e) {
                // try the next spelling
            }
        }
        return name;   // Pattern.compile reports it
    }
}
