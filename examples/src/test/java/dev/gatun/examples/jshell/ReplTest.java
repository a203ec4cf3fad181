package dev.gatun.examples.jshell;

import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.regex.Pattern;

import static dev.gatun.examples.jshell.Repl.*;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The jshell helpers against the traps of a first session (what jshell itself prints is GatunShellTest's). */
class ReplTest {

    @AfterEach
    void closeSession() {
        if (session != null) session.close();
        session = null;
        graph("jshell");
    }

    @Test
    void numbersAfterTheDtypeAreTheShapeAndASeedIsSpelledOut() {
        assertThat(random(F32, 4, 4).shape()).containsExactly(4, 4);
        assertThat(randn(F32, 2, 3).shape()).containsExactly(2, 3);
        assertThat(random(F32, seed(7), 4, 4)).isEqualTo(NDArray.random(F32, 7, 4, 4));
        assertThat(randn(DType.F64, seed(7), 3)).isEqualTo(NDArray.randn(DType.F64, 7, 3));
        manualSeed(3);
        NDArray first = random(F32, 8), second = random(F32, 8);
        assertThat(first).isNotEqualTo(second);
        manualSeed(3);
        assertThat(random(F32, 8)).isEqualTo(first);
    }

    @Test
    void arrayTakesJavaArraysOfEveryElementType() {
        var f = array(new float[]{1, 2, 3, 4}, 2, 2);
        assertThat(f.dtype()).isEqualTo(DType.F32);
        assertThat(f.shape()).containsExactly(2, 2);
        assertThat(f.get(1, 0)).isEqualTo(3);
        assertThat(array(new double[]{1, 2}, 2, 1).dtype()).isEqualTo(DType.F64);
        assertThat(array(new int[]{1, 2}).dtype()).isEqualTo(DType.I32);
        assertThat(array(new long[]{1, 2}).dtype()).isEqualTo(DType.I64);
        assertThat(array(new byte[]{1, 2}).dtype()).isEqualTo(DType.I8);
        assertThat(array(new boolean[]{true, false}).dtype()).isEqualTo(DType.BOOL);
        assertThat(array(new float[]{5, 6, 7}).shape()).as("no shape: one dimension").containsExactly(3);
        assertThat(array(DType.F16, new double[]{0.5, 1.5}).toDoubleArray()).containsExactly(0.5, 1.5);
    }

    @Test
    void explainPrintsTextNotAnEscapedString() {
        var x = input("x", F32, 4, 4);
        output("y", x.add(1).allReduce(SUM));
        compile(2);
        String printed = stdout(Repl::explain);
        assertThat(printed).isEqualTo(session.explain() + System.lineSeparator());
        assertThat(printed).contains("\n").doesNotContain("\\n").doesNotStartWith("\"");
    }

    @Test
    void aGraphFrozenByCompileSaysHowToStartTheNextOne() {
        graph("first");
        var x = input("x", F32, 4);
        output("y", x.add(1));
        compile(1);
        assertThatThrownBy(() -> output("z", x)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("output: graph 'first' was frozen by compile(1) and cannot change")
                .hasMessageContaining("start a new graph with graph(\"name\")");
        assertThatThrownBy(() -> input("w", F32, 4)).hasMessageContaining("input: graph 'first' was frozen by compile(1)");
        graph("second");
        var w = input("w", F32, 4);
        output("v", w.add(2));
        assertThat(compile(1).runToHost(java.util.Map.of("w", NDArray.full(F32, 1, 4))).get("v").toFloatArray()).containsOnly(3f);
        graph("third");
        assertThatThrownBy(Repl::build).hasMessageContaining("no outputs");
        output("u", input("u", F32, 1));        // a refused build leaves the graph open
        build();
        assertThatThrownBy(() -> input("x", F32, 1)).hasMessageContaining("frozen by build()");
    }

    /** Every public helper appears in help() as name(Type name, ...), so the list cannot fall behind the class. */
    @Test
    void helpListsEveryHelperWithItsArguments() {
        String help = stdout(Repl::help);
        var missing = new ArrayList<String>();
        for (Method m : Repl.class.getDeclaredMethods()) {
            if (!Modifier.isPublic(m.getModifiers()) || !Modifier.isStatic(m.getModifiers())) continue;
            if (!signature(m).matcher(help).find()) missing.add(m.toGenericString());
        }
        assertThat(missing).as(help).isEmpty();
        assertThat(help).contains("random(DType dtype, long... shape)").contains("array(float[] values, long... shape)");
    }

    /** {@code name(Type1 a, Type2... b)}, generic arguments optional, parameter names free. */
    private static Pattern signature(Method m) {
        var params = new ArrayList<String>();
        Class<?>[] types = m.getParameterTypes();
        for (int i = 0; i < types.length; i++) {
            boolean varargs = m.isVarArgs() && i == types.length - 1;
            String type = varargs ? types[i].getComponentType().getSimpleName() : types[i].getSimpleName();
            params.add(Pattern.quote(type.replace("[]", "")) + (type.endsWith("[]") ? "\\[\\]" : "") + "(<[^()]*>)?"
                    + (varargs ? "\\.\\.\\." : "") + " \\w+");
        }
        return Pattern.compile("\\b" + m.getName() + "\\(" + String.join(", ", params) + "\\)");
    }

    private static String stdout(Runnable r) {
        PrintStream old = System.out;
        var bytes = new ByteArrayOutputStream();
        System.setOut(new PrintStream(bytes, true, StandardCharsets.UTF_8));
        try {
            r.run();
        } finally {
            System.setOut(old);
        }
        return bytes.toString(StandardCharsets.UTF_8);
    }
}
