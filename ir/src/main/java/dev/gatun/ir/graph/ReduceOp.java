package dev.gatun.ir.graph;

/** How a collective combines the ranks' values. */
public enum ReduceOp {
    SUM, AVG, MAX, MIN;

    public String opName() { return name().toLowerCase(java.util.Locale.ROOT); }
}
