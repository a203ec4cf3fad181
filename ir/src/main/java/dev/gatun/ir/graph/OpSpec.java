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
