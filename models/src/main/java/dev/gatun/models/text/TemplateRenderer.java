package dev.gatun.models.text;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * Renders parsed template nodes with Jinja's (Python's) semantics for the values chat templates handle: strings,
 * integers, booleans, none, lists and string-keyed maps. Python's truth ({@code ''}, {@code 0}, {@code []} are
 * false), {@code and}/{@code or} giving an operand, {@code +} of two strings, integers or lists and an error for
 * anything else, {@code ~} converting both sides to text. A name that is not set is Jinja's lenient undefined: it
 * prints as nothing and is false, but adding to it or reading from it is an error, as in Jinja. A {@code for} body
 * is a scope of its own ({@code set} inside does not leak out).
 */
final class TemplateRenderer {

    /** Jinja's undefined value; {@code name} says what was looked up, for errors. */
    record Undefined(String name) {}

    private final TemplateSource src;
    private final Deque<Map<String, Object>> scopes = new ArrayDeque<>();
    private final StringBuilder out = new StringBuilder();

    private TemplateRenderer(TemplateSource src, Map<String, Object> globals) {
        this.src = src;
        scopes.push(new HashMap<>(globals));
    }

    static String render(TemplateSource src, List<TemplateNode> nodes, Map<String, Object> globals) {
        TemplateRenderer r = new TemplateRenderer(src, globals);
        r.run(nodes);
        return r.out.toString();
    }

    private void run(List<TemplateNode> nodes) {
        for (TemplateNode node : nodes) {
            switch (node) {
                case TemplateNode.Text t -> out.append(t.text());
                case TemplateNode.Print p -> out.append(str(eval(p.expr()), p.expr()));
                case TemplateNode.Set s -> scopes.peek().put(s.name(), eval(s.value()));
                case TemplateNode.If i -> ifBlock(i);
                case TemplateNode.For f -> forLoop(f);
            }
        }
    }

    private void ifBlock(TemplateNode.If i) {
        for (int k = 0; k < i.conditions().size(); k++) {
            if (truth(eval(i.conditions().get(k)))) {
                run(i.bodies().get(k));
                return;
            }
        }
        run(i.orElse());
    }

    private void forLoop(TemplateNode.For f) {
        Object seq = eval(f.iterable());
        List<?> items = switch (seq) {
            case List<?> l -> l;
            case Map<?, ?> m -> new ArrayList<>(m.keySet());
            case String s -> s.codePoints().mapToObj(Character::toString).toList();
            case Undefined u -> List.of();   // Jinja iterates an undefined value as empty
            default -> throw src.error(f.iterable().at(), "cannot loop over " + typeName(seq));
        };
        int n = items.size();
        for (int i = 0; i < n; i++) {
            Map<String, Object> scope = new HashMap<>();
            scope.put(f.var(), items.get(i));
            scope.put("loop", Map.of("index0", (long) i, "index", (long) i + 1, "first", i == 0, "last", i == n - 1,
                    "length", (long) n, "revindex", (long) (n - i), "revindex0", (long) (n - i - 1)));
            scopes.push(scope);
            try {
                run(f.body());
            } finally {
                scopes.pop();
            }
        }
    }

    private Object lookup(String name) {
        for (Map<String, Object> scope : scopes) if (scope.containsKey(name)) return scope.get(name);
        return new Undefined(name);
    }

    private Object eval(TemplateExpr e) {
        return switch (e) {
            case TemplateExpr.Literal l -> l.value();
            case TemplateExpr.Name n -> lookup(n.name());
            case TemplateExpr.Attr a -> get(eval(a.target()), a.name(), a);
            case TemplateExpr.Item i -> get(eval(i.target()), eval(i.key()), i);
            case TemplateExpr.ListOf l -> l.items().stream().map(this::eval).toList();
            case TemplateExpr.Binary b -> binary(b);
            case TemplateExpr.Compare c -> compare(c);
            case TemplateExpr.Not n -> !truth(eval(n.operand()));
            case TemplateExpr.Filter f -> filter(f.name(), eval(f.operand()), f);
            case TemplateExpr.Test t -> test(t);
            case TemplateExpr.Raise r -> throw new TokenizerException(src.where(r.at()) + ": the template raised an exception: " + str(eval(r.message()), r.message()));
        };
    }

