package dev.gatun.runtime.host;

import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.ExecutionOptions.HostTransport;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.distributed.Fingerprints;
import dev.gatun.runtime.distributed.Rendezvous;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Opens the transport of a session that is one rank of a world: checks that every rank compiled the same plan, then
 * sets up shared memory or TCP as {@link HostTransport} asks ({@code AUTO}: shared memory where every rank can map
 * every other's file, which all ranks find out together, else TCP).
 */
final class Transports {
    private Transports() {}

    private static final System.Logger LOG = System.getLogger("dev.gatun.runtime.host");
    /** Sessions made per rendezvous: every rank makes them in the same order, so the count names one session everywhere. */
    private static final Map<Rendezvous, AtomicInteger> SESSIONS = java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    static Transport open(Plan plan, CompileOptions options) {
        Rendezvous r = options.world().rendezvous();
        if (r.worldSize() != plan.worldSize())
            throw new GatunRuntimeException("plan '" + plan.name() + "' is for a world of " + plan.worldSize() + " but this session is rank "
                    + r.rank() + " of " + r.worldSize());
        Duration timeout = options.timeout();
        String prefix = "host-session" + SESSIONS.computeIfAbsent(r, k -> new AtomicInteger()).incrementAndGet() + "/" + plan.fingerprint().substring(0, 16);
        Fingerprints.check(r, plan.name(), plan.fingerprint(), timeout);
        HostTransport asked = options.execution().hostTransport();
        Transport t = switch (asked) {
            case TCP -> TcpTransport.open(r, prefix, timeout);
            case SHARED_MEMORY -> SharedMemoryTransport.open(r, prefix, sections(plan), slotBytes(plan), timeout);
            case AUTO -> {
                try {
                    yield SharedMemoryTransport.open(r, prefix, sections(plan), slotBytes(plan), timeout);
                } catch (SharedMemoryTransport.Unavailable e) {
                    LOG.log(System.Logger.Level.INFO, "rank {0}: {1}; the collectives go over TCP", r.rank(), e.getMessage());
                    yield TcpTransport.open(r, prefix, timeout);
                }
            }
        };
        LOG.log(System.Logger.Level.DEBUG, "plan {0}: rank {1} of {2} reaches its peers through {3}", plan.name(), r.rank(), r.worldSize(), t.describe());
        return t;
    }

    /** Every group of the plan, the world's included, in the same order on every rank: one section of shared memory each. */
    static List<String> sections(Plan plan) {
        var names = new TreeSet<>(plan.groups().keySet());
        names.add(ProcessGroup.WORLD_NAME);
        return new ArrayList<>(names);
    }

    /**
     * The shared-memory slot: the largest contribution of the plan, in whole cache lines, at most
     * {@link SharedMemoryTransport#MAX_SLOT} (also where a contribution's size is known only at run time).
     */
    static long slotBytes(Plan plan) {
        long most = 64;
        for (Step s : plan.steps())
            for (Step.Collective c : s.collectives()) {
                PlanBuffer in = c.input();
                most = Math.max(most, in.shape().isStatic() ? in.shape().numel() * in.dtype().byteSize() : SharedMemoryTransport.MAX_SLOT);
            }
        return Math.min(SharedMemoryTransport.MAX_SLOT, Math.ceilDiv(most, 64) * 64);
    }
}
