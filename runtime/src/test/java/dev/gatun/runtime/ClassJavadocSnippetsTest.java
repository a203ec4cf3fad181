package dev.gatun.runtime;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import javax.tools.DiagnosticCollector;
import javax.tools.JavaFileObject;
import javax.tools.SimpleJavaFileObject;
import javax.tools.ToolProvider;
import java.io.IOException;
import java.net.URI;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The code in the class javadoc of {@link Session} and {@link NDArray} is the real API: each {@code <pre>{@code ...}}
 * block is taken from the source file as it stands, compiled against the test class path and run, with the variables
 * its text names declared before it ({@code graph}, {@code x0}, {@code x1}; {@code rank}, {@code world}).
 */
class ClassJavadocSnippetsTest {
    static final Pattern SNIPPET = Pattern.compile("<pre>\\{@code\\n(.*?)\\n \\* }</pre>", Pattern.DOTALL);

    /** The {@code <pre>{@code}} blocks of the javadoc before {@code public final class Name}, as plain Java. */
    static List<String> classSnippets(String name) throws IOException {
        String src = Files.readString(Path.of("src/main/java/dev/gatun/runtime/" + name + ".java"));
        int cls = src.indexOf("public final class " + name);
        String doc = src.substring(src.lastIndexOf("/**", cls), cls);
        var out = new ArrayList<String>();
        var m = SNIPPET.matcher(doc);
        while (m.find())
            out.add(m.group(1).lines().map(l -> l.replaceFirst("^ \\* ?", "")).reduce("", (a, b) -> a + b + "\n"));
        return out;
    }

    /**
     * Compiles {@code prelude + snippet} as the body of a Runnable, {@code checks} at the snippet's end (inside its last
     * block where it ends with one, to see the variables declared there), and runs it.
     */
    static void compileAndRun(String prelude, String snippet, String checks, Path dir) throws Exception {
        String body = snippet.strip().endsWith("}")
                ? snippet.substring(0, snippet.lastIndexOf('}')) + checks + snippet.substring(snippet.lastIndexOf('}'))
                : snippet + checks;
        String source = """
                package snippets;
                import dev.gatun.ir.DType;
                import dev.gatun.ir.graph.Graph;
                import dev.gatun.runtime.*;
                import dev.gatun.runtime.distributed.LocalWorld;
                import java.nio.file.Path;
                import java.util.List;
                import java.util.Map;
                public final class Snippet implements Runnable {
                    @Override public void run() {
                        try {
                %s
                %s
                        } catch (Exception e) {
                            throw new RuntimeException(e);
                        }
                    }
                }
                """.formatted(prelude, body);
        var file = new SimpleJavaFileObject(URI.create("string:///snippets/Snippet.java"), JavaFileObject.Kind.SOURCE) {
            @Override public CharSequence getCharContent(boolean ignoreEncodingErrors) { return source; }
        };
        var diagnostics = new DiagnosticCollector<JavaFileObject>();
        var compiler = ToolProvider.getSystemJavaCompiler();
        boolean ok = compiler.getTask(null, null, diagnostics,
                List.of("-classpath", System.getProperty("java.class.path"), "-d", dir.toString(), "-proc:none", "-Xlint:none"),
                null, List.of(file)).call();
        assertThat(ok).as("the javadoc snippet does not compile:%n%s%n%s", source, diagnostics.getDiagnostics()).isTrue();
        try (var loader = new URLClassLoader(new java.net.URL[]{dir.toUri().toURL()}, ClassJavadocSnippetsTest.class.getClassLoader())) {
            ((Runnable) loader.loadClass("snippets.Snippet").getDeclaredConstructor().newInstance()).run();
        }
    }

    @Test
    void sessionsClassJavadocCompilesAndRuns(@TempDir Path dir) throws Exception {
        var snippets = classSnippets("Session");
        assertThat(snippets).hasSize(2);
        assertThat(snippets.getFirst()).contains("s.run(", "s.runToHost(");
        compileAndRun(SEEDS + """
                NDArray x0 = NDArray.full(DType.F32, 1, 4, 4), x1 = NDArray.full(DType.F32, 2, 4, 4);
                """, snippets.getFirst(), """
                // each rank: (x+1) + (x+2) + (x+3) summed over x = 1 and x = 2, then summed over the 2 ranks: 2 * 21
                if (d0.get(3, 3) != 42 || host.get(1).get("d").get(0, 0) != 42 || again.get(0).get("d").get(2, 1) != 42)
                    throw new AssertionError(d0 + "\\n" + host + "\\n" + again);
                """, dir);
        // a world of sessions, a thread a rank (on the host backend without a GPU): each rank's result is checked inside
        assertThat(snippets.get(1)).contains("LocalWorld.run(2", "CompileOptions.world(2).rank(rv)");
        compileAndRun(SEEDS + """
                List<NDArray> shards = List.of(NDArray.full(DType.F32, 1, 4, 4), NDArray.full(DType.F32, 2, 4, 4));
                """, snippets.get(1).replace("Map<String, NDArray> out = s.runToHost(Map.of(\"x\", shards.get(rv.rank())));",
                "Map<String, NDArray> out = s.runToHost(Map.of(\"x\", shards.get(rv.rank())));\n        if (out.get(\"d\").get(1, 2) != 42) throw new AssertionError(out);"),
                "", Files.createDirectories(dir.resolve("world")));
    }

    /** The seeds' graph of README.md: (x + 1) + (x + 2) + (x + 3), each all-reduced, and their sum all-reduced. */
    static final String SEEDS = """
            var g = dev.gatun.dsl.Gatun.graph("seeds");
            var x = g.input("x", DType.F32, 4, 4);
            var sum = dev.gatun.ir.graph.ReduceOp.SUM;
            g.output("d", x.add(1).allReduce(sum).add(x.add(2).allReduce(sum)).add(x.add(3).allReduce(sum)).allReduce(sum));
            Graph graph = g.build();
            """;

    @Test
    void ndarraysClassJavadocCompilesAndRuns(@TempDir Path dir) throws Exception {
        var snippets = classSnippets("NDArray");
        assertThat(snippets).hasSize(1);
        assertThat(snippets.getFirst()).contains(".chunk(world, 1)");
        compileAndRun("int rank = 1, world = 4;", snippets.getFirst(), """
                if (!back.equals(w) || parts.size() != 4 || !parts.get(rank).equals(mine)) throw new AssertionError("chunk, shard and concat disagree");
                if (first != w.get(0, 256) || values.length != 256 * 256 || values[257] != (float) w.get(1, 257)) throw new AssertionError(first);
                """, dir);
    }
}
