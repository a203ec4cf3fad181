package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.ir.lower.ExternCall;
import dev.gatun.planner.kernel.Kernel;

import java.util.List;
import java.util.StringJoiner;

/** One step of an executable {@link Plan}. Each prints as one line close to the code a backend runs. */
public sealed interface Step {

    /** Whether a CUDA graph may capture this step (false for host-side bookkeeping). */
    default boolean isDeviceWork() { return false; }

    String format();

    record AllocPool(Pool pool) implements Step {
        @Override public String format() { return pool.declaration(); }
    }

    /** Places a buffer at {@code offset} of {@code pool}; {@code reuses} names the earlier occupant of its slot. */
    record Place(String buffer, String pool, long offset, long bytes, TensorType type, List<SymInt> strides, String reuses,
                 boolean inPlace) implements Step {
        public Place { strides = List.copyOf(strides); }
        @Override public String format() {
            var j = new StringJoiner(",", "[", "]");
            strides.forEach(s -> j.add(s.toString()));
            return buffer + " = " + pool + ".at(" + offset + ", " + type + " strides " + j + ")"
                    + (reuses == null ? "" : inPlace ? "   # reuse: in place of " + reuses : "   # reuse of " + reuses + "'s slot");
        }
    }

    /** A buffer whose size depends on symbols: allocated for each call once the symbols are bound. */
    record AllocDynamic(String buffer, TensorType type) implements Step {
        @Override public String format() { return buffer + " = alloc_dynamic(" + type + ")   # symbolic size: " + type.shape().symNumel() + " elements"; }
    }

    /** Path 2: copies the caller's tensor into the input's persistent symmetric buffer (async DMA copy on a GPU). */
    record CopyIn(String input, String buffer) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() { return "copy_in(\"" + input + "\") -> " + buffer + "   # path 2: async copy into symmetric memory"; }
    }

    record Launch(Kernel kernel) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() {
            return "kernel " + kernel.name() + "(" + String.join(", ", kernel.inputs()) + ") -> " + String.join(", ", kernel.outputs());
        }
    }

    /** {@code freed} names the input whose slot is free on all ranks once this collective's trailing barrier passes. */
    record Collective(String output, String input, ExternCall.Collective call, String freed) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() {
            String attrs = (call.reduceOp() != null ? ", " + call.reduceOp().opName() : "")
                    + (call.kind() == dev.gatun.ir.graph.CollectiveKind.BROADCAST ? ", root=" + call.root() : "");
            String note = call.algorithm().endsWithBarrier()
                    ? "   # ends with a barrier" + (freed != null ? ": " + freed + " free on all ranks" : "")
                    : "   # no trailing barrier";
            return output + " = " + call.opName() + "(" + input + attrs + ", \"" + call.group() + "\")" + note;
        }
    }

    record Matmul(String output, String a, String b) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() { return output + " = matmul(" + a + ", " + b + ")"; }
    }

    record CallUserOp(UserOp op, String group, List<String> inputs, List<String> outputs) implements Step {
        public CallUserOp { inputs = List.copyOf(inputs); outputs = List.copyOf(outputs); }
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() { return String.join(", ", outputs) + " = " + op.name() + "(" + String.join(", ", inputs) + ")"; }
    }

    /** A barrier among a group's ranks, where no collective gives one before the pool is reused. */
    record Barrier(String group, String why) implements Step {
        @Override public boolean isDeviceWork() { return true; }
        @Override public String format() { return "barrier(\"" + group + "\")   # " + why; }
    }

    record Release(String pool) implements Step {
        @Override public String format() { return "release " + pool; }
    }
}
