package dev.gatun.runtime.host;

import dev.gatun.ir.graph.HostTensor;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;

/**
 * Calls a user op's host implementation, or a registered op's host body ({@link dev.gatun.ir.graph.OpSpec#host}), with
 * views of its (row-major) inputs and outputs; a registered op that checks its values is asked first
 * ({@link dev.gatun.ir.graph.OpSpec#refusal}), and a refusal fails the call naming the step.
 */
final class HostUserOps {
    private HostUserOps() {}

    static void run(HostExecutable.RankRun r, Step.CallUserOp u) {
        if (!u.op().hasHostImplementation())
            throw new GatunRuntimeException("user op '" + u.op().name() + "' has no host implementation, so the host backend cannot run it");
        var ins = new ArrayList<HostTensor>();
        for (PlanBuffer b : u.inputs()) ins.add(view(r, b));
        var outs = new ArrayList<HostTensor>();
        for (PlanBuffer b : u.outputs()) outs.add(view(r, b));
        // a user op that reads peers' symmetric inputs relies on the barrier the planner places after it
        u.op().host().run(java.util.Collections.unmodifiableList(ins), java.util.Collections.unmodifiableList(outs), r.rank(),
                r.executable().plan().worldSize());
    }

    static void run(HostExecutable.RankRun r, Step.OpCall s) {
        var ins = new ArrayList<HostTensor>();
        for (PlanBuffer b : s.inputs()) ins.add(view(r, b));
        var outs = new ArrayList<HostTensor>();
        for (PlanBuffer b : s.outputs()) outs.add(view(r, b));
        if (s.spec().checksValues()) {
            String why = s.spec().refusal(java.util.Collections.unmodifiableList(ins), s.attrs());
            if (why != null) throw new GatunRuntimeException(s.format().strip() + ": " + why);
        }
        s.spec().host(java.util.Collections.unmodifiableList(ins), java.util.Collections.unmodifiableList(outs), s.attrs());
    }

    private static NDArray view(HostExecutable.RankRun r, PlanBuffer b) {
        return NDArray.wrap(b.dtype(), r.segment(b), b.shape().sizes(r.env()));
    }
}
