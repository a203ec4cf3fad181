package dev.gatun.models.text;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The Jinja subset of {@link ChatTemplate}, construct by construct. Every expected text is what Jinja2 3.1.6 renders
 * with transformers' chat-template settings ({@code ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True)} and its {@code raise_exception}), rendered there and copied here.
 */
class ChatTemplateTest {
    static final List<Message> USER_ASSISTANT = List.of(Message.user("hi"), Message.assistant("yo"));

    static String render(String template, List<Message> messages, boolean generationPrompt, Map<String, String> vars) {
        return ChatTemplate.of(template, vars).render(messages, generationPrompt);
    }

    static String render(String template, List<Message> messages) { return render(template, messages, false, Map.of()); }

    static String render(String template) { return render(template, List.of()); }

    @Test
    void blockTagsTakeTheirLinesWhiteSpaceAsTrimBlocksAndLstripBlocksSay() {
        assertThat(render("{% for m in messages %}\n  {% if m.role == 'user' %}\n    U: {{ m.content }}\n  {% else %}\n    A: {{ m['content'] }}\n  {% endif %}\n{% endfor %}\n",
                USER_ASSISTANT)).isEqualTo("    U: hi\n    A: yo\n");
        assertThat(render("{% if true %}\n    indented\n{% endif %}\n{{ 'v' }}  {% if true %}inline{% endif %}\n"))
                .isEqualTo("    indented\nv  inline");
        assertThat(render("  {%+ if true %}k{% endif %}\n  {# note #}\nend")).isEqualTo("  kend");
    }

    @Test
    void minusSignsStripAllWhiteSpaceOnTheirSide() {
        assertThat(render("a  {%- if true -%}  b  {%- endif -%}  c\n")).isEqualTo("abc");
        assertThat(render("x {{- ' y ' -}} z")).isEqualTo("x y z");
        assertThat(render("{%- for m in messages -%}\n{{ m.content }}\n{%- endfor %}\n",
                List.of(Message.user("a"), Message.user("b")))).isEqualTo("ab");
    }

    @Test
    void newlinesAreNormalizedAndOneTrailingNewlineDropped() {
        assertThat(render("line1\r\nline2\r{{ 'x' }}\n\n")).isEqualTo("line1\nline2\nx\n");
    }

    @Test
    void stringLiteralsReadPythonsEscapes() {
        assertThat(render("{{ 'tab\\there\\nnl \\'q\\' \\\"d\\\" \\u00e9 \\x41 \\\\ \\d' }}"))
                .isEqualTo("tab\there\nnl 'q' \"d\" é A \\ \\d");
        assertThat(render("{{ 'x' 'y' }}{{ \"dq\" }}")).isEqualTo("xydq");
    }

    @Test
    void loopVariablesCountFromZeroAndFromOne() {
        var three = List.of(new Message("a", "1"), new Message("b", "2"), new Message("c", "3"));
        assertThat(render("{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", three))
                .isEqualTo("01TrueFalse3|12FalseFalse3|23FalseTrue3|");
    }

    @Test
    void filtersWorkOnCodePointsAndUnicodeWhiteSpace() {
        // trim strips the no-break space; length counts the emoji as one (it is two UTF-16 units); upper makes ß SS
        assertThat(render("{{ (messages[0]['content'] | trim | upper) ~ '|' ~ (messages | length) ~ '|' ~ ('ÄbC' | lower) ~ '|' ~ (messages[0].content | length) }}",
                List.of(new Message("u", "  straße 😀 \u00a0")))).isEqualTo("STRASSE 😀|1|äbc|12");
        // a filter binds tighter than + and ~
        assertThat(render("{{ 'ab' + 'c' ~ 'd' | upper }}")).isEqualTo("abcD");
    }

