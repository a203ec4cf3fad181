package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.json.Json;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link LlamaConfig#write} of every architecture: each transformers-written reference configuration, read and written
 * again, reads back as the same configuration, under the model type transformers wrote, and every field the writer
 * writes holds the value transformers' file holds (the rotary fields aside: transformers 5 writes them as
 * {@code rope_parameters}, the writer as {@code rope_theta} and {@code rope_scaling}, which transformers also reads).
 */
class LlamaConfigWriterTest {
    @TempDir Path dir;

    /** Fields whose spelling differs between the two files by design (see the class comment), or is null in transformers'. */
    private static final Set<String> SPELLED_OTHERWISE = Set.of("rope_theta", "rope_scaling", "max_position_embeddings", "head_dim");

    @ParameterizedTest
    @ValueSource(strings = {"llama", "llama_tied", "llama_head_dim", "llama_bias", "llama_rope_llama3", "llama_rope_linear", "llama_rope_dynamic",
            "llama_rope_yarn", "llama_bf16", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "phi3_partial_rotary", "mixtral", "qwen2_moe",
            "qwen3_moe"})
    void everyReferenceConfigurationRoundTripsUnderItsOwnType(String name) throws IOException {
        Path reference = TransformersReference.directory(name).resolve("config.json");
        LlamaConfig c = LlamaConfig.read(reference);
        Path written = dir.resolve(name + ".json");
        c.write(written);
        assertThat(LlamaConfig.read(written)).isEqualTo(c);
        var ours = (Json.Obj) Json.parse(Files.readString(written, StandardCharsets.UTF_8));
        var theirs = (Json.Obj) Json.parse(Files.readString(reference, StandardCharsets.UTF_8));
        assertThat(ours.get("model_type")).isEqualTo(theirs.get("model_type"));
        assertThat(ours.get("architectures")).isEqualTo(theirs.get("architectures"));
        List<String> differ = new ArrayList<>();
        for (var e : ours.fields().entrySet()) {
            if (SPELLED_OTHERWISE.contains(e.getKey())) continue;
            Json t = theirs.get(e.getKey());
            if (t == null || !same(e.getValue(), t)) differ.add(e.getKey() + ": ours " + e.getValue() + ", transformers' " + t);
        }
        assertThat(differ).as(name).isEmpty();
    }

    /**
     * Numbers by value (1e-05 and 1.0000000000000001e-05 are the same) and kind (transformers 5's typed config fields
     * refuse 24.0 where they take an int: a whole number must be written as transformers writes it), the rest as parsed.
     */
    private static boolean same(Json a, Json b) {
        if (a instanceof Json.Num x && b instanceof Json.Num y) return x.doubleValue() == y.doubleValue() && x.isIntegral() == y.isIntegral();
        if (a instanceof Json.Arr x && b instanceof Json.Arr y) {
            if (x.size() != y.size()) return false;
            for (int i = 0; i < x.size(); i++) if (!same(x.get(i), y.get(i))) return false;
            return true;
        }
        return a.equals(b);
    }

    /** A random checkpoint of a mixture of experts and of Gemma 2 is written whole and opens as written. */
    @Test
    void randomCheckpointsOfEveryFamilyOpen() throws IOException {
        for (String name : new String[]{"gemma2", "qwen2_moe", "qwen3_moe", "mixtral"}) {
            LlamaConfig c = LlamaConfig.read(TransformersReference.directory(name).resolve("config.json"));
            Path ckpt = dir.resolve(name);
            LlamaCheckpoint.writeRandom(c, dev.gatun.ir.DType.BF16, 3, ckpt);
            try (var loaded = LlamaCheckpoint.open(ckpt)) {
                assertThat(loaded.config()).isEqualTo(c);
            }
        }
    }

    /** A configuration no file of its type says (Gemma 1 has no window) is refused, and no file is left. */
    @Test
    void aConfigurationNoFileSaysIsRefused() throws IOException {
        LlamaConfig gemma = LlamaConfig.read(TransformersReference.directory("gemma").resolve("config.json"));
        Path out = dir.resolve("out.json");
        assertThatThrownBy(() -> gemma.withSlidingWindow(16).write(out)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("LlamaConfig.write").hasMessageContaining("no gemma file says this configuration");
        assertThat(out).doesNotExist();
    }
}
