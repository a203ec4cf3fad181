package dev.gatun.runtime;

import dev.gatun.runtime.distributed.LaunchEnvironment;
import dev.gatun.runtime.distributed.Rendezvous;

import java.util.Map;

/**
 * The ranks a compiled graph runs on, and which of them this process (or thread) drives: the one place the world
 * size enters Gatun. Made once, at the edge, and given to {@link CompileOptions}:
 * <ul>
 *   <li>{@link Simulated}: every rank in this process (the host backend's threads), or a world of one;</li>
 *   <li>{@link Launched}: this process is one rank of a world a launcher started (gatun-run, torchrun, srun,
 *   mpirun), as its environment says;</li>
 *   <li>{@link Local}: this thread is one rank of a world whose ranks are threads of this process and meet through a
 *   rendezvous ({@link dev.gatun.runtime.distributed.LocalWorld}).</li>
 * </ul>
 */
public sealed interface World {

    /** How many ranks. */
    int size();

    /** The ranks this process drives are all of them ({@link Simulated}), or just {@link #rank()}. */
    default boolean drivesEveryRank() { return this instanceof Simulated; }

    /** The rank this process or thread drives (0 for a simulated world). */
    int rank();

    /** Its index among the ranks of this host: which GPU it uses, with {@link #ranksPerGpu()}. */
    int localRank();

    /** How many ranks share one GPU (1 unless asked for). */
    int ranksPerGpu();

    /** The same world with {@code k} ranks on each GPU. */
    World withRanksPerGpu(int k);

    /** How the ranks meet: the local rendezvous, the launched job's store (connected on first use), none when simulated. */
    Rendezvous rendezvous();

    /** Every rank simulated in this process. */
    record Simulated(int size, int ranksPerGpu) implements World {
        public Simulated {
            if (size < 1) throw new GatunRuntimeException("a world needs at least one rank, not " + size);
            checkSharing(ranksPerGpu);
        }
        @Override public int rank() { return 0; }
        @Override public int localRank() { return 0; }
        @Override public Simulated withRanksPerGpu(int k) { return new Simulated(size, k); }
        @Override public Rendezvous rendezvous() { return null; }
    }

    /** This process is rank {@code job.rank()} of a world a launcher started; {@code ranksPerGpu} from GATUN_RANKS_PER_GPU. */
    record Launched(LaunchEnvironment job, int ranksPerGpu) implements World {
        public Launched { checkSharing(ranksPerGpu); }
        @Override public int size() { return job.worldSize(); }
        @Override public int rank() { return job.rank(); }
        @Override public int localRank() { return job.localRank(); }
        @Override public Launched withRanksPerGpu(int k) { return new Launched(job, k); }
        @Override public Rendezvous rendezvous() { return ProcessRendezvous.get(); }
    }

    /** This thread is one rank of a world of threads that meet through {@code rendezvous}. */
    record Local(Rendezvous rendezvous, int ranksPerGpu) implements World {
        public Local { checkSharing(ranksPerGpu); }
        @Override public int size() { return rendezvous.worldSize(); }
        @Override public int rank() { return rendezvous.rank(); }
        @Override public int localRank() { return rendezvous.localRank(); }
        @Override public Local withRanksPerGpu(int k) { return new Local(rendezvous, k); }
    }

    /** A world of {@code n} ranks, all simulated in this process. */
    static World simulated(int n) { return new Simulated(n, 1); }

    /** One rank of a world of threads meeting through {@code r}. */
    static World local(Rendezvous r) { return new Local(r, 1); }

    /**
     * A world of {@code n}: this process's rank of it where a launcher started this process as one rank of a world of
     * {@code n}, else {@code n} simulated ranks.
     */
    static World of(int n) {
        World env = fromEnvironment(System.getenv());
        return env instanceof Launched l && l.size() == n ? l : new Simulated(n, 1);
    }

    /** The world this process's environment describes: a launched rank, or a simulated world of one. */
    static World fromEnvironment(Map<String, String> env) {
        var job = LaunchEnvironment.of(env);
        if (job == null) return simulated(1);
        String k = env.get("GATUN_RANKS_PER_GPU");
        int perGpu;
        try {
            perGpu = k == null || k.isBlank() ? 1 : Integer.parseInt(k.trim());
        } catch (NumberFormatException e) {
            throw new GatunRuntimeException("environment variable GATUN_RANKS_PER_GPU='" + k + "' is not an integer");
        }
        return new Launched(job, perGpu);
    }

    private static void checkSharing(int k) {
        if (k < 1) throw new GatunRuntimeException("ranksPerGpu must be at least 1, not " + k);
    }

    /** The process's one connection to its launched job's rendezvous store, made on first use, closed at exit. */
    final class ProcessRendezvous {
        private static Rendezvous process;

        private ProcessRendezvous() {}

        static synchronized Rendezvous get() {
            if (process == null || process.isClosed()) {
                process = Rendezvous.fromEnvironment();
                Runtime.getRuntime().addShutdownHook(new Thread(process::close, "gatun-rendezvous-close"));
            }
            return process;
        }
    }
}
