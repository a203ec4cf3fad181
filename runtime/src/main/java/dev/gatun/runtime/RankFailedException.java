package dev.gatun.runtime;

/** A rank failed (threw, or timed out waiting for peers); the others stopped with this error instead of hanging. */
public final class RankFailedException extends GatunRuntimeException {
    private final int rank;

    public RankFailedException(int rank, String message, Throwable cause) {
        super(message, cause);
        this.rank = rank;
    }

    /** The rank that failed first. */
    public int rank() { return rank; }
}
