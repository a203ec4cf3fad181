package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Prefill and token-by-token decode with the KV cache, one compiled session per phase, on the host backend at TP 1,
 * 2 and 4: the greedy tokens are the float64 pass's, and every step's logits are the float64 pass's over the whole
 * sequence so far (the cache changes nothing but the work).
 */
class LlamaDecoderTest {
    static final int MAX = 24;

    @Test
    void prefillThenEightStepsGiveTheFloat64PassesTokensAndLogits(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 12, dir);
        int[] prompt = LlamaPrefillTest.PROMPT;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            int[] want = LlamaPrefillTest.greedy(prompt, 8, ids -> {
                double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                return l[l.length - 1];
            });
            for (int tp : new int[]{1, 2, 4}) {
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                var options = CompileOptions.world(tp).backend("host");
                try (var prefill = Session.compile(LlamaDecoder.prefill(c, prompt.length, MAX, tp, DType.F32), options);
                     var decode = Session.compile(LlamaDecoder.decode(c, MAX, tp, DType.F32), options)) {
                    var calls = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < tp; r++) {
                        var in = new HashMap<>(shards.get(r));
                        in.putAll(LlamaDecoder.prompt(c, prompt, MAX, tp, DType.F32));
                        calls.add(in);
                    }
                    var out = prefill.runToHost(calls);
                    int[] seq = prompt.clone();
                    int[] got = new int[8];
                    for (int k = 0; k < 8; k++) {
                        got[k] = (int) out.getFirst().get("next").get(0);
                        for (int r = 1; r < tp; r++) assertThat((int) out.get(r).get("next").get(0)).as("rank %d agrees", r).isEqualTo(got[k]);
                        // this step's logits against float64 over the sequence so far
                        double[][] ref = LlamaPrefillTest.Reference.logits(c, weights, seq);
                        NDArray logits = out.getFirst().get("logits");
                        double worst = 0, scale = 0;
                        for (int v = 0; v < c.vocabSize(); v++) {
                            scale = Math.max(scale, Math.abs(ref[seq.length - 1][v]));
                            worst = Math.max(worst, Math.abs(logits.get(v) - ref[seq.length - 1][v]));
                        }
                        assertThat(worst / scale).as("tp %d step %d", tp, k).isLessThan(1e-4);
                        seq = java.util.Arrays.copyOf(seq, seq.length + 1);
                        seq[seq.length - 1] = got[k];
                        if (k == 7) break;
                        calls = new ArrayList<>();
                        for (int r = 0; r < tp; r++) {
                            var in = new HashMap<>(shards.get(r));
                            in.putAll(LlamaDecoder.step(c, got[k], seq.length - 1, MAX, DType.F32));
                            for (int l = 0; l < c.layers(); l++)
                                for (String kv : List.of("k", "v")) in.put("cache." + l + "." + kv, out.get(r).get("cache." + l + "." + kv));
                            calls.add(in);
                        }
                        out = decode.runToHost(calls);
                    }
                    assertThat(got).as("tp %d", tp).containsExactly(want);
                }
            }
        }
    }
}
