package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The mixture-of-experts block against plain float64 loops (the router's softmax, top-k and renormalisation, each
 * routed expert's SwiGLU weighted by its probability, Qwen2-MoE's gated shared expert), sharded over 1 and 2 ranks on
 * the host backend; Qwen's dense layers ({@code mlp_only_layers}) against transformers' Qwen3 logits; and the
 * checkpoints whose tensors do not match the layers' kinds refused. The whole decoders are compared with transformers
 * in {@link TransformersReferenceTest}.
 */
class MixtureOfExpertsTest {
    @TempDir Path dir;

    static final String P = "model.layers.0.";

    /** The checkpoint names of one expert's gate, up and down projections, as transformers writes them. */
    private static String[] expertNames(MoeConfig.Naming naming, int e) {
        return naming == MoeConfig.Naming.MIXTRAL
                ? new String[]{P + "block_sparse_moe.experts." + e + ".w1.weight", P + "block_sparse_moe.experts." + e + ".w3.weight", P + "block_sparse_moe.experts." + e + ".w2.weight"}
                : new String[]{P + "mlp.experts." + e + ".gate_proj.weight", P + "mlp.experts." + e + ".up_proj.weight", P + "mlp.experts." + e + ".down_proj.weight"};
    }

    /** Rows 7 take the dense form (7 * 2 >= 5 experts), rows 1 and 2 the routed one. */
    @ParameterizedTest(name = "{0}, renormalised {1}, shared {2}, tp {3}, rows {4}")
    @CsvSource({"MIXTRAL,true,0,1,7", "MIXTRAL,true,0,2,7", "QWEN,false,0,1,7", "QWEN,false,6,1,7", "QWEN,false,6,2,7", "QWEN,true,6,2,7", "QWEN,true,0,2,7",
            "MIXTRAL,true,0,1,1", "MIXTRAL,true,0,2,2", "QWEN,false,6,1,2", "QWEN,true,6,2,1", "QWEN,false,0,2,1"})
    void theBlockIsTheWeightedSumOfTheRoutedExpertsAsPlainLoopsComputeIt(MoeConfig.Naming naming, boolean norm, int shared, int tp, int rows) throws IOException {
        int h = 8, experts = 5, k = 2, width = 6;
        var moe = new MoeConfig(naming, experts, k, width, norm, shared, 1, Set.of());
        var c = new LlamaConfig(h, 1, 2, 2, width, 16, 10000, 1e-5, false).withMoe(moe);
        var rnd = new SplittableRandom(17 + shared + (norm ? 1 : 0));
        var tensors = new LinkedHashMap<String, NDArray>();
        String router = naming == MoeConfig.Naming.MIXTRAL ? P + "block_sparse_moe.gate.weight" : P + "mlp.gate.weight";
        tensors.put(router, random(rnd, 1.0, experts, h));
        for (int e = 0; e < experts; e++) {
            String[] n = expertNames(naming, e);
            tensors.put(n[0], random(rnd, 0.5, width, h));
            tensors.put(n[1], random(rnd, 0.5, width, h));
            tensors.put(n[2], random(rnd, 0.5, h, width));
        }
        String[] s = {P + "mlp.shared_expert.gate_proj.weight", P + "mlp.shared_expert.up_proj.weight", P + "mlp.shared_expert.down_proj.weight",
                P + "mlp.shared_expert_gate.weight"};
        if (shared > 0) {
            tensors.put(s[0], random(rnd, 0.5, shared, h));
            tensors.put(s[1], random(rnd, 0.5, shared, h));
            tensors.put(s[2], random(rnd, 0.5, h, shared));
            tensors.put(s[3], random(rnd, 0.5, 1, h));
        }
        NDArray x = random(rnd, 1.0, rows, h);
        SafeTensors.write(dir.resolve("w.safetensors"), tensors, Map.of());
        assertThat(MixtureOfExperts.shapes(c, P).keySet()).containsExactlyInAnyOrderElementsOf(tensors.keySet());

        GraphBuilder g = Gatun.graph("moe").world(tp);
        g.output("y", MixtureOfExperts.block(g, c, P, g.input("x", DType.F32, rows, h), rows, tp, DType.F32));
        var graph = g.build();
        List<Map<String, NDArray>> out;
        try (var files = SafeTensors.open(dir.resolve("w.safetensors")); var session = Session.compile(graph, CompileOptions.world(tp).backend("host"))) {
            assertForm(graph, session.plan().toString(), rows * k < experts);
            var inputs = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < tp; r++) {
                var in = new LinkedHashMap<String, NDArray>();
                MixtureOfExperts.shard(c, files, new WeightReads(files, tensors.keySet(), null), in, P, tp, r, DType.F32);
                in.put("x", x);
                inputs.add(in);
            }
            out = session.runToHost(inputs);
        }

