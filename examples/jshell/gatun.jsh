// Gatun's jshell start-up file: ./gatun-shell loads it after jshell's DEFAULT imports. It imports the DSL
// and the runtime, and the top-level helpers of dev.gatun.examples.jshell.Repl (compiled with the examples,
// so start-up stays fast), so that this works at the first prompt:
//
//   var x = input("x", F32, 4, 4)                 // adds to the graph under construction, g
//   output("y", x.add(1).allReduce(SUM))
//   compile(2)                                    // the last session: session, plan(), explain()
//   run(r -> Map.of("x", full(F32, r + 1, 4, 4)))   // one input map per rank; one output map per rank
//   random(F32, 4, 4)                             // a 4x4 array; random(F32, seed(7), 4, 4) fixes the seed
//
// Type help() for the list, with every helper's arguments.
import dev.gatun.dsl.*;
import dev.gatun.runtime.*;
import dev.gatun.ir.DType;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.ir.Algorithm;
import dev.gatun.planner.Plan;
import static dev.gatun.ir.DType.*;
import static dev.gatun.ir.graph.ReduceOp.*;
import static dev.gatun.examples.jshell.Repl.*;
