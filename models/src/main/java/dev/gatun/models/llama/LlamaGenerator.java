package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Greedy generation with {@link LlamaDecoder}'s two phases, each compiled once: the prompt's prefill, then one decode
 * call per token, each call taking the caches the last one returned. {@code shards} holds the weights of the ranks
 * this process runs ({@link LlamaDecoder#weights}): all {@code tp} of them for the host backend's simulated ranks, or
 * this rank's one where each rank is a session of its own. The weights are bound to both sessions once (copied into
 * memory the sessions keep, on a GPU its memory), so a call passes only the token, its position's tables and masks,
 * and the caches. Closing closes both sessions.
 */
public final class LlamaGenerator implements AutoCloseable {
    /**
     * The new tokens; each step's logits of the last position (of the first local rank; empty unless asked for); and
     * the host wall time of the prefill call and of each decode call, each until its token was on the host.
     */
    public record Result(int[] tokens, List<double[]> logits, double prefillMillis, double[] stepMillis) {}

    private final LlamaConfig config;
    private final List<Map<String, NDArray>> shards;
    private final int promptLength, maxLen, tp;
    private final DType dtype;
    private final Session prefill, decode;

    public LlamaGenerator(LlamaConfig config, List<Map<String, NDArray>> shards, int promptLength, int maxLen, int tp, DType dtype,
                          CompileOptions options) {
        this.config = config;
        this.shards = List.copyOf(shards);
        this.promptLength = promptLength;
        this.maxLen = maxLen;
        this.tp = tp;
        this.dtype = dtype;
        this.prefill = Session.compile(LlamaDecoder.prefill(config, promptLength, maxLen, tp, dtype), options);
        Session d;
        try {
            d = Session.compile(LlamaDecoder.decode(config, maxLen, tp, dtype), options);
        } catch (RuntimeException e) {
            prefill.close();
            throw e;
        }
        this.decode = d;
        try {
            for (Session s : List.of(prefill, decode))
                for (int i = 0; i < this.shards.size(); i++) {
                    int rank = s.ranks().get(i);
                    for (var w : this.shards.get(i).entrySet()) s.bind(rank, w.getKey(), w.getValue());
                }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /** The prompt's greedy continuation by {@code n} tokens, with each step's logits. */
    public Result generate(int[] prompt, int n) { return generate(prompt, n, true); }

    /**
     * The prompt's greedy continuation by {@code n} tokens (the prompt's length is the one compiled for). Outputs stay
     * in the sessions' memory (on a GPU, the device's): each call's caches are the next call's inputs as they are, and
     * only the token (and with {@code keepLogits} the logits) comes to the host.
     */
    public Result generate(int[] prompt, int n, boolean keepLogits) {
        if (prompt.length != promptLength) throw new IllegalArgumentException("the prefill was compiled for " + promptLength + " tokens, not " + prompt.length);
        if (promptLength + n - 1 > maxLen) throw new IllegalArgumentException(n + " tokens after " + promptLength + " do not fit the cache of " + maxLen);
        long t0 = System.nanoTime();
        var out = prefill.run(calls(LlamaDecoder.prompt(config, prompt, maxLen, tp, dtype), null));
        int[] tokens = new int[n];
        double prefillMillis = 0;
        double[] stepMillis = new double[Math.max(0, n - 1)];
        var logits = new ArrayList<double[]>();
        for (int k = 0; k < n; k++) {
            tokens[k] = (int) out.getFirst().get("next").toHost().get(0);
            double ms = (System.nanoTime() - t0) / 1e6;
            if (k == 0) prefillMillis = ms;
            else stepMillis[k - 1] = ms;
            for (int r = 1; r < out.size(); r++) {
                int other = (int) out.get(r).get("next").toHost().get(0);
                if (other != tokens[k]) throw new GatunRuntimeException("the ranks disagree on token " + k + ": " + tokens[k] + " against " + other);
            }
            if (keepLogits) logits.add(out.getFirst().get("logits").toHost().toDoubleArray());
            if (k == n - 1) break;
            t0 = System.nanoTime();
            out = decode.run(calls(LlamaDecoder.step(config, tokens[k], promptLength + k, maxLen, dtype), out));
        }
        return new Result(tokens, logits, prefillMillis, stepMillis);
    }

    /** Each local rank's inputs: the call's inputs and the caches its last call returned (the weights are bound). */
    private List<Map<String, ArrayLike>> calls(Map<String, NDArray> call, List<Map<String, DeviceArray>> last) {
        var out = new ArrayList<Map<String, ArrayLike>>();
        for (int r = 0; r < shards.size(); r++) {
            var in = new HashMap<String, ArrayLike>(call);
            if (last != null)
                for (int l = 0; l < config.layers(); l++)
                    for (String kv : List.of("k", "v")) in.put("cache." + l + "." + kv, last.get(r).get("cache." + l + "." + kv));
            out.add(in);
        }
        return out;
    }

    /** Where the first local rank runs ("cuda:0", "host"). */
    public String device() { return prefill.device(); }

    @Override public void close() {
        try (prefill; decode) { }
    }
}
