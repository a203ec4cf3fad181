// A Llama-architecture decoder (the layout most open checkpoints use) written in Gatun's DSL: it writes a small
// checkpoint with random weights (config.json and model.safetensors, Hugging Face naming), reads it back, and
// decodes 8 tokens greedily after a prompt, on the host backend: one compiled session for the prompt (prefill),
// one for each next token (decode, with the KV cache), at tensor parallelism 1 and 2 (Megatron style: whole
// heads per rank, one all-reduce after the attention and one after the MLP); then once more, stopping at an end
// token the checkpoint names and streaming the tokens as they come. A real checkpoint (transformers' llama or
// mistral: config.json and model.safetensors or its shards) loads the same way: LlamaCheckpoint.open(dir), which
// refuses by name what the decoder does not compute (docs/MODELS.md).
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/LlamaGreedy.java
import dev.gatun.ir.DType;
import dev.gatun.models.llama.Generation;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Map;

static final int MAX = 32, NEW = 8;

/** The prompt's greedy continuation at tensor parallelism tp: prefill, then one decode call per token. */
static int[] generate(LlamaConfig c, TensorFiles weights, int[] prompt, int tp) {
    var shards = new ArrayList<Map<String, NDArray>>();
    for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
    try (var gen = new LlamaGenerator(c, shards, prompt.length, MAX, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
        var result = gen.generate(prompt, NEW);
        // the graph's argmax is each step's largest logit
        for (int k = 0; k < NEW; k++) {
            double[] logits = result.logits().get(k);
            for (double v : logits)
                if (v > logits[result.tokens()[k]]) throw new AssertionError("WRONG: token " + result.tokens()[k] + " is not the largest logit");
        }
        return result.tokens();
    }
}

void main() throws Exception {
    Path dir = Files.createTempDirectory("gatun-llama");
    // 2 layers, hidden 64, 4 query heads sharing 2 key-value heads, a gated MLP of 128, 256 tokens
    LlamaCheckpoint.writeRandom(new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false), DType.F32, 12, dir);
    try (var ckpt = LlamaCheckpoint.open(dir)) {   // config.json and model.safetensors, read and checked against each other
        LlamaConfig c = ckpt.config();
        TensorFiles weights = ckpt.weights();
        System.out.println("config: " + c);
        int[] prompt = {1, 17, 255, 3, 42, 42, 0, 128};
        int[] one = generate(c, weights, prompt, 1), two = generate(c, weights, prompt, 2);
        System.out.println("prompt " + Arrays.toString(prompt));
        System.out.println("tensor-parallel 1: " + Arrays.toString(one));
        System.out.println("tensor-parallel 2: " + Arrays.toString(two));
        if (!Arrays.equals(one, two)) throw new AssertionError("WRONG: the two tensor-parallel degrees disagree");
        // a checkpoint names its end tokens (generation_config.json here): a generation stops at the first, and the
        // tokens stream to a listener as they come
        Files.writeString(dir.resolve(LlamaCheckpoint.GENERATION_CONFIG), "{\"eos_token_id\": " + one[3] + "}");
        var eos = LlamaCheckpoint.eosTokens(dir);
        System.out.print("streamed, stopping at " + eos + ":");
        int[] streamed;
        try (var gen = new LlamaGenerator(c, java.util.List.of(LlamaDecoder.weights(c, weights, 1, 0, DType.F32)), prompt.length, MAX, 1,
                DType.F32, CompileOptions.world(1).backend("host"))) {
            streamed = gen.generate(new int[][]{prompt}, Generation.of(NEW).stopAt(eos).stepwise()
                    .onTokens((step, tokens) -> System.out.print(" " + tokens[0]))).tokens();
        }
        System.out.println();
        int end = 0;
        while (!eos.contains(one[end])) end++;
        if (!Arrays.equals(streamed, Arrays.copyOf(one, end + 1))) throw new AssertionError("WRONG: the stopped generation is not the first one cut at its end token");
        System.out.println("verified: " + NEW + " greedy tokens, the same at tensor parallelism 1 and 2, and stopped at the end token");
    } finally {
        try (var files = Files.walk(dir)) { files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete()); }
    }
}
