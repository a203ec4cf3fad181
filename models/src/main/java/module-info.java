/**
 * Models written in Gatun's DSL and the files they load: the Llama family ({@code dev.gatun.models.llama}: config,
 * checkpoint, prefill and decode graphs, generation) and Hugging Face tokenizers and chat templates
 * ({@code dev.gatun.models.text}). Both packages are public API. The models read their JSON files (config.json,
 * tokenizer.json, the safetensors index) with Gatun's JSON reader, which {@code dev.gatun.ir} exports to this module
 * only.
 */
module dev.gatun.models {
    requires transitive dev.gatun.dsl;
    requires transitive dev.gatun.runtime;

    exports dev.gatun.models.llama;
    exports dev.gatun.models.text;
}
