package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class ProgramOptionsTest {
    @Test
    void parsesCommandLineStyleOptions() {
        ProgramOptions o = ProgramOptions.parse("-std=c++20 -DN=4 -D FLAG \"-DMSG=a b\" -I inc --include-path=/x "
                + "-I/y --use_fast_math -lineinfo");
        assertThat(o.std()).isEqualTo("c++20");
        assertThat(o.defines().keySet()).containsExactly("N", "FLAG", "MSG");
        assertThat(o.defines().get("N")).isEqualTo("4");
        assertThat(o.defines().get("FLAG")).isNull();
        assertThat(o.defines().get("MSG")).isEqualTo("a b");
        assertThat(o.includePaths()).containsExactly("inc", "/x", "/y");
        assertThat(o.flags()).containsExactly("--use_fast_math", "-lineinfo");
        assertThat(o.arch()).isEmpty();
    }

    @Test
    void architectureComesFromTheDeviceUnlessGiven() {
        assertThat(ProgramOptions.defaults().toArgs("sm_90")).containsExactly("--gpu-architecture=sm_90", "--std=c++17");
        ProgramOptions o = ProgramOptions.parse("-arch=sm_80 -DX=1");
        assertThat(o.toArgs("sm_90")).containsExactly("--gpu-architecture=sm_80", "--std=c++17", "-DX=1");
        assertThat(ProgramOptions.parse("--gpu-architecture compute_90").arch()).contains("compute_90");
    }

    @Test
    void argsRoundTripThroughParse() {
        ProgramOptions o = ProgramOptions.defaults().withDefine("A", "1").withIncludePath("/inc").withFlag("-G");
        List<String> args = o.toArgs("sm_90");
        assertThat(ProgramOptions.parse(String.join(" ", args))).isEqualTo(o.withArch("sm_90"));
    }

    @Test
    void rejectsMalformedOptions() {
        assertThatThrownBy(() -> ProgramOptions.parse("-I")).hasMessageContaining("needs a value");
        assertThatThrownBy(() -> ProgramOptions.parse("saxpy.cu")).hasMessageContaining("not an NVRTC option");
        assertThatThrownBy(() -> ProgramOptions.parse("\"-DX=1")).hasMessageContaining("unterminated quote");
        assertThatThrownBy(() -> ProgramOptions.parse("-std=gnu99")).hasMessageContaining("unsupported language standard");
        assertThatThrownBy(() -> ProgramOptions.parse("-D=3")).hasMessageContaining("empty macro");
        assertThat(ProgramOptions.parse("   ")).isEqualTo(ProgramOptions.defaults());
    }

    @Test
    void computeCapabilityNamesArchitectures() {
        assertThat(new ComputeCapability(9, 0).arch()).isEqualTo("sm_90");
        assertThat(new ComputeCapability(10, 0).arch()).isEqualTo("sm_100");
        assertThat(ComputeCapability.parse("sm_90a")).isEqualTo(new ComputeCapability(9, 0));
        assertThat(ComputeCapability.parse("compute_120")).isEqualTo(new ComputeCapability(12, 0));
        assertThat(ComputeCapability.parse("8.6")).isEqualTo(new ComputeCapability(8, 6));
        assertThat(new ComputeCapability(8, 6)).isLessThan(new ComputeCapability(9, 0));
        assertThatThrownBy(() -> ComputeCapability.parse("sm_x")).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void launchConfigValidates() {
        assertThat(LaunchConfig.cover(1000, 256).grid()).isEqualTo(Dim3.of(4));
        assertThat(LaunchConfig.cover(0, 256).grid()).isEqualTo(Dim3.of(1));
        assertThatThrownBy(() -> LaunchConfig.of(1, 2048)).hasMessageContaining("1024");
        assertThatThrownBy(() -> Dim3.of(0)).isInstanceOf(IllegalArgumentException.class);
    }
}
