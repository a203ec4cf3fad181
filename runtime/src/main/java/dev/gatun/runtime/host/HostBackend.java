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
    @Override public Executable load(Plan plan, CompileOptions options) { return new HostExecutable(plan, options); }
}
