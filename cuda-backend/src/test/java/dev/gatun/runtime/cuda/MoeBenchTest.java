package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link MoeBench} on the host backend at small shapes (the harness without a GPU): both workloads run on two ranks,
 * every rank's result passes its plain-loop check, the JSON that {@code bench/moe_torch.py} reads holds every case;
 * the checks fail on a wrong value; the input formulas give the values that {@code bench/moe_torch.py}'s copies of
 * them give (pinned here from a run of its functions on Python integers).
 */
class MoeBenchTest {
    @Test
    void bothWorkloadsRunAndPassTheirChecksOnTheHostBackend(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("moe.json");
        MoeBench.main(new String[]{"--backend", "host", "--world", "2", "--tokens", "6", "--hidden", "32", "--experts", "4", "--intermediate", "16",
                "--layer-tokens", "3,1", "--iters", "2", "--warmup", "1", "--host-check", "on", "--out", out.toString()});
        String json = Files.readString(out);
        assertThat(json).contains("\"workload\": \"dispatch+combine\", \"variant\": \"uniform\", \"tokens\": 6, \"capacity\": 24",
                "\"variant\": \"skewed\"", "\"workload\": \"layer\", \"variant\": \"mixtral\", \"tokens\": 1, \"capacity\": 4",
                "\"tokens\": 3, \"capacity\": 12", "\"world\": 2", "\"tokens_compared\": [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]]");
        // two dispatch cases and the smallest layer case checked on both ranks; the larger layer case not checked
        assertThat(Pattern.compile("rank \\d: \\d+ tokens ok").matcher(json).results().count()).isEqualTo(6);
        assertThat(json).contains("not checked (only the smallest case)").doesNotContain("no token checked");
        assertThat(Pattern.compile("the host backend's 1 tokens within").matcher(json).results().count()).isEqualTo(2);
    }

    private static MoeBench.Settings small(DType dtype) {
        return MoeBench.Settings.of(LlamaBench.options(new String[]{"--world", "2", "--hidden", "16", "--experts", "4", "--intermediate", "8",
                "--dtype", dtype == DType.F32 ? "f32" : "bf16", "--check-tokens", "2"}));
    }

    @Test
    void theDispatchCheckFailsOnAWrongWeightAndPassesTheRightOnes() {
        var s = small(DType.F32);
        var routing = MoeInputs.routing(1, 3, 4, false);
        double[] y = new double[3 * 16];
        for (int n = 0; n < 3; n++)
            for (int c = 0; c < 16; c++)
                for (int j = 0; j < 2; j++) y[n * 16 + c] += routing.weights()[2 * n + j] * (1 + routing.ids()[2 * n + j] % 2) * MoeInputs.token(1, n, c, 16);
        assertThat(MoeCheck.dispatch(s, 1, 3, routing, NDArray.of(y, 3, 16))).contains("3 tokens ok");
        y[2 * 16 + 5] *= 1.01;
        assertThatThrownBy(() -> MoeCheck.dispatch(s, 1, 3, routing, NDArray.of(y, 3, 16))).hasMessageContaining("rank 1 token 2 element 5");
    }

    @Test
    void theLayerCheckFailsOnZeros() {
        var s = small(DType.BF16);
        assertThatThrownBy(() -> MoeCheck.layer(s, 0, NDArray.zeros(DType.F32, 2, 16))).hasMessageContaining("layer rank 0 token");
    }

    @Test
    void theFormulasGiveMoeTorchsValues() {
        // bench/moe_torch.py on Python integers: python3 bench/moe_torch.py --selftest prints the first three;
        // [value(1000, i, 7) for i in range(3)] and hash_(5001, 4) the others
        assertThat(MoeInputs.mix(12345)).isEqualTo(4126181493L);
        assertThat(MoeInputs.hash(3001, 777)).isEqualTo(2841054843L);
        assertThat(MoeInputs.value(2000, 4097, 12)).isEqualTo(-0.0107421875);
        assertThat(new double[]{MoeInputs.token(0, 0, 0, 16), MoeInputs.token(0, 0, 1, 16), MoeInputs.token(0, 0, 2, 16)})
                .containsExactly(0.4375, -0.34375, -0.7578125);
        assertThat(MoeInputs.hash(MoeInputs.ROUTING_SALT + 1, 4)).isEqualTo(3044674909L);
        // exact in bf16: the tensor's bits are the value's
        var t = MoeInputs.tokens(DType.BF16, 0, 1, 16);
        for (int c = 0; c < 16; c++) assertThat(t.get(c)).isEqualTo(MoeInputs.token(0, 0, c, 16));
    }
}
