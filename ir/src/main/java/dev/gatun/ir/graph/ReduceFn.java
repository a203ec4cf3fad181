package dev.gatun.ir.graph;

/** Reductions over dimensions of one tensor. */
public enum ReduceFn {
    SUM, MEAN, MAX, MIN;

    /** Made once: lowering and fusion ask for it for every reduction of a graph. */
    private final String opName = name().toLowerCase(java.util.Locale.ROOT);

    public String opName() { return opName; }
}
