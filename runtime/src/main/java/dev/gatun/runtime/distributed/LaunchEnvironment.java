package dev.gatun.runtime.distributed;

import java.util.List;
import java.util.Map;

/**
 * Who this process is in a job, read once from the environment of whichever launcher started it, so Gatun ranks
 * start under gatun-run, {@code torchrun}, Slurm's {@code srun} or Open MPI's {@code mpirun} alike.
 *
 * <table>
 * <caption>Where each fact comes from, first match wins</caption>
 * <tr><th>launcher</th><th>rank / world</th><th>local rank / ranks on this host</th><th>store address</th></tr>
 * <tr><td>gatun-run, torchrun, by hand</td><td>RANK / WORLD_SIZE</td><td>LOCAL_RANK / LOCAL_WORLD_SIZE</td>
 *     <td rowspan="3">GATUN_RENDEZVOUS, else MASTER_ADDR and MASTER_PORT + 1 (torchrun's own store holds
 *     MASTER_PORT)</td></tr>
 * <tr><td>Slurm</td><td>SLURM_PROCID / SLURM_NTASKS</td><td>SLURM_LOCALID / SLURM_NTASKS_PER_NODE</td></tr>
 * <tr><td>Open MPI</td><td>OMPI_COMM_WORLD_RANK / _SIZE</td><td>OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE</td></tr>
 * </table>
 *
 * <p>The store authenticates every connection with GATUN_SECRET, which no launcher provides: export it before the
 * launcher starts the ranks ({@code export GATUN_SECRET=$(openssl rand -hex 32)}; srun passes the environment on,
 * mpirun needs {@code -x GATUN_SECRET}). gatun-run makes one itself.
 *
 * @param source         which launcher's variables were read ("gatun", "slurm", "openmpi")
 * @param localWorldSize ranks on this host; null where the launcher does not say
 * @param address        {@code host:port} of the rendezvous store; null where none is given
 */
public record LaunchEnvironment(String source, int rank, int worldSize, int localRank, Integer localWorldSize, String address) {

    /** The job as the launcher described it, or null where no launcher variables are set (a world of one). */
    public static LaunchEnvironment of(Map<String, String> env) {
        for (var names : LAUNCHERS) {
            if (env.get(names.rank()) == null && env.get(names.world()) == null) continue;
            int world = integer(env, names.world(), 1, null);
            int rank = integer(env, names.rank(), 0, null);
            if (rank >= world) throw new RendezvousException(names.rank() + "=" + rank + " must be below " + names.world() + "=" + world);
            int local = integer(env, names.localRank(), 0, 0);
            Integer localWorld = env.get(names.localWorld()) == null ? null : integer(env, names.localWorld(), 1, null);
            if (local >= (localWorld == null ? world : localWorld))
                throw new RendezvousException(names.localRank() + "=" + local + " must be below " + (localWorld == null
                        ? names.world() + "=" + world : names.localWorld() + "=" + localWorld));
            return new LaunchEnvironment(names.source(), rank, world, local, localWorld, address(env));
        }
        return null;
    }

    /** {@link #of(Map)} of this process's environment. */
    public static LaunchEnvironment current() { return of(System.getenv()); }

    static final String HOW = "start ranks with gatun-run, torchrun, srun or mpirun, or set RANK, LOCAL_RANK, WORLD_SIZE,"
            + " GATUN_RENDEZVOUS and GATUN_SECRET";

    private record Names(String source, String rank, String world, String localRank, String localWorld) {}

    private static final List<Names> LAUNCHERS = List.of(
            new Names("gatun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
            new Names("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
            new Names("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"));

    private static String address(Map<String, String> env) {
        String a = env.get(Rendezvous.GATUN_RENDEZVOUS);
        if (a != null && !a.isBlank()) return a.trim();
        String host = env.get("MASTER_ADDR");
        if (host == null || host.isBlank()) return null;
        int port = integer(env, "MASTER_PORT", 1, 29500);
        if (port >= 65535) throw new RendezvousException("MASTER_PORT=" + port + " leaves no port above it for Gatun's store; set GATUN_RENDEZVOUS");
        return host.trim() + ":" + (port + 1);
    }

    /** An integer variable of at least {@code min}; {@code otherwise} when unset (null: it must be set). */
    private static int integer(Map<String, String> env, String name, int min, Integer otherwise) {
        String v = env.get(name);
        if (v == null || v.isBlank()) {
            if (otherwise != null) return otherwise;
            throw new RendezvousException("environment variable " + name + " is not set (an integer); " + HOW);
        }
        // Slurm writes SLURM_NTASKS_PER_NODE as "4" or, on uneven nodes, "4(x2),3": the first count is this host's upper bound
        String t = v.trim().replaceFirst("\\(.*$", "").replaceFirst(",.*$", "");
        try {
            int i = Integer.parseInt(t);
            if (i < min) throw new RendezvousException("environment variable " + name + "=" + v + " must be at least " + min);
            return i;
        } catch (NumberFormatException e) {
            throw new RendezvousException("environment variable " + name + "='" + v + "' is not an integer");
        }
    }
}
