package dev.gatun.models.text;

import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/** The reference tokenizers under {@code src/test/resources/references/tokenizers} and their JSON, for the tests. */
final class References {
    private References() {}

    static final List<String> TOKENIZERS = List.of("gpt2_bytelevel", "llama3_bytelevel", "qwen2_bytelevel",
            "llama2_sentencepiece", "mistral_metaspace", "gemma_sentencepiece");

    /** Those with a chat template and the conversations transformers rendered with it. */
    static final List<String> WITH_CHATS = TOKENIZERS.subList(0, 5);

    static Path dir(String name) {
        try {
            return Path.of(References.class.getResource("/references/tokenizers/" + name).toURI());
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    static Json.Obj json(String name, String file) {
        try {
            return (Json.Obj) Json.parse(Files.readString(dir(name).resolve(file), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static String str(Json.Obj o, String key) { return ((Json.Str) o.get(key)).value(); }

    static int[] ints(Json v) {
        Json.Arr a = (Json.Arr) v;
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) out[i] = Integer.parseInt(((Json.Num) a.get(i)).text());
        return out;
    }

    static List<String> strings(Json v) {
        return ((Json.Arr) v).items().stream().map(x -> ((Json.Str) x).value()).toList();
    }
}
