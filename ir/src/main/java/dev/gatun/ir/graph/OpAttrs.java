package dev.gatun.ir.graph;

import dev.gatun.ir.GraphException;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.StringJoiner;

/**
 * A registered op's attribute values, in the order its {@link OpSpec#attributes()} declares them: integers as
 * {@code Long}, reals as {@code Double}. {@link #of} checks them against the op's declaration, so a body reads them
 * without checks of its own.
 */
public record OpAttrs(Map<String, Number> values) {
    public OpAttrs {
        values = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(values));
    }

    /** {@code given} checked against {@code spec}: every declared attribute present, of its kind, and no other. */
    public static OpAttrs of(OpSpec spec, Map<String, ? extends Number> given) {
        var out = new LinkedHashMap<String, Number>();
        for (OpSpec.Attribute a : spec.attributes()) {
            Number v = given.get(a.name());
            if (v == null) throw new GraphException(spec.name() + ": missing attribute '" + a.name() + "'");
            switch (a.kind()) {
                case INT -> {
                    if (!(v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte))
                        throw new GraphException(spec.name() + ": attribute '" + a.name() + "' is an integer, not " + v);
                    out.put(a.name(), v.longValue());
                }
                case REAL -> out.put(a.name(), v.doubleValue());
            }
        }
        for (String k : given.keySet())
            if (!out.containsKey(k))
                throw new GraphException(spec.name() + ": unknown attribute '" + k + "' (it takes " + spec.attributes().stream().map(OpSpec.Attribute::name).toList() + ")");
        return new OpAttrs(out);
    }

    /** An integer attribute. */
    public long integer(String name) { return ((Number) values.get(name)).longValue(); }

    /** A real attribute. */
    public double real(String name) { return ((Number) values.get(name)).doubleValue(); }

    /** As the graph prints them: {@code k=3, dim=-1}; empty for none. */
    public String format() {
        var j = new StringJoiner(", ");
        values.forEach((k, v) -> j.add(k + "=" + v));
        return j.toString();
    }
}
