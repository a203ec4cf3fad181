package dev.gatun.ir.graph;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * The built-in ops declared through {@link OpSpec}: the one table that the DSL, type inference, JSON, lowering, the
 * planner and the backends consult for them. Adding an op is one {@link OpSpec} and one line here.
 */
public final class OpRegistry {
    private OpRegistry() {}

    private static final Map<String, OpSpec> BY_NAME = new LinkedHashMap<>();

    static {
        for (OpSpec s : List.<OpSpec>of(
                dev.gatun.ir.ops.Argmax.SPEC,
                dev.gatun.ir.ops.TopK.SPEC,
                dev.gatun.ir.ops.IndexSelect.SPEC,
                dev.gatun.ir.ops.Sample.SPEC,
                dev.gatun.ir.ops.Gather.SPEC,
                dev.gatun.ir.ops.ScatterAdd.SPEC,
                dev.gatun.ir.ops.UpdateSlice.SPEC,
                dev.gatun.ir.ops.Snapshot.SPEC,
                dev.gatun.ir.ops.Attention.SPEC,
                dev.gatun.ir.ops.FlashAttention.SPEC,
                dev.gatun.ir.ops.FlashAttentionBackward.SPEC,
                dev.gatun.ir.ops.ExpertMatmul.SPEC)) {
            if (BY_NAME.put(s.name(), s) != null) throw new IllegalStateException("two registered ops are named " + s.name());
        }
    }

    /** Every registered op, in registration order. */
    public static List<OpSpec> all() { return List.copyOf(BY_NAME.values()); }

    /** The op named {@code name}, or null. */
    public static OpSpec find(String name) { return BY_NAME.get(name); }

    /** The op named {@code name}; a {@link dev.gatun.ir.GraphException} naming the known ones where there is none. */
    public static OpSpec get(String name) {
        OpSpec s = BY_NAME.get(name);
        if (s == null) throw new dev.gatun.ir.GraphException("unknown op '" + name + "' (registered ops: " + BY_NAME.keySet() + ")");
        return s;
    }

    /** Every attribute name any registered op declares (fields a JSON node may carry). */
    public static Set<String> attributeNames() {
        var out = new TreeSet<String>();
        for (OpSpec s : BY_NAME.values()) for (OpSpec.Attribute a : s.attributes()) out.add(a.name());
        return out;
    }
}
