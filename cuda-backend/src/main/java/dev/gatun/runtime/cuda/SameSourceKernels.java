package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Module;

import java.util.HashMap;
import java.util.Map;
import java.util.function.BiFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Compiles each distinct kernel of a plan once. The generated sources of a decoder's layers differ only in their entry's
 * name and their comments (the planner's buffers, named per layer): a Llama training step has about 1,250 kernels and
 * far fewer distinct programs. Two sources are the same program here when they are equal once their line comments are
 * dropped and their entry's name (as a whole word) is replaced by one placeholder; the second is then the first's
 * function, its module loaded once. NVRTC still compiles the first one's source as written, so a compile error names
 * it and its file reads as generated. A source whose entry name also appears inside a string literal is never shared
 * (the name might be part of what the kernel prints or compares).
 */
final class SameSourceKernels {
    private record First(Module module, String kernelName) {}

    private final Map<String, First> byProgram = new HashMap<>();
    private final BiFunction<String, String, Module> compile;
    private int shared;

    /** {@code compile}: (program name, source) to a loaded module. */
    SameSourceKernels(BiFunction<String, String, Module> compile) { this.compile = compile; }

    /** {@code kernelName} of {@code source}: compiled and loaded, or the function of an earlier source that is the same program. */
    Kernel kernel(String programName, String source, String kernelName) {
        String key = canonical(source, kernelName);
        if (key == null) return compile.apply(programName, source).kernel(kernelName);
        First first = byProgram.get(key);
        if (first != null) {
            shared++;
            return first.module().kernel(first.kernelName());
        }
        Module m = compile.apply(programName, source);
        byProgram.put(key, new First(m, kernelName));
        return m.kernel(kernelName);
    }

    /** How many kernels were another's function (not compiled again). */
    int shared() { return shared; }

    private static final Pattern LINE_COMMENT = Pattern.compile("//[^\n]*");
    private static final Pattern STRING_LITERAL = Pattern.compile("\"(?:[^\"\\\\\n]|\\\\.)*\"");

    /** The source without line comments and with the entry's name replaced; null where the name is in a string literal. */
    static String canonical(String source, String kernelName) {
        Pattern name = Pattern.compile("\\b" + Pattern.quote(kernelName) + "\\b");
        String code = LINE_COMMENT.matcher(source).replaceAll("");
        Matcher literal = STRING_LITERAL.matcher(code);
        while (literal.find()) if (name.matcher(literal.group()).find()) return null;
        return name.matcher(code).replaceAll(Matcher.quoteReplacement("gatun_entry"));
    }
}
