package dev.gatun.ir.graph;

import dev.gatun.ir.TensorType;

import java.util.List;

/**
 * Everything Gatun knows about one registered op, in one place ({@link OpRegistry}): its name, its attributes, its
 * type inference with the errors it raises, its reference semantics and its host backend's body. The rest of the
 * compiler treats a registered op generically: the DSL and {@link Graph.Builder#apply} make an {@link Op.Registered}
 * node, {@link GraphJson} writes its attributes as fields named as declared, lowering gives each input packed row-major
 * memory and each output a buffer of its own, the planner makes one {@code Step.OpCall} that reads the inputs and writes
 * the outputs, and a backend runs that step: the host backend through {@link #host}, the reference interpreter through
 * {@link #reference}, the CUDA backend where it has a kernel for the op (else it refuses the plan when it is loaded).
 *
 * <p>An op with several outputs is a node typed by its first output and one {@link Op.CustomOutput} node per further
 * output, as a user op's. Bodies see their tensors row-major through {@link HostTensor} (floating elements as doubles,
 * integers exact as longs); they run on the host only, in float64 where they compute, so an op whose result depends
 * on rounding in a narrower type says so in its reference.
 */
public interface OpSpec {

    /** The op's name, as the graph prints it and JSON stores it; unique among built-in ops. */
    String name();

    /** The attributes a call takes, each required, in the order the op prints them. */
    List<Attribute> attributes();

    /**
     * The outputs' types for {@code inputs} and {@code attrs} (the attributes already checked against
     * {@link #attributes()}); a {@link dev.gatun.ir.GraphException} naming the op, the tensor and what is wrong where
     * the call is invalid.
     */
    List<TensorType> infer(List<Operand> inputs, OpAttrs attrs);

    /**
     * The op's meaning, for the reference interpreter: reads {@code inputs}, writes every element of {@code outputs}
     * (shaped as {@link #infer} says). Written for clarity, not speed; a test's expectations come from elsewhere.
     */
    void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs);

    /**
     * The host backend's body: the same values as {@link #reference}, written to be quick on a CPU; by default the
     * reference itself.
     */
    default void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) { reference(inputs, outputs, attrs); }

    /**
     * Whether a call can be refused for its input values, which only a run shows (an index outside a table): then
     * {@link #refusal} says why, and a backend's kernel for the op checks the same on the device (the CUDA backend's
     * record their reason and trap). False by default: every value the types admit is valid.
     */
    default boolean checksValues() { return false; }

    /**
     * Why a call cannot run on these input values, or null where it can; asked before each call where
     * {@link #checksValues}, so a body never meets such values. The host backend fails the call with a
     * {@code GatunRuntimeException} naming the step and this reason, the reference interpreter with a
     * {@link dev.gatun.ir.GraphException} naming the node. It says what is wrong, where, and what is valid ("index 10 at
     * position 1 of the indices is outside the 10 rows of the table (valid: 0 to 9)").
     */
    default String refusal(List<HostTensor> inputs, OpAttrs attrs) { return null; }

    /**
     * Whether output 0 is input 0 updated in place ({@code update_slice} writes a slice of a cache): output 0 has input
     * 0's type and takes its storage, and a call writes only the elements it changes. Lowering gives input 0 a buffer
     * the call may write (a version of a state, written in place, which the graph checked nothing else reads; else a
     * copy made for the call), the memory planner places output 0 over it, and the step reads the other inputs and
     * writes output 0 (its reads leave input 0 out). The bodies ({@link #reference}, {@link #host}) find output 0
     * holding input 0's values when they start (the reference interpreter copies them there; a backend's output is
     * input 0's memory) and write what changes. An update of a state is kept even where no output reads it: the state
     * holds it after the call. False by default: every output is a buffer of its own, written whole.
     */
    default boolean inPlace() { return false; }

    /**
     * Whether the op's kernels read input {@code input}, of static {@code shape}, where it lies at {@code strides}
     * (elements) rather than packed row-major: then lowering passes a view as it is (a slice of a fused product, a
     * transposed key) instead of copying it first, and the step names the view; a backend's body for the op reads it at
     * its strides (the host backend gathers such an input into a packed copy for {@link #host}). False by default: every
     * input is packed memory. Asked only of a static shape and constant strides; an input of a flexible layout is made
     * packed for the call.
     */
    default boolean readsStrided(int input, long[] shape, long[] strides, OpAttrs attrs) { return false; }

    /** One attribute: its name (a JSON field of the node) and whether it holds an integer or a real number. */
    record Attribute(String name, Kind kind) {
        public enum Kind { INT, REAL }
    }

    /** An input as type inference sees it: how errors name it ({@code %3}, {@code 'x'}) and its type. */
    record Operand(String label, TensorType type) {
        public static Operand of(Node n) { return new Operand(n.label(), n.type()); }

        public String describe() { return label + " " + type; }
    }
}
