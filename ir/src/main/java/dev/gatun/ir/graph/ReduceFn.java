package dev.gatun.ir.graph;

/** Reductions over dimensions of one tensor. */
public enum ReduceFn {
    SUM, MEAN, MAX, MIN;

    public String opName() { return name().toLowerCase(java.util.Locale.ROOT); }
}
