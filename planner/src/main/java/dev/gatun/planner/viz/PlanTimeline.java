package dev.gatun.planner.viz;

import dev.gatun.ir.TensorType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The liveness of a plan's placed buffers over time, as the planner decided it ({@link Plan#slots()}): the data a
 * picture of the plan ({@link PlanSvg}) draws.
 *
 * <p>Time is counted in <em>operations</em>: the steps that do work (copy-ins, kernel launches, collectives,
 * matrix products, user-op calls and barriers), numbered from 0 in plan order. A buffer is live from the
 * operation that first writes it to its last use (a read by a kernel, collective, matmul or user op, or a
 * copy-in). Graph outputs live to the end of the call; constants and path-2 inputs are persistent. A slot of a
 * communication pool stays live until every rank has finished reading it: until the first collective of its
 * group that ends with a barrier (or an explicit barrier) at or after the last read by a peer.
 *
 * @param operations the operations, in order
 * @param boxes      one box per {@link Step.Place} step, in plan order
 * @param dynamic    buffers allocated per call ({@link Step.AllocDynamic}); they live in no pool
 */
public record PlanTimeline(List<Operation> operations, List<Box> boxes, List<Step.AllocDynamic> dynamic) {

    public PlanTimeline {
        operations = List.copyOf(operations);
        boxes = List.copyOf(boxes);
        dynamic = List.copyOf(dynamic);
    }

    /** One operation: its index on the time axis, its index in {@link Plan#steps()} and the step. */
    public record Operation(int index, int stepIndex, Step step) {
        /** A short label: the kernel's name, the collective's op and input, and so on. */
        public String label() { return step.label(); }
    }

    /** What a box holds, for colouring and the legend. */
    public enum Role { COMM, SYMM_INPUT, REGULAR, OUTPUT, CONSTANT }

    /**
     * One placed buffer: its slot (pool, offset, bytes) and its live range {@code [first, last]} of operations.
     *
     * @param reuses  the earlier occupant of the slot, or null
     * @param inPlace whether the buffer is written over its input by the same kernel
     */
    public record Box(String buffer, Pool pool, long offset, long bytes, TensorType type, int first, int last, Role role,
                      String reuses, boolean inPlace, String lifetime) {
        public boolean isReuse() { return reuses != null; }
    }

    /** The liveness of every placed buffer of {@code plan}: its slots ({@link Plan#slots()}) on the operations' time axis. */
    public static PlanTimeline of(Plan plan) {
        var steps = plan.steps();
        var ops = new ArrayList<Operation>();
        int[] atOrBefore = new int[steps.size()], atOrAfter = new int[steps.size()];
        for (int i = 0; i < steps.size(); i++) {
            if (isOperation(steps.get(i))) ops.add(new Operation(ops.size(), i, steps.get(i)));
            atOrBefore[i] = ops.size() - 1;
        }
        for (int i = steps.size() - 1, next = ops.size() - 1; i >= 0; i--) {
            if (isOperation(steps.get(i))) next = atOrBefore[i];
            atOrAfter[i] = next;
        }
        int last = Math.max(ops.size() - 1, 0);
        var outputs = new HashSet<PlanBuffer>();
        for (PlanBuffer o : plan.outputs().values()) outputs.add(o.storage());

        var boxes = new ArrayList<Box>();
        for (Plan.Slot s : plan.slots()) {
            Pool pool = plan.pool(s.pool());
            int first = Math.max(0, atOrAfter[s.first()]);
            int end;
            Role role;
            String lifetime;
            switch (pool.kind()) {
                case CONSTANT -> { first = 0; end = last; role = Role.CONSTANT; lifetime = "persistent (constant, written once per session)"; }
                case SYMM_INPUTS -> { end = last; role = Role.SYMM_INPUT; lifetime = "persistent (path-2 input: the next call's copy_in overwrites it)"; }
                case COMM -> {
                    int local = Math.max(first, atOrBefore[s.localLast()]);
                    int cross = s.crossRankLast() < 0 ? -1 : atOrBefore[s.crossRankLast()];
                    end = Math.max(local, cross);
                    role = Role.COMM;
                    lifetime = cross > local
                            ? "cross-rank: free once every rank passed the barrier of operation " + cross
                            : cross >= 0 ? "cross-rank: freed by the trailing barrier of operation " + cross : "local";
                }
                default -> {
                    boolean out = outputs.contains(s.buffer());
                    end = out ? last : Math.max(first, atOrBefore[s.localLast()]);
                    role = out ? Role.OUTPUT : Role.REGULAR;
                    lifetime = out ? "graph output: live to the end of the call" : "until its last read";
                }
            }
            boxes.add(new Box(s.buffer().name(), pool, s.offset(), s.bytes(), s.buffer().type(), Math.min(first, last), Math.max(end, Math.min(first, last)),
                    role, s.reuses(), s.inPlace(), lifetime));
        }
        var dynamic = new ArrayList<Step.AllocDynamic>();
        for (Step st : steps) if (st instanceof Step.AllocDynamic d) dynamic.add(d);
        return new PlanTimeline(ops, boxes, dynamic);
    }

    /** Boxes grouped by pool, in the plan's pool order. */
    public Map<Pool, List<Box>> byPool(List<Pool> pools) {
        var m = new LinkedHashMap<Pool, List<Box>>();
        for (Pool p : pools) m.put(p, new ArrayList<>());
        for (Box b : boxes) m.computeIfAbsent(b.pool(), k -> new ArrayList<>()).add(b);
        return m;
    }

    /** Steps that do work (on the device or across ranks) are operations; the plan's bookkeeping is not. */
    static boolean isOperation(Step s) { return s.isDeviceWork(); }
}
