package dev.gatun.models.text;

import dev.gatun.models.text.TemplateLexer.Chunk;
import dev.gatun.models.text.TemplateLexer.Tag;
import dev.gatun.models.text.TemplateLexer.Tok;
import dev.gatun.models.text.TemplateLexer.TokType;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Parses a chat template into {@link TemplateNode}s, for the Jinja subset chat templates mostly use. Whatever is
 * outside it (a macro, a filter such as {@code tojson}, a method call, arithmetic other than {@code +}) is refused
 * here, by name and with its line and column, rather than rendered into a different prompt. Expression precedence
 * is Jinja's: {@code or} < {@code and} < {@code not} < comparisons < {@code +}, {@code -} < {@code ~} < {@code *},
 * {@code //}, {@code %} < unary minus < filters and tests, so {@code a + b | trim} trims {@code b} alone.
 */
final class TemplateParser {
    static final String STATEMENTS = "for, endfor, if, elif, else, endif, set";
    static final String FILTERS = "trim, length, upper, lower";
    static final String TESTS = "defined, undefined, none";
    static final String OPERATORS = "+ (strings, integers, lists), ~, and integers' - * // %; == != < <= > >= in, not in, and, or, not";

    private final TemplateSource src;
    private final List<Chunk> chunks;
    private int next;           // the next chunk
    private List<Tok> toks;     // the tag being parsed
    private int t;              // the next token of it
    private int tagEnd;
    private Tok endKeyword;     // the statement that ended the last body()

    private TemplateParser(TemplateSource src) {
        this.src = src;
        this.chunks = TemplateLexer.lex(src);
    }

    static List<TemplateNode> parse(TemplateSource src) {
        TemplateParser p = new TemplateParser(src);
        return p.body(Set.of());
    }

    /** Nodes up to (not past) a statement whose name is one of {@code ends}, or the end of the template. */
    private List<TemplateNode> body(Set<String> ends) {
        List<TemplateNode> out = new ArrayList<>();
        while (next < chunks.size()) {
            Chunk c = chunks.get(next);
            if (c instanceof TemplateLexer.Text text) {
                out.add(new TemplateNode.Text(text.text()));
                next++;
                continue;
            }
            Tag tag = (Tag) c;
            begin(tag);
            if (tag.output()) {
                next++;
                out.add(new TemplateNode.Print(expressionToEnd()));
                continue;
            }
            Tok keyword = take();
            if (keyword.type() != TokType.NAME) throw src.error(keyword.at(), "expected a statement name after {%, found '" + keyword.text() + "'");
            next++;
            if (ends.contains(keyword.text())) {
                endKeyword = keyword;
                return out;
            }
            if (Set.of("endfor", "endif", "elif", "else").contains(keyword.text()) && !ends.isEmpty())
                throw src.error(keyword.at(), "'" + keyword.text() + "' where {% " + String.join(" %} or {% ", ends.stream().sorted().toList()) + " %} was expected");
            out.add(statement(keyword));
        }
        if (!ends.isEmpty()) throw src.error(src.text().length(), "the template ends inside a block; expected {% " + String.join(" %} or {% ", ends.stream().sorted().toList()) + " %}");
        return out;
    }

    private TemplateNode statement(Tok keyword) {
        return switch (keyword.text()) {
            case "for" -> forLoop();
            case "if" -> ifBlock();
            case "set" -> set();
            case "endfor", "endif", "elif", "else" -> throw src.error(keyword.at(), "'" + keyword.text() + "' has no block to end here");
            default -> throw src.error(keyword.at(), "statement '" + keyword.text() + "' is not supported; supported: " + STATEMENTS);
        };
    }

    private TemplateNode forLoop() {
        Tok var = take();
        if (var.type() != TokType.NAME) throw src.error(var.at(), "expected a loop variable after 'for', found '" + var.text() + "'");
        if (peek() != null && peek().is(",")) throw src.error(peek().at(), "unpacking several loop variables is not supported; loop over one name");
        expect("in");
        TemplateExpr iterable = orExpr();
        if (peek() != null) {
            Tok extra = peek();
            throw src.error(extra.at(), extra.is("if") ? "a loop filter ('for ... if') is not supported"
                    : extra.is("recursive") ? "a recursive loop is not supported" : "unexpected '" + extra.text() + "' after the loop's sequence");
        }
        List<TemplateNode> body = body(Set.of("endfor", "else"));
        Tok end = endKeyword;
        if (end.is("else")) throw src.error(end.at(), "'for ... else' is not supported");
        endTag();
        return new TemplateNode.For(var.text(), iterable, body);
    }

    private TemplateNode ifBlock() {
        List<TemplateExpr> conditions = new ArrayList<>();
        List<List<TemplateNode>> bodies = new ArrayList<>();
        conditions.add(expressionToEnd());
        while (true) {
            bodies.add(body(Set.of("elif", "else", "endif")));
            switch (endKeyword.text()) {
                case "elif" -> conditions.add(expressionToEnd());
                case "else" -> {
                    endTag();
                    List<TemplateNode> orElse = body(Set.of("endif"));
                    endTag();
                    return new TemplateNode.If(conditions, bodies, orElse);
                }
                default -> {
                    endTag();
                    return new TemplateNode.If(conditions, bodies, List.of());
                }
            }
        }
    }

    private TemplateNode set() {
        Tok name = take();
        if (name.type() != TokType.NAME) throw src.error(name.at(), "expected a variable name after 'set', found '" + name.text() + "'");
        if (peek() == null) throw src.error(name.at(), "a block 'set' ({% set x %}...{% endset %}) is not supported; write {% set x = ... %}");
        if (peek().is(".")) throw src.error(peek().at(), "setting an attribute ('set " + name.text() + ".x = ...', as with namespace()) is not supported");
        expect("=");
        return new TemplateNode.Set(name.text(), expressionToEnd());
    }

    // ---- tokens of the current tag

    private void begin(Tag tag) {
        toks = tag.tokens();
        t = 0;
        tagEnd = tag.end();
    }

    private Tok peek() { return t < toks.size() ? toks.get(t) : null; }

    private Tok take() {
        if (t >= toks.size()) throw src.error(tagEnd, "the tag ends where more was expected");
        return toks.get(t++);
    }

    private void expect(String s) {
        Tok tok = take();
        if (!tok.is(s)) throw src.error(tok.at(), "expected '" + s + "', found '" + tok.text() + "'");
    }

    private void endTag() {
        if (peek() != null) throw src.error(peek().at(), "unexpected '" + peek().text() + "' before the end of the tag");
    }

    private TemplateExpr expressionToEnd() {
        TemplateExpr e = orExpr();
        if (peek() != null && peek().is("if")) throw src.error(peek().at(), "an inline 'x if c else y' expression is not supported; use {% if %}");
        endTag();
        return e;
    }

    // ---- expressions, lowest precedence first

    private TemplateExpr orExpr() {
        TemplateExpr e = andExpr();
        while (peek() != null && peek().is("or")) {
            int at = take().at();
            e = new TemplateExpr.Binary("or", e, andExpr(), at);
        }
        return e;
    }

    private TemplateExpr andExpr() {
        TemplateExpr e = notExpr();
        while (peek() != null && peek().is("and")) {
            int at = take().at();
            e = new TemplateExpr.Binary("and", e, notExpr(), at);
        }
        return e;
    }

    private TemplateExpr notExpr() {
        if (peek() != null && peek().is("not")) {
            int at = take().at();
            return new TemplateExpr.Not(notExpr(), at);
        }
        return compare();
    }

    private TemplateExpr compare() {
        TemplateExpr first = plus();
        List<String> ops = new ArrayList<>();
        List<TemplateExpr> rest = new ArrayList<>();
        while (peek() != null) {
            Tok op = peek();
            String name;
            if (op.type() == TokType.OP && Set.of("==", "!=", "<", "<=", ">", ">=").contains(op.text())) name = op.text();
            else if (op.is("in")) name = "in";
            else if (op.is("not") && t + 1 < toks.size() && toks.get(t + 1).is("in")) { t++; name = "not in"; }
            else break;
            t++;
            ops.add(name);
            rest.add(plus());
        }
        return ops.isEmpty() ? first : new TemplateExpr.Compare(first, ops, rest, first.at());
    }

    private TemplateExpr plus() {
        TemplateExpr e = concat();
        while (peek() != null && (peek().is("+") || peek().is("-"))) {
            Tok op = take();
            e = new TemplateExpr.Binary(op.text(), e, concat(), op.at());
        }
        return e;
    }

    private TemplateExpr concat() {
        TemplateExpr e = times();
        while (peek() != null && peek().is("~")) {
            int at = take().at();
            e = new TemplateExpr.Binary("~", e, times(), at);
        }
        return e;
    }

    private TemplateExpr times() {
        TemplateExpr e = unary();
        while (peek() != null && peek().type() == TokType.OP && Set.of("*", "/", "//", "%", "**").contains(peek().text())) {
            Tok op = take();
            if (op.is("/") || op.is("**"))
                throw src.error(op.at(), "operator '" + op.text() + "' is not supported; supported operators: " + OPERATORS);
            e = new TemplateExpr.Binary(op.text(), e, unary(), op.at());
        }
        return e;
    }

    private TemplateExpr unary() { return unary(true); }

    /** A unary minus takes the value before its filters: {@code -x | f} is {@code (-x) | f}, as in Jinja. */
    private TemplateExpr unary(boolean withFilters) {
        Tok tok = peek();
        TemplateExpr e;
        if (tok != null && tok.type() == TokType.OP && (tok.is("-") || tok.is("+"))) {
            t++;
            TemplateExpr operand = unary(false);
            e = tok.is("-") ? new TemplateExpr.Binary("-", new TemplateExpr.Literal(0L, tok.at()), operand, tok.at()) : operand;
        } else {
            e = postfix(primary());
        }
        while (withFilters && peek() != null) {
            Tok op = peek();
            if (op.is("|")) {
                t++;
                e = filter(e);
            } else if (op.is("is")) {
                t++;
                e = test(e, op.at());
            } else {
                break;
            }
        }
        return e;
    }

    private TemplateExpr filter(TemplateExpr e) {
        Tok name = take();
        if (name.type() != TokType.NAME) throw src.error(name.at(), "expected a filter name after '|', found '" + name.text() + "'");
        if (!Set.of("trim", "length", "upper", "lower").contains(name.text()))
            throw src.error(name.at(), "filter '" + name.text() + "' is not supported; supported filters: " + FILTERS);
        if (peek() != null && peek().is("(")) throw src.error(peek().at(), "filter '" + name.text() + "' with arguments is not supported");
        return new TemplateExpr.Filter(e, name.text(), name.at());
    }

    private TemplateExpr test(TemplateExpr e, int at) {
        boolean negated = peek() != null && peek().is("not");
        if (negated) t++;
        Tok name = take();
        if (name.type() != TokType.NAME) throw src.error(name.at(), "expected a test name after 'is', found '" + name.text() + "'");
        String n = name.text().equals("None") ? "none" : name.text();
        if (!Set.of("defined", "undefined", "none").contains(n))
            throw src.error(name.at(), "test '" + name.text() + "' is not supported; supported tests: " + TESTS);
        return new TemplateExpr.Test(e, n, negated, at);
    }

    private TemplateExpr primary() {
        Tok tok = take();
        switch (tok.type()) {
            case STRING -> {
                StringBuilder s = new StringBuilder(tok.text());   // adjacent literals join, as in Python
                while (peek() != null && peek().type() == TokType.STRING) s.append(take().text());
                return new TemplateExpr.Literal(s.toString(), tok.at());
            }
            case INT -> {
                try {
                    return new TemplateExpr.Literal(Long.parseLong(tok.text()), tok.at());
                } catch (NumberFormatException e) {
                    throw src.error(tok.at(), "the integer " + tok.text() + " is too large");
                }
            }
            case NAME -> {
                return switch (tok.text()) {
                    case "true", "True" -> new TemplateExpr.Literal(Boolean.TRUE, tok.at());
                    case "false", "False" -> new TemplateExpr.Literal(Boolean.FALSE, tok.at());
                    case "none", "None" -> new TemplateExpr.Literal(null, tok.at());
                    default -> call(tok);
                };
            }
            case OP -> {
                if (tok.is("(")) {
                    TemplateExpr e = orExpr();
                    if (peek() != null && peek().is(",")) throw src.error(peek().at(), "tuples are not supported");
                    expect(")");
                    return e;
                }
                if (tok.is("[")) return list(tok.at());
                if (tok.is("{")) throw src.error(tok.at(), "dictionary literals are not supported");
                throw src.error(tok.at(), "unexpected '" + tok.text() + "' where a value was expected");
            }
        }
        throw new AssertionError(tok);
    }

    /** A name, or a call: only {@code raise_exception(message)} is supported. */
    private TemplateExpr call(Tok name) {
        if (peek() == null || !peek().is("(")) return new TemplateExpr.Name(name.text(), name.at());
        if (!name.text().equals("raise_exception"))
            throw src.error(name.at(), "calling '" + name.text() + "' is not supported; the only function is raise_exception(message)");
        t++;
        TemplateExpr message = orExpr();
        expect(")");
        return new TemplateExpr.Raise(message, name.at());
    }

    private TemplateExpr list(int at) {
        List<TemplateExpr> items = new ArrayList<>();
        while (peek() != null && !peek().is("]")) {
            items.add(orExpr());
            if (peek() != null && peek().is(",")) t++;
            else break;
        }
        expect("]");
        return new TemplateExpr.ListOf(items, at);
    }

    private TemplateExpr postfix(TemplateExpr e) {
        while (peek() != null) {
            Tok op = peek();
            if (op.is(".")) {
                t++;
                Tok name = take();
                if (name.type() != TokType.NAME && name.type() != TokType.INT) throw src.error(name.at(), "expected an attribute name after '.', found '" + name.text() + "'");
                if (peek() != null && peek().is("("))
                    throw src.error(name.at(), "method calls ('." + name.text() + "(...)') are not supported; filters " + FILTERS + " are");
                e = name.type() == TokType.INT ? new TemplateExpr.Item(e, new TemplateExpr.Literal(Long.parseLong(name.text()), name.at()), op.at())
                        : new TemplateExpr.Attr(e, name.text(), op.at());
            } else if (op.is("[")) {
                t++;
                if (peek() != null && peek().is(":")) throw src.error(peek().at(), "slices ('[a:b]') are not supported");
                TemplateExpr key = orExpr();
                if (peek() != null && peek().is(":")) throw src.error(peek().at(), "slices ('[a:b]') are not supported");
                expect("]");
                e = new TemplateExpr.Item(e, key, op.at());
            } else if (op.is("(")) {
                throw src.error(op.at(), "calling a value is not supported; the only function is raise_exception(message)");
            } else {
                return e;
            }
        }
        return e;
    }
}