    @Test
    void operatorsFollowPythonsSemanticsAndJinjasPrecedence() {
        assertThat(render("{{ 'b' in 'abc' }}{{ 'z' not in ['x', 'y'] }}{{ messages[-1].role }}{{ 0 or 'or' }}{{ '' and 'no' }}{{ 'x' and 'yes' }}",
                List.of(new Message("first", ""), new Message("last", "")))).isEqualTo("TrueTruelastoryes");
        assertThat(render("{{ 7 // 2 }}{{ -7 // 2 }}{{ -7 % 3 }}{{ 2 * 3 - 1 }}{{ - 2 * 3 }}{{ 10 - 2 - 3 }}")).isEqualTo("3-425-65");
        assertThat(render("{{ not 1 == 2 }}{{ not '' }}{{ (1 == 1) == true }}")).isEqualTo("TrueTrueTrue");
        assertThat(render("{{ 5 > 3 }}{{ 'a' < 'b' }}{{ 2 <= 2 >= 1 }}")).isEqualTo("TrueTrueTrue");
        assertThat(render("{{ 'x' ~ none ~ true ~ 3 }}{{ [1, 2] | length }}{{ 'a' in ['a'] and 'b' not in 'abc' }}")).isEqualTo("xNoneTrue32False");
        assertThat(render("{% if a %}A{% elif b %}B{% elif c %}C{% else %}E{% endif %}", List.of(), false, Map.of("c", "yes"))).isEqualTo("C");
    }

    @Test
    void undefinedValuesPrintAsNothingAndAreFalse() {
        assertThat(render("{{ nothing }}[{{ nothing ~ 'x' }}]{% if nothing is defined %}D{% else %}U{% endif %}{% if not nothing %}F{% endif %}"))
                .isEqualTo("[x]UF");
        assertThat(render("{{ messages[0].nope }}|{{ messages[5] }}|{{ messages[0]['role'][0] }}{{ 'abc'[-1] }}", List.of(Message.user("x"))))
                .isEqualTo("||uc");
    }

    @Test
    void aSetInsideALoopStaysInTheLoop() {
        assertThat(render("{% set n = 'outer' %}{% for m in messages %}{% set n = m.role %}{{ n }}{% endfor %}|{{ n }}",
                List.of(new Message("r1", ""), new Message("r2", "")))).isEqualTo("r1r2|outer");
    }

    @Test
    void theGenerationPromptAndSpecialTokensAreVariables() {
        String mistral = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
                + "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
                + "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                + "{{ message['content'] + eos_token}}{% endif %}{% endfor %}";
        var tokens = Map.of("bos_token", "<s>", "eos_token", "</s>");
        assertThat(render(mistral, List.of(Message.user("a"), Message.assistant("b"), Message.user("c")), false, tokens))
                .isEqualTo("<s>[INST] a [/INST]b</s>[INST] c [/INST]");
        assertThatThrownBy(() -> render(mistral, List.of(Message.user("a"), Message.user("c")), false, tokens))
                .isInstanceOf(TokenizerException.class)
                .hasMessageContaining("chat template line 1, column 110")
                .hasMessageContaining("raised an exception: Conversation roles must alternate user/assistant/user/assistant/...");
        String prompt = "{% for message in messages %}{{ message.role | upper }}: {{ message.content }}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}";
        assertThat(render(prompt, List.of(Message.user("x")), true, Map.of())).isEqualTo("USER: x\nASSISTANT:");
        assertThat(render(prompt, List.of(Message.user("x")), false, Map.of())).isEqualTo("USER: x\n");
    }

