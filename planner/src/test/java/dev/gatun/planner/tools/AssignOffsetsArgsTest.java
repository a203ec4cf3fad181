package dev.gatun.planner.tools;

import dev.gatun.ir.GatunException;
import dev.gatun.planner.OffsetAssigner;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The offset tool's command line: a bad argument is a usage error (one of Gatun's exceptions, which {@code main} prints
 * with the usage and exits 2 on) naming the argument; a missing value is said as such, not an index out of bounds.
 */
class AssignOffsetsArgsTest {
    @Test
    void goodArgumentsParse() {
        var a = AssignOffsets.parseArgs(new String[]{"--nodes", "5", "--millis", "7", "--repeat", "3", "-o", "out", "in.csv"});
        assertThat(a.input()).isEqualTo("in.csv");
        assertThat(a.outPath()).isEqualTo("out");
        assertThat(a.repeat()).isEqualTo(3);
        assertThat(a.options().searchNodes()).isEqualTo(5);
        assertThat(a.options().searchMillis()).isEqualTo(7);
        assertThat(AssignOffsets.parseArgs(new String[]{"--greedy", "x"}).options()).isEqualTo(OffsetAssigner.Options.GREEDY_ONLY);
        assertThat(AssignOffsets.parseArgs(new String[]{"--help"}).input()).isNull();
    }

    @Test
    void badArgumentsAreUsageErrorsNamingThem() {
        String[][] cases = {
                {"--nodes", "many", "in.csv"}, {"--nodes many: a whole number"},
                {"--repeat", "0", "in.csv"}, {"--repeat 0: a whole number, at least 1"},
                {"in.csv", "--millis"}, {"--millis needs a value"},
                {"-o"}, {"-o needs a value"},
                {"--frob", "in.csv"}, {"unexpected argument --frob"},
                {"a.csv", "b.csv"}, {"unexpected argument b.csv"},
                {}, {"no input file or directory"},
        };
        for (int i = 0; i < cases.length; i += 2) {
            String[] args = cases[i];
            assertThatThrownBy(() -> AssignOffsets.parseArgs(args)).as(String.join(" ", args))
                    .isInstanceOf(GatunException.class).hasMessageContaining(cases[i + 1][0]);
        }
    }
}
