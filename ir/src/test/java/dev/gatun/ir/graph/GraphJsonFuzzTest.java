package dev.gatun.ir.graph;

import dev.gatun.ir.GatunException;
import dev.gatun.ir.json.Json;
import dev.gatun.ir.testing.RandomGraphs;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Graph files a hostile or careless writer could make: documents of random graphs (written by {@link GraphJson}) with
 * one to three mutations each (a number, a declared type's sizes, a string, a field, an array entry or the text
 * itself changed), read back. Every document is read or refused with a {@link GatunException}; nothing else escapes
 * (no ArithmeticException, IndexOutOfBounds, NegativeArraySize, OutOfMemoryError), and declared sizes never make the
 * reader allocate what the document does not hold. Seeded, so a failure names the document that caused it; 6,000
 * documents take a few seconds (400,000, from 20,000 seeds, found nothing more when this was written).
 */
class GraphJsonFuzzTest {
    /** Numbers that break arithmetic: zero, negatives, the edges of int and long, beyond long, fractions, huge doubles. */
    static final String[] NUMBERS = {"0", "-1", "1", "2", "3", "-2147483648", "2147483647", "2147483648", "4294967296", "9007199254740993",
            "4611686018427387904", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "123456789012345678901234567890",
            "1.5", "-0.0", "1e308", "1e400", "-1e400", "0.000001"};
    /** Sizes put into declared types ("f32[4,n]"). */
    static final String[] SIZES = {"0", "1", "-1", "2147483648", "4294967296", "1099511627776", "4611686018427387904", "9223372036854775807",
            "9223372036854775808", "99999999999999999999", "n", "", " ", "1.5", "0x10", "-0"};
    static final String[] STRINGS = {"", "x", "f32", "f32[]", "f32[4,4]", "bf16[n]", "f32[9223372036854775807]", "f32[4611686018427387904,4]",
            "q99[4]", "f32[4", "[]", "world", "nope", "all_reduce", "constant", "input", "reshape", "slice", "cat", "custom", "sum", "NaN",
            "Infinity", "-Infinity"};

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void mutatedDocumentsAreReadOrRefusedWithAGatunException() {
        var options = RandomGraphs.Options.defaults().withMaxNodes(14);
        int refused = 0, read = 0;
        var escaped = new LinkedHashMap<String, String>();   // each kind of escape (exception and where) once, with its document
        for (long seed = 0; seed < 300; seed++) {
            String original = GraphJson.toJson(RandomGraphs.generate(seed, options));
            var random = new Random(seed * 7919 + 17);
            for (int round = 0; round < 20; round++) {
                String doc = mutate(original, random);
                try {
                    GraphJson.fromJson(doc, RandomGraphs.userOps());
                    read++;
                } catch (GatunException e) {
                    assertThat(e.getMessage()).as("seed %d round %d", seed, round).isNotBlank();
                    refused++;
                } catch (Throwable t) {
                    var where = java.util.Arrays.stream(t.getStackTrace()).filter(f -> f.getClassName().startsWith("dev.gatun")).findFirst();
                    escaped.putIfAbsent(t.getClass().getName() + " at " + where.map(Object::toString).orElse("?"),
                            "seed " + seed + " round " + round + ": " + t + "\n" + doc);
                }
            }
        }
        assertThat(escaped).as("exceptions outside the GatunException family").isEmpty();
        assertThat(refused).isGreaterThan(2000);
        assertThat(read).isGreaterThan(100);
    }

    /** One to three mutations of the document; the text's last one may cut or change characters. */
    static String mutate(String json, Random random) {
        Json doc = Json.parse(json);
        int n = 1 + random.nextInt(3);
        for (int i = 0; i < n; i++) doc = mutateTree(doc, random, pickPath(doc, random));
        String text = Json.write(doc);
        if (random.nextInt(10) == 0) {
            int at = random.nextInt(text.length());
            text = random.nextBoolean() ? text.substring(0, at) : text.substring(0, at) + "\"[]{}:,0-e9x".charAt(random.nextInt(12)) + text.substring(at + 1);
        }
        return text;
    }