    private Object get(Object target, Object key, TemplateExpr at) {
        String what = key instanceof String k ? "'" + k + "'" : String.valueOf(key);
        return switch (target) {
            case Undefined u -> throw src.error(at.at(), "'" + u.name() + "' is undefined, so it has no " + what);
            case Map<?, ?> m -> m.containsKey(key) ? m.get(key) : new Undefined(what);
            case List<?> l when key instanceof Long i -> {
                long k = i < 0 ? i + l.size() : i;
                yield k >= 0 && k < l.size() ? l.get((int) k) : new Undefined("item " + i);
            }
            case String s when key instanceof Long i -> {
                int[] cps = s.codePoints().toArray();
                long k = i < 0 ? i + cps.length : i;
                yield k >= 0 && k < cps.length ? Character.toString(cps[(int) k]) : new Undefined("item " + i);
            }
            case null, default -> new Undefined(what);
        };
    }

    private Object binary(TemplateExpr.Binary b) {
        Object left = eval(b.left());
        switch (b.op()) {
            case "and": return truth(left) ? eval(b.right()) : left;
            case "or": return truth(left) ? left : eval(b.right());
            case "~": return str(left, b.left()) + str(eval(b.right()), b.right());
            default: break;
        }
        Object right = eval(b.right());
        if (left instanceof Undefined u) throw src.error(b.left().at(), "'" + u.name() + "' is undefined, so '" + b.op() + "' cannot take it");
        if (right instanceof Undefined u) throw src.error(b.right().at(), "'" + u.name() + "' is undefined, so '" + b.op() + "' cannot take it");
        if (b.op().equals("+")) {
            if (left instanceof String x && right instanceof String y) return x + y;
            if (left instanceof List<?> x && right instanceof List<?> y) {
                List<Object> joined = new ArrayList<>(x);
                joined.addAll(y);
                return joined;
            }
        }
        if (!isInt(left) || !isInt(right))
            throw src.error(b.at(), "cannot apply '" + b.op() + "' to " + typeName(left) + " and " + typeName(right)
                    + (b.op().equals("+") ? " ('+' takes two strings, integers or lists; '~' joins any values as text)" : " (it takes integers)"));
        long x = asLong(left), y = asLong(right);
        if ((b.op().equals("//") || b.op().equals("%")) && y == 0) throw src.error(b.at(), "integer division or modulo by zero");
        return switch (b.op()) {
            case "+" -> x + y;
            case "-" -> x - y;
            case "*" -> x * y;
            case "//" -> Math.floorDiv(x, y);
            case "%" -> Math.floorMod(x, y);
            default -> throw new AssertionError(b.op());
        };
    }

    private boolean compare(TemplateExpr.Compare c) {
        Object left = eval(c.first());
        for (int k = 0; k < c.ops().size(); k++) {
            Object right = eval(c.rest().get(k));
            boolean ok = switch (c.ops().get(k)) {
                case "==" -> pyEquals(left, right);
                case "!=" -> !pyEquals(left, right);
                case "in" -> contains(right, left, c.rest().get(k));
                case "not in" -> !contains(right, left, c.rest().get(k));
                default -> order(c.ops().get(k), left, right, c.rest().get(k));
            };
            if (!ok) return false;
            left = right;
        }
        return true;
    }

    private boolean contains(Object container, Object item, TemplateExpr at) {
        return switch (container) {
            case String s when item instanceof String x -> s.contains(x);
            case List<?> l -> l.stream().anyMatch(v -> pyEquals(v, item));
            case Map<?, ?> m -> m.containsKey(item);
            default -> throw src.error(at.at(), "'in' needs a string, list or mapping on its right, not " + typeName(container)
                    + (container instanceof String ? " with " + typeName(item) + " on its left" : ""));
        };
    }

