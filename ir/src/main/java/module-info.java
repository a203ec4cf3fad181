/** Gatun's IR: types, layouts, graphs, user ops and JSON. The JSON model stays internal. */
module dev.gatun.ir {

    exports dev.gatun.ir;
    exports dev.gatun.ir.graph;
    exports dev.gatun.ir.ops;
    exports dev.gatun.ir.viz;
    exports dev.gatun.ir.json to dev.gatun.runtime, dev.gatun.models;
}
