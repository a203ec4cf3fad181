package dev.gatun.dsl;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * Reverse-mode differentiation of a graph under construction ({@link GraphBuilder#grad}, {@link GraphBuilder#vjp}): the
 * backward nodes are added to the same graph, so the forward and backward passes are one graph that the planner fuses,
 * orders and packs together, as {@code jax.grad} traced into one jaxpr or {@code torch.compile}'s joint graph.
 *
 * <p>The sweep is the textbook one. A node is <em>active</em> where it is floating and is one of the tensors asked
 * about or reads an active node; it is <em>needed</em> where the output reads it through active nodes. Walking the
 * needed nodes from the output down (node ids are a topological order), each node's gradient is complete when it is
 * reached (all its readers come later), and {@link GradientRules} turns it into one contribution per active input,
 * which are summed. A tensor asked about that the output does not depend on gets zeros of its type. Integer and bool
 * values (indices, masks, comparisons) carry no gradient, as in PyTorch, nor does a {@link Tensor#detach}ed value.
 *
 * <p>This class owns the walk and the checks of the call; the rules of each op live in {@link GradientRules} and
 * {@link PointwiseGradients}.
 */
final class Gradients {
    private final GraphBuilder graph;
    private final String call;
    private final Map<Integer, Tensor> adjoint = new HashMap<>();

    private Gradients(GraphBuilder graph, String call) {
        this.graph = graph;
        this.call = call;
    }

    /** The gradients of {@code output} (seeded with {@code seed}, of its type) with respect to each of {@code wrt}. */
    static Tensor[] of(GraphBuilder graph, String call, Tensor output, Tensor seed, Tensor[] wrt) {
        var g = new Gradients(graph, call);
        g.check(output, seed, wrt);
        return g.sweep(output, seed, wrt);
    }

    private void check(Tensor output, Tensor seed, Tensor[] wrt) {
        if (wrt == null || wrt.length == 0)
            throw new GraphException(call + ": no tensors to differentiate with respect to; name at least one, e.g. grad(loss, w)");
        if (!output.dtype().isFloating())
            throw new GraphException(call + ": " + output.describe() + " is " + output.dtype() + "; only a floating tensor has a gradient");
        if (!seed.type().equals(output.type()))
            throw new GraphException(call + ": the seed " + seed.describe() + " must have the output's type " + output.type()
                    + "; cast or reshape it");
        for (Tensor t : wrt) {
            if (t == null) throw new GraphException(call + ": a tensor to differentiate with respect to is null");
            if (t.graph() != graph)
                throw new GraphException(call + ": " + t.describe() + " belongs to graph '" + t.graph().name() + "', not to '" + graph.name() + "'");
            if (!t.dtype().isFloating())
                throw new GraphException(call + ": " + t.describe() + " is " + t.dtype() + "; only floating tensors have gradients (an index or"
                        + " a mask has none); leave it out");
        }
    }

    private Tensor[] sweep(Tensor output, Tensor seed, Tensor[] wrt) {
        int last = output.node().id();
        Set<Integer> targets = new HashSet<>();
        for (Tensor t : wrt) targets.add(t.node().id());
        boolean[] active = new boolean[last + 1], needed = new boolean[last + 1];
        for (int i = 0; i <= last; i++) {
            Node n = graph.node(i);
            active[i] = targets.contains(i) || (n.type().dtype().isFloating() && !graph.isDetached(i) && n.inputs().stream().anyMatch(in -> active[in.id()]));
        }
        needed[last] = active[last];
        adjoint.put(last, seed);
        for (int i = last; i >= 0; i--) {
            if (!needed[i] || !active[i]) continue;
            Node n = graph.node(i);
            if (n.inputs().isEmpty()) continue;
            boolean[] want = new boolean[n.inputs().size()];
            boolean any = false;
            for (int k = 0; k < want.length; k++) any |= want[k] = active[n.input(k).id()];
            if (!any) continue;   // a wrt no active input reaches (snapshot's copy of a parameter): nothing to pass down, no rule needed
            Tensor[] parts = GradientRules.vjp(graph, call, n, adjoint.get(i), want);
            for (int k = 0; k < want.length; k++) {
                if (!want[k] || parts[k] == null) continue;   // null: no contribution (a tensor read twice, counted once)
                Node in = n.input(k);
                needed[in.id()] = true;
                accumulate(in, parts[k]);
            }
        }
        Tensor[] out = new Tensor[wrt.length];
        for (int k = 0; k < wrt.length; k++) {
            Tensor t = adjoint.get(wrt[k].node().id());
            out[k] = t != null ? t : zeros(graph, wrt[k].shape(), wrt[k]);
        }
        return out;
    }

    /** Adds one contribution to {@code in}'s gradient, in {@code in}'s dtype (a cast's or a promotion's gradient is cast back). */
    private void accumulate(Node in, Tensor part) {
        if (!part.shape().equals(in.type().shape()))
            throw new GraphException(call + ": internal error: the gradient of " + in.describe() + " came out as " + part.describe());
        if (part.dtype() != in.type().dtype()) part = part.cast(in.type().dtype());
        adjoint.merge(in.id(), part, Tensor::add);
    }

    /** Zeros of {@code like}'s dtype in {@code shape}: a scalar constant expanded (a view, no values stored). */
    static Tensor zeros(GraphBuilder graph, Shape shape, Tensor like) {
        Tensor z = graph.scalar(0, like.dtype());
        return shape.rank() == 0 ? z : graph.op(new Op.Expand(shape), z);
    }
}
