package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Llama decode step under the general product-epilogue rule ({@code PlanOptions.productEpilogues}): the rule joins
 * each product with the SwiGLU, the rotations and the norms after it from the tiles alone (nothing in it knows Llama),
 * and the generator still gives the float64 pass's tokens on the host at TP 1 and 2.
 */
class LlamaProductEpiloguesTest {
    static final PlanOptions RULE = PlanOptions.DEFAULT.withProductEpilogues(true);

    @Test
    void theRuleJoinsEveryLayersQkvProductWithItsRotationsAndTheGateUpProductWithItsSwiGlu() {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        for (int batch : new int[]{1, 3}) {
            try (var s = Session.compile(LlamaDecoder.decode(c, batch, LlamaDecoderTest.MAX, 1, DType.BF16), CompileOptions.world(1).backend("host").planning(RULE))) {
                var steps = s.plan().steps();
                var tiled = steps.stream().filter(st -> st instanceof Step.TiledProduct).map(st -> (Step.TiledProduct) st).toList();
                // per layer: gate|up with the SwiGLU (tiles of a gate column and its up column), q|k|v with the rotation of
                // its query and key heads (tiles of the two columns a rotation pairs); and, in this tiny model whose hidden
                // size fits one block, o and down each with the residual add and the next norm (a tile of the whole row)
                assertThat(tiled).filteredOn(t -> t.epilogues().stream().anyMatch(l -> l.kernel().ops().contains("silu"))).hasSize(c.layers())
                        .allSatisfy(t -> assertThat(t.tiles().largest()).isEqualTo(2));
                assertThat(tiled).filteredOn(t -> t.epilogues().stream().anyMatch(l -> l.kernel().ops().containsAll(java.util.List.of("sub", "add", "mul"))
                        && l.kernel().stores().size() == 2)).hasSize(c.layers());
                assertThat(tiled).filteredOn(t -> t.tiles().largest() == c.hiddenSize()).hasSize(2 * c.layers());
                // each epilogue taken in is a launch fewer than with the rule off
                try (var apart = Session.compile(LlamaDecoder.decode(c, batch, LlamaDecoderTest.MAX, 1, DType.BF16),
                        CompileOptions.world(1).backend("host").planning(RULE.withProductEpilogues(false)))) {
                    assertThat(apart.plan().steps()).noneMatch(st -> st instanceof Step.TiledProduct);
                    assertThat(steps.stream().filter(Step::isDeviceWork).count())
                            .isEqualTo(apart.plan().steps().stream().filter(Step::isDeviceWork).count() - tiled.stream().mapToInt(t -> t.epilogues().size()).sum());
                }
            }
        }
    }

    /**
     * A q|k|v product with biases (Qwen2's): the bias is added in one kernel and the rotation of the sum in the next, so
     * the rotation reads the bias kernel's output, not the product's. The rule follows the chain: both join the
     * product's launch (the rotation reading back, in the same block, the tile the bias kernel stored), and the layer
     * is as many launches as the same model's without biases.
     */
    @Test
    void aBiasAndTheRotationOfTheSumJoinTheProductAsAChain() {
        LlamaConfig plain = LlamaCheckpointTest.TINY;
        LlamaConfig biased = new LlamaConfig(plain.hiddenSize(), plain.layers(), plain.heads(), plain.kvHeads(), plain.intermediateSize(),
                plain.vocabSize(), plain.ropeTheta(), plain.rmsNormEps(), false, null, plain.headDim(), 0, new LlamaConfig.Biases(true, false, false));
        try (var s = Session.compile(LlamaDecoder.decode(biased, 1, LlamaDecoderTest.MAX, 1, DType.BF16), CompileOptions.world(1).backend("host").planning(RULE));
             var p = Session.compile(LlamaDecoder.decode(plain, 1, LlamaDecoderTest.MAX, 1, DType.BF16), CompileOptions.world(1).backend("host").planning(RULE))) {
            var tiled = s.plan().steps().stream().filter(st -> st instanceof Step.TiledProduct).map(st -> (Step.TiledProduct) st).toList();
            var chains = tiled.stream().filter(t -> t.epilogues().size() >= 2
                    && t.epilogues().get(1).kernel().inputs().stream().anyMatch(b -> t.epilogues().get(0).kernel().outputs().contains(b))).toList();
            assertThat(chains).as("every layer's q|k|v product with its bias, then the rotation of the sum").hasSize(biased.layers())
                    .allSatisfy(t -> assertThat(t.tiles().largest()).isEqualTo(2));
            assertThat(s.plan().steps().stream().filter(st -> st.isDeviceWork()).count())
                    .isEqualTo(p.plan().steps().stream().filter(st -> st.isDeviceWork()).count());
        }
    }

    @Test
    void theGeneratorGivesTheFloat64PassesTokensUnderTheRule(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 21, dir);
        int[] prompt = LlamaPrefillTest.PROMPT;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            int[] want = LlamaPrefillTest.greedy(prompt, 6, ids -> {
                double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                return l[l.length - 1];
            });
            for (int tp : new int[]{1, 2}) {
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                try (var gen = new LlamaGenerator(c, shards, prompt.length, LlamaDecoderTest.MAX, tp, DType.F32, CompileOptions.world(tp).backend("host").planning(RULE))) {
                    assertThat(gen.generate(prompt, 6).tokens()).as("tp %d", tp).containsExactly(want);
                }
            }
        }
    }
}
