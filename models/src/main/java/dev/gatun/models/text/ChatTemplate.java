package dev.gatun.models.text;

import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A model's chat template: turns a conversation into the prompt text the model was trained on, as transformers'
 * {@code apply_chat_template} does, for the Jinja subset chat templates mostly use: {@code {{ }}},
 * {@code {% for %}}, {@code {% if %}}/{@code elif}/{@code else}, {@code {% set %}}, {@code +} and {@code ~},
 * integer {@code -}, {@code *}, {@code //} and {@code %}, string and list literals (Python's escapes),
 * {@code message['role']} and {@code message.role}, {@code messages[-1]}, comparisons,
 * {@code and}/{@code or}/{@code not}/{@code in}, the filters {@code trim}, {@code length}, {@code upper},
 * {@code lower}, the tests {@code defined}, {@code none}, {@code loop.first}/{@code last}/{@code index0}/{@code index}/
 * {@code length}, and {@code raise_exception(...)}; white space as transformers' Jinja environment handles it
 * ({@code trim_blocks}, {@code lstrip_blocks}, {@code -} and {@code +} signs). Anything outside the subset
 * ({@code namespace}, {@code tojson}, macros, slices, method calls) is refused when the template is read, by name and
 * with its line and column, never rendered into a different prompt.
 *
 * <p>The template sees {@code messages}, {@code add_generation_prompt} and the tokenizer's special tokens
 * ({@code bos_token}, {@code eos_token}, ... as {@code tokenizer_config.json} names them). The rendered text already
 * holds its special tokens: encode it with {@code tokenizer.encode(text, false)}, as transformers does.
 */
public final class ChatTemplate {
    private static final List<String> TOKEN_FIELDS = List.of("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token");

    private final TemplateSource source;
    private final List<TemplateNode> nodes;
    private final Map<String, String> variables;

    private ChatTemplate(TemplateSource source, Map<String, String> variables) {
        this.source = source;
        this.nodes = TemplateParser.parse(source);
        this.variables = Collections.unmodifiableMap(new LinkedHashMap<>(variables));
    }

    /**
     * A template from its text.
     *
     * @param variables names the template may use besides {@code messages} and {@code add_generation_prompt}, such
     *                  as {@code bos_token}
     * @throws TokenizerException naming the line and column of anything outside the supported subset
     */
    public static ChatTemplate of(String template, Map<String, String> variables) {
        return new ChatTemplate(TemplateSource.of("chat template", template), variables);
    }

    /**
     * The chat template of a model directory: {@code chat_template.jinja} if there is one (transformers 4.50 and
     * later save it so), else {@code tokenizer_config.json}'s {@code chat_template} (its "default" one where it holds
     * several), with the special tokens {@code tokenizer_config.json} names. A path to one of those two files reads
     * that file (with the other's tokens where it is a template).
     */
    public static ChatTemplate load(Path dirOrFile) {
        boolean file = Files.isRegularFile(dirOrFile);
        Path dir = file ? dirOrFile.toAbsolutePath().getParent() : dirOrFile;
        boolean jsonFile = file && dirOrFile.getFileName().toString().endsWith(".json");
        Path jinja = file ? (jsonFile ? null : dirOrFile) : dir.resolve("chat_template.jinja");   // null: only the config
        Path config = jsonFile ? dirOrFile : dir.resolve("tokenizer_config.json");
        JsonNode cfg = Files.isRegularFile(config) ? JsonNode.read(config) : null;
        Map<String, String> tokens = cfg == null ? Map.of() : specialTokens(cfg);
        if (jinja != null && Files.isRegularFile(jinja)) {
            try {
                return new ChatTemplate(TemplateSource.of(jinja.toString(), Files.readString(jinja, StandardCharsets.UTF_8)), tokens);
            } catch (IOException e) {
                throw new TokenizerException(jinja + ": cannot be read: " + e, e);
            }
        }
        Json t = cfg == null ? null : cfg.get("chat_template");
        if (t == null) throw new TokenizerException(dirOrFile + ": no chat template (neither chat_template.jinja nor a 'chat_template' in tokenizer_config.json)");
        String origin = config + " (chat_template)";
        if (t instanceof Json.Str s) return new ChatTemplate(TemplateSource.of(origin, s.value()), tokens);
        return new ChatTemplate(TemplateSource.of(origin, named(cfg, t)), tokens);
    }

    /** The "default" of a list of {@code {"name": ..., "template": ...}}. */
    private static String named(JsonNode cfg, Json t) {
        if (!(t instanceof Json.Arr list)) throw cfg.error("field 'chat_template' is a JSON " + t.kind() + ", not a string or a list of named templates");
        List<String> names = new ArrayList<>();
        for (Json item : list.items()) {
            if (!(item instanceof Json.Obj o)) throw cfg.error("field 'chat_template' holds a JSON " + item.kind() + ", not a {name, template} object");
            JsonNode n = new JsonNode(cfg.file(), "chat_template[" + names.size() + "]", o);
            if (n.string("name").equals("default")) return n.string("template");
            names.add(n.string("name"));
        }
        throw cfg.error("field 'chat_template' has no template named 'default' (it has " + names + ")");
    }

    /** {@code bos_token} and its kind as strings or {@code {"content": ...}} objects; null ones are left out, as transformers leaves them. */
    private static Map<String, String> specialTokens(JsonNode cfg) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String f : TOKEN_FIELDS) {
            Json v = cfg.get(f);
            if (v == null) continue;
            if (v instanceof Json.Str s) out.put(f, s.value());
            else if (v instanceof Json.Obj o) out.put(f, new JsonNode(cfg.file(), f, o).string("content"));
            else throw cfg.error("field '" + f + "' is a JSON " + v.kind() + ", not a string");
        }
        return out;
    }

    /**
     * The prompt text of a conversation.
     *
     * @param addGenerationPrompt whether to end with what starts the assistant's reply (the template's
     *                            {@code add_generation_prompt} branch)
     * @throws TokenizerException where the template raises an exception (such as "roles must alternate") or
     *                            meets a value it cannot handle, naming the line and column
     */
    public String render(List<Message> messages, boolean addGenerationPrompt) {
        List<Object> list = new ArrayList<>(messages.size());
        for (Message m : messages) list.add(Map.of("role", m.role(), "content", m.content()));
        Map<String, Object> globals = new LinkedHashMap<>(variables);
        globals.put("messages", list);
        globals.put("add_generation_prompt", addGenerationPrompt);
        return TemplateRenderer.render(source, nodes, globals);
    }

    /** The special tokens and other names the template sees, besides the conversation. */
    public Map<String, String> variables() { return variables; }

    /** The template's text. */
    public String source() { return source.text(); }

    @Override public String toString() { return "ChatTemplate[" + source.origin() + "]"; }
}
