package dev.gatun.models.text;

import dev.gatun.ir.json.Json;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.FieldSource;

import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Every reference case of every reference tokenizer, against what the Rust {@code tokenizers} library (0.23.2) gave
 * for it ({@code cases.json}, made by {@code bench/make_references.py}): the ids with and without special tokens,
 * their tokens, and the decoded text of those ids with and without the special tokens skipped.
 */
class TokenizerReferenceTest {
    static final List<String> NAMES = References.TOKENIZERS;

    @ParameterizedTest
    @FieldSource("NAMES")
    void everyCaseEncodesAndDecodesAsTheLibraryDoes(String name) {
        Tokenizer tok = Tokenizer.load(References.dir(name));
        Json.Arr cases = (Json.Arr) References.json(name, "cases.json").get("cases");
        assertThat(cases.size()).isGreaterThan(20);
        for (Json c : cases.items()) {
            Json.Obj row = (Json.Obj) c;
            String text = References.str(row, "text");
            for (boolean special : new boolean[]{true, false}) {
                Json.Obj want = (Json.Obj) row.get(special ? "with_special" : "without_special");
                String what = name + " " + (special ? "with" : "without") + " special tokens, text " + Json.write(new Json.Str(text));
                int[] ids = tok.encode(text, special);
                assertThat(ids).as(what).containsExactly(References.ints(want.get("ids")));
                assertThat(Arrays.stream(ids).mapToObj(tok::idToToken).toList()).as(what).isEqualTo(References.strings(want.get("tokens")));
                assertThat(tok.decode(ids, false)).as(what + ", decoded").isEqualTo(References.str(want, "decoded"));
                assertThat(tok.decode(ids, true)).as(what + ", decoded skipping special tokens").isEqualTo(References.str(want, "decoded_skip_special"));
            }
        }
    }
}
