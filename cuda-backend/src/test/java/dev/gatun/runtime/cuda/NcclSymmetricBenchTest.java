package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The host half of {@link NcclSymmetricBench}: its refusals, and the inputs against the closed form it checks with. */
class NcclSymmetricBenchTest {
    private static NcclSymmetricBench.Options options(int world, int calls) {
        return new NcclSymmetricBench.Options(world, calls, NcclSymmetricBench.DEFAULT_SIZES, List.of(NcclSymmetricBench.Type.F32), Path.of("x.jsonl"));
    }

    @Test
    void refusesFewerThanTwoGpusAMissingNvlsSwitchAndTooFewCalls() {
        Map<String, String> off = Map.of("NCCL_NVLS_ENABLE", "0");
        assertThat(NcclSymmetricBench.refusal(options(2, 2000), off, 1)).contains("needs 2 GPUs").contains("has 1")
                .contains("NCCL refuses two ranks on one device");
        assertThat(NcclSymmetricBench.refusal(options(4, 2000), off, 2)).contains("needs 4 GPUs");
        assertThat(NcclSymmetricBench.refusal(options(1, 2000), off, 8)).contains("--world must be at least 2");
        assertThat(NcclSymmetricBench.refusal(options(2, 5), off, 2)).contains("--calls");
        assertThat(NcclSymmetricBench.refusal(options(2, 2000), Map.of(), 2)).contains("NCCL_NVLS_ENABLE=0");
        assertThat(NcclSymmetricBench.refusal(options(2, 2000), Map.of("NCCL_NVLS_ENABLE", "1"), 2)).contains("NCCL_NVLS_ENABLE=0");
        assertThat(NcclSymmetricBench.refusal(options(2, 2000), off, 2)).isNull();
    }

    @Test
    void parsesItsArguments() {
        var o = NcclSymmetricBench.Options.parse(new String[]{"--world", "4", "--calls", "100", "--sizes", "8,4096", "--types", "bf16", "--out", "o.jsonl"});
        assertThat(o.world()).isEqualTo(4);
        assertThat(o.calls()).isEqualTo(100);
        assertThat(o.sizes()).containsExactly(8, 4096);
        assertThat(o.types()).containsExactly(NcclSymmetricBench.Type.BF16);
        assertThat(o.out()).isEqualTo(Path.of("o.jsonl"));
        var d = NcclSymmetricBench.Options.parse(new String[0]);
        assertThat(d.sizes()).containsExactly(8, 256, 4096, 16384, 262144, 1048576, 4194304, 67108864);
        assertThat(d.calls()).isEqualTo(2000);
    }

    /** The ranks' inputs summed in float64 (decoded independently of the bench), encoded back: the check finds no error. */
    @ParameterizedTest
    @CsvSource({"F32,2,1000", "F32,8,1000", "BF16,2,1000", "BF16,8,1000", "F32,2,2", "BF16,4,4"})
    void theSumOfTheInputsPassesTheCheckAndOneChangedElementFails(NcclSymmetricBench.Type t, int world, int n) {
        double[] sum = new double[n];
        for (int r = 0; r < world; r++) {
            ByteBuffer in = ByteBuffer.wrap(NcclSymmetricBench.input(t, n, r)).order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < n; i++) {
                double v = t == NcclSymmetricBench.Type.F32 ? in.getFloat() : Float.intBitsToFloat((in.getShort() & 0xFFFF) << 16);
                assertThat(v).isEqualTo((double) ((i % (t == NcclSymmetricBench.Type.F32 ? 251 : 4)) + 1) * (r + 1));
                sum[i] += v;
            }
        }
        byte[] result = encode(t, sum);
        assertThat(NcclSymmetricBench.wrong(t, result, world)).isZero();
        sum[n - 1] += 1;
        assertThat(NcclSymmetricBench.wrong(t, encode(t, sum), world)).isEqualTo(1);
        assertThat(NcclSymmetricBench.wrong(t, result, world + 1)).isEqualTo(n); // a rank missing from the sum
        byte[] nan = new byte[result.length];
        java.util.Arrays.fill(nan, (byte) 0xFF);
        assertThat(NcclSymmetricBench.wrong(t, nan, world)).isEqualTo(n); // the poison of a receive buffer never written
    }

    private static byte[] encode(NcclSymmetricBench.Type t, double[] v) {
        ByteBuffer out = ByteBuffer.allocate(v.length * t.bytes()).order(ByteOrder.LITTLE_ENDIAN);
        for (double x : v) {
            if (t == NcclSymmetricBench.Type.F32) out.putFloat((float) x);
            else {
                int bits = Float.floatToRawIntBits((float) x);
                assertThat(bits & 0xFFFF).as("%s is exact in bf16", x).isZero();
                out.putShort((short) (bits >>> 16));
            }
        }
        return out.array();
    }
}
