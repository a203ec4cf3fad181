package dev.gatun.planner.viz;

import dev.gatun.ir.TensorType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The liveness of a plan's placed buffers over time, reconstructed from its steps: the data a picture of the
 * plan ({@link PlanSvg}) draws.
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
        public String label() {
            return switch (step) {
                case Step.Launch l -> l.kernel().name();
                case Step.Collective c -> c.call().opName() + "(" + c.input().name() + ")";
                case Step.CollectiveBatch b -> b.first().call().opName() + "×" + b.members().size() + "(" + b.first().input().name() + ", ...)";
                case Step.Matmul m -> "matmul(" + m.a().name() + ", " + m.b().name() + ")";
                case Step.CallUserOp u -> u.op().name();
                case Step.CopyIn c -> "copy_in(\"" + c.input() + "\")";
                case Step.Barrier b -> "barrier(\"" + b.group() + "\")";
                default -> step.format();
            };
        }
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

    /** Reconstructs the liveness of every placed buffer of {@code plan}. */
    public static PlanTimeline of(Plan plan) {
        var steps = plan.steps();
        var ops = new ArrayList<Operation>();
        for (int i = 0; i < steps.size(); i++)
            if (isOperation(steps.get(i))) ops.add(new Operation(ops.size(), i, steps.get(i)));
        int n = ops.size();
        int last = Math.max(n - 1, 0);

        var firstWrite = new HashMap<String, Integer>();
        var lastUse = new HashMap<String, Integer>();
        var lastPeerRead = new HashMap<String, Integer>();
        var freedBy = new HashMap<String, Integer>();
        for (Operation op : ops) {
            int t = op.index();
            for (PlanBuffer w : writes(op.step())) {
                String s = w.storage().name();
                firstWrite.putIfAbsent(s, t);
                lastUse.merge(s, t, Math::max);
            }
            for (PlanBuffer r : reads(op.step())) lastUse.merge(r.storage().name(), t, Math::max);
            for (PlanBuffer r : peerReads(op.step())) lastPeerRead.merge(r.storage().name(), t, Math::max);
            for (Step.Collective c : collectives(op.step()))
                if (c.freed() != null) for (String f : c.freed().split(",\\s*")) freedBy.merge(storage(plan, f.strip()), t, Math::max);
        }
        var outputs = new HashSet<String>();
        for (PlanBuffer o : plan.outputs().values()) outputs.add(o.storage().name());

        var boxes = new ArrayList<Box>();
        var dynamic = new ArrayList<Step.AllocDynamic>();
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            if (s instanceof Step.AllocDynamic d) { dynamic.add(d); continue; }
            if (!(s instanceof Step.Place p)) continue;
            Pool pool = plan.pool(p.pool());
            String name = p.buffer().name();
            int nextOp = nextOperation(ops, i);
            int first, end;
            Role role;
            String lifetime;
            switch (pool.kind()) {
                case CONSTANT -> { first = 0; end = last; role = Role.CONSTANT; lifetime = "persistent (constant, written once per session)"; }
                case SYMM_INPUTS -> {
                    first = firstWrite.getOrDefault(name, nextOp);
                    end = last;
                    role = Role.SYMM_INPUT;
                    lifetime = "persistent (path-2 input: the next call's copy_in overwrites it)";
                }
                case COMM -> {
                    first = firstWrite.getOrDefault(name, nextOp);
                    int local = lastUse.getOrDefault(name, first);
                    int cross = crossRankEnd(ops, pool.group(), lastPeerRead.get(name), freedBy.get(name), last);
                    end = Math.max(local, cross);
                    role = Role.COMM;
                    lifetime = cross > local
                            ? "cross-rank: free once every rank passed the barrier of operation " + cross
                            : cross >= 0 ? "cross-rank: freed by the trailing barrier of operation " + cross : "local";
                }
                default -> {
                    first = firstWrite.getOrDefault(name, nextOp);
                    boolean out = outputs.contains(name);
                    end = out ? last : lastUse.getOrDefault(name, first);
                    role = out ? Role.OUTPUT : Role.REGULAR;
                    lifetime = out ? "graph output: live to the end of the call" : "until its last read";
                }
            }
            boxes.add(new Box(name, pool, p.offset(), p.bytes(), p.buffer().type(), Math.min(first, last), Math.max(end, Math.min(first, last)),
                    role, p.reuses(), p.inPlace(), lifetime));
        }
        return new PlanTimeline(ops, boxes, dynamic);
    }

    /** Boxes grouped by pool, in the plan's pool order. */
    public Map<Pool, List<Box>> byPool(List<Pool> pools) {
        var m = new LinkedHashMap<Pool, List<Box>>();
        for (Pool p : pools) m.put(p, new ArrayList<>());
        for (Box b : boxes) m.computeIfAbsent(b.pool(), k -> new ArrayList<>()).add(b);
        return m;
    }

    static boolean isOperation(Step s) {
        return s instanceof Step.CopyIn || s instanceof Step.Launch || s instanceof Step.Collective || s instanceof Step.CollectiveBatch || s instanceof Step.Matmul
                || s instanceof Step.CallUserOp || s instanceof Step.Barrier;
    }

    private static int nextOperation(List<Operation> ops, int stepIndex) {
        for (Operation o : ops) if (o.stepIndex() > stepIndex) return o.index();
        return Math.max(ops.size() - 1, 0);
    }

    /**
     * The operation whose barrier frees a slot last read by a peer at {@code lastPeer}: the first collective of
     * {@code group} that ends with a barrier, or a barrier of the group, at or after it; -1 when no peer reads it.
     */
    private static int crossRankEnd(List<Operation> ops, String group, Integer lastPeer, Integer freed, int last) {
        if (lastPeer == null) return freed == null ? -1 : freed;
        int end = last;
        for (int t = lastPeer; t < ops.size(); t++) {
            Step s = ops.get(t).step();
            boolean barrier = s instanceof Step.Barrier b && group.equals(b.group());
            for (Step.Collective c : collectives(s)) barrier |= group.equals(c.call().group()) && c.call().algorithm().endsWithBarrier();
            if (barrier) { end = t; break; }
        }
        return freed == null ? end : Math.max(end, freed);
    }

    private static String storage(Plan plan, String name) {
        try {
            return plan.buffer(name).storage().name();
        } catch (IllegalArgumentException e) {
            return name;
        }
    }

    private static List<Step.Collective> collectives(Step s) {
        return switch (s) {
            case Step.Collective c -> List.of(c);
            case Step.CollectiveBatch b -> b.members();
            default -> List.of();
        };
    }

    private static List<PlanBuffer> writes(Step s) {
        return switch (s) {
            case Step.Launch l -> l.kernel().outputs();
            case Step.Collective c -> c.copiesIn() ? List.of(c.input(), c.output()) : List.of(c.output());
            case Step.CollectiveBatch b -> b.members().stream().map(Step.Collective::output).toList();
            case Step.Matmul m -> List.of(m.output());
            case Step.CallUserOp u -> u.outputs();
            case Step.CopyIn c -> List.of(c.buffer());
            default -> List.of();
        };
    }

    private static List<PlanBuffer> reads(Step s) {
        return switch (s) {
            case Step.Launch l -> l.kernel().inputs();
            case Step.Collective c -> List.of(c.input());
            case Step.CollectiveBatch b -> b.members().stream().map(Step.Collective::input).toList();
            case Step.Matmul m -> List.of(m.a(), m.b());
            case Step.CallUserOp u -> u.inputs();
            case Step.CopyIn c -> List.of(c.buffer());
            default -> List.of();
        };
    }

    /** Inputs read by peers: symmetric collectives' inputs, and user-op inputs declared symmetric. */
    private static List<PlanBuffer> peerReads(Step s) {
        return switch (s) {
            case Step.Collective c -> c.call().algorithm().isSymmetric() ? List.of(c.input()) : List.of();
            case Step.CollectiveBatch b -> reads(b);
            case Step.CallUserOp u -> {
                var out = new ArrayList<PlanBuffer>();
                for (int i = 0; i < u.inputs().size(); i++) if (u.op().requiresSymmetric(i)) out.add(u.inputs().get(i));
                yield out;
            }
            default -> List.of();
        };
    }
}
