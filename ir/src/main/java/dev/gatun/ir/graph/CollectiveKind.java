package dev.gatun.ir.graph;

/** Collectives over a process group. */
public enum CollectiveKind {
    ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST;

    public String opName() { return name().toLowerCase(java.util.Locale.ROOT); }
}
