package dev.gatun.models.text;

import java.util.List;

/** A chat template's parsed expressions; {@code at} is the offset in the template, for errors. */
sealed interface TemplateExpr {
    int at();

    /** A string, integer, boolean or none literal. */
    record Literal(Object value, int at) implements TemplateExpr {}

    record Name(String name, int at) implements TemplateExpr {}

    /** {@code target.name}. */
    record Attr(TemplateExpr target, String name, int at) implements TemplateExpr {}

    /** {@code target[key]}. */
    record Item(TemplateExpr target, TemplateExpr key, int at) implements TemplateExpr {}

    /** {@code [a, b, ...]}. */
    record ListOf(List<TemplateExpr> items, int at) implements TemplateExpr {}

    /** {@code +}, {@code -}, {@code *}, {@code //}, {@code %}, {@code ~}, {@code and}, {@code or} (unary minus is {@code 0 - x}). */
    record Binary(String op, TemplateExpr left, TemplateExpr right, int at) implements TemplateExpr {}

    /** A chain of comparisons, Python's way: {@code a == b != c} is {@code a == b and b != c}. */
    record Compare(TemplateExpr first, List<String> ops, List<TemplateExpr> rest, int at) implements TemplateExpr {}

    record Not(TemplateExpr operand, int at) implements TemplateExpr {}

    /** {@code operand | name}. */
    record Filter(TemplateExpr operand, String name, int at) implements TemplateExpr {}

    /** {@code operand is [not] name}. */
    record Test(TemplateExpr operand, String name, boolean negated, int at) implements TemplateExpr {}

    /** {@code raise_exception(message)}. */
    record Raise(TemplateExpr message, int at) implements TemplateExpr {}
}
