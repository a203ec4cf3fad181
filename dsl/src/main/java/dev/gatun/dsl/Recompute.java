package dev.gatun.dsl;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Activation recomputation ({@link GraphBuilder#recompute}, PyTorch's {@code torch.utils.checkpoint}), and the gathered
 * weights alone gathered again ({@link GraphBuilder#regather}, FSDP2's {@code reshard_after_forward}): a graph
 * transformation made when the graph is built, before lowering and planning. The values a marked region computes from
 * the activations (anything that depends on a graph input that is not a state), other than those read after the region
 * by the forward pass (its outputs: the residual stream a layer hands on), are no longer read by the backward pass:
 * each backward node that read one reads a clone of it instead, computed again from the region's inputs. So the forward
 * pass's values die inside the region and the planner does not keep them until the backward pass.
 *
 * <p>The clones must run late, when the backward pass reaches the region, not when their inputs are ready (which is
 * the forward pass). A graph has no control edges, so each activation a clone reads from outside the region passes
 * through a gate, {@code where(c, x, x)} with {@code c = s == s} for {@code s} an element of a gradient the backward
 * pass has just computed: the gate is {@code x} bit for bit (both branches are x, whatever c is, a NaN included), and
 * reading {@code s} orders every clone after that gradient. The weights (values computed from states only, a
 * parameter's snapshot or cast) are read as they are, except what a region gathers (an FSDP parameter's
 * {@code all_gather} and the views of it): that is gathered again in the backward pass from its gated shard, as FSDP2's
 * {@code reshard_after_forward}, so the gathered weight lives only while its layer runs. The clones compute the same ops on the same values, so the
 * losses and gradients are bit for bit those without recomputation. A region whose clones would include a user op or
 * an in-place update is refused by name: running those twice may not be the same. (In f16 and bf16 a clone may be
 * fused otherwise than the op it repeats, and the default plan rounds half values only where a kernel stores them: the
 * values then agree to the half type's rounding; with {@code roundEachOp} they are bit for bit too.)
 */
final class Recompute {
    /**
     * A region: nodes {@code [first, end)} of the graph, as {@code recompute(name, body)} made them; with
     * {@code activations} false ({@code regather(name, body)}) only what it gathers is made again, its activations kept.
     */
    record Region(String name, int first, int end, boolean activations) {}

    private final Graph g;
    private final Graph.Builder b;
    private final boolean[] backward, activation, regather, cloneable;
    private final int[] region;
    private final Node[] mapped;
    private final List<Region> regions;
    private final List<Map<Integer, Node>> clones = new ArrayList<>(), gates = new ArrayList<>();
    private final Node[] cond;

    private Recompute(Graph g, List<Region> regions, List<int[]> backwardRanges) {
        this.g = g;
        this.regions = regions;
        int n = g.nodes().size();
        backward = new boolean[n];
        for (int[] r : backwardRanges) for (int i = r[0]; i < r[1]; i++) backward[i] = true;
        activation = new boolean[n];
        for (Node x : g.nodes())
            activation[x.id()] = x.op() instanceof Op.Input in ? !g.states().contains(in.name()) : x.inputs().stream().anyMatch(i -> activation[i.id()]);
        region = new int[n];
        java.util.Arrays.fill(region, -1);
        regather = new boolean[n];
        for (int r = 0; r < regions.size(); r++)
            for (int i = regions.get(r).first(); i < regions.get(r).end(); i++) {
                Node x = g.node(i);
                if (backward[i] || x.op() instanceof Op.Input || x.op() instanceof Op.Constant) continue;
                // a weight's gather and what is made of it (a view, a cast) is gathered again, not kept
                boolean fromGather = false;
                for (Node in : x.inputs()) fromGather |= regather[in.id()] && inRange(r, in);
                regather[i] = !activation[i] && (x.op() instanceof Op.Collective || fromGather);
                if ((activation[i] && regions.get(r).activations()) || regather[i]) region[i] = r;
            }
        // what a region's gathers alone read of a weight (the shard's cast to the compute dtype) is made again with them,
        // not kept from the forward pass for them (it would hold every layer's shards until the backward pass)
        for (int r = 0; r < regions.size(); r++)
            for (int i = regions.get(r).end() - 1; i >= regions.get(r).first(); i--) {
                Node x = g.node(i);
                if (backward[i] || activation[i] || regather[i] || x.op() instanceof Op.Input || x.op() instanceof Op.Constant
                        || x.op() instanceof Op.Custom || x.op() instanceof Op.CustomOutput || Graph.writesInPlace(x)) continue;
                boolean onlyGathers = !g.users(x).isEmpty();
                for (Node u : g.users(x)) onlyGathers &= regather[u.id()] && inRange(r, u);
                if (onlyGathers) {
                    regather[i] = true;
                    region[i] = r;
                }
            }
        cloneable = new boolean[n];
        for (Node x : g.nodes()) cloneable[x.id()] = region[x.id()] >= 0 && !readAfter(x);
        mapped = new Node[n];
        cond = new Node[regions.size()];
        for (int r = 0; r < regions.size(); r++) { clones.add(new HashMap<>()); gates.add(new HashMap<>()); }
        b = Graph.builder(g.name());
    }

    /** {@code g} with the regions' values recomputed for the backward nodes ({@code backwardRanges}: the grad calls' nodes). */
    static Graph apply(Graph g, List<Region> regions, List<int[]> backwardRanges) {
        return new Recompute(g, regions, backwardRanges).rebuild();
    }

    private boolean inRange(int r, Node x) { return x.id() >= regions.get(r).first() && x.id() < regions.get(r).end(); }

    /** Whether the forward pass reads {@code x} after its region (or it is an output): the region hands it on, it is kept. */
    private boolean readAfter(Node x) {
        if (g.isOutput(x)) return true;
        for (Node u : g.users(x)) if (!backward[u.id()] && !inRange(region[x.id()], u)) return true;
        return false;
    }

    private Graph rebuild() {
        if (g.worldSize() != null) b.worldSize(g.worldSize());
        for (ProcessGroup pg : g.groups().values()) if (!pg.name().equals(ProcessGroup.WORLD_NAME)) b.group(pg);
        g.userOps().values().forEach(b::register);
        for (Node x : g.nodes()) {
            mapped[x.id()] = switch (x.op()) {
                case Op.Input in -> g.states().contains(in.name()) ? b.state(in.name(), x.type()) : b.input(in.name(), x.type());
                case Op.Constant c -> b.constant(c.values(), x.type());
                default -> {
                    var args = new ArrayList<Node>();
                    for (Node in : x.inputs()) args.add(backward[x.id()] && cloneable[in.id()] ? clone(in, x) : mapped[in.id()]);
                    yield b.add(x.op(), args, x.symmetricGroup());
                }
            };
        }
        g.outputs().forEach((name, x) -> b.output(name, mapped[x.id()]));
        for (int r = 0; r < regions.size(); r++)
            if (!clones.get(r).isEmpty())
                b.note(regions.get(r).activations()
                        ? "recompute " + regions.get(r).name() + ": " + clones.get(r).size() + " of its nodes computed again in the backward pass instead of kept"
                        : "regather " + regions.get(r).name() + ": " + clones.get(r).size() + " of its nodes (the weights it gathers) gathered again in the backward pass instead of kept");
        return b.build();
    }

    /** The clone of region node {@code x} for backward node {@code user}, made with its own region inputs' clones. */
    private Node clone(Node x, Node user) {
        int r = region[x.id()];
        Node done = clones.get(r).get(x.id());
        if (done != null) return done;
        if (x.op() instanceof Op.Custom || x.op() instanceof Op.CustomOutput o && x.input(0).op() instanceof Op.Custom || Graph.writesInPlace(x))
            throw new GraphException("recompute(\"" + regions.get(r).name() + "\"): " + x.describe() + " (" + x.op().opName() + ") would be computed again in the backward pass,"
                    + " but a user op or an in-place update may not give the same the second time; compute it outside the region");
        var args = new ArrayList<Node>();
        for (Node in : x.inputs()) {
            if (cloneable[in.id()] && region[in.id()] == r) args.add(clone(in, user));
            else if ((activation[in.id()] || regather[x.id()]) && !(in.op() instanceof Op.Input || in.op() instanceof Op.Constant)) args.add(gate(in, r, user));
            else args.add(mapped[in.id()]);
        }
        Node c = b.add(x.op(), args, x.symmetricGroup());
        clones.get(r).put(x.id(), c);
        return c;
    }

    /** {@code where(c, x, x)}: x bit for bit, read after the gradient {@code c} is made of (see the class comment). */
    private Node gate(Node x, int r, Node user) {
        Node done = gates.get(r).get(x.id());
        if (done != null) return done;
        Node c = condition(r, user);
        Node out = mapped[x.id()];
        if (c != null) {
            int rank = x.type().shape().rank();
            long[] ones = new long[rank];
            java.util.Arrays.fill(ones, 1);
            out = b.add(new Op.Pointwise(PointwiseFn.WHERE), List.of(b.add(new Op.Reshape(Shape.of(ones)), List.of(c)), out, out), x.symmetricGroup());
        }
        gates.get(r).put(x.id(), out);
        return out;
    }

    /**
     * The region's gate condition, made once: {@code s == s} for {@code s} the first element of a gradient {@code user}
     * reads (else of the latest backward node before it), so the clones run once the backward pass is there.
     */
    private Node condition(int r, Node user) {
        if (cond[r] != null) return cond[r];
        Node src = null;
        for (Node in : user.inputs()) if (src == null && backward[in.id()] && usable(in)) src = mapped[in.id()];
        for (int i = user.id() - 1; src == null && i >= 0; i--) if (backward[i] && usable(g.node(i))) src = mapped[i];
        if (src == null) return null;
        Node flat = b.add(new Op.Reshape(Shape.of(src.type().shape().numel())), List.of(src));
        Node first = b.add(new Op.Slice(0, 0, 1, 1), List.of(flat));
        return cond[r] = b.add(new Op.Pointwise(PointwiseFn.EQ), List.of(first, first));
    }

    private static boolean usable(Node n) {
        return n.type().dtype().isFloating() && n.type().shape().isStatic() && n.type().shape().numel() > 0;
    }
}