    /**
     * The path of indices to one value of the tree: half the time a field of a node, of a user op or of a group (where
     * declared sizes are), else a random walk from the root.
     */
    static List<Integer> pickPath(Json doc, Random random) {
        var path = new ArrayList<Integer>();
        Json at = doc;
        if (random.nextBoolean() && doc instanceof Json.Obj root) {
            String section = random.nextInt(4) == 0 ? (random.nextBoolean() ? "user_ops" : "groups") : "nodes";
            int i = new ArrayList<>(root.fields().keySet()).indexOf(section);
            if (i >= 0 && root.get(section) instanceof Json.Arr a && a.size() > 0) {
                path.add(i);
                int e = random.nextInt(a.size());
                path.add(e);
                at = a.get(e);
                if (at instanceof Json.Obj o && !o.fields().isEmpty()) {
                    int f = random.nextInt(o.fields().size());
                    path.add(f);
                    at = child(at, f);
                }
                if (random.nextBoolean()) return path;
            }
        }
        while (random.nextInt(5) != 0) {
            int size = switch (at) {
                case Json.Obj o -> o.fields().size();
                case Json.Arr a -> a.size();
                default -> 0;
            };
            if (size == 0) break;
            int i = random.nextInt(size);
            path.add(i);
            at = child(at, i);
        }
        return path;
    }

    static Json child(Json j, int i) {
        return switch (j) {
            case Json.Obj o -> new ArrayList<>(o.fields().values()).get(i);
            case Json.Arr a -> a.get(i);
            default -> throw new IllegalStateException();
        };
    }

    /** The tree with the value at {@code path} changed. */
    static Json mutateTree(Json j, Random random, List<Integer> path) {
        if (path.isEmpty()) return mutateValue(j, random);
        int i = path.getFirst();
        var rest = path.subList(1, path.size());
        return switch (j) {
            case Json.Obj o -> {
                var fields = new LinkedHashMap<String, Json>();
                int k = 0;
                for (var e : o.fields().entrySet()) {
                    if (k++ != i) fields.put(e.getKey(), e.getValue());
                    else if (rest.isEmpty() && random.nextInt(6) == 0) continue;                       // drop the field
                    else fields.put(rest.isEmpty() && random.nextInt(12) == 0 ? e.getKey() + "s" : e.getKey(), mutateTree(e.getValue(), random, rest));
                }
                yield new Json.Obj(fields);
            }
            case Json.Arr a -> {
                var items = new ArrayList<>(a.items());
                Json changed = mutateTree(items.get(i), random, rest);
                switch (rest.isEmpty() ? random.nextInt(8) : 9) {
                    case 0 -> items.remove(i);
                    case 1 -> items.add(i, changed);                                                       // one more entry
                    case 2 -> { for (int r = 0; r < 40; r++) items.add(items.get(i)); }                   // many more
                    default -> items.set(i, changed);
                }
                yield new Json.Arr(items);
            }
            default -> mutateValue(j, random);
        };
    }

    static Json mutateValue(Json j, Random random) {
        return switch (j) {
            case Json.Num n -> new Json.Num(NUMBERS[random.nextInt(NUMBERS.length)]);
            case Json.Str s when s.value().matches("[a-z0-9]+\\[.*]") && random.nextInt(4) != 0 -> new Json.Str(resize(s.value(), random));
            case Json.Str s -> new Json.Str(STRINGS[random.nextInt(STRINGS.length)]);
            case Json.Arr a when random.nextBoolean() && a.size() > 0 -> {
                var items = new ArrayList<>(a.items());
                items.set(random.nextInt(items.size()), new Json.Num(NUMBERS[random.nextInt(NUMBERS.length)]));
                yield new Json.Arr(items);
            }
            default -> switch (random.nextInt(5)) {
                case 0 -> Json.Null.INSTANCE;
                case 1 -> new Json.Arr(List.of());
                case 2 -> new Json.Obj(java.util.Map.of());
                case 3 -> new Json.Str(STRINGS[random.nextInt(STRINGS.length)]);
                default -> new Json.Num(NUMBERS[random.nextInt(NUMBERS.length)]);
            };
        };
    }

    /** A declared type with one size changed, or one added: "f32[4,8]" to "f32[4,9223372036854775807]". */
    static String resize(String type, Random random) {
        int open = type.indexOf('[');
        String body = type.substring(open + 1, type.length() - 1);
        var dims = new ArrayList<>(body.isEmpty() ? List.of() : List.of(body.split(",", -1)));
        String size = SIZES[random.nextInt(SIZES.length)];
        if (dims.isEmpty() || random.nextInt(3) == 0) dims.add(random.nextInt(dims.size() + 1), size);
        else dims.set(random.nextInt(dims.size()), size);
        return type.substring(0, open + 1) + String.join(",", dims) + "]";
    }
}