    private boolean order(String op, Object a, Object b, TemplateExpr at) {
        int c;
        if (isInt(a) && isInt(b)) c = Long.compare(asLong(a), asLong(b));
        else if (a instanceof String x && b instanceof String y) c = compareCodePoints(x, y);
        else throw src.error(at.at(), "cannot compare " + typeName(a) + " and " + typeName(b) + " with '" + op + "'");
        return switch (op) {
            case "<" -> c < 0;
            case "<=" -> c <= 0;
            case ">" -> c > 0;
            default -> c >= 0;
        };
    }

    private static int compareCodePoints(String x, String y) {
        int[] a = x.codePoints().toArray(), b = y.codePoints().toArray();
        return java.util.Arrays.compare(a, b);
    }

    private Object filter(String name, Object v, TemplateExpr at) {
        return switch (name) {
            case "trim" -> pyStrip(str(v, at));
            case "upper" -> str(v, at).toUpperCase(Locale.ROOT);
            case "lower" -> str(v, at).toLowerCase(Locale.ROOT);
            case "length" -> switch (v) {
                case String s -> (long) s.codePointCount(0, s.length());
                case List<?> l -> (long) l.size();
                case Map<?, ?> m -> (long) m.size();
                case Undefined u -> 0L;
                default -> throw src.error(at.at(), "filter 'length' needs a string, list or mapping, not " + typeName(v));
            };
            default -> throw new AssertionError(name);   // the parser admits only the four
        };
    }

    private boolean test(TemplateExpr.Test t) {
        Object v = eval(t.operand());
        boolean r = switch (t.name()) {
            case "defined" -> !(v instanceof Undefined);
            case "undefined" -> v instanceof Undefined;
            case "none" -> v == null;
            default -> throw new AssertionError(t.name());
        };
        return r != t.negated();
    }

    // ---- Python's semantics

    static boolean truth(Object v) {
        return switch (v) {
            case null -> false;
            case Undefined u -> false;
            case Boolean b -> b;
            case Long l -> l != 0;
            case String s -> !s.isEmpty();
            case List<?> l -> !l.isEmpty();
            case Map<?, ?> m -> !m.isEmpty();
            default -> true;
        };
    }

    private static boolean isInt(Object v) { return v instanceof Long || v instanceof Boolean; }

    private static long asLong(Object v) { return v instanceof Boolean b ? (b ? 1 : 0) : (Long) v; }

    private static boolean pyEquals(Object a, Object b) {
        if (isInt(a) && isInt(b)) return asLong(a) == asLong(b);
        if (a instanceof Undefined || b instanceof Undefined) return a instanceof Undefined && b instanceof Undefined;
        return Objects.equals(a, b);
    }

    /** What {@code {{ v }}} prints: Python's {@code str}, and nothing for an undefined value. */
    private String str(Object v, TemplateExpr at) {
        return switch (v) {
            case null -> "None";
            case Undefined u -> "";
            case String s -> s;
            case Boolean b -> b ? "True" : "False";
            case Long l -> l.toString();
            default -> throw src.error(at.at(), "printing " + typeName(v) + " is not supported (Python would print its repr); print its items");
        };
    }

    private static String pyStrip(String s) {
        int start = 0, end = s.length();
        while (start < end && UnicodeChars.isPythonSpace(s.codePointAt(start))) start += Character.charCount(s.codePointAt(start));
        while (end > start && UnicodeChars.isPythonSpace(s.codePointBefore(end))) end -= Character.charCount(s.codePointBefore(end));
        return s.substring(start, end);
    }

    private static String typeName(Object v) {
        return switch (v) {
            case null -> "none";
            case Undefined u -> "undefined '" + u.name() + "'";
            case String s -> "a string";
            case Boolean b -> "a boolean";
            case Long l -> "an integer";
            case List<?> l -> "a list";
            case Map<?, ?> m -> "a mapping";
            default -> v.getClass().getSimpleName();
        };
    }
}
