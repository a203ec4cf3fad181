package dev.gatun.ir.graph;

import dev.gatun.ir.TensorType;

import java.util.List;
import java.util.StringJoiner;

/**
 * One value of a graph: an op applied to earlier nodes. Nodes are immutable and numbered in the order they
 * were added, which is a topological order.
 */
public final class Node {
    private final int id;
    private final Op op;
    private final List<Node> inputs;
    private final TensorType type;
    private final String symmetricGroup;
    private final Object owner;

    Node(int id, Op op, List<Node> inputs, TensorType type, String symmetricGroup, Object owner) {
        this.id = id;
        this.op = op;
        this.inputs = List.copyOf(inputs);
        this.type = type;
        this.symmetricGroup = symmetricGroup;
        this.owner = owner;
    }

    public int id() { return id; }
    public Op op() { return op; }
    public List<Node> inputs() { return inputs; }
    public Node input(int i) { return inputs.get(i); }
    public TensorType type() { return type; }

    /** The group whose symmetric memory this node's result must live in (a scoped region's mark), or null. */
    public String symmetricGroup() { return symmetricGroup; }

    Object owner() { return owner; }

    /** {@code %3}, or the input's name. */
    public String label() { return op instanceof Op.Input in ? "'" + in.name() + "'" : "%" + id; }

    /** Label and type, as error messages show a tensor. */
    public String describe() { return label() + " " + type; }

    /** The node as one line of the graph's text form. */
    public String format() {
        var args = new StringJoiner(", ");
        inputs.forEach(n -> args.add("%" + n.id));
        String attrs = switch (op) {
            case Op.Input in -> "\"" + in.name() + "\"";
            case Op.Constant c -> c.length() == 1 ? Double.toString(c.value(0)) : "[" + c.length() + " values]";
            case Op.Cast c -> args + ", " + c.to();
            case Op.Reduce r -> args + ", dims=" + r.dims() + (r.keepdim() ? ", keepdim" : "");
            case Op.Collective c -> args + c.attributes() + ", \"" + c.group() + "\"";
            case Op.Reshape r -> args + ", " + r.shape();
            case Op.Permute p -> args + ", " + p.perm();
            case Op.Slice s -> args + ", dim=" + s.dim() + ", " + s.start() + ":" + s.end() + (s.step() == 1 ? "" : ":" + s.step());
            case Op.Expand e -> args + ", " + e.shape();
            case Op.Cat c -> args + ", dim=" + c.dim();
            case Op.Registered r -> r.attrs().values().isEmpty() ? args.toString() : args + (inputs.isEmpty() ? "" : ", ") + r.attrs().format();
            case Op.CustomOutput o -> args + ", " + o.index();
            default -> args.toString();
        };
        return "%" + id + " = " + op.opName() + "(" + attrs + ") : " + type + (symmetricGroup != null ? "  # symmetric \"" + symmetricGroup + "\"" : "");
    }

    @Override public String toString() { return describe(); }
}
