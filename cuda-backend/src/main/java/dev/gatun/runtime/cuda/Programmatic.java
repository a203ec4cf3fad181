package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;

/**
 * Programmatic dependent launch (Hopper and later): a kernel launched this way may be scheduled while the kernel before
 * it on the stream is still running, so the gap between two short kernels (launch, block scheduling) overlaps the first
 * one's last blocks instead of following them. A decode step is a chain of a few hundred such kernels. A plan is
 * launched this way where the plan says ({@code Plan.launches()}, printed under its pools: by default one rank, every
 * product Gatun's own GEMV's, of 1 to 8 rows by a weight: a decode step at batch 1 to 8); {@code GATUN_PROGRAMMATIC_LAUNCH=1}
 * or {@code 0} ({@code PlanOptions.programmaticLaunch}) forces it on or off.
 *
 * <p>The rule that keeps it exact: every kernel launched this way starts with {@code GATUN_DEPENDENT_START()}, which
 * first lets the kernel after it be scheduled ({@code griddepcontrol.launch_dependents}) and then waits
 * ({@code griddepcontrol.wait}) until the kernel before it has finished and its writes are visible, before reading or
 * writing any memory. The order is free for correctness (a kernel's wait is always for the whole of the kernel before
 * it, however early that one let it be scheduled) and decides how far ahead the chain runs: the kernel after this one
 * is scheduled once every block of this one has started, even while this one still waits for the one before; so the
 * next kernel's blocks are resident, and the GEMV's first weight loads in flight, one kernel further ahead than when
 * each kernel let the next go only after its own wait (Llama-3.2-1B's decode step on an H200, batch 1: 0.959-0.961
 * against 0.944-0.946 ms a step, the same tokens; BENCHMARKS, seventeenth session). No block can be starved by it:
 * the kernel after is scheduled only once all of this kernel's blocks have started. One exception to "nothing
 * before the wait": the GEMV loads the first loop of a weight that is a graph input (which no kernel of the call
 * writes) before it waits, so those loads overlap the kernels before it; every other access comes after the wait. Kernels without it (cuBLAS, NCCL, the collectives) are launched as always; a kernel
 * launched this way after one of them waits for its end as usual. Where the kernel was not launched this way the
 * wait returns at once. Captured into a CUDA graph, the launch becomes a programmatic edge.
 */
final class Programmatic {
    private Programmatic() {}

    /** The macro every kernel that may be launched this way calls first. */
    static final String SOURCE = """
            #ifndef GATUN_DEPENDENT_START
            #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            #define GATUN_DEPENDENT_START() asm volatile("griddepcontrol.launch_dependents;\\n\\tgriddepcontrol.wait;" ::: "memory")
            #else
            #define GATUN_DEPENDENT_START() do { } while (0)
            #endif
            #endif
            """;

    /** Launches {@code kernel} programmatically where {@code on} (its source starts with the macro), else as usual. */
    static void launch(Kernel kernel, boolean on, LaunchConfig config, Object... args) {
        if (on) kernel.launchOverlapped(config, args);
        else kernel.launch(config, args);
    }
}
