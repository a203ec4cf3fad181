package dev.gatun.runtime.cuda;

import dev.gatun.models.llama.LlamaConfig;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The training benchmark's initial weights and data are the PyTorch peer's: the expected values were computed by
 * {@code bench/llama_train_torch.py}'s own functions (numpy, uint64 arithmetic; a separate implementation), and FNV-1a's
 * published value of "a". Bit for bit: both round the same double to float32.
 */
class TrainInitTest {
    @Test
    void hashesAndElementsAreThePeersBitForBit() {
        assertThat(TrainInit.fnv1a64("a")).isEqualTo(0xaf63dc4c8601ec8cL);
        assertThat(TrainInit.fnv1a64("model.embed_tokens.weight")).isEqualTo(0xa88fd795d5c6d156L);
        assertThat(TrainInit.elements("model.layers.0.self_attn.q_proj.weight", 0, 0.02, 0, 4))
                .containsExactly((float) -0.0055909669026732445, (float) -0.03000320866703987, (float) 0.024705106392502785, (float) -0.0036475793458521366);
        assertThat(TrainInit.elements("model.embed_tokens.weight", 5, 0.02, 1000, 3))
                .containsExactly((float) -0.018989864736795425, (float) -0.002817600965499878, (float) -0.02144227735698223);
        // past the peer's chunks of 2^24 elements
        assertThat(TrainInit.elements("model.embed_tokens.weight", 5, 0.02, (1L << 24) - 2, 5)).containsExactly((float) 0.02111572027206421,
                (float) 0.0257333442568779, (float) 0.02349594421684742, (float) 0.011930904351174831, (float) 0.03107035532593727);
        assertThat(TrainInit.elements("model.norm.weight", 0, 0.02, 0, 2)).containsExactly(1f, 1f);
    }

    @Test
    void aRanksBlockIsItsRowsOfTheWholeAndTheTokensFollowTheFormula() {
        float[] whole = TrainInit.elements("w", 3, 0.02, 0, 24);
        float[] second = TrainInit.block("w", new long[]{3, 4}, 1, 3, 0.02).toFloatArray();
        assertThat(second).containsExactly(java.util.Arrays.copyOfRange(whole, 12, 24));
        var c = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
        var b = TrainInit.batch(c, 3, 1, 2);
        assertThat(b.get("tokens").toDoubleArray()).containsExactly(224, 207);
        assertThat(b.get("targets").toDoubleArray()).containsExactly(207, 190);
        assertThat(TrainInit.token(c, 0, 0)).isEqualTo(13);
    }
}
