// Any decoder checkpoint the family computes (transformers' llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, mixtral,
// qwen2_moe, qwen3_moe: config.json and model.safetensors or its shards), loaded as it is and decoded greedily on the
// host backend at tensor parallelism 1 and 2. Given no directory, it takes the small reference checkpoints that
// transformers made for the tests (models/src/test/resources/references/decoders: random weights, each with the 16
// greedy tokens transformers' generate() gave for its prompt) and checks every one against transformers' tokens.
// Given directories, it decodes 16 tokens after a short prompt in each and prints them. What the family does not
// compute is refused by name when the checkpoint is opened (docs/MODELS.md).
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/AnyDecoder.java [DIR ...]
import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

static final int NEW = 16;
static final Path REFERENCES = Path.of("models/src/test/resources/references/decoders");

/** The greedy continuation of {@code prompt} at tensor parallelism {@code tp}, float32, on the host backend. */
static int[] generate(Path dir, int[] prompt, int tp) throws Exception {
    try (var ckpt = LlamaCheckpoint.open(dir)) {
        LlamaConfig c = ckpt.config();
        var shards = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, ckpt.weights(), tp, r, DType.F32));
        try (var gen = new LlamaGenerator(c, shards, prompt.length, prompt.length + NEW, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
            return gen.generate(prompt, NEW, false).tokens();
        }
    }
}

/** The integers of the JSON array {@code field} in {@code json} (reference.json's "prompt" and "tokens"). */
static int[] ints(String json, String field) {
    var m = Pattern.compile("\"" + field + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
    if (!m.find()) throw new IllegalStateException("no \"" + field + "\" in reference.json");
    return Arrays.stream(m.group(1).split(",")).map(String::strip).mapToInt(Integer::parseInt).toArray();
}

static String modelType(Path dir) throws Exception {
    var m = Pattern.compile("\"model_type\"\\s*:\\s*\"([^\"]+)\"").matcher(Files.readString(dir.resolve("config.json")));
    return m.find() ? m.group(1) : "?";
}

void main(String[] args) throws Exception {
    List<Path> dirs = new ArrayList<>();
    for (String a : args) dirs.add(Path.of(a));
    boolean references = dirs.isEmpty();
    if (references)
        try (var list = Files.list(REFERENCES)) {
            // every reference with weights (mistral's needs a window longer than its test generation: the test checks its prefill)
            list.filter(d -> Files.exists(d.resolve("reference.json")) && !d.getFileName().toString().equals("mistral")).sorted().forEach(dirs::add);
        }
    var types = new java.util.TreeSet<String>();
    for (Path dir : dirs) {
        Path ref = dir.resolve("reference.json");
        int[] prompt = references ? ints(Files.readString(ref), "prompt") : new int[]{1, 0, 37, 201, 5, 99};
        int[] one = generate(dir, prompt, 1), two = generate(dir, prompt, 2);
        String type = modelType(dir);
        types.add(type);
        System.out.printf("%-20s %-10s %s%n", dir.getFileName(), type, Arrays.toString(one));
        if (!Arrays.equals(one, two)) throw new AssertionError("WRONG: " + dir + ": tensor parallelism 1 and 2 disagree: " + Arrays.toString(two));
        if (references && !Arrays.equals(one, ints(Files.readString(ref), "tokens")))
            throw new AssertionError("WRONG: " + dir + ": transformers' greedy tokens are " + Arrays.toString(ints(Files.readString(ref), "tokens")));
    }
    System.out.println("verified: " + dirs.size() + " checkpoints of " + types.size() + " model types " + types + " decode "
            + (references ? "transformers' greedy tokens" : "the same tokens") + " at tensor parallelism 1 and 2");
}
