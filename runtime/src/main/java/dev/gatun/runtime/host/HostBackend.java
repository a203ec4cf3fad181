package dev.gatun.runtime.host;

import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.World;
import dev.gatun.runtime.spi.Backend;
import dev.gatun.runtime.spi.Executable;

/** The CPU backend: runs every rank of the world as a thread of this JVM. Always available. */
public final class HostBackend implements Backend {
    @Override public String name() { return "host"; }
    @Override public int priority() { return 0; }
    @Override public String unavailableReason() { return null; }
    @Override public long commGranularity() { return 1; }

    /** A process started as one rank of a distributed world (gatun-run) must not silently simulate every rank. */
    @Override public String cannotRun(CompileOptions options) {
        return switch (options.world()) {
            case World.Simulated s -> null;
            case World.Local l -> "the session is one rank of a world that meets through a rendezvous, and the host backend simulates every rank itself";
            case World.Launched l -> l.size() == 1 ? null : "this process is rank " + l.rank() + " of a distributed world of " + l.size()
                    + " (started by " + l.job().source() + "), and the host backend simulates every rank in one process";
        };
    }

    @Override public Executable load(Plan plan, CompileOptions options) { return new HostExecutable(plan, options); }
}
