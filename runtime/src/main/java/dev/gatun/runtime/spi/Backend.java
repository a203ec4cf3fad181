package dev.gatun.runtime.spi;

import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;

/**
 * Executes plans. Backends are found with {@link java.util.ServiceLoader}; the session picks the available
 * one with the highest priority unless the options name one.
 */
public interface Backend {
    /** "host", "cuda", ... */
    String name();

    /** Higher wins in automatic choice. */
    int priority();

    /** Null when usable here, else why not (e.g. "unavailable: no CUDA driver"). */
    String unavailableReason();

    /** Null when this backend can run these options' world of ranks from this process (or thread), else why not. */
    default String cannotRun(CompileOptions options) { return null; }

    /** Options adjusted to what this machine allows (e.g. no symmetric memory without peer access). */
    default CompileOptions adapt(CompileOptions options) { return options; }

    /** The code this backend runs for the plan's kernels (the host backend interprets the kernel IR itself). */
    default String generatedSource(Plan plan) { return plan.kernelSources(); }

    /** Allocation granularity of symmetric memory, for the planner to round communication pools to. */
    long commGranularity();

    /** Allocates what the plan needs once; the result runs the plan any number of times. */
    Executable load(Plan plan, CompileOptions options);
}
