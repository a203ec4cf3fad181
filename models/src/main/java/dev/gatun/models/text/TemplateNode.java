package dev.gatun.models.text;

import java.util.List;

/** A chat template's parsed statements (the Jinja subset {@link ChatTemplate} renders). */
sealed interface TemplateNode {

    /** Literal text. */
    record Text(String text) implements TemplateNode {}

    /** {@code {{ expr }}}. */
    record Print(TemplateExpr expr) implements TemplateNode {}

    /** {@code {% if %}}, its {@code elif}s (one condition and body each) and {@code else} (empty when absent). */
    record If(List<TemplateExpr> conditions, List<List<TemplateNode>> bodies, List<TemplateNode> orElse) implements TemplateNode {}

    /** {@code {% for var in iterable %}...{% endfor %}}, with {@code loop} bound in the body. */
    record For(String var, TemplateExpr iterable, List<TemplateNode> body) implements TemplateNode {}

    /** {@code {% set name = value %}}. */
    record Set(String name, TemplateExpr value) implements TemplateNode {}
}
