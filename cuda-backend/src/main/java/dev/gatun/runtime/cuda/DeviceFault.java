package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.PinnedHostBuffer;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * Where a kernel that stops a call on purpose says why, without {@code printf}. The first thread to find a bad value
 * claims a word in device memory, writes a record into page-locked host memory mapped into the GPU (what failed, the
 * step, four numbers), fences it out to the host and traps. The call then fails with a sticky CUDA error, after
 * which no device memory can be read; the record lies in host memory, so the failure's message can still say which
 * step stopped and why ("index 130000 at position 3 is outside the 128256 rows of the table").
 *
 * <p>Why not {@code printf}: a kernel that may call it needs a stack frame, and loading one makes the driver reserve
 * local memory for every thread the GPU can hold (67 MB on an H200, measured by {@code MemoryProbe}), which a model's
 * memory budget pays for a message that is never printed. These kernels need no stack at all.
 *
 * <p>One record per executable, made only where its plan has a step that can stop (index_select, gather, scatter_add,
 * expert_matmul, update_slice, attention, an uneven all_to_all: {@link SymmetricAllToAll}, a kernel that reads an
 * index_select's table through its indices).
 */
final class DeviceFault implements AutoCloseable {
    /** What a kernel includes: the record's layout and the one function that fills it and traps. */
    static final String SOURCE = """
            #ifndef GATUN_FAULT_DEFINED
            #define GATUN_FAULT_DEFINED
            struct gatun_fault { int code; int step; long long v[4]; };
            // the first caller on the GPU writes the record (host memory, mapped), fences it out and traps; the others wait
            // (at most about 0.1 s) until the record is out before they trap: a trap ends the whole grid at once, so a thread
            // that trapped first would end the writer too, before its record left the GPU
            __device__ __forceinline__ void gatun_fail(int* claim, volatile gatun_fault* rec, int code, int step,
                                                      long long a, long long b, long long c, long long d) {
                if (atomicCAS(claim, 0, 1) == 0) {
                    rec->v[0] = a; rec->v[1] = b; rec->v[2] = c; rec->v[3] = d; rec->step = step;
                    __threadfence_system();
                    rec->code = code;
                    __threadfence_system();
                } else {
                    for (int i = 0; i < (1 << 20) && rec->code == 0; i++) __nanosleep(100);
                }
                __trap();
            }
            #endif
            """;

    /** The record's codes, as the kernels write them. */
    static final int INDEX_SELECT = 1, UPDATE_SLICE = 2, ATTENTION = 3, INDEX_ALONG = 4, EXPERT = 5, ALL_TO_ALL = 6;
    static final long RECORD_BYTES = 48;

    private final PinnedHostBuffer record;
    private final DeviceBuffer claim;
    /** The index in the plan of each step that can stop, as the kernels report it. */
    private final Map<Step, Integer> index = new IdentityHashMap<>();

    /** The record and claim word for {@code plan}'s steps; the claim is cleared on {@code stream}, before any of its kernels. */
    DeviceFault(Device device, Plan plan, dev.gatun.cuda.Stream stream) {
        var steps = plan.steps();
        for (int i = 0; i < steps.size(); i++) if (canStop(steps.get(i))) index.put(steps.get(i), i);
        this.record = device.allocatePinned(RECORD_BYTES);
        DeviceBuffer word = null;
        try {
            record.segment().fill((byte) 0);
            word = device.allocate(4);
            word.memsetAsync(0, stream);
        } catch (RuntimeException e) {
            if (word != null) word.close();
            record.close();
            throw e;
        }
        this.claim = word;
    }

    /** Whether the plan has a step whose kernel can stop the call on purpose (and so needs a record). */
    static boolean needed(Plan plan) { return plan.steps().stream().anyMatch(DeviceFault::canStop); }

    private static boolean canStop(Step s) {
        return s instanceof Step.OpCall o && o.spec().checksValues() || s instanceof Step.UpdateSlices || s instanceof Step.UpdateAttention
                || s instanceof Step.Collective c && c.uneven() || s instanceof Step.Launch l && l.kernel().gathers()
                || s instanceof Step.JoinedAllToAll j && j.members().stream().anyMatch(Step.Collective::uneven);
    }

    /** The device address of the claim word, the kernels' first fault argument. */
    long claim() { return claim.address(); }

    /** The address of the record (host memory, mapped: the same address on the device), the second. */
    long record() { return record.address(); }

    /** The step's index in the plan, the third. */
    /** Where a kernel reports a bad index or id: this record's claim word and record, and plan step {@code s}'s number. */
    record Site(long claim, long record, int step) {}

    /** The {@link Site} of step {@code s}. */
    Site site(Step s) { return new Site(claim(), record(), step(s)); }

    int step(Step s) {
        Integer i = index.get(s);
        if (i == null) throw new IllegalStateException("step " + s.format() + " is not one that can stop a call");
        return i;
    }

    /** What stopped the last call, naming its step, or null where no kernel of this plan wrote the record. */
    String describe(Plan plan) { return describe(record.segment(), plan); }

    /** {@link #describe(Plan)} from the record's bytes (a separate function so it is tested without a GPU). */
    static String describe(MemorySegment rec, Plan plan) {
        int code = rec.get(ValueLayout.JAVA_INT, 0), step = rec.get(ValueLayout.JAVA_INT, 4);
        if (code == 0) return null;
        long a = rec.get(ValueLayout.JAVA_LONG, 8), b = rec.get(ValueLayout.JAVA_LONG, 16), c = rec.get(ValueLayout.JAVA_LONG, 24),
                member = rec.get(ValueLayout.JAVA_LONG, 32);
        Step s = step >= 0 && step < plan.steps().size() ? plan.steps().get(step) : null;
        // a batch of updates names the member that stopped (the kernel records its index)
        if (s instanceof Step.UpdateSlices batch && member >= 0 && member < batch.members().size()) s = batch.members().get((int) member).call();
        // joined all_to_alls: the kernel records the part that refused its counts in the kind (kind + 256 x part)
        if (code == ALL_TO_ALL && s instanceof Step.JoinedAllToAll j && a >= 256 && a / 256 < j.members().size()) {
            s = j.members().get((int) (a / 256));
            a %= 256;
        } else if (code == ALL_TO_ALL && s instanceof Step.JoinedAllToAll j) s = j.first();
        // an attention with its caches' update: the attention's kernel checks the position for both
        if (s instanceof Step.UpdateAttention u) s = u.attention().call();
        // a kernel's launch prints its fusion notes on lines of their own: its first line names it
        String format = s == null ? null : s instanceof Step.Launch ? s.format().lines().findFirst().orElse("") : s.format();
        String where = s != null ? "step " + step + " (" + format.replaceFirst("\\s+#.*", "") + ")" : "step " + step;
        return switch (code) {
            case INDEX_SELECT -> where + " stopped the call: " + gathering(s, member) + "index " + a + " at position " + b + " of the indices is outside the " + c
                    + " rows of the table (valid: 0 to " + (c - 1) + ")";
            case UPDATE_SLICE -> where + " stopped the call: position " + a + " puts the update's " + b + " elements outside the " + c
                    + " of the target along its dimension (valid: 0 to " + (c - b) + ")";
            case ATTENTION -> where + " stopped the call: position " + a + " is outside the " + b + " positions of the cache (valid: 0 to " + (b - 1) + ")";
            // gather and scatter_add, in the words of their host refusal (Gather.outOfRange)
            case INDEX_ALONG -> where + " stopped the call: index " + a + " at position " + b + coordinates(s, b) + " of the index is outside the " + c
                    + " elements of dimension " + member + " of x" + (c == 0 ? " (it has none)" : " (valid: 0 to " + (c - 1) + ")");
            // expert_matmul: the id, its position in the ids, the experts, the choices a token (k), in its host refusal's words
            case EXPERT -> where + " stopped the call: " + dev.gatun.ir.ops.ExpertMatmul.outOfRange(a, b, member, c);
            // an uneven all_to_all's counts (SymmetricAllToAll): what AllToAllCounts refuses, the members numbered in the group
            case ALL_TO_ALL -> where + " stopped the call: " + allToAll(s, a, b, c, member);
            default -> where + " stopped the call (fault code " + code + ")";
        };
    }

    /**
     * An uneven all_to_all's refusal from the record: {@code kind} 1 a negative count (sender, count, receiver), 2 a
     * sender's counts past its rows (sender, total, rows), 3 a receiver's rows past the capacity (receiver, total,
     * capacity), members by their number in the step's group; in {@code AllToAllCounts}' words. Nothing was moved.
     */
    static String allToAll(Step s, long kind, long x, long y, long z) {
        String group = s instanceof Step.Collective c ? " of group \"" + c.call().group() + "\"" : "";
        return switch ((int) kind) {
            case 1 -> "member " + x + group + " sends " + y + " rows to member " + z + "; a row count is never negative (nothing was moved)";
            case 2 -> "member " + x + group + "'s counts add up to " + total(y) + " rows, but its input has " + z + "; send at most the rows it holds"
                    + " (nothing was moved)";
            case 3 -> "member " + x + group + " would receive " + total(y) + " rows but the capacity is " + z + " rows; raise the capacity of"
                    + " allToAll(group, counts, capacity) to the most rows a rank may receive (nothing is truncated; nothing was moved)";
            default -> "all_to_all refused its row counts (kind " + kind + ")";
        };
    }

    private static String total(long t) { return t == Long.MAX_VALUE ? "at least " + Long.MAX_VALUE : Long.toString(t); }

    /**
     * "kernel K, which reads OP through its indices: " where step {@code s} is a kernel that gathers ({@link
     * KernelScope#gathers}: {@code which} numbers its gather), as the host interpreter says it; "" for index_select's own
     * kernel.
     */
    private static String gathering(Step s, long which) {
        if (!(s instanceof Step.Launch l) || !l.kernel().gathers()) return "";
        var gathers = KernelScope.gathersOf(l.kernel());
        String op = which >= 0 && which < gathers.size() ? gathers.get((int) which).op() : "an index_select";
        return "kernel " + l.kernel().name() + ", which reads " + op + " through its indices: ";
    }

    /** " [i, j]": position {@code k}'s coordinates in the index (an op's second input) where its shape is static; else "". */
    private static String coordinates(Step s, long k) {
        if (!(s instanceof Step.OpCall o) || o.inputs().size() < 2 || !o.input(1).shape().isStatic()) return "";
        long[] shape = o.input(1).shape().sizes();
        long[] at = new long[shape.length];
        for (int d = shape.length - 1; d >= 0; d--) {
            if (shape[d] == 0) return "";
            at[d] = k % shape[d];
            k /= shape[d];
        }
        return " " + java.util.Arrays.toString(at);
    }

    @Override public void close() {
        claim.close();
        record.close();
    }
}
