package dev.gatun.cuda;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * NVRTC options: language standard, macro definitions, include paths, an optional explicit architecture and other
 * flags. Immutable; {@link #parse(String)} reads a command-line style string; {@link #toArgs(String)} gives the
 * argument list, with {@code --gpu-architecture} taken from the device unless set explicitly.
 */
public record ProgramOptions(String std, Map<String, String> defines, List<String> includePaths,
                             Optional<String> arch, List<String> flags) {

    public ProgramOptions {
        defines = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(defines));
        includePaths = List.copyOf(includePaths);
        flags = List.copyOf(flags);
        if (std != null && !std.matches("c\\+\\+\\d\\d")) {
            throw new IllegalArgumentException("unsupported language standard: " + std);
        }
    }

    /** C++17, no defines, no include paths, default optimisation. */
    public static ProgramOptions defaults() {
        return new ProgramOptions("c++17", Map.of(), List.of(), Optional.empty(), List.of());
    }

    public ProgramOptions withDefine(String name, String value) {
        Map<String, String> d = new LinkedHashMap<>(defines);
        d.put(name, value);
        return new ProgramOptions(std, d, includePaths, arch, flags);
    }

    public ProgramOptions withIncludePath(String path) {
        List<String> p = new ArrayList<>(includePaths);
        p.add(path);
        return new ProgramOptions(std, defines, p, arch, flags);
    }

    public ProgramOptions withFlag(String flag) {
        List<String> f = new ArrayList<>(flags);
        f.add(flag);
        return new ProgramOptions(std, defines, includePaths, arch, f);
    }

    public ProgramOptions withArch(String a) {
        return new ProgramOptions(std, defines, includePaths, Optional.of(a), flags);
    }

    public ProgramOptions withStd(String s) {
        return new ProgramOptions(s, defines, includePaths, arch, flags);
    }

    /**
     * Parses options written as on a command line, for example
     * {@code -std=c++20 -DN=4 -I include --use_fast_math -arch=sm_90 "-DMSG=a b"}.
     */
    public static ProgramOptions parse(String text) {
        ProgramOptions o = defaults();
        List<String> tokens = tokenize(text);
        for (int i = 0; i < tokens.size(); i++) {
            String t = tokens.get(i);
            if (t.startsWith("-std=") || t.startsWith("--std=")) {
                o = o.withStd(t.substring(t.indexOf('=') + 1));
            } else if (t.equals("-D") || t.equals("--define-macro")) {
                o = define(o, next(tokens, ++i, t));
            } else if (t.startsWith("--define-macro=")) {
                o = define(o, t.substring("--define-macro=".length()));
            } else if (t.startsWith("-D")) {
                o = define(o, t.substring(2));
            } else if (t.equals("-I") || t.equals("--include-path")) {
                o = o.withIncludePath(next(tokens, ++i, t));
            } else if (t.startsWith("--include-path=")) {
                o = o.withIncludePath(t.substring("--include-path=".length()));
            } else if (t.startsWith("-I")) {
                o = o.withIncludePath(t.substring(2));
            } else if (t.equals("-arch") || t.equals("--gpu-architecture")) {
                o = o.withArch(next(tokens, ++i, t));
            } else if (t.startsWith("-arch=") || t.startsWith("--gpu-architecture=")) {
                o = o.withArch(t.substring(t.indexOf('=') + 1));
            } else if (t.startsWith("-")) {
                o = o.withFlag(t);
            } else {
                throw new IllegalArgumentException("not an NVRTC option: '" + t + "' in: " + text);
            }
        }
        return o;
    }

    private static ProgramOptions define(ProgramOptions o, String def) {
        int eq = def.indexOf('=');
        if (def.isEmpty() || eq == 0) {
            throw new IllegalArgumentException("empty macro definition");
        }
        return eq < 0 ? o.withDefine(def, null) : o.withDefine(def.substring(0, eq), def.substring(eq + 1));
    }

    private static String next(List<String> tokens, int i, String option) {
        if (i >= tokens.size()) {
            throw new IllegalArgumentException(option + " needs a value");
        }
        return tokens.get(i);
    }

    static List<String> tokenize(String text) {
        List<String> out = new ArrayList<>();
        StringBuilder cur = new StringBuilder();
        char quote = 0;
        boolean any = false;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (quote != 0) {
                if (c == quote) {
                    quote = 0;
                } else {
                    cur.append(c);
                }
            } else if (c == '"' || c == '\'') {
                quote = c;
                any = true;
            } else if (Character.isWhitespace(c)) {
                if (any || !cur.isEmpty()) {
                    out.add(cur.toString());
                }
                cur.setLength(0);
                any = false;
            } else {
                cur.append(c);
            }
        }
        if (quote != 0) {
            throw new IllegalArgumentException("unterminated quote in: " + text);
        }
        if (any || !cur.isEmpty()) {
            out.add(cur.toString());
        }
        return out;
    }

    /** The NVRTC arguments for {@code deviceArch} (for example {@code sm_90}) unless an arch was set explicitly. */
    public List<String> toArgs(String deviceArch) {
        List<String> out = new ArrayList<>();
        out.add("--gpu-architecture=" + arch.orElse(deviceArch));
        if (std != null) {
            out.add("--std=" + std);
        }
        defines.forEach((k, v) -> out.add(v == null ? "-D" + k : "-D" + k + "=" + v));
        includePaths.forEach(p -> out.add("-I" + p));
        out.addAll(flags);
        return out;
    }
}
