package dev.gatun.ir.graph;

import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;

/**
 * A user-registered op: typed inputs and outputs, a CUDA C kernel launched with one thread per element of
 * its first output (grid-stride loop allowed), an optional host implementation, and the inputs that must
 * live in symmetric memory. Build with {@link #builder(String)}.
 *
 * <p>The CUDA kernel's parameters are the input pointers, then the output pointers, then the element count
 * of the first output as {@code long long}.
 */
public final class UserOp {
    private final String name;
    private final List<TensorSpec> inputs, outputs;
    private final String cudaSource, kernelName;
    private final int blockSize;
    private final Set<Integer> symmetricInputs;
    private final HostKernel host;
    private final Function<List<TensorType>, List<TensorType>> infer;

    private UserOp(Builder b) {
        this.name = b.name;
        this.inputs = List.copyOf(b.inputs);
        this.outputs = List.copyOf(b.outputs);
        this.cudaSource = b.cudaSource;
        this.kernelName = b.kernelName == null ? b.name : b.kernelName;
        this.blockSize = b.blockSize;
        this.symmetricInputs = Set.copyOf(b.symmetricInputs);
        this.host = b.host;
        this.infer = b.infer;
    }

    public static Builder builder(String name) { return new Builder(name); }

    public String name() { return name; }
    public List<TensorSpec> inputs() { return inputs; }
    public List<TensorSpec> outputs() { return outputs; }
    public String cudaSource() { return cudaSource; }
    public String kernelName() { return kernelName; }
    public int blockSize() { return blockSize; }
    public Set<Integer> symmetricInputs() { return symmetricInputs; }
    public HostKernel host() { return host; }
    public boolean hasHostImplementation() { return host != null; }
    public boolean requiresSymmetric(int input) { return symmetricInputs.contains(input); }

    /** Checks the actual inputs against the declared specs and returns the output types. */
    public List<TensorType> outputTypes(List<TensorType> actual) {
        if (actual.size() != inputs.size())
            throw new GraphException("user op '" + name + "' takes " + inputs.size() + " inputs " + inputs + ", got " + actual.size());
        var bind = new HashMap<String, Dim>();
        for (int i = 0; i < actual.size(); i++) {
            String why = inputs.get(i).match(actual.get(i), bind);
            if (why != null)
                throw new GraphException("user op '" + name + "': input " + i + " '" + inputs.get(i).name() + "' has " + why);
        }
        List<TensorType> out;
        if (infer != null) {
            out = infer.apply(List.copyOf(actual));
            if (out == null || out.size() != outputs.size())
                throw new GraphException("user op '" + name + "': its output function returned "
                        + (out == null ? "nothing" : out.size() + " outputs " + out) + " but the spec declares "
                        + outputs.size() + " " + outputs);
            for (int i = 0; i < out.size(); i++) {
                String why = outputs.get(i).match(out.get(i), new HashMap<>(bind));
                if (why != null)
                    throw new GraphException("user op '" + name + "': output " + i + " '" + outputs.get(i).name()
                            + "' does not match its spec " + outputs.get(i) + ": it has " + why);
            }
        } else {
            out = new ArrayList<>();
            for (var spec : outputs) {
                TensorType t = spec.instantiate(bind);
                if (t == null)
                    throw new GraphException("user op '" + name + "': output '" + spec.name() + "' spec " + spec
                            + " is not determined by the inputs; declare its dtype and shape or give an output function");
                out.add(t);
            }
        }
        return List.copyOf(out);
    }

    @Override public String toString() {
        return "UserOp " + name + inputs + " -> " + outputs + (symmetricInputs.isEmpty() ? "" : " symmetric inputs " + new TreeSet<>(symmetricInputs))
                + (host != null ? " (host implementation)" : "");
    }

    public static final class Builder {
        private final String name;
        private final List<TensorSpec> inputs = new ArrayList<>(), outputs = new ArrayList<>();
        private String cudaSource, kernelName;
        private int blockSize = 256;
        private final Set<Integer> symmetricInputs = new TreeSet<>();
        private HostKernel host;
        private Function<List<TensorType>, List<TensorType>> infer;

        private Builder(String name) {
            if (name == null || !name.matches("[A-Za-z_][A-Za-z0-9_]*"))
                throw new GraphException("a user op needs an identifier name, got '" + name + "'");
            this.name = name;
        }

        public Builder input(TensorSpec spec) { inputs.add(Objects.requireNonNull(spec)); return this; }
        public Builder output(TensorSpec spec) { outputs.add(Objects.requireNonNull(spec)); return this; }

        /** Declares that input {@code index} must be in symmetric memory of the call's group. */
        public Builder symmetricInput(int index) { symmetricInputs.add(index); return this; }

        public Builder cuda(String kernelName, String source) { this.kernelName = kernelName; this.cudaSource = source; return this; }
        public Builder blockSize(int threads) { this.blockSize = threads; return this; }
        public Builder host(HostKernel host) { this.host = host; return this; }
        public Builder outputTypes(Function<List<TensorType>, List<TensorType>> infer) { this.infer = infer; return this; }

        public UserOp build() {
            if (outputs.isEmpty()) throw new GraphException("user op '" + name + "' declares no outputs");
            for (int i : symmetricInputs)
                if (i < 0 || i >= inputs.size())
                    throw new GraphException("user op '" + name + "': symmetric input " + i + " does not exist (it has " + inputs.size() + " inputs)");
            if (blockSize < 1 || blockSize > 1024) throw new GraphException("user op '" + name + "': block size " + blockSize + " is not in 1..1024");
            return new UserOp(this);
        }
    }
}
