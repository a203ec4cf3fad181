package dev.gatun.runtime.distributed;

/** What one rank of a {@link LocalWorld} does, given its rendezvous client. */
@FunctionalInterface
public interface RankBody {
    void run(Rendezvous rank) throws Exception;
}
