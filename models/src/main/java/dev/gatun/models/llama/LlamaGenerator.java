package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Profile;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Generation with {@link LlamaDecoder}'s two phases, each compiled once: the prompts' prefill, then one decode call per
 * token, each call taking the caches the last one returned. {@code shards} holds the weights of the ranks this process
 * runs ({@link LlamaDecoder#weights}): all {@code tp} of them for the host backend's simulated ranks, or this rank's one
 * where each rank is a session of its own. Each rank's weights are copied to its device once and every session reads
 * them there, bound in place ({@link Session#bindInPlace}): one copy of the weights in all, at any number of ranks.
 *
 * <p><b>Prompts of any length.</b> The prefill is compiled once, for the longest prompt ({@code promptLength}); a
 * shorter prompt is padded to it and its logits read at its own last position (the causal mask keeps its positions
 * from the padding after them, so it computes what it would alone: {@link LlamaDecoder.Form}). The prompt's rotary
 * tables and mask are bound to the prefill once. The caches are the decode session's states: the prefill's caches are
 * bound to them once per generation, and each decode call, passed only its tokens and position, writes its new key and
 * value into them in place. Where the prompts of a batch are of one length, the steps are at their positions; where
 * they differ, the batch's steps share cache slots from the longest prompt's length on and each sequence is rotated at
 * its own position, with the slots between its prompt and them masked: a second decode graph ({@code ragged}),
 * compiled the first time a batch needs it, whose attention is the products and softmax instead of the one-step
 * {@code attention}.
 *
 * <p><b>Greedy or drawn.</b> Made with {@code sampling}, the graphs draw each token on the device ({@link Sampling}:
 * temperature, top-k, top-p, min-p, repetition penalty, seeded), with parameters given per generation and no new
 * compile; otherwise every token is the argmax. Without logits to keep, a generation is queued: each decode call is
 * passed the token the call before left on the device, and the host does not wait for one call before it queues the
 * next. A {@link Generation} says when to stop (a checkpoint's end tokens), how to draw and who hears the tokens as
 * they come. Closing closes every session.
 */
public final class LlamaGenerator implements AutoCloseable {
    /**
     * Each sequence's new tokens ({@code sequences[b]}, up to and with its stop token where it generated one); each
     * step's logits of the first sequence's last position (of the first local rank; empty unless asked for); and the
     * host wall time of the prefill call and of each decode call that ran, each until its tokens were on the host
     * (queued: every decode call's the same, the time of all of them over their number, from the first queued to the
     * last tokens on the host).
     */
    public record Result(int[][] sequences, List<double[]> logits, double prefillMillis, double[] stepMillis) {
        /** The first (for a batch of one, the only) sequence's new tokens. */
        public int[] tokens() { return sequences[0]; }
    }

    private final LlamaConfig config;
    private final int localRanks;
    private final int batch, promptLength, maxLen;
    private final Parallelism parallel;
    private final DType dtype;
    private final boolean sampling;
    private final CompileOptions options;
    private final Session prefill, decode;
    /** The decode of a batch of prompts of different lengths ({@link LlamaDecoder.Form#ragged}): made on first need. */
    private Session raggedDecode;
    /** Each local rank's weights on its device, which every session reads in place. */
    private final List<Map<String, DeviceArray>> onDevice = new ArrayList<>();
    /**
     * A decode call's inputs and its tokens, in the decode session's page-locked host memory, filled and read in place
     * every step: a step's host round trip copies them by DMA, with no new arrays.
     */
    private final NDArray stepTokens, stepPosition, stepNext;

    /** Greedy generation for one sequence at a time, its prompt at most {@code promptLength} tokens. */
    public LlamaGenerator(LlamaConfig config, List<Map<String, NDArray>> shards, int promptLength, int maxLen, int tp, DType dtype,
                          CompileOptions options) {
        this(config, shards, 1, promptLength, maxLen, tp, dtype, options);
    }

    /** Greedy generation for {@code batch} sequences at once, each with a prompt of at most {@code promptLength} tokens. */
    public LlamaGenerator(LlamaConfig config, List<Map<String, NDArray>> shards, int batch, int promptLength, int maxLen, int tp, DType dtype,
                          CompileOptions options) {
        this(config, shards, batch, promptLength, maxLen, tp, dtype, options, false);
    }

    /**
     * Generation for {@code batch} sequences at once, each with a prompt of at most {@code promptLength} tokens, in a
     * cache of {@code maxLen} positions; with {@code sampling} the tokens are drawn as each generation's
     * {@link Generation#sampling} says, else they are the argmax.
     */
    public LlamaGenerator(LlamaConfig config, List<Map<String, NDArray>> shards, int batch, int promptLength, int maxLen, int tp, DType dtype,
                          CompileOptions options, boolean sampling) {
        this(config, shards, batch, promptLength, maxLen, Parallelism.tensor(tp), dtype, options, sampling);
    }

    /**
     * {@link #LlamaGenerator(LlamaConfig, List, int, int, int, int, DType, CompileOptions, boolean)} over
     * {@code parallel}'s mesh: {@code shards} the weights of the ranks this process runs
     * ({@link LlamaDecoder#weights(LlamaConfig, dev.gatun.runtime.TensorFiles, Parallelism, int, DType)}), a world of
     * {@code parallel.world()} ranks; with expert parallelism each mixture of experts split over the "ep" axis.
     */
    public LlamaGenerator(LlamaConfig config, List<Map<String, NDArray>> shards, int batch, int promptLength, int maxLen, Parallelism parallel, DType dtype,
                          CompileOptions options, boolean sampling) {
        this.config = config;
        this.batch = batch;
        this.promptLength = promptLength;
        this.maxLen = maxLen;
        this.parallel = parallel;
        this.dtype = dtype;
        this.sampling = sampling;
        this.options = options;
        this.prefill = Session.compile(LlamaDecoder.prefill(config, batch, promptLength, maxLen, parallel, dtype, new LlamaDecoder.Form(sampling, true)), options);
        Session d;
        try {
            d = Session.compile(LlamaDecoder.decode(config, batch, maxLen, parallel, dtype, new LlamaDecoder.Form(sampling, false)), options);
        } catch (Throwable e) {
            closeAfter(e, prefill);
            throw e;
        }
        this.decode = d;
        try {
            // each rank's weights go to its device once (a tied weight once) and every session reads them where they are
            for (int i = 0; i < shards.size(); i++) {
                int rank = prefill.ranks().get(i);
                var copies = new java.util.IdentityHashMap<NDArray, DeviceArray>();
                var named = new java.util.LinkedHashMap<String, DeviceArray>();
                for (var w : shards.get(i).entrySet()) named.put(w.getKey(), copies.computeIfAbsent(w.getValue(), nd -> prefill.toDevice(rank, nd)));
                onDevice.add(named);
                bindWeights(prefill, i);
                bindWeights(decode, i);
            }
            // the prompt's rotary tables, mask and padding depend on its length only: bound once, a call passes its tokens
            var tables = LlamaDecoder.promptTables(config, batch, promptLength, maxLen, parallel.tp(), dtype);
            for (int rank : prefill.ranks()) for (var t : tables.entrySet()) prefill.bind(rank, t.getKey(), t.getValue());
        } catch (Throwable e) {
            closeAfter(e, this);
            throw e;
        }
        this.localRanks = shards.size();
        this.stepTokens = decode.allocateHost(DType.I64, batch);
        this.stepPosition = decode.allocateHost(DType.I32, 1);
        this.stepNext = decode.allocateHost(DType.I64, batch);
    }

    /** Local rank {@code i}'s weights bound in place in {@code session}. */
    private void bindWeights(Session session, int i) {
        for (var w : onDevice.get(i).entrySet()) session.bindInPlace(session.ranks().get(i), w.getKey(), w.getValue());
    }

    /** The decode of prompts of different lengths, compiled and given the weights the first time a batch needs it. */
    private Session raggedDecode() {
        if (raggedDecode == null) {
            Session s = Session.compile(LlamaDecoder.decode(config, batch, maxLen, parallel, dtype, new LlamaDecoder.Form(sampling, true)), options);
            try {
                for (int i = 0; i < onDevice.size(); i++) bindWeights(s, i);
            } catch (Throwable e) {
                closeAfter(e, s);
                throw e;
            }
            raggedDecode = s;
        }
        return raggedDecode;
    }

    /** Closes {@code c} after {@code failure}, keeping a failure of the close as suppressed. */
    private static void closeAfter(Throwable failure, AutoCloseable c) {
        try {
            c.close();
        } catch (Throwable t) {
            failure.addSuppressed(t);
        }
    }

    /** The prompt's greedy continuation by {@code n} tokens, with each step's logits. */
    public Result generate(int[] prompt, int n) { return generate(new int[][]{prompt}, n, true); }

    /** The prompt's greedy continuation by {@code n} tokens (a generator for one sequence). */
    public Result generate(int[] prompt, int n, boolean keepLogits) { return generate(new int[][]{prompt}, n, keepLogits); }

    /**
     * Each prompt's greedy continuation by {@code n} tokens (as many prompts as the batch compiled for, each of at most
     * the length compiled for). Outputs stay in the sessions' memory (on a GPU, the device's): the prefill's caches are
     * bound to the decode session's states on the device (its time counts in the prefill's), each decode call updates
     * them in place, and only the tokens (and with {@code keepLogits} the logits) come to the host.
     */
    public Result generate(int[][] prompts, int n, boolean keepLogits) { return generate(prompts, n, keepLogits, !keepLogits); }

    /**
     * As {@link #generate(int[][], int, boolean)}, the loop chosen: {@code queued} (where no logits are kept) feeds each
     * decode step the token the step before left on the device and the host queues the steps one after the other
     * without waiting for any (the next step is queued while the one before runs); the tokens come to the host at the
     * end, from the decode's {@value LlamaDecoder#HISTORY}, and every step's time is the decode's time over the steps.
     * Otherwise the host reads each step's token (and logits) before it queues the next, and each step's time is its own.
     */
    public Result generate(int[][] prompts, int n, boolean keepLogits, boolean queued) {
        return generate(prompts, new Generation(n, java.util.Set.of(), keepLogits, queued, n, null));
    }

    /**
     * Each prompt's continuation as {@code how} says: at most its number of tokens, each sequence ending at the first of
     * its stop tokens (kept; a sequence that ended early is shorter in the result), greedy or drawn, queued or step by
     * step, its listener told each step's tokens. {@link Result#stepMillis} has one time a decode call that ran.
     */
    public Result generate(int[][] prompts, Generation how) {
        var run = plan(prompts, how);
        return how.queued() ? generateQueued(run, how) : generateStepwise(run, how);
    }

    /**
     * One generation's layout: the prompts, each one's length, the first decode call's cache slot ({@code start}, the
     * longest prompt's length: every later call one slot on), the decode session that runs it (the ragged one where the
     * lengths differ), and each sequence's sampling.
     */
    private record Run(int[][] prompts, int[] lengths, int start, Session decode, boolean ragged, List<Sampling> sampling) {
        /** The slot decode call k (1 and up) writes: k - 1 after the start. */
        int slot(int k) { return start + k - 1; }

        /** Sequence b's position at decode call k: the position of the token it is passed. */
        int position(int b, int k) { return lengths[b] + k - 1; }
    }

    /** {@link #generate(int[][], Generation)}, step by step. */
    private Result generateStepwise(Run run, Generation how) {
        int n = how.maxNew();
        var seqs = new Sequences(batch, n, how);
        long t0 = System.nanoTime();
        var out = prefillAndStart(run);
        double prefillMillis = 0;
        double[] stepMillis = new double[n - 1];
        var logits = new ArrayList<double[]>();
        int k = 0;
        for (; ; k++) {
            int[] next = next(out, k);
            double ms = (System.nanoTime() - t0) / 1e6;
            if (k == 0) prefillMillis = ms;
            else stepMillis[k - 1] = ms;
            if (how.keepLogits()) logits.add(java.util.Arrays.copyOf(out.getFirst().get("logits").toHost().toDoubleArray(), config.vocabSize()));
            if (!seqs.take(next) || k == n - 1) break;
            t0 = System.nanoTime();
            NDArray tokens = run.ragged() ? NDArray.zeros(DType.I64, batch) : stepTokens;   // the page-locked arrays are the decode's
            for (int b = 0; b < batch; b++) tokens.set(b, next[b]);
            var in = new HashMap<String, ArrayLike>(stepInputs(run, k + 1));
            in.put("tokens", tokens);
            if (!run.ragged()) {
                stepPosition.set(0, run.slot(k + 1));
                in.put("position", stepPosition);
            }
            out = run.decode().run(calls(in));
        }
        return new Result(seqs.sequences(), logits, prefillMillis, java.util.Arrays.copyOf(stepMillis, k));
    }

    /**
     * Decode call {@code k}'s inputs but its tokens: its slot ({@code position}; a new host array each call, not the
     * page-locked stepPosition: the copy engine reads a page-locked array after run returns, while a queued generation
     * has already moved on to the next step) and, ragged, each sequence's position.
     */
    private static Map<String, NDArray> stepInputs(Run run, int k) {
        var in = new HashMap<String, NDArray>();
        in.put("position", NDArray.of(new int[]{run.slot(k)}, 1));
        if (run.ragged()) {
            int[] positions = new int[run.lengths().length];
            for (int b = 0; b < positions.length; b++) positions[b] = run.position(b, k);
            in.put(LlamaDecoder.POSITIONS, NDArray.of(positions, positions.length));
        }
        return in;
    }

    /**
     * {@link #generate(int[][], Generation)}, queued: the steps are queued a chunk at a time (all of them where nothing
     * needs the tokens before the end), and each chunk's tokens are read from the last call's history once.
     */
    private Result generateQueued(Run run, Generation how) {
        int n = how.maxNew();
        var seqs = new Sequences(batch, n, how);
        long t0 = System.nanoTime();
        var out = prefillAndStart(run);
        int[] first = next(out, 0);   // waits for the prefill: its time is the first token's
        double prefillMillis = (System.nanoTime() - t0) / 1e6;
        boolean going = seqs.take(first);
        int chunk = how.readsAsItGoes() ? how.checkEvery() : n;
        long t1 = System.nanoTime();
        var last = out;
        int k = 1;   // the step the next decode call makes
        while (going && k < n) {
            int from = k;
            for (int upto = Math.min(n, k + chunk); k < upto; k++) {
                // each rank's step reads the token its last call left on the device (the runtime copies it in first)
                var in = new ArrayList<Map<String, ArrayLike>>();
                for (int r = 0; r < localRanks; r++) {
                    var call = new HashMap<String, ArrayLike>(stepInputs(run, k));
                    call.put("tokens", last.get(r).get("next"));
                    in.add(call);
                }
                last = run.decode().run(in);
            }
            long[] history = history(last);
            for (int j = from; j < k && going; j++) {
                int[] next = new int[batch];
                for (int b = 0; b < batch; b++) next[b] = (int) history[b * maxLen + run.slot(j)];
                going = seqs.take(next);
            }
        }
        double[] stepMillis = new double[k - 1];
        java.util.Arrays.fill(stepMillis, (System.nanoTime() - t1) / 1e6 / Math.max(1, k - 1));
        return new Result(seqs.sequences(), List.of(), prefillMillis, stepMillis);
    }

    /** The decode's {@value LlamaDecoder#HISTORY} after a call (waits for it), the same on every local rank (else refused). */
    private long[] history(List<Map<String, DeviceArray>> call) {
        long[] first = null;
        for (int r = 0; r < localRanks; r++) {
            NDArray h = call.get(r).get(LlamaDecoder.HISTORY).toHost();
            long[] history = new long[batch * maxLen];
            for (int i = 0; i < history.length; i++) history[i] = (long) h.get(i);
            if (first == null) first = history;
            else if (!java.util.Arrays.equals(history, first))
                throw new GatunRuntimeException("the ranks disagree on the generated tokens: rank " + r + "'s differ from the first rank's");
        }
        return first;
    }

    /** Each sequence's tokens as the steps give them, until it generates a stop token; the listener told of each step. */
    private static final class Sequences {
        private final int[][] tokens;
        private final int[] length;
        private final Generation how;
        private int step, going;

        Sequences(int batch, int n, Generation how) {
            this.tokens = new int[batch][n];
            this.length = new int[batch];
            this.how = how;
            this.going = batch;
        }

        /** Takes the next step's tokens (those of sequences that have ended are dropped); whether any sequence goes on. */
        boolean take(int[] next) {
            int[] told = new int[tokens.length];
            for (int b = 0; b < tokens.length; b++) {
                boolean ended = length[b] > 0 && how.stopTokens().contains(tokens[b][length[b] - 1]);
                if (ended) {
                    told[b] = Generation.ENDED;
                    continue;
                }
                tokens[b][length[b]++] = told[b] = next[b];
                if (how.stopTokens().contains(next[b])) going--;
            }
            if (how.listener() != null) how.listener().step(step, told);
            step++;
            return going > 0;
        }

        int[][] sequences() {
            int[][] out = new int[tokens.length][];
            for (int b = 0; b < tokens.length; b++) out[b] = java.util.Arrays.copyOf(tokens[b], length[b]);
            return out;
        }
    }

    /**
     * Where the time of each phase goes: the prompts' prefill and the first decode step after it (greedy), each profiled
     * step by step ({@link Session#profile}).
     */
    public List<Profile> profile(int[][] prompts) {
        var run = plan(prompts, Generation.of(2));
        var first = prefill.profile(calls(prefillInputs(run)));
        var out = prefillAndStart(run);
        var in = new HashMap<String, ArrayLike>(stepInputs(run, 1));
        in.put("tokens", LlamaDecoder.stepTokens(next(out, 0)));
        var second = run.decode().profile(calls(in));
        return List.of(first, second);
    }

    /** Each sequence's greedy token {@code k} from a call's outputs, the same on every local rank (else refused). */
    private int[] next(List<Map<String, DeviceArray>> out, int k) {
        int[] first = null;
        for (int r = 0; r < out.size(); r++) {
            NDArray next = stepNext;
            out.get(r).get("next").copyTo(next);
            int[] tokens = new int[batch];
            for (int b = 0; b < batch; b++) tokens[b] = (int) next.get(b);
            if (first == null) first = tokens;
            else for (int b = 0; b < batch; b++)
                if (tokens[b] != first[b])
                    throw new GatunRuntimeException("the ranks disagree on token " + k + " of sequence " + b + ": " + first[b] + " against " + tokens[b]);
        }
        return first;
    }

    /**
     * The bytes of the two plans' pools, as the plans print them, but for the decode's states: they are the KV cache,
     * which a caller counts on its own (the weights and the call's inputs are apart too).
     */
    public long poolBytes() {
        long sum = 0;
        for (Session s : List.of(prefill, decode))
            for (var p : s.plan().pools()) if (p.kind() != dev.gatun.planner.Pool.Kind.STATE) sum += p.bytes();
        return sum;
    }

    /**
     * The layout of a generation of {@code how} after {@code prompts}; refuses one this generator was not compiled for:
     * prompts of another batch, empty or longer than compiled for, more tokens than the cache holds after the longest,
     * a stop token outside the vocabulary, a drawn generation on a greedy generator ({@link Generation} refuses the
     * rest).
     */
    private Run plan(int[][] prompts, Generation how) {
        if (prompts.length != batch) throw new GatunRuntimeException("generate: the generator was compiled for a batch of " + batch + " prompts, not " + prompts.length);
        int[] lengths = new int[batch];
        int longest = 0;
        for (int b = 0; b < batch; b++) {
            lengths[b] = prompts[b].length;
            if (lengths[b] < 1 || lengths[b] > promptLength)
                throw new GatunRuntimeException("generate: prompt " + b + " has " + lengths[b] + " tokens: the prefill was compiled for 1 to " + promptLength);
            longest = Math.max(longest, lengths[b]);
        }
        int n = how.maxNew();
        if (longest + n - 1 > maxLen)
            throw new GatunRuntimeException("generate: " + n + " new tokens after " + longest + (batch > 1 ? " (the longest prompt)" : "") + " do not fit the cache of "
                    + maxLen + " positions; ask for at most " + (maxLen - longest + 1) + " or make the generator with a larger maxLen");
        for (int t : how.stopTokens())
            if (t >= config.vocabSize()) throw new GatunRuntimeException("generate: stop token " + t + " is not in the vocabulary of " + config.vocabSize() + " tokens");
        var rows = how.samplingOf(batch);
        if (!sampling && rows.stream().anyMatch(r -> !r.isPlainGreedy()))
            throw new GatunRuntimeException("generate: this generator was made for greedy tokens; make it with sampling (the last argument true) to draw them as "
                    + rows.stream().filter(r -> !r.isPlainGreedy()).findFirst().orElseThrow() + " says");
        final int start = longest;
        boolean ragged = java.util.Arrays.stream(lengths).anyMatch(l -> l != start);
        return new Run(prompts, lengths, start, ragged ? raggedDecode() : decode, ragged, rows);
    }

    /** The prefill's inputs for a generation: the padded prompts and where each ends, with sampling its draws' parameters. */
    private Map<String, NDArray> prefillInputs(Run run) {
        var in = LlamaDecoder.raggedPrompts(run.prompts(), promptLength, sampling);
        if (sampling) {
            in.put(LlamaDecoder.SAMPLING, Sampling.parameters(run.sampling()));
            in.put(LlamaDecoder.SEEDS, Sampling.seeds(run.sampling()));
        }
        return in;
    }

    /** The prompts' prefill call, its caches bound to the decode's states; its outputs (on the device). */
    private List<Map<String, DeviceArray>> prefillAndStart(Run run) {
        var out = prefill.run(calls(prefillInputs(run)));
        startDecode(run, out);
        return out;
    }

    /** Each local rank's inputs: the call's (the weights, tables and caches are bound). */
    private List<Map<String, ArrayLike>> calls(Map<String, ? extends ArrayLike> call) {
        var out = new ArrayList<Map<String, ArrayLike>>();
        for (int r = 0; r < localRanks; r++) out.add(new HashMap<>(call));
        return out;
    }

    /**
     * The prefill's caches (its outputs, on the device) bound to the decode session's states, all of a rank at once;
     * with sampling, the draws' parameters and the context (the prompts' tokens); ragged, each sequence's gap.
     */
    private void startDecode(Run run, List<Map<String, DeviceArray>> prefilled) {
        var fixed = new HashMap<String, NDArray>();
        if (sampling) {
            fixed.put(LlamaDecoder.SAMPLING, Sampling.parameters(run.sampling()));
            fixed.put(LlamaDecoder.SEEDS, Sampling.seeds(run.sampling()));
            fixed.put(LlamaDecoder.CONTEXT, LlamaDecoder.context(run.prompts(), maxLen));
        }
        if (run.ragged()) fixed.put(LlamaDecoder.GAP, LlamaDecoder.gap(run.lengths(), run.start(), maxLen, dtype));
        for (int r = 0; r < localRanks; r++) {
            var values = new HashMap<String, ArrayLike>(fixed);
            for (int l = 0; l < config.layers(); l++)
                for (String kv : List.of("k", "v")) values.put("cache." + l + "." + kv, prefilled.get(r).get("cache." + l + "." + kv));
            run.decode().bind(run.decode().ranks().get(r), values);
        }
    }

    /** Where the first local rank runs ("cuda:0", "host"). */
    public String device() { return prefill.device(); }

    @Override public void close() {
        try (prefill; decode; var ragged = raggedDecode) { }
    }
}
