package dev.gatun.runtime.host;

import dev.gatun.ir.graph.HostTensor;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;

/**
 * Calls a user op's host implementation, or a registered op's host body ({@link dev.gatun.ir.graph.OpSpec#host}), with
 * views of its (row-major) inputs and outputs (an input read strided is gathered into a packed copy; an op that writes in
 * place finds its output 0 over its input 0, the same memory); a registered op that checks its values is asked first
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
        for (PlanBuffer b : s.inputs()) ins.add(packed(r, b));
        var outs = new ArrayList<HostTensor>();
        for (PlanBuffer b : s.outputs()) outs.add(view(r, b));
        if (s.spec().checksValues()) {
            String why = s.spec().refusal(java.util.Collections.unmodifiableList(ins), s.attrs());
            if (why != null) throw new GatunRuntimeException(s.format().strip() + ": " + why);
        }
        s.spec().host(java.util.Collections.unmodifiableList(ins), java.util.Collections.unmodifiableList(outs), s.attrs());
    }

    /**
     * An input as the body reads it, row-major: a view of its memory, or, for an input the op reads strided
     * ({@link dev.gatun.ir.graph.OpSpec#readsStrided}: update_slice's update where it lies), a packed copy of it.
     */
    private static NDArray packed(HostExecutable.RankRun r, PlanBuffer b) {
        long[] shape = b.shape().sizes(r.env()), strides = KernelInterpreter.eval(b.strides(), r.env());
        long run = 1;
        boolean rowMajor = true;
        for (int d = shape.length - 1; d >= 0; d--) {
            rowMajor &= shape[d] == 1 || strides[d] == run;
            run *= shape[d];
        }
        return rowMajor ? view(r, b) : NDArray.gather(r.segment(b), b.dtype(), shape, 0, strides);
    }

    private static NDArray view(HostExecutable.RankRun r, PlanBuffer b) {
        return NDArray.wrap(b.dtype(), r.segment(b), b.shape().sizes(r.env()));
    }
}
