package dev.gatun.ir.json;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

class JsonTest {

    @Test
    void parsesEveryKindOfValue() {
        Json v = Json.parse(" {\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"x\\ny\\u0041\\\"\"}} ");
        var o = (Json.Obj) v;
        var a = (Json.Arr) o.get("a");
        assertThat(a.items()).containsExactly(new Json.Num("1"), new Json.Num("-2.5e3"), new Json.Bool(true), new Json.Bool(false), Json.Null.INSTANCE);
        assertThat(((Json.Num) a.get(1)).doubleValue()).isEqualTo(-2500.0);
        assertThat(((Json.Obj) o.get("b")).get("c")).isEqualTo(new Json.Str("x\nyA\""));
    }

    @Test
    void writesDeterministicPrettyTextThatReadsBack() {
        var o = new Json.Obj(Map.of("k", new Json.Arr(List.of(Json.of(1), Json.of("a\tb\u0001")))));
        String text = Json.write(o);
        assertThat(text).isEqualTo("{\n  \"k\": [1, \"a\\tb\\u0001\"]\n}\n");
        assertThat(Json.parse(text)).isEqualTo(o);
    }

    @Test
    void doublesRoundTripExactly() {
        for (double d : new double[]{0.1, -0.0, 1e-320, Double.MAX_VALUE, Math.PI, 1.0 / 3, 123456789012345.67})
            assertThat(((Json.Num) Json.parse(Json.write(Json.Num.of(d)).strip())).doubleValue()).isEqualTo(d);
    }

    @ParameterizedTest
    @CsvSource(delimiter = '|', value = {
            "{\"a\" 1}                 | 1 | 6  | expected ':' after the key \"a\", found '1'",
            "[1, 2                     | 1 | 6  | expected ',' or ']' in an array, found the end of the text",
            "{\"a\": tru}              | 1 | 7  | expected a value",
            "{\"a\": 1,}               | 1 | 9  | expected a string key in an object, found '}'",
            "[01]                      | 1 | 3  | expected ',' or ']' in an array, found '1'",
            "\"abc                     | 1 | 5  | expected '\"' to close a string",
            "[1.]                      | 1 | 4  | expected a digit after the decimal point",
            "{}  x                     | 1 | 5  | expected the end of the document",
            "''                        | 1 | 1  | expected a value",
    })
    void malformedTextNamesLineColumnAndWhatWasExpected(String text, int line, int column, String message) {
        assertThatThrownBy(() -> Json.parse(text.strip()))
                .isInstanceOf(JsonSyntaxException.class)
                .hasMessageContaining("line " + line + ", column " + column)
                .hasMessageContaining(message)
                .satisfies(e -> {
                    assertThat(((JsonSyntaxException) e).line()).isEqualTo(line);
                    assertThat(((JsonSyntaxException) e).column()).isEqualTo(column);
                });
    }

    @Test
    void aLargeObjectOnOneLineParsesInLinearTime() {
        // a tokenizer.json vocabulary: 200,000 keys on one line; counting each key's line and column (for a
        // duplicate-key error that never comes) scanned back over the line for every key, hours for this
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < 200_000; i++) sb.append(i == 0 ? "" : ", ").append("\"token").append(i).append("\": ").append(i);
        String text = sb.append(", \"token7\": 0}").toString();
        assertTimeoutPreemptively(java.time.Duration.ofSeconds(30), () -> assertThatThrownBy(() -> Json.parse(text))
                .hasMessageContaining("line 1, column " + (text.length() - 11)).hasMessageContaining("duplicate key \"token7\""));
        String valid = text.substring(0, text.length() - 14) + "}";
        Json.Obj o = assertTimeoutPreemptively(java.time.Duration.ofSeconds(30), () -> (Json.Obj) Json.parse(valid));
        assertThat(o.fields()).hasSize(200_000);
        assertThat(o.get("token199999")).isEqualTo(Json.of(199_999));
    }

    @Test
    void errorsOnLaterLinesCountLinesAndColumns() {
        assertThatThrownBy(() -> Json.parse("{\n  \"a\": 1,\n  \"a\": 2\n}"))
                .hasMessageContaining("line 3, column 3").hasMessageContaining("duplicate key \"a\"");
        assertThatThrownBy(() -> Json.parse("[\n1,\n\"\\q\"]"))
                .hasMessageContaining("line 3, column 3").hasMessageContaining("escape");
    }

    @Test
    void deepNestingIsAnErrorNotAStackOverflow() {
        assertThatThrownBy(() -> Json.parse("[".repeat(100_000))).isInstanceOf(JsonSyntaxException.class)
                .hasMessageContaining("levels of nesting");
    }

    /**
     * An object of 200,000 keys on one line (a safetensors header's shape) parses in linear time: the position of a key
     * is counted only for an error (it was counted for every key, quadratic in the line's length). The bound is a guard.
     */
    @Test
    void manyKeysOnOneLineParseInLinearTime() {
        var sb = new StringBuilder("{");
        for (int i = 0; i < 200_000; i++) sb.append(i == 0 ? "" : ",").append("\"key").append(i).append("\":[").append(i).append(']');
        String text = sb.append('}').toString();
        org.junit.jupiter.api.Assertions.assertTimeoutPreemptively(java.time.Duration.ofSeconds(20), () -> {
            var o = (Json.Obj) Json.parse(text);
            assertThat(o.fields()).hasSize(200_000);
            assertThat(o.get("key199999")).isEqualTo(new Json.Arr(List.of(new Json.Num("199999"))));
        });
        // a duplicate still names its line and column
        assertThatThrownBy(() -> Json.parse("{\"a\": 1, \"a\": 2}")).hasMessageContaining("line 1, column 10").hasMessageContaining("duplicate key \"a\"");
    }
}
