package dev.gatun.runtime.cuda;

import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * An executable's bound inputs ({@code Session.bind}, {@code bindInPlace}): a bound value is copied once into its
 * input's staging buffer (a state's into its slot), which every later call reads; an array bound in place is read
 * where it lies by every call. A call reads an input it is not passed from here ({@link CudaRun#stageInputs}).
 */
final class Bindings {
    private final CudaExecutable exe;
    /** Inputs whose staging buffer holds a bound value. */
    private final Set<String> bound = ConcurrentHashMap.newKeySet();
    /** An input bound in place: the caller's array, read where it lies by every call, and its address when bound. */
    private record InPlace(DeviceArray array, long address) {}
    private final Map<String, InPlace> boundInPlace = new ConcurrentHashMap<>();

    Bindings(CudaExecutable exe) { this.exe = exe; }

    /** Whether the input's staging buffer holds a bound value. */
    boolean isBound(String input) { return bound.contains(input); }

    /** The array bound in place to the input, or null. */
    DeviceArray inPlace(String input) {
        InPlace p = boundInPlace.get(input);
        return p == null ? null : p.array();
    }

    /** Unbinds the input; a state's slot is set to zeros. */
    void unbind(String input) {
        PlanBuffer state = exe.plan.state(input);
        if (state != null) {
            DeviceBuffer.wrap(exe.device, exe.fixedAddress[state.id()], state.type().byteSize()).memsetAsync(0, exe.stream);
            exe.stream.synchronize();
        }
        bound.remove(input);
        if (boundInPlace.containsKey(input)) bindInPlace(input, null);
    }

    /** Every value's copy queued first, then one wait for them all (the values may change or close once bind returns). */
    void bind(Map<String, ? extends ArrayLike> values) {
        boolean wait = false;
        for (var e : values.entrySet()) wait |= queueBind(e.getKey(), e.getValue());
        if (wait) exe.stream.synchronize();
        bound.addAll(values.keySet());
    }

    /**
     * The caller's array itself for every later call (null: no longer): its address becomes the input's, read in
     * place. Where ranks share a GPU the address may change only before the first call ({@link #checkAddressKept}).
     */
    void bindInPlace(String input, DeviceArray array) {
        inputNamed(input);
        if (array == null) {
            checkAddressKept(input, 0);
            boundInPlace.remove(input);
            bound.remove(input);
            return;
        }
        CudaMemory m = exe.memoryOf(array, "the array bound in place to '" + input + "'");
        if (m.owner == exe && m.callMemory)
            throw new GatunRuntimeException("plan '" + exe.plan.name() + "': bindInPlace(\"" + input + "\"): " + array.origin()
                    + " is an output of this session, which its next call overwrites; copy() it first");
        checkAddressKept(input, array.address());
        bound.remove(input);   // its staging buffer is no longer read
        boundInPlace.put(input, new InPlace(array, array.address()));
    }

    private PlanBuffer inputNamed(String input) {
        PlanBuffer in = exe.plan.input(input);
        if (in == null) throw new GatunRuntimeException("plan '" + exe.plan.name() + "' has no input '" + input + "'");
        return in;
    }

    /**
     * Refuses a new address for an input bound in place once ranks sharing a GPU have captured their graphs: a rank
     * that alone saw a new address would capture again, and its capture could wait for a peer's spinning kernels.
     */
    private void checkAddressKept(String input, long address) {
        InPlace old = boundInPlace.get(input);
        if (exe.dist != null && exe.sharesGpu() && exe.generation > 0 && (old == null ? address != 0 : old.address() != address))
            throw new GatunRuntimeException("plan '" + exe.plan.name() + "': '" + input + "' may be bound in place, or moved from its place, only before the"
                    + " first call where ranks share a GPU (a rank that alone saw a new address would capture its graphs again while its"
                    + " peers' kernels spin on the same GPU); bind(...) copies into the input's own buffer instead");
    }

    /** Queues the copy of a bound value into its input's staging buffer (or state's slot); whether it must be waited for. */
    private boolean queueBind(String input, ArrayLike value) {
        if (boundInPlace.containsKey(input)) {
            checkAddressKept(input, 0);
            boundInPlace.remove(input);
        }
        PlanBuffer state = exe.plan.state(input);
        PlanBuffer in = state != null ? state : inputNamed(input);
        DeviceBuffer dst = state != null ? DeviceBuffer.wrap(exe.device, exe.fixedAddress[state.id()], state.type().byteSize())
                : in.isDynamic() ? null : exe.stagingOf(in);
        if (dst == null) throw new GatunRuntimeException("bind(\"" + input + "\"): the input's shape is symbolic; only inputs of static shape can be bound");
        bound.remove(input);
        switch (value) {
            case NDArray n -> {
                if (n.byteSize() > 0) exe.writeFromHost(dst.address(), n.segment(), n.byteSize());
                return false;
            }
            case DeviceArray d -> {
                CudaMemory m = exe.memoryOf(d, "the value bound to '" + input + "'");
                if (m.owner != exe) exe.stream.waitFor(m.owner.markWritten());
                if (d.byteSize() == 0) {
                    // nothing to copy
                } else if (d.isContiguous()) {
                    DeviceBuffer.wrap(exe.device, dst.address(), d.byteSize()).copyFromAsync(DeviceBuffer.wrap(exe.device, d.address(), d.byteSize()), exe.stream);
                } else {
                    exe.writeFromHost(dst.address(), d.toHost().segment(), d.byteSize());
                }
                if (m.owner != exe) m.owner.readers.add(exe);
                return true;
            }
        }
    }
}
