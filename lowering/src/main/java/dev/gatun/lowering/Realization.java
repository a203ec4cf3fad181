package dev.gatun.lowering;

import dev.gatun.ir.Algorithm;
import java.util.List;

/**
 * Why a collective (or a user op's symmetric input, or a symmetric region's result) got the algorithm and
 * the communication buffer it did.
 *
 * @param consumer     the buffer of the op that needs symmetric memory, e.g. "buf2"
 * @param op           the op as printed, e.g. "all_reduce.one_shot"
 * @param algorithm    the chosen algorithm (null for user-op inputs and regions)
 * @param whyAlgorithm why that algorithm
 * @param input        the buffer the op was given
 * @param path         how that input became a communication buffer
 * @param commBuffer   the communication buffer the op reads (the input itself on paths 1 and 2), or null
 * @param notTaken     for each earlier path, why it did not apply
 */
public record Realization(String consumer, String op, Algorithm algorithm, String whyAlgorithm, String input, Path path,
                          String commBuffer, List<String> notTaken) {

    public Realization { notTaken = List.copyOf(notTaken); }

    public enum Path {
        /** Path 1: the producing kernel writes straight into symmetric memory; zero copies. */
        ZERO_COPY(1, "zero copy: the producer writes into the pool"),
        /** Path 2: a graph input with a persistent symmetric buffer and a per-call async copy into it. */
        SYMMETRIC_INPUT(2, "graph input: persistent symmetric buffer, async copy per call"),
        /** Path 3: an identity-copy kernel into a new communication buffer. */
        IDENTITY_COPY(3, "identity copy into a new communication buffer"),
        /** The op does not run on symmetric memory (NCCL). */
        NONE(0, "no communication buffer (NCCL)"),
        /** A barrier-free all-reduce: the input is read where it is and pushed into the peers' rotating slots. */
        PUSHED(0, "no communication buffer: read in place and pushed into the peers' rotating slots"),
        /** A collective among one rank: its result is its input; nothing runs. */
        IDENTITY(0, "the result is the input itself: no kernel, no barrier, no copy");

        private final int number;
        private final String meaning;

        Path(int number, String meaning) {
            this.number = number;
            this.meaning = meaning;
        }

        public int number() { return number; }
        public String meaning() { return meaning; }

        @Override public String toString() { return number == 0 ? "no path" : "path " + number; }
    }

    /** One paragraph: which path, and why the earlier ones did not apply. */
    public String explain() {
        var sb = new StringBuilder(consumer).append(" = ").append(op);
        if (whyAlgorithm != null) sb.append("  [").append(whyAlgorithm).append(']');
        sb.append("\n    input ").append(input).append(": ").append(path).append(" (").append(path.meaning()).append(')');
        if (commBuffer != null && !commBuffer.equals(input)) sb.append(" -> ").append(commBuffer);
        for (String n : notTaken) sb.append("\n      ").append(n);
        return sb.toString();
    }
}
