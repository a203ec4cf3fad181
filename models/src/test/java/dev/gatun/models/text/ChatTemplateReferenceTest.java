package dev.gatun.models.text;

import dev.gatun.ir.json.Json;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.FieldSource;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Every conversation of every reference chat template, against what transformers' {@code apply_chat_template}
 * rendered ({@code chats.json}, made by {@code bench/make_references.py}): the text with and without the generation
 * prompt, and the ids of that text encoded as transformers encodes chat text (no special tokens added).
 */
class ChatTemplateReferenceTest {
    static final List<String> NAMES = References.WITH_CHATS;

    @ParameterizedTest
    @FieldSource("NAMES")
    void everyConversationRendersAndEncodesAsTransformersDoes(String name) {
        ChatTemplate template = ChatTemplate.load(References.dir(name));
        Tokenizer tok = Tokenizer.load(References.dir(name));
        Json.Arr chats = (Json.Arr) References.json(name, "chats.json").get("chats");
        assertThat(chats.size()).isEqualTo(6);
        for (Json c : chats.items()) {
            Json.Obj chat = (Json.Obj) c;
            List<Message> messages = ((Json.Arr) chat.get("messages")).items().stream()
                    .map(m -> new Message(References.str((Json.Obj) m, "role"), References.str((Json.Obj) m, "content"))).toList();
            boolean generationPrompt = ((Json.Bool) chat.get("add_generation_prompt")).value();
            String what = name + " " + messages + (generationPrompt ? " with" : " without") + " the generation prompt";
            String text = template.render(messages, generationPrompt);
            assertThat(text).as(what).isEqualTo(References.str(chat, "text"));
            assertThat(tok.encode(text, false)).as(what).containsExactly(References.ints(chat.get("ids")));
        }
    }
}
