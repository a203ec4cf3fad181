package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Turns a lowered graph into a {@link Plan}, as a sequence of passes, each in a class of its own:
 * <ol>
 *   <li>{@link BufferTable}: one {@link PlanBuffer} per lowered buffer, the table steps refer to;</li>
 *   <li>{@link Slices}: where a buffer's data goes (its own slot, or its slice of a concatenation), which the
 *   passes below consult;</li>
 *   <li>{@link Fusion}: loops into kernels (holding f16/bf16 intermediates in float unless
 *   {@link PlanOptions#roundEachOp});</li>
 *   <li>{@link GatherFusion} (an option, on by default): an index_select read through its indices by the kernels that
 *   read its result;</li>
 *   <li>{@link GridFolds}: a whole reduction of a row kernel's per-row results taken into that kernel;</li>
 *   <li>{@link Scheduler}: a memory-aware order of the work;</li>
 *   <li>{@link ProductEpilogues}: a product of a few rows with the kernels after it that read it, on the tiles they
 *   need, one launch (one point of the order);</li>
 *   <li>{@link Liveness}: when each buffer is written and last read, here and by peers (all_to_alls that will run
 *   joined, {@link AllToAllRuns}, as one step);</li>
 *   <li>{@link StateWrites}: a state's new value written into its slot by the kernel that reads the old value last,
 *   without the snapshot and update_slice around it (liveness then taken again);</li>
 *   <li>{@link InPlace}: which elementwise kernels write over a dying input;</li>
 *   <li>{@link Pools}: one pool planner per kind (communication per group, path-2 inputs, rotating slots, states,
 *   the regular arena, constants), recording the {@link SlotHistory};</li>
 *   <li>{@link #steps}: the step list, one line of the printout each;</li>
 *   <li>{@link CollectivePasses}: fused path-2 copies and batched one-shot all-reduces;</li>
 *   <li>{@link CollectiveFusion}: an all-reduce with the kernels that write its inputs and read its results, one launch;</li>
 *   <li>{@link UpdateBatching}: in-place updates at one position, one launch;</li>
 *   <li>{@link AttentionUpdates}: an attention with the update of its caches just before it, one launch;</li>
 *   <li>{@link ProductKernels}: which kernel takes each product (the few-row GEMV or the library's GEMM), and whether the
 *   plan's kernels are programmatic dependent launches ({@link Plan#launches()});</li>
 *   <li>{@link #partitions}: the runs of device work a CUDA graph can capture.</li>
 * </ol>
 */
public final class Planner {
    private Planner() {}

    public static Plan plan(LoweredGraph graph) { return plan(graph, PlanOptions.DEFAULT); }

    public static Plan plan(LoweredGraph graph, PlanOptions options) {
        var outputs = new ByBuffer.Set(graph);   // asked once per buffer by the scheduler, liveness and in place
        for (Buffer o : graph.outputs().values()) {
            outputs.add(o.storage());
            // an output written into a concatenation lives as long as the concatenation's storage, and a concatenation
            // that is an output keeps its parts' writers (in the scheduler's estimate) to the end
            Buffer s = Slices.storage(o.storage());
            outputs.add(s);
            for (Buffer w : Slices.writers(s)) outputs.add(w);
        }
        var table = BufferTable.of(graph);
        List<Work> fused = Fusion.fuse(graph, table);
        if (options.gatherFusion()) fused = GatherFusion.apply(fused, table, outputs);
        if (!options.roundEachOp()) fused.replaceAll(Planner::floatIntermediates);
        fused = GridFolds.apply(fused);
        var choice = Scheduler.choose(fused, outputs, options.reorder(), graph.buffers().size());
        var order = options.productEpilogues() ? ProductEpilogues.join(choice.order(), table) : choice.order();
        if (options.attentionUpdates()) order = AttentionUpdates.widenReads(order);
        int join = options.batchCollectives();   // the most all_to_alls joined into one step (AllToAllRuns)
        var live = new Liveness(graph, order, outputs, join);
        var stateWrites = StateWrites.of(graph, order, live, outputs, options.inPlace());
        if (!stateWrites.written.isEmpty()) live = new Liveness(graph, stateWrites.order, outputs, join);   // the snapshots and updates left out
        Map<Buffer, Buffer> inPlace = new IdentityHashMap<>(options.inPlace() ? InPlace.pairs(graph, live, outputs) : Map.of());
        inPlace.putAll(InPlace.updates(graph));   // not an option: an op that writes in place writes only what it changes
        var aliases = stateWrites.aliases();   // a value written into a state's slot chains to nothing
        inPlace.entrySet().removeIf(e -> aliases.contains(e.getKey()) || aliases.contains(e.getValue()));
        var pools = new Pools(graph, options);
        pools.communication(live);
        pools.symmetricInputs(graph, live);
        pools.rotating(graph);
        pools.states(graph, stateWrites, live);
        pools.regular(graph, live, inPlace);
        pools.constants(graph);
        for (Buffer b : graph.buffers()) {
            var p = pools.placements.get(b);
            if (p != null) table.of(b).place(p);
        }
        var kernels = new ArrayList<Kernel>();
        var notes = new ArrayList<String>(stateWrites.notes);
        List<Step> steps = CollectivePasses.apply(steps(table, live, pools, kernels), options, runs(live, table), notes);
        if (options.fuseCollectives()) steps = CollectiveFusion.apply(steps);
        steps = UpdateBatching.apply(steps);
        if (options.attentionUpdates()) steps = AttentionUpdates.apply(steps);
        steps = ProductKernels.choose(steps);
        return new Plan(graph, table.all(), pools.pools, steps, kernels, partitions(steps, table.anyDynamic()), pools.history.slots(steps, live, table),
                choice.name(), choice.plainPeak(), choice.peak(), options, notes);
    }

    /**
     * The step list: pools; persistent placements and path-2 copies (inside the first partition); then each
     * work's placements and the work itself; final barriers where peers may still read; communication pools
     * released.
     */
    private static List<Step> steps(BufferTable table, Liveness live, Pools pools, List<Kernel> kernels) {
        var steps = new ArrayList<Step>();
        Set<Buffer> placed = Collections.newSetFromMap(new IdentityHashMap<>());
        int tiled = 0;
        for (Pool p : pools.pools) steps.add(new Step.AllocPool(p));
        for (Buffer b : pools.persistent) steps.add(place(b, table, pools));
        for (Buffer b : pools.persistent)
            if (b instanceof InputBuffer in && !in.isState()) steps.add(new Step.CopyIn(table.of(in)));
        for (int i = 0; i < live.n; i++) {
            Work w = live.order.get(i);
            for (Buffer b : w.writes()) {
                Buffer s = Slices.storage(b);   // a part's concatenation is placed where its first part is written
                if (s == b || live.def(s) == i && placed.add(s)) steps.add(place(s, table, pools));
            }
            switch (w) {
                case Work.KernelWork k -> { steps.add(launch(k)); kernels.add(k.kernel()); }
                case Work.ExternWork e -> steps.add(extern(e.call(), live.freedAt(i), table, pools.rotating.get(e.call())));
                case Work.TiledWork t -> {
                    var product = (Step.Matmul) extern(t.product().call(), live.freedAt(i), table, pools.rotating.get(t.product().call()));
                    steps.add(new Step.TiledProduct("tiled_" + tiled++, product, t.epilogues().stream().map(Planner::launch).toList(), t.tiles()));
                    t.epilogues().forEach(k -> kernels.add(k.kernel()));
                }
            }
        }
        live.finalBarriers.forEach((group, why) -> steps.add(new Step.Barrier(group, why)));
        for (Pool p : pools.pools) if (p.kind() == Pool.Kind.COMM) steps.add(new Step.Release(p.name()));
        return steps;
    }

    /** The result of each all_to_all that runs joined ({@link AllToAllRuns}), to the index of its run's first work. */
    private static Map<PlanBuffer, Integer> runs(Liveness live, BufferTable table) {
        var out = new IdentityHashMap<PlanBuffer, Integer>();
        for (int i = 0; i < live.n; i++)
            if (live.runs.isJoined(i) && live.order.get(i) instanceof Work.ExternWork e) out.put(table.of(e.call()), live.runs.first(i));
        return out;
    }

    /** A kernel work whose kernel holds its f16/bf16 intermediates in float32 (see {@link PlanOptions#roundEachOp}). */
    private static Work floatIntermediates(Work w) {
        if (!(w instanceof Work.KernelWork k)) return w;
        Kernel held = k.kernel().withFloatIntermediates();
        return held == k.kernel() ? w : new Work.KernelWork(held, k.writes(), k.reads(), k.elementwise(), k.notes());   // most kernels have no half values
    }

    private static Step place(Buffer b, BufferTable table, Pools pools) {
        if (!b.type().shape().isStatic()) return new Step.AllocDynamic(table.of(b));
        var p = pools.placements.get(b);
        return new Step.Place(table.of(b), p.pool(), p.offset(), p.bytes(), pools.history.reuses(b), pools.history.isInPlace(b));
    }

    /** The launch of a kernel work, its notes printed under it. */
    private static Step.Launch launch(Work.KernelWork k) { return new Step.Launch(k.kernel(), k.notes()); }

    private static Step extern(ExternBuffer e, String freed, BufferTable table, RotatingSlots slots) {
        return switch (e.call()) {
            case ExternCall.Collective c -> new Step.Collective(table.of(e), table.of(e.inputs().getFirst()),
                    e.inputs().size() > 1 ? table.of(e.inputs().get(1)) : null,
                    new Step.CollectiveCall(c.kind(), c.reduceOp(), c.group(), c.root(), c.algorithm()), freed, false, slots);
            case ExternCall.Matmul m -> new Step.Matmul(table.of(e), table.of(e.inputs().get(0)), table.of(e.inputs().get(1)), m.transA(), m.transB());
            case ExternCall.Registered r -> {
                var outs = new ArrayList<PlanBuffer>();
                outs.add(table.of(e));
                e.extraOutputs().forEach(o -> outs.add(table.of(o)));
                yield new Step.OpCall(r.spec(), r.attrs(), table.of(e.inputs()), outs);
            }
            case ExternCall.UserOpCall u -> {
                var outs = new ArrayList<PlanBuffer>();
                outs.add(table.of(e));
                e.extraOutputs().forEach(o -> outs.add(table.of(o)));
                yield new Step.CallUserOp(u.op(), u.group(), table.of(e.inputs()), outs);
            }
        };
    }

    /** Contiguous runs of device work without symbolic shapes; {@code anyDynamic}: whether any buffer has one (else no step touches one). */
    private static List<Plan.Partition> partitions(List<Step> steps, boolean anyDynamic) {
        var parts = new ArrayList<Plan.Partition>();
        int start = -1, last = -1;
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            if (s instanceof Step.AllocDynamic || (anyDynamic && s.isDeviceWork() && touchesDynamic(s))) {
                if (start >= 0) parts.add(new Plan.Partition(parts.size(), start, last));
                start = -1;
            } else if (s.isDeviceWork()) {
                if (start < 0) start = i;
                last = i;
            }
        }
        if (start >= 0) parts.add(new Plan.Partition(parts.size(), start, last));
        return parts;
    }

    /** Whether a step reads or writes a buffer of symbolic size (a joined launch's, its parts'). */
    private static boolean touchesDynamic(Step s) { return anyDynamic(s.reads()) || anyDynamic(s.writes()); }

    private static boolean anyDynamic(List<PlanBuffer> bs) {
        for (PlanBuffer b : bs) if (b.isDynamic()) return true;
        return false;
    }
}
