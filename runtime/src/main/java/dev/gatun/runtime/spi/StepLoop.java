package dev.gatun.runtime.spi;

import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

/**
 * The one run loop of every backend: a plan's steps, in order, each handed to the backend's implementation of
 * it. Backends differ in what a step does ({@link Steps}), never in which steps run or in what order: what runs
 * is what the plan prints. A backend that captures partitions (CUDA graphs) replays a partition in place of its
 * steps, which it captured by running exactly those steps through this loop.
 */
public final class StepLoop {
    private StepLoop() {}

    /** What a backend does for each kind of step; bookkeeping steps (pools, placements, releases) do nothing by default. */
    public interface Steps {
        /** Called before each step, with its index in {@link Plan#steps()}: a hook for tracing, delays and stopping. */
        default void before(int index, Step step) {}

        default void allocPool(Step.AllocPool s) {}
        default void place(Step.Place s) {}
        default void release(Step.Release s) {}
        void allocDynamic(Step.AllocDynamic s);
        void copyIn(Step.CopyIn s);
        void launch(Step.Launch s);
        void collective(int index, Step.Collective s);
        void batch(int index, Step.CollectiveBatch s);

        /**
         * All_to_alls joined into one barrier pair: one starting barrier, every part's rows moved, one ending barrier (the
         * host backend moves the parts one after another between its two barriers; the CUDA backend in one kernel).
         */
        void joinedAllToAll(int index, Step.JoinedAllToAll s);

        /**
         * A collective with the kernels around it as one launch; by default the prologue, the collective and the
         * epilogue one after the other, which computes the same values (the host backend does that).
         */
        default void fused(int index, Step.FusedCollective s) {
            if (s.prologue() != null) launch(s.prologue());
            switch (s.collective()) {
                case Step.Collective c -> collective(index, c);
                case Step.CollectiveBatch b -> batch(index, b);
                default -> throw new IllegalStateException("not a collective: " + s.collective().format());
            }
            if (s.epilogue() != null) launch(s.epilogue());
        }
        void matmul(Step.Matmul s);

        /**
         * A registered op's call ({@link dev.gatun.ir.graph.OpSpec}: argmax, topk, index_select, sample, update_slice,
         * attention, ...): the values its spec defines; where the spec {@link dev.gatun.ir.graph.OpSpec#checksValues checks
         * values}, values it refuses fail the call with a message naming the step and the reason. A backend without a
         * kernel for the op refuses the plan when it loads it, so this never meets one.
         */
        void op(Step.OpCall s);

        /** Updates at one position as one launch; by default one after the other, which writes the same (the host backend does that). */
        default void updateSlices(Step.UpdateSlices s) { for (var u : s.members()) op(u.call()); }

        /** The update of an attention's caches and the attention as one launch; by default one after the other (the host backend). */
        default void updateAttention(Step.UpdateAttention s) {
            updateSlices(s.updates());
            op(s.attention().call());
        }

        /** A product and its epilogues as one launch; by default the product, then the epilogues (the host backend). */
        default void tiledProduct(Step.TiledProduct s) {
            matmul(s.product());
            s.epilogues().forEach(this::launch);
        }
        void userOp(Step.CallUserOp s);
        void barrier(Step.Barrier s);

        /** Replays partition {@code p} instead of running its steps; false to run them one by one. */
        default boolean replay(Plan.Partition p) { return false; }
    }

    /** Runs every step of {@code plan}; where {@code partitions} is set, each partition is offered to {@link Steps#replay} first. */
    public static void run(Plan plan, Steps backend, boolean partitions) {
        var steps = plan.steps();
        var parts = plan.partitions();
        int next = 0;
        for (int i = 0; i < steps.size(); i++) {
            while (next < parts.size() && parts.get(next).first() < i) next++;
            if (partitions && next < parts.size() && parts.get(next).first() == i && backend.replay(parts.get(next))) {
                i = parts.get(next).last();
                continue;
            }
            run(i, steps.get(i), backend);
        }
    }

    /** Runs the steps {@code [first, last]} of {@code plan} (a partition being captured). */
    public static void run(Plan plan, int first, int last, Steps backend) {
        for (int i = first; i <= last; i++) run(i, plan.steps().get(i), backend);
    }

    private static void run(int index, Step step, Steps backend) {
        backend.before(index, step);
        switch (step) {
            case Step.AllocPool s -> backend.allocPool(s);
            case Step.Place s -> backend.place(s);
            case Step.Release s -> backend.release(s);
            case Step.AllocDynamic s -> backend.allocDynamic(s);
            case Step.CopyIn s -> backend.copyIn(s);
            case Step.Launch s -> backend.launch(s);
            case Step.Collective s -> backend.collective(index, s);
            case Step.CollectiveBatch s -> backend.batch(index, s);
            case Step.JoinedAllToAll s -> backend.joinedAllToAll(index, s);
            case Step.FusedCollective s -> backend.fused(index, s);
            case Step.Matmul s -> backend.matmul(s);
            case Step.OpCall s -> backend.op(s);
            case Step.UpdateSlices s -> backend.updateSlices(s);
            case Step.UpdateAttention s -> backend.updateAttention(s);
            case Step.TiledProduct s -> backend.tiledProduct(s);
            case Step.CallUserOp s -> backend.userOp(s);
            case Step.Barrier s -> backend.barrier(s);
        }
    }
}
