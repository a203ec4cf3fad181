/**
 * Lowering, the compiler's first step after the graph: {@code Lowering.lower} turns a graph of {@code dev.gatun.ir}
 * into the lowered IR (buffers, extern calls, expressions), choosing each collective's algorithm and realization
 * path. The planner reads its output; backends never do.
 */
module dev.gatun.lowering {
    requires transitive dev.gatun.ir;

    exports dev.gatun.lowering;
}
