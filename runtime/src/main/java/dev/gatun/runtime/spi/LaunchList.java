package dev.gatun.runtime.spi;

import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.List;

/**
 * The launches a call of a plan makes, in order, each with the launch choices it is made with: one line a launch,
 * the step's first line and its {@link LaunchChoice} ({@link #entry}). A step the plan joins into one launch (a batch
 * of updates, an attention with its update, a product with its epilogues, a fused collective) is one entry, though a
 * backend without the joint kernel runs its parts. {@link #of} lists what the plan tells a backend to launch (the host
 * backend's list); a backend with its own launches records what it actually launched, and a test compares the two:
 * the backend makes no choice the plan text does not show.
 */
public final class LaunchList {
    private LaunchList() {}

    /** One launch: the step's first line (without its printed choices) and the choices it is launched with. */
    public static String entry(Step step, LaunchChoice choice) {
        String line = step.format().lines().findFirst().orElse("").strip();
        String d = choice.describe();
        return d.isEmpty() ? line : line + "  [" + d + "]";
    }

    /** The launches a call of {@code plan} makes, every step run (none replayed), with the plan's choices. */
    public static List<String> of(Plan plan) {
        var r = new Recorder(plan);
        StepLoop.run(plan, r, false);
        return List.copyOf(r.entries);
    }

    /** Records each launching step's entry; runs nothing. */
    private static final class Recorder implements StepLoop.Steps {
        private final Plan plan;
        private final List<String> entries = new ArrayList<>();

        Recorder(Plan plan) { this.plan = plan; }

        private void note(Step s) { entries.add(entry(s, plan.choice(s))); }

        @Override public void allocDynamic(Step.AllocDynamic s) {}
        @Override public void copyIn(Step.CopyIn s) {}
        @Override public void barrier(Step.Barrier s) {}
        @Override public void launch(Step.Launch s) { note(s); }
        @Override public void collective(int index, Step.Collective s) { note(s); }
        @Override public void batch(int index, Step.CollectiveBatch s) { note(s); }
        @Override public void joinedAllToAll(int index, Step.JoinedAllToAll s) { note(s); }
        @Override public void fused(int index, Step.FusedCollective s) { note(s); }
        @Override public void matmul(Step.Matmul s) { note(s); }
        @Override public void op(Step.OpCall s) { note(s); }
        @Override public void updateSlices(Step.UpdateSlices s) { note(s); }
        @Override public void updateAttention(Step.UpdateAttention s) { note(s); }
        @Override public void tiledProduct(Step.TiledProduct s) { note(s); }
        @Override public void userOp(Step.CallUserOp s) { note(s); }
    }
}
