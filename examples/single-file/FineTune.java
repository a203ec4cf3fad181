// Trains a tiny Llama-architecture model on the host: one graph holds the forward pass, the cross-entropy of each
// next token, its backward pass and an AdamW step (clipped at a global norm of 1.0) whose weights and moments are
// states of the session, written in place each call. Each call is one training step; the program prints the falling
// loss over 50 steps on a fixed random batch, with bf16 compute over f32 master weights.
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/FineTune.java
import dev.gatun.dsl.Optimizers;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaTraining;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.HashMap;

import static dev.gatun.ir.DType.BF16;
import static dev.gatun.ir.DType.F32;

static final int SEQUENCES = 4, TOKENS = 8, STEPS = 50;

void main() {
    // hidden 32, 2 layers, 4 query heads over 2 key-value heads, MLP width 64, vocabulary 64
    var config = new LlamaConfig(32, 2, 4, 2, 64, 64, 10000, 1e-5, false);
    var graph = LlamaTraining.graph(config, SEQUENCES, TOKENS, 1, F32, BF16, Optimizers.adamW(1e-2).clipGradNorm(1.0), false);
    var inputs = new HashMap<String, NDArray>(LlamaTraining.tables(config, TOKENS, BF16));
    inputs.putAll(LlamaTraining.batch(config, SEQUENCES, TOKENS, 1, 42).getFirst());
    try (var session = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
        session.bind(0, LlamaTraining.initialWeights(graph, 1, 0.02, F32));   // the moments and the step count start at zero
        double first = 0, last = 0;
        for (int step = 0; step < STEPS; step++) {
            last = session.runToHost(inputs).get("loss").get(0);
            if (step == 0) first = last;
            if (step % 5 == 0 || step == STEPS - 1) System.out.printf("step %2d  loss %.4f%n", step, last);
        }
        if (!(last < 0.5 * first)) throw new IllegalStateException("WRONG: the loss did not fall: " + first + " -> " + last);
        System.out.printf("verified: the loss fell from %.4f to %.4f in %d AdamW steps%n", first, last, STEPS);
    }
}
