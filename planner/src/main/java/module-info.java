/** Fusion, ordering, memory planning and the executable plan. */
module dev.gatun.planner {
    requires transitive dev.gatun.ir;
    requires transitive dev.gatun.lowering;

    exports dev.gatun.planner;
    exports dev.gatun.planner.kernel;
    exports dev.gatun.planner.viz;
}
