package dev.gatun.lowering;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.AllocatorType;
import dev.gatun.ir.CommBufferType;
import dev.gatun.ir.Layout;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * How an input of an op that needs symmetric memory becomes a communication buffer: by the first of the three paths
 * that applies (the buffer itself takes a communication-buffer layout; a graph input is allocated in symmetric memory;
 * else an identity copy into one), each path not taken recorded with its reason; and where a symmetric region's
 * results are placed. Lowering owns the lists this appends to; the copy of path 3 is lowering's to make.
 */
final class SymmetricPaths {
    /** Makes path 3's copy of {@code in} with {@code layout}, registered with lowering. */
    interface Copier { Buffer copy(Buffer in, Layout layout); }

    private final Graph graph;
    private final LoweringOptions options;
    private final List<Realization> realizations;
    private final List<String> decisions;
    private final Map<Buffer, String> fixedBecause;
    private final Copier copier;

    SymmetricPaths(Graph graph, LoweringOptions options, List<Realization> realizations, List<String> decisions, Map<Buffer, String> fixedBecause,
                   Copier copier) {
        this.graph = graph;
        this.options = options;
        this.realizations = realizations;
        this.decisions = decisions;
        this.fixedBecause = fixedBecause;
        this.copier = copier;
    }

    /**
     * Makes {@code in} available as a communication buffer of {@code group} by the first path that applies:
     * (1) a computed buffer with a flexible layout and static shape takes a communication-buffer layout;
     * (2) a graph input with a static shape gets the SYMM_MEM allocator; (3) otherwise an identity copy.
     * {@code shared} (when set) says why the input may not be modified in place: paths 1 and 2 are then closed.
     */
    Buffer realize(Buffer in, String group, String consumer, String op, Algorithm algorithm, String why, String shared) {
        var notTaken = new ArrayList<String>();
        String p1 = shared != null ? shared : pathOneBlocker(in, group);
        if (p1 == null) {
            if (!(in.layout() instanceof Layout.CommBuffer)) in.setLayout(Layout.CommBuffer.of(in.layout(), CommBufferType.SYMM_MEM, group));
            realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.ZERO_COPY, in.name(), notTaken));
            return in;
        }
        notTaken.add("path 1 not taken: " + p1);
        String p2 = shared != null ? shared : pathTwoBlocker(in, group);
        if (p2 == null) {
            in.setLayout(in.layout().withAllocator(AllocatorType.symmMem(group)));
            realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.SYMMETRIC_INPUT, in.name(), notTaken));
            return in;
        }
        notTaken.add("path 2 not taken: " + p2);
        var layout = Layout.CommBuffer.of(Layout.contiguous(in.type().dtype(), in.type().shape()), CommBufferType.SYMM_MEM, group);
        Buffer copy = copier.copy(in, layout);
        realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.IDENTITY_COPY, copy.name(), notTaken));
        return copy;
    }

    /** Null when only the collective reads {@code x}'s value; else a reason naming another reader. */
    String sharedInput(Node x) {
        if (graph.isOutput(x)) return "two-shot reduces in place and " + x.label() + " is also a graph output";
        if (graph.users(x).size() > 1)
            return "two-shot reduces in place and " + x.label() + " is also read by " + graph.users(x).stream().map(Node::label).toList();
        return null;
    }

    private String pathOneBlocker(Buffer in, String group) {
        if (in instanceof ViewBuffer v) return in.name() + " is a view (" + v.viewOp() + ") of " + v.base().name();
        if (in instanceof InputBuffer) return in.name() + " is a graph input, not a computed buffer";
        String extern = externBlocker(in);
        if (extern != null) return extern;
        if (in instanceof ConstantBuffer) return in.name() + " is a constant";
        if (in instanceof ConcatBuffer) return in.name() + " is a concatenation, which its parts write in regular memory";
        if (!in.type().shape().isStatic()) return in.name() + " has a symbolic shape " + in.type().shape();
        if (in.layout() instanceof Layout.CommBuffer cb)
            return cb.group().equals(group) ? null : in.name() + " is already a communication buffer of group '" + cb.group() + "'";
        boolean packedExtern = (in instanceof ExternBuffer || in instanceof ExternOutputBuffer) && in.layout() instanceof Layout.Fixed f && f.isContiguous();
        if (!in.layout().isFlexible() && !packedExtern)
            return in.name() + " has a fixed layout" + (fixedBecause.containsKey(in) ? " because " + fixedBecause.get(in) : "");
        if (isGraphOutput(in)) return in.name() + " must also stay a graph output (a regular buffer)";
        return null;
    }

    /**
     * Why an extern call's output cannot be written straight into symmetric memory, or null where it can: a registered
     * op's output (not one written in place) or a collective's result is written where the plan places it, so the
     * call writes the communication buffer itself instead of an identity copy after it (a launch and a pass over the
     * bytes fewer: mixture-of-experts dispatch, whose rows an index_select orders and whose counts an all_to_all
     * returns). A product's output keeps the copy, which {@code CollectiveFusion} takes into an all-reduce's launch; a
     * user op's and an in-place op's outputs keep it too (their writers are not the planner's).
     */
    private static String externBlocker(Buffer in) {
        ExternBuffer call = in instanceof ExternBuffer e ? e : in instanceof ExternOutputBuffer o ? o.call() : null;
        if (call == null) return null;
        return switch (call.call()) {
            case ExternCall.Registered r when !r.inPlace() -> null;
            case ExternCall.Collective c -> null;
            case ExternCall.Registered r -> in.name() + " is written in place by " + r.spec().name() + ", an extern kernel";
            case ExternCall.Matmul m -> in.name() + " is the output of an extern kernel (a product, whose copy the collective's launch may take)";
            case ExternCall.UserOpCall u -> in.name() + " is the output of an extern kernel (a user op)";
        };
    }

    /** Graph outputs are known before lowering reaches them, so a buffer is matched by the node it came from. */
    private boolean isGraphOutput(Buffer b) {
        return b.origin() >= 0 && graph.outputs().values().stream().anyMatch(n -> n.id() == b.origin());
    }

    private String pathTwoBlocker(Buffer in, String group) {
        if (!(in instanceof InputBuffer)) return in.name() + " is not a graph input";
        if (!options.symmetricInputs()) return "symmetric graph inputs are switched off by the lowering options";
        if (!in.type().shape().isStatic()) return in.name() + " has a symbolic shape " + in.type().shape();
        AllocatorType a = in.layout().allocator();
        if (a.isSymmetric() && !a.group().equals(group))
            return in.name() + " is already symmetric memory of group '" + a.group() + "'";
        return null;
    }

    /** A node made inside a symmetric region: its result goes to that group's pool where possible. */
    void placeInRegion(Node n, Buffer b) {
        String group = n.symmetricGroup();
        String why = null;
        if (b instanceof ViewBuffer) why = "it is a view";
        else if (b instanceof InputBuffer || b instanceof ConstantBuffer) why = "it is not computed by the graph";
        else if (b instanceof ConcatBuffer) why = "it is a concatenation, which its parts write in regular memory";
        else if (!b.type().shape().isStatic()) why = "its shape " + b.type().shape() + " is symbolic";
        else if (b.layout() instanceof Layout.CommBuffer cb && !cb.group().equals(group)) why = "it is already in group '" + cb.group() + "'";
        else if (b instanceof ComputedBuffer && !b.layout().isFlexible() && !(b.layout() instanceof Layout.CommBuffer)) why = "its layout is fixed";
        if (why != null) {
            decisions.add(b.name() + ": symmetric region \"" + group + "\" cannot place it in symmetric memory: " + why);
            return;
        }
        if (!(b.layout() instanceof Layout.CommBuffer)) b.setLayout(Layout.CommBuffer.of(b.layout(), CommBufferType.SYMM_MEM, group));
        realizations.add(new Realization(b.name(), "symmetric region \"" + group + "\"", null, null, b.name(), Realization.Path.ZERO_COPY, b.name(), List.of()));
    }
}
