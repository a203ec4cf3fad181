package dev.gatun.planner;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.List;
import java.util.StringJoiner;

/**
 * One step of an executable {@link Plan}. Each prints as one line close to the code a backend runs, and every
 * backend runs exactly these steps in this order (see {@code dev.gatun.runtime.spi.StepLoop}). Steps refer to
 * buffers through the plan's buffer table ({@link PlanBuffer}), never by name. Only the planner makes steps, from a
 * graph it has checked: an {@code IllegalArgumentException} from a step's constructor is a planner bug, not a user's error.
 */
public sealed interface Step {

    /** Whether a CUDA graph may capture this step (false for host-side bookkeeping). */
    default boolean isDeviceWork() { return false; }

    String format();

    /**
     * What kind of work this is, for tables and profiles ("kernel", "matmul", "collective", "argmax", ...): a joined
     * launch is of the kind of the work it is built around, a step of a registered op of the op's name.
     */
    String kind();

    /**
     * A short label for pictures (a timeline's row): by default the kind and the buffers read, as
     * {@code argmax(buf3)}; joined launches and steps whose reads say too much or too little say more or less.
     */
    default String label() { return kind() + "(" + names(reads()) + ")"; }

    /** The plan buffers this step copies a caller's tensor into (path 2): a copy_in's, a collective's that copies in; else none. */
    default List<PlanBuffer> copiedIn() { return List.of(); }

    /** The collectives this step runs: itself, a batch's members, a fused launch's collective; none for other steps. */
    default List<Collective> collectives() { return List.of(); }

    /**
     * The steps this one runs, in the order a backend without its joint kernel runs them: a joined launch's members (a
     * batch, a fused collective's prologue, collective and epilogue, a product and its epilogues, ...), else this step.
     */
    default List<Step> parts() { return List.of(this); }

    /**
     * The buffers this step reads, as it names them (views as views): a joined launch's, its parts'. Bookkeeping steps
     * read nothing; a path-2 copy reads the caller's tensor, which is no buffer of the plan.
     */
    default List<PlanBuffer> reads() { return isOwnPart() ? List.of() : joined(Step::reads); }

    /**
     * The buffers this step writes, as it names them: a joined launch's, its parts'. A collective writes what it names;
     * a barrier-free one also writes its members' rotating slots, which are no buffers of the plan.
     */
    default List<PlanBuffer> writes() { return isOwnPart() ? List.of() : joined(Step::writes); }

    /** Whether this step is its only part (asks {@link #parts} once: a step's default parts are a new list). */
    private boolean isOwnPart() {
        var parts = parts();
        return parts.size() == 1 && parts.getFirst() == this;
    }

    private List<PlanBuffer> joined(java.util.function.Function<Step, List<PlanBuffer>> of) {
        var out = new java.util.ArrayList<PlanBuffer>();
        for (Step p : parts()) out.addAll(of.apply(p));
        return List.copyOf(out);
    }

    record AllocPool(Pool pool) implements Step {
        @Override public String format() { return pool.declaration(); }
        @Override public String kind() { return "pool"; }
    }

    /** Places a storage at {@code offset} of {@code pool}; {@code reuses} names the earlier occupant of its slot. */
    record Place(PlanBuffer buffer, String pool, long offset, long bytes, String reuses, boolean inPlace) implements Step {
        @Override public String kind() { return "place"; }
        @Override public String format() {
            var j = new StringJoiner(",", "[", "]");
            buffer.strides().forEach(s -> j.add(s.toString()));
            var notes = new StringJoiner("; ", "   # ", "").setEmptyValue("");
            if (!buffer.parts().isEmpty()) notes.add(catNote(buffer));
            if (reuses != null) notes.add(inPlace ? "reuse: in place of " + reuses : "reuse of " + reuses + "'s slot");
            return buffer.name() + " = " + pool + ".at(" + offset + ", " + buffer.type() + " strides " + j + ")" + notes;
        }
    }