        for (int i = 0; i < rows; i++) {
            double[] xi = new double[h];
            for (int j = 0; j < h; j++) xi[j] = x.get((long) i * h + j);
            // the router: softmax over the logits, the k most probable (the lower index first of equal ones), renormalised
            double[] p = new double[experts];
            double max = Double.NEGATIVE_INFINITY, sum = 0;
            for (int e = 0; e < experts; e++) max = Math.max(max, p[e] = dot(tensors.get(router), e, xi));
            for (int e = 0; e < experts; e++) sum += p[e] = Math.exp(p[e] - max);
            for (int e = 0; e < experts; e++) p[e] /= sum;
            Integer[] order = {0, 1, 2, 3, 4};
            Arrays.sort(order, (a, b) -> p[a] != p[b] ? Double.compare(p[b], p[a]) : Integer.compare(a, b));
            double chosen = 0;
            for (int j = 0; j < k; j++) chosen += p[order[j]];
            double[] y = new double[h];
            for (int j = 0; j < k; j++) {
                int e = order[j];
                String[] n = expertNames(naming, e);
                double[] o = swiglu(tensors.get(n[0]), tensors.get(n[1]), tensors.get(n[2]), xi);
                double w = norm ? p[e] / chosen : p[e];
                for (int d = 0; d < h; d++) y[d] += w * o[d];
            }
            if (shared > 0) {
                double gate = 1 / (1 + Math.exp(-dot(tensors.get(s[3]), 0, xi)));
                double[] o = swiglu(tensors.get(s[0]), tensors.get(s[1]), tensors.get(s[2]), xi);
                for (int d = 0; d < h; d++) y[d] += gate * o[d];
            }
            for (int r = 0; r < tp; r++)
                for (int d = 0; d < h; d++)
                    assertThat(out.get(r).get("y").get((long) i * h + d)).as("row %d, element %d, rank %d", i, d, r)
                            .isCloseTo(y[d], org.assertj.core.api.Assertions.within(1e-5 * (1 + Math.abs(y[d]))));
        }
    }

    /** The ops that read the experts' stacked weights (through reshapes and transpositions, which are views), by name. */
    static Set<String> expertWeightReaders(dev.gatun.ir.graph.Graph graph) {
        var readers = new java.util.TreeSet<String>();
        var todo = new java.util.ArrayDeque<dev.gatun.ir.graph.Node>();
        graph.inputs().forEach((name, n) -> {
            if (name.endsWith(MixtureOfExperts.GATE_UP) || name.endsWith(MixtureOfExperts.DOWN)) todo.add(n);
        });
        while (!todo.isEmpty())
            for (var user : graph.users(todo.poll())) {
                if (user.op() instanceof dev.gatun.ir.graph.Op.Reshape || user.op() instanceof dev.gatun.ir.graph.Op.Permute) todo.add(user);
                else readers.add(user.op().opName());
            }
        return readers;
    }

    /**
     * The plan runs the form the rule picks: routed, two expert_matmul steps and nothing else reading the experts'
     * weights; dense, no expert_matmul and products over every expert.
     */
    static void assertForm(dev.gatun.ir.graph.Graph graph, String plan, boolean routed) {
        assertThat(plan.lines().filter(l -> l.contains("= expert_matmul(")).count()).as(plan).isEqualTo(routed ? 2 : 0);
        assertThat(expertWeightReaders(graph)).containsOnly(routed ? "expert_matmul" : "matmul");
    }

    private static NDArray random(SplittableRandom rnd, double scale, long... shape) {
        var a = NDArray.zeros(DType.F32, shape);
        for (long i = 0; i < a.numel(); i++) a.set(i, scale * rnd.nextGaussian());
        return a;
    }

    /** Row {@code row} of the [out, in] matrix {@code w} times {@code x}, in float64. */
    private static double dot(NDArray w, int row, double[] x) {
        double s = 0;
        for (int j = 0; j < x.length; j++) s += w.get((long) row * x.length + j) * x[j];
        return s;
    }

    /** down(silu(gate x) * up x), in float64. */
    private static double[] swiglu(NDArray gate, NDArray up, NDArray down, double[] x) {
        int width = (int) gate.shape()[0], h = x.length;
        double[] act = new double[width];
        for (int f = 0; f < width; f++) {
            double a = dot(gate, f, x);
            act[f] = a / (1 + Math.exp(-a)) * dot(up, f, x);
        }
        double[] o = new double[h];
        for (int d = 0; d < h; d++) o[d] = dot(down, d, act);
        return o;
    }

    /**
     * The transformers references through the routed form: a one-token prefill (1 * k < experts) gives transformers'
     * logits of the first position at tensor parallelism 1 and 2 (the full prompt's prefill is dense and the greedy
     * decode routed, both checked in {@link TransformersReferenceTest}); and the decode step's plan reads only the routed
     * experts (expert_matmul twice a layer, no product over every expert), the prompt's prefill every expert densely.
     */
    @ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(strings = {"mixtral", "qwen2_moe", "qwen3_moe"})
    void theReferencesMatchTransformersThroughTheRoutedFormAndTheDecodePlanShowsIt(String name) throws IOException {
        var ref = TransformersReference.load(name);
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            MoeConfig m = c.moe();
            assertThat(MixtureOfExperts.routed(m, 1)).as("one token routed").isTrue();
            assertThat(MixtureOfExperts.routed(m, ref.prompt().length)).as("the prompt dense").isFalse();
            for (int tp : new int[]{1, 2}) {
                TransformersReferenceTest.assertLogits(ref, ckpt, tp, 1);
                var decodeGraph = LlamaDecoder.decode(c, ref.prompt().length + 4, tp, DType.F32);
                assertThat(expertWeightReaders(decodeGraph)).as("what reads the experts' weights in the decode step").containsOnly("expert_matmul");
                assertThat(expertWeightReaders(LlamaDecoder.prefill(c, ref.prompt().length, ref.prompt().length + 4, tp, DType.F32)))
                        .as("what reads them in the prefill").containsOnly("matmul");
                try (var decode = Session.compile(decodeGraph, CompileOptions.world(tp).backend("host"));
                     var prefill = Session.compile(LlamaDecoder.prefill(c, ref.prompt().length, ref.prompt().length + 4, tp, DType.F32),
                             CompileOptions.world(tp).backend("host"))) {
                    String plan = decode.plan().toString();
                    assertThat(plan.lines().filter(l -> l.contains("= expert_matmul(")).count()).as(plan).isEqualTo(2L * java.util.stream.IntStream.range(0, c.layers()).filter(l -> MixtureOfExperts.sparse(c, l)).count());
                    assertThat(prefill.plan().toString()).doesNotContain("expert_matmul");
                }
            }
        }
    }

    /**
     * A Qwen3-MoE checkpoint whose every layer is in {@code mlp_only_layers} is Qwen3 with dense MLPs: over the Qwen3
     * reference's weights it gives transformers' Qwen3 logits and greedy tokens, at tensor parallelism 1 and 2.
     */
    @Test
    void qwen3MoeLayersInMlpOnlyLayersAreDenseAsTransformersQwen3() throws IOException {
        var ref = TransformersReference.load("qwen3");
        Path ckpt = qwen3MoeOverQwen3Weights("\"mlp_only_layers\": [0, 1]");
        try (var loaded = LlamaCheckpoint.open(ckpt)) {
            assertThat(loaded.config().moe().sparse(0)).isFalse();
            assertThat(loaded.config().moe().sparse(1)).isFalse();
            for (int tp : new int[]{1, 2}) {
                TransformersReferenceTest.assertLogits(ref, loaded, tp, ref.prompt().length);
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(loaded.config(), loaded.weights(), tp, r, DType.F32));
                try (var gen = new LlamaGenerator(loaded.config(), shards, ref.prompt().length, ref.prompt().length + 16, tp, DType.F32,
                        CompileOptions.world(tp).backend("host"))) {
                    assertThat(gen.generate(ref.prompt(), 16, false).tokens()).as("tp %d", tp).containsExactly(ref.tokens());
                }
            }
        }
    }

    /**
     * The checkpoint must hold each layer's kind of MLP: a layer the configuration makes a mixture (here layer 0, not
     * in {@code mlp_only_layers}) needs its router and experts, a dense one (layer 0 with {@code decoder_sparse_step} 2)
     * its three projections; and a tensor no layer uses is refused, as for every architecture.
     */
    @Test
    void aCheckpointWhoseTensorsAreNotTheLayersKindsIsRefused() throws IOException {
        Path sparse = qwen3MoeOverQwen3Weights("\"mlp_only_layers\": [1]");
        assertThatThrownBy(() -> LlamaCheckpoint.open(sparse)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor 'model.layers.0.mlp.gate.weight' is missing");
        Path moe = dir.resolve("step");
        Files.createDirectories(moe);
        Path reference = TransformersReference.directory("qwen3_moe");
        Files.copy(reference.resolve("model.safetensors"), moe.resolve("model.safetensors"));
        Files.writeString(moe.resolve("config.json"), Files.readString(reference.resolve("config.json")).replace("\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2"));
        assertThatThrownBy(() -> LlamaCheckpoint.open(moe)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor 'model.layers.0.mlp.gate_proj.weight' is missing");
        // transformers 5's in-memory form of the experts, one 3-D tensor, beside the per-expert ones: not used, refused
        Path fused = dir.resolve("fused");
        Files.createDirectories(fused);
        Files.copy(reference.resolve("config.json"), fused.resolve("config.json"));
        var tensors = new LinkedHashMap<String, NDArray>();
        try (var files = SafeTensors.open(reference.resolve("model.safetensors"))) {
            for (String n : files.names()) tensors.put(n, files.get(n).to(DType.F32));
            tensors.put("model.layers.0.mlp.experts.gate_up_proj", NDArray.zeros(DType.F32, 4, 64, 64));
            SafeTensors.write(fused.resolve("model.safetensors"), tensors, Map.of("format", "pt"));
        }
        assertThatThrownBy(() -> LlamaCheckpoint.open(fused)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("1 tensor the model does not use: 'model.layers.0.mlp.experts.gate_up_proj'");
    }

    /** The Qwen3 reference's weights under a Qwen3-MoE config of its shape with {@code more} fields. */
    private Path qwen3MoeOverQwen3Weights(String more) throws IOException {
        Path reference = TransformersReference.directory("qwen3"), out = dir.resolve("qwen3_moe_dense");
        Files.createDirectories(out);
        Files.copy(reference.resolve("model.safetensors"), out.resolve("model.safetensors"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        String config = Files.readString(reference.resolve("config.json")).replace("\"qwen3\"", "\"qwen3_moe\"").replace("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
                .replace("\"vocab_size\": 256", "\"vocab_size\": 256, \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                        + "\"norm_topk_prob\": true, \"decoder_sparse_step\": 1, " + more);
        Files.writeString(out.resolve("config.json"), config);
        return out;
    }
}