    @Test
    void constructsOutsideTheSubsetAreRefusedByNameAndPosition() {
        refused("ab\n  {{ messages | tojson }}", "chat template line 2, column 17: filter 'tojson' is not supported; supported filters: trim, length, upper, lower");
        refused("{% macro m() %}{% endmacro %}", "line 1, column 4: statement 'macro' is not supported; supported: for, endfor, if, elif, else, endif, set");
        refused("{{ messages[0].content.strip() }}", "line 1, column 24: method calls ('.strip(...)') are not supported");
        refused("{{ 'a' if x else 'b' }}", "line 1, column 8: an inline 'x if c else y' expression is not supported");
        refused("{% for m in messages[1:] %}{% endfor %}", "line 1, column 23: slices ('[a:b]') are not supported");
        refused("{% set ns = namespace(found=false) %}", "line 1, column 13: calling 'namespace' is not supported");
        refused("{% set ns.found = true %}", "line 1, column 10: setting an attribute");
        refused("{{ 1 / 2 }}", "line 1, column 6: operator '/' is not supported");
        refused("{% for k, v in x %}{% endfor %}", "line 1, column 9: unpacking several loop variables is not supported");
        refused("{% for m in messages if m.role %}{% endfor %}", "line 1, column 22: a loop filter ('for ... if') is not supported");
        refused("{{ x is string }}", "line 1, column 9: test 'string' is not supported; supported tests: defined, undefined, none");
        refused("{{ {'a': 1} }}", "line 1, column 4: dictionary literals are not supported");
        refused("{{ 1.5 }}", "line 1, column 4: a number with a fraction or an exponent is not supported");
        refused("{% if x %}open", "the template ends inside a block; expected {% elif %} or {% else %} or {% endif %}");
        refused("{% for m in messages %}{% endif %}", "line 1, column 27: 'endif' where {% else %} or {% endfor %} was expected");
        refused("text {% endfor %}", "line 1, column 9: 'endfor' has no block to end here");
        refused("{{ 'open }}", "line 1, column 4: the string literal is not closed by '");
        refused("{{ x ", "line 1, column 1: the tag {{ is not closed by }}");
        refused("{% raw %}{{ x }}{% endraw %}", "line 1, column 4: statement 'raw' is not supported");
    }

    private static void refused(String template, String message) {
        assertThatThrownBy(() -> ChatTemplate.of(template, Map.of())).as(template)
                .isInstanceOf(TokenizerException.class).hasMessageContaining(message);
    }

    @Test
    void valuesTheSubsetCannotCombineAreErrorsWhenRendered() {
        assertThatThrownBy(() -> render("{{ 'a' + 1 }}")).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("chat template line 1, column 8: cannot apply '+' to a string and an integer");
        assertThatThrownBy(() -> render("{{ missing + 'x' }}")).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("line 1, column 4: 'missing' is undefined");
        assertThatThrownBy(() -> render("{{ missing.role }}")).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("line 1, column 11: 'missing' is undefined, so it has no 'role'");
        assertThatThrownBy(() -> render("{{ messages }}")).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("printing a list is not supported");
    }

    @Test
    void aDirectorysTemplateAndSpecialTokensLoadFromTheTokenizerConfig(@TempDir Path dir) throws IOException {
        Files.writeString(dir.resolve("tokenizer_config.json"), """
                {"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>", "pad_token": null,
                 "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|"}]}
                """);
        ChatTemplate t = ChatTemplate.load(dir);
        assertThat(t.render(List.of(), false)).isEqualTo("<s>|</s>||");
        assertThat(t.variables()).containsExactly(Map.entry("bos_token", "<s>"), Map.entry("eos_token", "</s>"));
        // a chat_template.jinja beside it wins, as transformers has it
        Files.writeString(dir.resolve("chat_template.jinja"), "J{{ eos_token }}\n");
        assertThat(ChatTemplate.load(dir).render(List.of(), false)).isEqualTo("J</s>");
        // either file by its own path: the template with its sibling's tokens, or the config's own template
        assertThat(ChatTemplate.load(dir.resolve("chat_template.jinja")).render(List.of(), false)).isEqualTo("J</s>");
        assertThat(ChatTemplate.load(dir.resolve("tokenizer_config.json")).render(List.of(), false)).isEqualTo("<s>|</s>||");
        Files.delete(dir.resolve("chat_template.jinja"));
        Files.writeString(dir.resolve("tokenizer_config.json"), "{\"eos_token\": \"</s>\"}");
        assertThatThrownBy(() -> ChatTemplate.load(dir)).isInstanceOf(TokenizerException.class)
                .hasMessageContaining("no chat template (neither chat_template.jinja nor a 'chat_template' in tokenizer_config.json)");
    }
}
