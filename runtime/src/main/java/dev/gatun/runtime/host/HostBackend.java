package dev.gatun.runtime.host;

import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;
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
        int worldSize = options.worldSize();
        if (options.rendezvous() != null) return "the session is one rank of a world that meets through a rendezvous, and the host backend simulates every rank itself";
        var job = launchedRank();
        if (worldSize > 1 && job != null && job.worldSize() == worldSize)
            return "this process is rank " + job.rank() + " of a distributed world of " + worldSize + " (started by " + job.source()
                    + "), and the host backend simulates every rank in one process";
        return null;
    }
    /** The launcher's description of this process, or null where it was not started as a rank (or says nonsense). */
    private static dev.gatun.runtime.distributed.LaunchEnvironment launchedRank() {
        try {
            return dev.gatun.runtime.distributed.LaunchEnvironment.current();
        } catch (RuntimeException e) {
            return null;
        }
    }

    @Override public Executable load(Plan plan, CompileOptions options) { return new HostExecutable(plan, options); }
}