    /** What a concatenation's storage holds: "cat on dim 0 of buf2 [0:4], buf7 [4:8] (copy: x is a graph input)". */
    private static String catNote(PlanBuffer b) {
        var j = new StringJoiner(", ");
        b.parts().forEach(p -> j.add(p.describe()));
        return "cat on dim " + b.parts().getFirst().dim() + " of " + j;
    }

    /** Where the outputs of a step that are parts of a concatenation go: "   # buf2 into buf9[:, 0:4]", or nothing. */
    static String partNotes(List<PlanBuffer> outputs) {
        var j = new StringJoiner("; ", "   # ", "").setEmptyValue("");
        for (PlanBuffer b : outputs) {
            var p = b.part();
            if (p != null) j.add(b.name() + " into " + p.range() + (p.copied() == null ? "" : ", a copy: " + p.copied()));
        }
        return j.toString();
    }

    /** A buffer whose size depends on symbols: allocated for each call once the symbols are bound. */
    record AllocDynamic(PlanBuffer buffer) implements Step {
        @Override public String kind() { return "alloc"; }
        @Override public String format() {
            return buffer.name() + " = alloc_dynamic(" + buffer.type() + ")   # symbolic size: " + buffer.shape().symNumel() + " elements";
        }
    }

    /** Path 2: copies the caller's tensor into the input's persistent symmetric buffer (async DMA copy on a GPU). */
    record CopyIn(PlanBuffer buffer) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> writes() { return List.of(buffer); }
        @Override public List<PlanBuffer> copiedIn() { return List.of(buffer); }
        @Override public String kind() { return "copy_in"; }
        @Override public String label() { return "copy_in(\"" + input() + "\")"; }
        public String input() { return buffer.input(); }
        @Override public String format() { return "copy_in(\"" + buffer.input() + "\") -> " + buffer.name() + "   # path 2: async copy into symmetric memory"; }
    }

    /** A fused kernel; {@code notes} explain fusion's decisions about it (a reordered loop, a join not taken). */
    record Launch(Kernel kernel, List<String> notes) implements Step {
        public Launch { notes = List.copyOf(notes); }
        public Launch(Kernel kernel) { this(kernel, List.of()); }

        /** This launch with {@code note} added to its notes. */
        public Launch withNote(String note) {
            var all = new java.util.ArrayList<>(notes);
            all.add(note);
            return new Launch(kernel, all);
        }

        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> reads() { return kernel.inputs(); }
        @Override public List<PlanBuffer> writes() { return kernel.outputs(); }
        @Override public String kind() { return "kernel"; }
        @Override public String label() { return kernel.name(); }
        @Override public String format() {
            var sb = new StringBuilder("kernel " + kernel.name() + "(" + names(kernel.inputs()) + ") -> " + names(kernel.outputs()) + "   # " + kernel.traffic()
                    + partNotes(kernel.outputs()).replace("   # ", "; "));
            for (String n : notes) sb.append("\n    # ").append(n);
            return sb.toString();
        }
    }

    /** What a collective computes and how: its kind, reduction, group, root (broadcast) and algorithm. */
    record CollectiveCall(CollectiveKind kind, ReduceOp reduceOp, String group, int root, Algorithm algorithm) {
        public String opName() { return kind.opName() + "." + algorithm.opName(); }
        String attributes() {
            return (reduceOp != null ? ", " + reduceOp.opName() : "") + (kind == CollectiveKind.BROADCAST ? ", root=" + root : "");
        }
    }

    /**
     * A collective. {@code freed} names the input whose slot is free on all ranks once its trailing barrier
     * passes. With {@code copiesIn} (the fused path-2 copy) the input is a path-2 input whose caller's tensor
     * the collective copies into its symmetric slot itself, before its first barrier, instead of a copy_in step.
     * {@code slots} is the rotating region of a barrier-free all-reduce (null for every other algorithm).
     * {@code counts} is an uneven all_to_all's i64 row counts per destination, read at run time (null for every
     * other collective): its output has the capacity's rows, the rows received packed in sender order, zero after them.
     */
    record Collective(PlanBuffer output, PlanBuffer input, PlanBuffer counts, CollectiveCall call, String freed, boolean copiesIn,
                      RotatingSlots slots) implements Step {
        public Collective {
            if ((slots != null) != (call.algorithm() == Algorithm.BARRIER_FREE))
                throw new IllegalArgumentException(call.opName() + ": rotating slots go with a barrier-free all-reduce, and only there");
            if (counts != null && call.kind() != CollectiveKind.ALL_TO_ALL)
                throw new IllegalArgumentException(call.opName() + ": row counts go with an all_to_all only");
        }

        /** Whether this is an all_to_all whose row counts are read at run time. */
        public boolean uneven() { return counts != null; }

        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> reads() { return counts == null ? List.of(input) : List.of(input, counts); }
        @Override public List<PlanBuffer> writes() { return List.of(output); }
        @Override public List<PlanBuffer> copiedIn() { return copiesIn ? List.of(input) : List.of(); }
        @Override public List<Collective> collectives() { return List.of(this); }
        @Override public String kind() { return "collective"; }
        @Override public String label() { return call.opName() + "(" + input.name() + ")"; }
        @Override public String format() {
            String note = slots != null ? "no barrier: pushes into the members' rotating slots " + slots.describe() + "; round = call mod 3"
                    : (copiesIn ? "copies input \"" + input.input() + "\" in (path 2, fused); " : "") + barrierNote(call, freed);
            String args = input.name() + (counts == null ? "" : ", " + counts.name() + ", capacity=" + output.shape().dim(0).size());
            return output.name() + " = " + call.opName() + "(" + args + call.attributes() + ", \"" + call.group() + "\")" + "   # " + note + receiveNote();
        }

        /**
         * How a symmetric all_to_all moves its rows, after a barrier that finds every member at the step (every backend
         * alike): an uneven one into a receive buffer in symmetric memory is pushed there by its senders, any other pulls
         * its part of every member's rows; nothing for the other collectives.
         */
        private String receiveNote() {
            if (call.kind() != CollectiveKind.ALL_TO_ALL || !call.algorithm().isSymmetric()) return "";
            if (counts == null || !output.isSymmetric() || output.placement() == null)
                return "; pull: after a starting barrier each member reads its part of every member's rows";
            var at = output.placement();
            return "; senders write into receive buffer " + output.name() + " (" + output.shape().dim(0).size() + " rows, the capacity) at "
                    + at.pool() + "+" + at.offset() + ", " + at.bytes() + " B, its slot no other buffer's from the group's barrier before"
                    + "; push: after a starting barrier each member writes its rows into the others' receive buffers";
        }

        Collective withCopiesIn() { return new Collective(output, input, counts, call, freed, true, slots); }

        /** The call as a part of a {@link JoinedAllToAll} prints it: no barrier of its own, how it moves its rows. */
        String partFormat() {
            String args = input.name() + (counts == null ? "" : ", " + counts.name() + ", capacity=" + output.shape().dim(0).size());
            String note = (copiesIn ? "copies input \"" + input.input() + "\" in (path 2, fused)" : "") + receiveNote();
            if (note.startsWith("; ")) note = note.substring(2);
            return output.name() + " = " + call.opName() + "(" + args + ", \"" + call.group() + "\")" + (note.isEmpty() ? "" : "   # " + note);
        }
    }

    /**
     * All_to_alls on symmetric memory of one group that the schedule places together and that do not depend on one
     * another (no part reads what another writes, no part's result placed over another's buffers), run as one step
     * named {@code name} ({@code CollectivePasses}): one starting barrier, every part's rows moved (each pushed or
     * pulled as it would be alone), one ending barrier. A peer may read a part's input and counts, and write a part's
     * receive buffer, from the starting barrier to the ending one, so every part's buffers are held for the whole step.
     * {@code why} says why the parts joined. A backend without a joint kernel runs the same protocol part after part
     * between the one barrier pair, which computes the same values.
     */
    record JoinedAllToAll(String name, List<Collective> members, String why) implements Step {
        public JoinedAllToAll {
            members = List.copyOf(members);
            if (members.size() < 2) throw new IllegalArgumentException(name + ": a joined all_to_all has two parts or more");
            String group = members.getFirst().call().group();
            for (Collective c : members)
                if (c.call().kind() != CollectiveKind.ALL_TO_ALL || !c.call().algorithm().isSymmetric() || !c.call().group().equals(group))
                    throw new IllegalArgumentException(name + ": only symmetric all_to_alls of one group join, not " + c.format());
        }

        public Collective first() { return members.getFirst(); }
        public String group() { return first().call().group(); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() { return List.copyOf(members); }
        @Override public List<Collective> collectives() { return members; }
        @Override public List<PlanBuffer> copiedIn() { return members.stream().flatMap(c -> c.copiedIn().stream()).toList(); }
        @Override public String kind() { return "collective"; }
        @Override public String label() { return name + ": " + first().call().opName() + "×" + members.size() + "(" + first().input().name() + ", ...)"; }

        /** The inputs (and counts) whose slots are free on all ranks once the ending barrier passes, as the parts name them. */
        public String freed() {
            var j = new StringJoiner(", ");
            for (Collective c : members) if (c.freed() != null) j.add(c.freed());
            return j.length() == 0 ? null : j.toString();
        }

        @Override public String format() {
            var sb = new StringBuilder("launch " + name + " {   # one launch: " + why + "; " + barrierNote(first().call(), freed()));
            for (Collective c : members) sb.append("\n    ").append(c.partFormat());
            return sb.append("\n  }").toString();
        }
    }

    /**
     * Consecutive one-shot all-reduces of one group, pool, dtype and operation, none reading another's result,
     * run as one launch with one pair of barriers for all of them; or barrier-free all-reduces, one launch, no barrier.
     */
    record CollectiveBatch(List<Collective> members) implements Step {
        public CollectiveBatch { members = List.copyOf(members); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() { return List.copyOf(members); }
        @Override public List<Collective> collectives() { return members; }
        @Override public String kind() { return "collective"; }
        @Override public String label() { return first().call().opName() + "×" + members.size() + "(" + first().input().name() + ", ...)"; }
        public Collective first() { return members.getFirst(); }
        @Override public String format() {
            var outs = new StringJoiner(", ");
            var ins = new StringJoiner(", ");
            var freed = new StringJoiner(", ");
            for (Collective c : members) {
                outs.add(c.output().name());
                ins.add(c.input().name());
                if (c.freed() != null) freed.add(c.freed());
            }
            CollectiveCall call = first().call();
            String note = call.algorithm() == Algorithm.BARRIER_FREE
                    ? "no barrier: pushes into the members' rotating slots " + String.join(", ", members.stream().map(c -> c.slots().describe()).toList()) + "; round = call mod 3"
                    : barrierNote(call, freed.length() == 0 ? null : freed.toString());
            return outs + " = " + call.opName() + "×" + members.size() + "(" + ins + call.attributes() + ", \"" + call.group() + "\")"
                    + "   # one launch for " + members.size() + "; " + note;
        }
    }

    /**
     * A collective with the pointwise kernel that writes its inputs ({@code prologue}) and the kernel that reads its
     * results ({@code epilogue}) taken in, as one launch named {@code name} ({@link CollectiveFusion}). Each block of
     * the launch computes the prologue's elements of its tile, reduces that tile (after the first barrier for a
     * one-shot, as the elements arrive for a barrier-free all-reduce) and finishes the epilogue on the same tile (after
     * the trailing barrier, if any): the same tile on every rank, so the per-block protocol holds. {@code prologue} or
     * {@code epilogue} may be null, not both. A backend without such a kernel runs the three in order, which computes
     * the same values.
     */
    record FusedCollective(String name, Launch prologue, Step collective, Launch epilogue) implements Step {
        public FusedCollective {
            if (!(collective instanceof Collective || collective instanceof CollectiveBatch))
                throw new IllegalArgumentException(name + ": only a collective or a batch of them takes a prologue or an epilogue, not " + collective.format());
            if (prologue == null && epilogue == null) throw new IllegalArgumentException(name + ": nothing fused");
        }

        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() {
            var out = new java.util.ArrayList<Step>(3);
            if (prologue != null) out.add(prologue);
            out.add(collective);
            if (epilogue != null) out.add(epilogue);
            return List.copyOf(out);
        }
        @Override public List<Collective> collectives() { return collective.collectives(); }
        @Override public String kind() { return "collective"; }
        @Override public String label() { return name + ": " + collective.label(); }

        /** The planner kernels that run inside: the prologue's and the epilogue's. */
        public List<Kernel> kernels() {
            var out = new java.util.ArrayList<Kernel>(2);
            if (prologue != null) out.add(prologue.kernel());
            if (epilogue != null) out.add(epilogue.kernel());
            return out;
        }

        @Override public String format() {
            Collective first = collective.collectives().getFirst();
            var sb = new StringBuilder("launch " + name + " {   # one launch: " + (prologue != null ? "prologue, " : "") + first.call().opName()
                    + (epilogue != null ? ", epilogue" : "") + "; block b takes the same tile in each, on every rank");
            if (prologue != null) sb.append("\n    prologue ").append(prologue.format().replace("\n", "\n    "));
            sb.append("\n    ").append(collective.format());
            if (epilogue != null) sb.append("\n    epilogue ").append(epilogue.format().replace("\n", "\n    "))
                    .append(first.call().algorithm().endsWithBarrier() ? "\n        # after the trailing barrier: every peer has read this tile's inputs" : "");
            return sb.append("\n  }").toString();
        }
    }

    /**
     * {@code output = a @ b}; {@code transA} / {@code transB}: that operand is the transposed view of packed memory,
     * read as it lies (printed {@code name.mT}, PyTorch's name for the transpose of the last two dimensions).
     * {@code gemv}: the planner chose the few-row kernel (a GEMV: at most 8 rows by a weight lying transposed,
     * {@code ProductKernels}) over a library GEMM; the two sum in different orders, so the choice is the plan's, printed
     * ({@code # gemv}), and a backend never makes it on its own.
     */
    record Matmul(PlanBuffer output, PlanBuffer a, PlanBuffer b, boolean transA, boolean transB, boolean gemv) implements Step {
        public Matmul(PlanBuffer output, PlanBuffer a, PlanBuffer b) { this(output, a, b, false, false, false); }
        public Matmul(PlanBuffer output, PlanBuffer a, PlanBuffer b, boolean transA, boolean transB) { this(output, a, b, transA, transB, false); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> reads() { return List.of(a, b); }
        @Override public List<PlanBuffer> writes() { return List.of(output); }
        @Override public String kind() { return "matmul"; }
        @Override public String label() { return "matmul(" + a.name() + (transA ? ".mT" : "") + ", " + b.name() + (transB ? ".mT" : "") + ")"; }

        /** This product with the planner's choice of kernel. */
        public Matmul withGemv(boolean on) { return on == gemv ? this : new Matmul(output, a, b, transA, transB, on); }

        @Override public String format() {
            String into = partNotes(List.of(output));
            // a part strided along its rows: the product writes rows of its slice one leading dimension (ldc) apart
            if (!into.isEmpty() && output.shape().rank() >= 2 && !output.strides().equals(output.shape().contiguousStrides()))
                into += " (ldc " + output.strides().get(output.shape().rank() - 2) + ")";
            if (gemv) into = into.isEmpty() ? "   # gemv" : into + "; gemv";
            return output.name() + " = matmul(" + a.name() + (transA ? ".mT" : "") + ", " + b.name() + (transB ? ".mT" : "") + ")" + into;
        }
    }

    /**
     * Updates at the same run-time position done as one launch ({@link UpdateBatching}): a decode layer's key and value
     * written into their caches. Each member is checked and written as it would be alone.
     */
    record UpdateSlices(List<UpdateSliceCall> members) implements Step {
        public UpdateSlices {
            members = List.copyOf(members);
            if (members.size() < 2) throw new IllegalArgumentException("a batch of updates has two members or more");
        }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() { return members.stream().<Step>map(UpdateSliceCall::call).toList(); }
        @Override public String kind() { return "update_slice"; }
        @Override public String label() { return "update_slice×" + members.size() + "(" + members.getFirst().target().name() + ", ...)"; }
        @Override public String format() {
            var outs = new StringJoiner(", ");
            var args = new StringJoiner("; ");
            for (UpdateSliceCall u : members) {
                outs.add(u.output().name());
                args.add(u.target().name() + ", " + u.update().name() + ", dim=" + u.dim());
            }
            return outs + " = update_slice×" + members.size() + "(" + args + "; at " + members.getFirst().start().name() + ")   # one launch for "
                    + members.size() + ", each in place: " + String.join("; ", members.stream().map(u -> u.format().replaceFirst(".*# in place: ", "")).toList());
        }
    }

    /**
     * The update of an attention's caches at its position and the attention over them, as one launch named {@code name}
     * ({@link AttentionUpdates}): a decode layer's new key and value written in place into the caches (states) and
     * attended to with the rest of each cache. The blocks read the cache as earlier calls left it and take the written
     * position from the update's sources, and the block of each batch entry that holds the position writes it into the
     * caches. A backend without such a kernel runs the updates, then the attention, which computes the same values.
     */
    record UpdateAttention(String name, UpdateSlices updates, AttentionCall attention) implements Step {
        public UpdateAttention {
            if (misfit(updates, attention) != null) throw new IllegalArgumentException(name + ": " + misfit(updates, attention));
        }

        /** The update of the keys' cache, then of the values'. */
        public UpdateSliceCall keys() { return member(updates, attention.keysT()); }
        public UpdateSliceCall values() { return member(updates, attention.values()); }

        /** The member of {@code u} that writes the storage of {@code cache}, or null. */
        static UpdateSliceCall member(UpdateSlices u, PlanBuffer cache) {
            for (UpdateSliceCall m : u.members()) if (m.output().storage() == cache.storage()) return m;
            return null;
        }

        /**
         * Null where the updates {@code u} and the attention {@code a} may be one launch; else why not. The batch is two
         * updates, one of the keys' cache (transposed: positions last) and one of the values' (positions second to
         * last), each the storage the attention reads, of rank 3 or 4, each of one position at the attention's
         * position; the updates write nothing else the attention reads (its queries, its position).
         */
        public static String misfit(UpdateSlices u, AttentionCall a) {
            if (u.members().size() != 2) return "a batch of " + u.members().size() + " updates, not the keys' and the values'";
            UpdateSliceCall k = member(u, a.keysT()), v = member(u, a.values());
            if (k == null || v == null || k == v) return "the updates are not of the attention's two caches";
            for (UpdateSliceCall m : u.members()) {
                if (m.output().storage() == a.q().storage() || m.output().storage() == a.position().storage()) return "an update writes what the attention reads";
                if (m.start().storage() != a.position().storage()) return "an update is at another position than the attention's";
                if (!m.update().shape().isStatic() || !m.output().shape().isStatic()) return "a shape is symbolic";
                if (m.update().shape().sizes()[m.dim()] != 1) return "an update writes more than one position";
            }
            int rk = k.output().shape().rank(), rv = v.output().shape().rank();
            if (rk != rv || rk < 3 || rk > 4 || k.dim() != rk - 1 || v.dim() != rv - 2)
                return "the caches are not [batch, (heads,) head_dim, positions] and [batch, (heads,) positions, head_dim]";
            return null;
        }

        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() { return List.of(updates, attention.call()); }
        @Override public String kind() { return "attention"; }
        @Override public String label() { return name + ": " + attention.label(); }

        @Override public String format() {
            return "launch " + name + " {   # one launch: the new key and value written into the caches at the position, and attended to"
                    + "\n    " + updates.format().replace("\n", "\n    ")
                    + "\n    " + attention.format()
                    + "\n  }";
        }
    }

    /**
     * A product of a few rows and the kernels right after it that read its output (its <em>epilogues</em>), as one launch
     * ({@code ProductEpilogues}): each block of the product computes the columns of some of the {@link ColumnTiles tiles},
     * stores them, and then runs every item of each epilogue whose reads fall in those columns, so no block reads what
     * another writes. The rule is about which elements a block holds, not about what the kernels compute: a SwiGLU, a
     * GeGLU, a bias, a rotary embedding however it is spelled, a norm over each head. A backend without such a kernel
     * runs the product, then the epilogues, which compute the same values.
     */
    record TiledProduct(String name, Matmul product, List<Launch> epilogues, ColumnTiles tiles) implements Step {
        /**
         * The most columns one block of the product holds together: the largest tile it takes (the few-row kernel's
         * block of 16 warps, 4 columns a warp at one row).
         */
        public static final int MAX_TILE_COLUMNS = 64;
        /** The most rows of a product joined so: a decode step's batch. */
        public static final int MAX_ROWS = 8;

        public TiledProduct {
            epilogues = List.copyOf(epilogues);
            if (epilogues.isEmpty()) throw new IllegalArgumentException(name + ": no epilogue");
            String why = fewRows(product.output(), product.transA(), product.transB());
            if (why != null) throw new IllegalArgumentException(name + ": " + why);
            if (tiles.columns() != product.output().shape().sizes()[1]) throw new IllegalArgumentException(name + ": tiles of another product");
        }

        /** The same launch with {@code p} (the same product, the planner's choice of its kernel made) in place of its product. */
        public TiledProduct withProduct(Matmul p) { return new TiledProduct(name, p, epilogues, tiles); }

        /**
         * Null where a product writing {@code x} may take kernels after it into its launch; else why not: at most
         * {@value #MAX_ROWS} rows and no batch, the right operand (a weight {@code [columns, k]}) lying transposed, and
         * a whole buffer of its own written, row-major.
         */
        static String fewRows(PlanBuffer x, boolean transA, boolean transB) {
            if (transA || !transB) return "the product's right operand does not lie transposed";
            if (!x.shape().isStatic() || x.shape().rank() != 2 || x.isView() || x.part() != null || !x.strides().equals(x.shape().contiguousStrides()))
                return "the product's output is not a whole row-major matrix of static shape";
            long rows = x.shape().sizes()[0];
            if (rows < 1 || rows > MAX_ROWS) return "the product has " + rows + " rows, not 1 to " + MAX_ROWS;
            return null;
        }

        @Override public boolean isDeviceWork() { return true; }
        @Override public List<Step> parts() { return java.util.stream.Stream.concat(java.util.stream.Stream.<Step>of(product), epilogues.stream()).toList(); }
        @Override public String kind() { return "matmul"; }
        @Override public String label() { return name + ": " + product.label(); }

        @Override public String format() {
            var out = new StringBuilder("launch " + name + " {   # one launch: the product, each block holding whole tiles of its columns ("
                    + tiles.describe() + "), then the epilogues on the tiles each block holds\n    " + product.format().replace("\n", "\n    "));
            for (Launch l : epilogues) out.append("\n    epilogue ").append(l.format().replace("\n", "\n    "));
            return out.append("\n  }").toString();
        }
    }

    /**
     * A call of a registered op ({@link dev.gatun.ir.graph.OpSpec}): reads {@code inputs} (packed row-major, or views
     * where the op {@linkplain dev.gatun.ir.graph.OpSpec#readsStrided reads them strided}), writes every one of
     * {@code outputs} (each a buffer of its own; for an op that writes {@linkplain dev.gatun.ir.graph.OpSpec#inPlace in
     * place}, output 0 is placed over input 0, which the step does not read). What it computes is the op's; a backend
     * runs it by the op (the host backend through {@link dev.gatun.ir.graph.OpSpec#host}). The ops whose fields the
     * planner's fusions and the CUDA backend read have typed views ({@link UpdateSliceCall}, {@link AttentionCall}),
     * which also print the step as it printed before those ops were registered.
     */
    record OpCall(dev.gatun.ir.graph.OpSpec spec, dev.gatun.ir.graph.OpAttrs attrs, List<PlanBuffer> inputs, List<PlanBuffer> outputs) implements Step {
        public OpCall { inputs = List.copyOf(inputs); outputs = List.copyOf(outputs); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> reads() { return spec.inPlace() ? inputs.subList(1, inputs.size()) : inputs; }
        @Override public List<PlanBuffer> writes() { return outputs; }
        @Override public String kind() { return spec.name(); }
        @Override public String label() {
            if (UpdateSliceCall.is(this)) return UpdateSliceCall.of(this).label();
            if (AttentionCall.is(this)) return AttentionCall.of(this).label();
            return Step.super.label();
        }
        /** The first output, which a single-output op writes. */
        public PlanBuffer output() { return outputs.getFirst(); }
        /** Input {@code i}. */
        public PlanBuffer input(int i) { return inputs.get(i); }
        @Override public String format() {
            if (UpdateSliceCall.is(this)) return UpdateSliceCall.of(this).format();
            if (AttentionCall.is(this)) return AttentionCall.of(this).format();
            String attributes = attrs.values().isEmpty() ? "" : ", " + attrs.format();
            return names(outputs) + " = " + spec.name() + "(" + names(inputs) + attributes + ")" + partNotes(outputs);
        }
    }


    record CallUserOp(UserOp op, String group, List<PlanBuffer> inputs, List<PlanBuffer> outputs) implements Step {
        public CallUserOp { inputs = List.copyOf(inputs); outputs = List.copyOf(outputs); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public List<PlanBuffer> reads() { return inputs; }
        @Override public List<PlanBuffer> writes() { return outputs; }
        @Override public String kind() { return "user_op"; }
        @Override public String label() { return op.name(); }
        @Override public String format() { return names(outputs) + " = " + op.name() + "(" + names(inputs) + ")"; }
    }

    /** A barrier among a group's ranks, where no collective gives one before the pool is reused. */
    record Barrier(String group, String why) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() { return "barrier(\"" + group + "\")   # " + why; }
        @Override public String kind() { return "barrier"; }
        @Override public String label() { return "barrier(\"" + group + "\")"; }
    }

    record Release(String pool) implements Step {
        @Override public String format() { return "release " + pool; }
        @Override public String kind() { return "release"; }
    }

    private static String barrierNote(CollectiveCall call, String freed) {
        return call.algorithm().endsWithBarrier() ? "ends with a barrier" + (freed != null ? ": " + freed + " free on all ranks" : "") : "no trailing barrier";
    }

    static String names(List<PlanBuffer> buffers) {
        var j = new StringJoiner(", ");
        for (PlanBuffer b : buffers) j.add(b.name());
        return j.toString();
    }
}
