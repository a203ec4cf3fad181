package dev.gatun.models.llama;

import dev.gatun.runtime.GatunRuntimeException;

import java.util.List;
import java.util.Set;

/**
 * How {@link LlamaGenerator#generate(int[][], Generation)} runs a generation: at most {@code maxNew} new tokens a
 * sequence; the tokens that end a sequence; whether each step's logits are kept; whether the steps are queued; who is
 * told each step's tokens; and how the tokens are drawn (greedy, or {@link Sampling}). Made fluently:
 * {@code Generation.of(64).stopAt(eos).sampling(Sampling.temperature(0.7).topP(0.9).seed(1)).onTokens((step, tokens) -> ...)}.
 *
 * <p><b>Stopping.</b> A sequence ends at the first of {@code stopTokens} it generates, which is kept as its last
 * token. The generation ends once every sequence of the batch has ended, or after {@code maxNew} steps. A sequence
 * that ended early is shorter in the result.
 *
 * <p><b>Queued or step by step.</b> Step by step, the host reads each step's tokens (and logits) before it queues the
 * next step, so the listener hears each step as it ends and no step runs past the last stop. Queued (the default where
 * no logits are kept), the host queues {@code checkEvery} steps, each fed the token the step before left on the
 * device, then reads their tokens once. The listener hears the chunk's steps together, and up to
 * {@code checkEvery - 1} steps past the last stop run for nothing. A queued generation with neither stop tokens nor a
 * listener reads its tokens once, at the end.
 *
 * @param maxNew     the most new tokens a sequence gets (at least 1)
 * @param stopTokens the tokens that end a sequence (none: every sequence gets {@code maxNew})
 * @param keepLogits keep each step's logits (of the first sequence): step by step only
 * @param queued     queue {@code checkEvery} steps before the host reads their tokens
 * @param checkEvery with {@code queued}: how many steps are queued between two reads, where there is a reason to read
 * @param listener   told each step's tokens in order; null: nobody
 * @param sampling   how each sequence's tokens are drawn: one for every sequence, or one a sequence (in the
 *                   prompts' order); empty: greedy
 */
public record Generation(int maxNew, Set<Integer> stopTokens, boolean keepLogits, boolean queued, int checkEvery, Listener listener,
                         List<Sampling> sampling) {
    /** Where a listener is told of a sequence that has already ended: it has no token at that step. */
    public static final int ENDED = -1;

    /** Told the tokens of each step, in order: {@code tokens[b]} is sequence b's, or {@link #ENDED}. */
    @FunctionalInterface
    public interface Listener {
        void step(int step, int[] tokens);
    }

    public Generation {
        if (maxNew < 1) throw bad("maxNew " + maxNew + ": generate at least 1 token");
        if (checkEvery < 1) throw bad("checkEvery " + checkEvery + ": at least 1 step between two reads");
        if (queued && keepLogits) throw bad("a queued generation keeps no logits: each step's would have to come to the host; generate step by step to keep them");
        stopTokens = Set.copyOf(stopTokens);
        for (int t : stopTokens) if (t < 0) throw bad("stop token " + t + ": a token id is at least 0");
        sampling = List.copyOf(sampling);
    }

    private static GatunRuntimeException bad(String what) { return new GatunRuntimeException("Generation: " + what); }

    /** Greedy. */
    public Generation(int maxNew, Set<Integer> stopTokens, boolean keepLogits, boolean queued, int checkEvery, Listener listener) {
        this(maxNew, stopTokens, keepLogits, queued, checkEvery, listener, List.of());
    }

    /** At most {@code maxNew} new tokens a sequence, no stop tokens, queued, no logits, nobody told, greedy. */
    public static Generation of(int maxNew) { return new Generation(maxNew, Set.of(), false, true, 16, null); }

    /**
     * The same, each sequence's tokens drawn as {@code rows} says: one for every sequence (each draws with its seed:
     * the same prompt, the same tokens), or one a sequence. The generator must have been made for sampling
     * ({@link LlamaGenerator}) unless each is greedy without a penalty.
     */
    public Generation sampling(Sampling... rows) {
        return new Generation(maxNew, stopTokens, keepLogits, queued, checkEvery, listener, List.of(rows));
    }

    /** Each sequence's sampling, for a batch of {@code batch}: greedy where none was given. */
    List<Sampling> samplingOf(int batch) {
        if (sampling.isEmpty()) return java.util.Collections.nCopies(batch, Sampling.GREEDY);
        if (sampling.size() == 1) return java.util.Collections.nCopies(batch, sampling.getFirst());
        if (sampling.size() != batch)
            throw bad("sampling: " + sampling.size() + " samplings for a batch of " + batch + " sequences; give one for all, or one a sequence");
        return sampling;
    }

    /** The same, each sequence ending at the first of {@code tokens} it generates (a checkpoint's end-of-sequence ids). */
    public Generation stopAt(int... tokens) {
        var set = new java.util.HashSet<>(stopTokens);
        for (int t : tokens) set.add(t);
        return new Generation(maxNew, set, keepLogits, queued, checkEvery, listener, sampling);
    }

    /** The same, with the stop tokens of a set (for example {@link LlamaCheckpoint#eosTokens}). */
    public Generation stopAt(Set<Integer> tokens) {
        return stopAt(tokens.stream().mapToInt(Integer::intValue).toArray());
    }

    /** The same, keeping each step's logits: step by step. */
    public Generation keepingLogits() { return new Generation(maxNew, stopTokens, true, false, checkEvery, listener, sampling); }

    /** The same, step by step: the host reads each step's tokens before it queues the next. */
    public Generation stepwise() { return new Generation(maxNew, stopTokens, keepLogits, false, checkEvery, listener, sampling); }

    /** The same, queued, the host reading the tokens every {@code checkEvery} steps where it has a reason to. */
    public Generation queued(int checkEvery) { return new Generation(maxNew, stopTokens, keepLogits, true, checkEvery, listener, sampling); }

    /** The same, {@code listener} told each step's tokens. */
    public Generation onTokens(Listener listener) { return new Generation(maxNew, stopTokens, keepLogits, queued, checkEvery, listener, sampling); }

    /** Whether a queued generation reads its tokens before the end: to stop, or to tell a listener. */
    boolean readsAsItGoes() { return !stopTokens.isEmpty() || listener != null; }
}
