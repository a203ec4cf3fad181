package dev.gatun.runtime.host;

import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.World;
import dev.gatun.runtime.spi.Backend;
import dev.gatun.runtime.spi.Executable;

/**
 * The CPU backend, always available. A {@link World.Simulated} world runs every rank as a thread of this JVM (the
 * simulated ranks, which follow the GPU algorithms); a session that is one rank of a world of sessions (a
 * {@link World.Local} rank of {@link dev.gatun.runtime.distributed.LocalWorld}, or a {@link World.Launched} process
 * of gatun-run) runs its own rank and performs its collectives with the other ranks for real, through shared memory
 * or TCP, as PyTorch's Gloo backend does.
 */
public final class HostBackend implements Backend {
    @Override public String name() { return "host"; }
    @Override public int priority() { return 0; }
    @Override public String unavailableReason() { return null; }
    @Override public long commGranularity() { return 1; }

    @Override public Executable load(Plan plan, CompileOptions options) { return new HostExecutable(plan, options); }
}
