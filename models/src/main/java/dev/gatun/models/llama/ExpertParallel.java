package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;

import java.util.function.BiFunction;

/**
 * Expert parallelism: a mixture-of-experts layer whose experts are split evenly over the members of a process group
 * (a mesh axis), each token's (token, choice) pairs sent to the members that hold their experts and the results sent
 * back, with two uneven all-to-alls whose row counts are computed on the device, so nothing waits for the host and a
 * captured graph holds the whole layer.
 *
 * <p>For this rank's tokens x [N, H] and the router's choice (weights [N, k], global expert ids [N, k] i64), with
 * {@code E} experts of which member j of the group holds {@code [j * E / m, (j + 1) * E / m)} (m members):
 * <ol>
 *   <li>each pair's destination, {@code id / (E / m)} (counted as how many member boundaries the id reaches), and its
 *       expert's local id on that member, {@code id - destination * E / m};</li>
 *   <li>the pairs ordered by destination, stably, over all P = N * k pairs: each pair's slot, each slot's token and
 *       local id ({@link Sorted}; by counting up to {@link #COUNTING_MAX_PAIRS} pairs, two row reductions, else by two
 *       top-k sorts); and the rows for each destination counted (a comparison with each member's number, summed); the
 *       destinations and local ids computed over the ids' own shape [N, k], one pointwise launch;</li>
 *   <li>dispatch: each slot's token row (picked from x, so no [P, H] copy of x is made; the index_select writes it
 *       into the all_to_all's symmetric input itself) and local id sent by those counts ({@link Tensor#allToAll(String,
 *       Tensor, long)}): each member receives up to {@code capacity} rows (the rest zero: expert 0 on zeros, computed
 *       and dropped);</li>
 *   <li>the local experts on the received rows ({@code expert}: rows [capacity, H] and local ids [capacity] to
 *       results [capacity, H]);</li>
 *   <li>combine: the results sent back by the counts received, which puts them in slot order; each pair's result read
 *       at its slot, weighted by the router and summed over each token's k choices (one launch: the lowering computes
 *       the weights' cast and the products inside the sum, which reads the results through the slots).</li>
 * </ol>
 * A member that would receive more than {@code capacity} rows fails the call at run time, on every member, naming the
 * counts (never truncated); {@code N * k * m} rows always suffice. Under a mesh whose other axis splits each expert's
 * width (tensor parallelism), {@code expert} sums its partial results over that axis itself.
 */
public final class ExpertParallel {
    private ExpertParallel() {}

    /**
     * The layer's output [N, H] for this rank's tokens {@code x} [N, H]: {@code sum_j weights[n, j] * expert_{ids[n,
     * j]}(x[n])}, the experts split over {@code group} ({@code members} of them; {@code experts} in all, a multiple of
     * {@code members}).
     */
    public static Tensor layer(GraphBuilder g, Tensor x, Tensor weights, Tensor ids, int experts, String group, int members, long capacity,
                               BiFunction<Tensor, Tensor, Tensor> expert) {
        return layer(g, x, weights, ids, experts, group, members, capacity, expert, COUNTING_MAX_PAIRS);
    }

    /** {@link #layer}, the pairs ordered by counting up to {@code countingMaxPairs} pairs, by sorting past it. */
    static Tensor layer(GraphBuilder g, Tensor x, Tensor weights, Tensor ids, int experts, String group, int members, long capacity,
                        BiFunction<Tensor, Tensor, Tensor> expert, int countingMaxPairs) {
        long[] xs = x.shape().sizes(), is = ids.shape().sizes();
        if (xs.length != 2 || is.length != 2 || is[0] != xs[0] || !java.util.Arrays.equals(weights.shape().sizes(), is) || ids.dtype() != DType.I64)
            throw new GraphException("expert parallelism: tokens [N, H], router weights [N, k] and i64 expert ids [N, k], not "
                    + x.shape() + ", " + weights.shape() + " and " + ids.dtype().shortName() + ids.shape());
        if (members < 1 || experts % members != 0)
            throw new GraphException("expert parallelism over '" + group + "': " + experts + " experts do not split evenly over " + members + " members");
        if (capacity < 1) throw new GraphException("expert parallelism over '" + group + "': the capacity must be at least 1, not " + capacity);
        int n = (int) xs[0], h = (int) xs[1], k = (int) is[1], p = n * k, local = experts / members;
        // each pair's destination and local id over the ids' own shape [N, k] (one pointwise launch with the sort key)
        Tensor dest = ids.mul(g.scalar(0, DType.I64));
        for (int j = 1; j < members; j++) dest = dest.add(ids.ge(g.scalar((double) j * local, DType.I64)).cast(DType.I64));
        Tensor localId = ids.sub(dest.mul(g.scalar(local, DType.I64)));
        Tensor counts = dest.reshape(1, p).eq(g.arange(DType.I64, members).reshape(members, 1)).cast(DType.I64).sum(false, 1);
        // the pairs by destination, equal destinations in pair order: each slot's token and local id, each pair's slot
        Sorted sorted = p <= countingMaxPairs ? counted(g, dest, localId, n, k, local) : bySort(g, dest, localId, n, k);
        // each sent row is its slot's token's row, picked from x itself: no [N * k, H] copy of x is made first, and the
        // index_select writes the all_to_all's input in symmetric memory
        var sent = x.indexSelect(0, sorted.token()).allToAll(group, counts, capacity);
        var sentIds = sorted.localId().allToAll(group, counts, capacity);
        Tensor done = expert.apply(sent.values(), sentIds.values().reshape(capacity));
        // back to the senders, in the order they sent; then each pair to its place, weighted, summed over the choices
        Tensor back = done.allToAll(group, sent.counts(), p).values();
        // the weights reshaped before the cast, so the cast's reader is the product itself (which computes it, broadcast)
        Tensor w = weights.dtype() == x.dtype() ? weights.reshape(n, k, 1) : weights.reshape(n, k, 1).cast(x.dtype());
        Tensor weighted = back.indexSelect(0, sorted.slot()).reshape(n, k, h).mul(w);
        return k == 1 ? weighted.reshape(n, h) : weighted.sum(false, 1);   // one choice: nothing to sum (no launch of its own)
    }

    /**
     * The most (token, choice) pairs a step orders by counting ({@link #counted}: two [P, P] comparisons summed, about
     * 16 million at this bound, a few microseconds on a GPU) rather than by a sort ({@link #bySort}: two top-k
     * launches, and a pointwise one for their keys).
     */
    static final int COUNTING_MAX_PAIRS = 4096;

    /**
     * The pairs in destination order (equal destinations in pair order): {@code token} [P] i64, slot i's token;
     * {@code localId} [P, 1] i64, slot i's expert on its destination; {@code slot} [P] i64, pair q's slot.
     */
    record Sorted(Tensor token, Tensor localId, Tensor slot) {}

    /**
     * {@link Sorted} by counting: pair q's slot is how many pairs have a smaller key {@code dest * P + q} (keys are
     * distinct, so this is a stable sort by destination), one row reduction whose comparisons compute the keys
     * themselves; slot i's token and local id, packed as {@code token * local + id} (the most experts a member holds
     * bound the id), are the sum over the pairs of {@code [slot[q] == i] * packed[q]}, one row reduction, unpacked by
     * its row members (the quotient exact in f64 below 2^52, truncated). No sort and no index_select: at 128 tokens of
     * top-2, two launches where the sorts took four.
     */
    static Sorted counted(GraphBuilder g, Tensor dest, Tensor localId, int n, int k, int local) {
        int p = n * k;
        Tensor d = dest.reshape(p), q = g.arange(DType.I64, p), big = g.scalar(p, DType.I64), many = g.scalar(local, DType.I64);
        Tensor before = d.reshape(1, p).mul(big).add(q.reshape(1, p)).lt(d.reshape(p, 1).mul(big).add(q.reshape(p, 1)));   // [q, q']: q' first
        Tensor slot = before.cast(DType.I64).sum(false, 1);
        double[] base = new double[n];
        for (int t = 0; t < n; t++) base[t] = (double) t * local;
        Tensor packed = localId.add(g.constant(DType.I64, new long[]{n, 1}, base)).reshape(1, p);   // token t's pairs: t * local + id
        Tensor sorted = slot.reshape(1, p).eq(q.reshape(p, 1)).cast(DType.I64).mul(packed).sum(true, 1);    // [P, 1]: slot i's
        Tensor token = sorted.cast(DType.F64).div(g.scalar(local, DType.F64)).cast(DType.I64);
        return new Sorted(token.reshape(p), sorted.sub(token.mul(many)), slot);
    }

    /**
     * {@link Sorted} by sorting: a stable top-k of the negated destinations gives the pairs in slot order (pair q is
     * token q / k's: exact in f64 below 2^52 pairs, truncated), a second top-k of the negated order the slots.
     */
    static Sorted bySort(GraphBuilder g, Tensor dest, Tensor localId, int n, int k) {
        int p = n * k;
        Tensor order = dest.cast(DType.F64).neg().reshape(p).topk(p).indices();
        Tensor token = order.cast(DType.F64).div(g.scalar(k, DType.F64)).cast(DType.I64);
        Tensor slot = order.cast(DType.F64).neg().topk(p).indices();
        return new Sorted(token, localId.reshape(p, 1).indexSelect(0, order), slot);
    }

    /**
     * The local experts of a member, gated (SwiGLU: {@code silu(gate) * up}, then down), as {@link #layer}'s
     * {@code expert}: {@code gateUp} [local, 2 * width, hidden] (each expert's gate rows, then its up rows) and
     * {@code down} [local, hidden, width], applied to the received rows [capacity, hidden] by their local ids
     * [capacity]. Routed where the capacity is at most the local experts: each row multiplies its own expert's weights
     * ({@code expert_matmul}), one expert's weights read a row. Else dense: every local expert on every row, each row's
     * result kept from its own expert only (a one-hot mask of its id), so each expert's weights are read once, by
     * products of many rows, where the routed form would read an expert again for each of its rows (Mixtral's shape at
     * EP 2: 8 tokens a rank are 32 rows, 4 local experts; measured 2.5 ms routed, every row streaming 352 MB). Padding
     * rows (id 0) are computed either way and dropped by the combine.
     */
    public static BiFunction<Tensor, Tensor, Tensor> swiGluExperts(GraphBuilder g, Tensor gateUp, Tensor down) {
        long[] gs = gateUp.shape().sizes(), ds = down.shape().sizes();
        if (gs.length != 3 || ds.length != 3 || gs[0] != ds[0] || gs[1] != 2 * ds[2] || gs[2] != ds[1])
            throw new GraphException("expert parallelism: gate|up [local, 2 * width, hidden] and down [local, hidden, width], not "
                    + gateUp.shape() + " and " + down.shape());
        int local = (int) gs[0], width = (int) ds[2], hidden = (int) ds[1];
        return (rows, ids) -> {
            long cap = rows.shape().sizes()[0];
            if (cap <= local) return routedSwiGlu(rows, gateUp, down, ids.reshape(cap, 1)).reshape(cap, hidden);
            Tensor mine = ids.reshape(cap, 1).eq(g.arange(DType.I64, local).reshape(1, local)).cast(rows.dtype());   // [cap, local]
            return denseSwiGlu(rows, gateUp.reshape((long) local * 2 * width, hidden), down, mine);
        };
    }

    /**
     * Each row of {@code x} [rows, hidden] through the experts {@code ids} [rows, k] pick, by {@code expert_matmul}: gate |
     * up of {@code gateUp} [experts, 2 * width, hidden], SwiGLU, down of {@code down} [experts, hidden, width];
     * [rows, k, hidden].
     */
    static Tensor routedSwiGlu(Tensor x, Tensor gateUp, Tensor down, Tensor ids) {
        return swiGlu(x.expertMatmul(gateUp, ids), (int) down.shape().sizes()[2]).expertMatmul(down, ids);
    }

    /**
     * Every expert on every row of {@code x} [rows, hidden] (gate | up of {@code gateUp} [experts * 2 * width, hidden],
     * each expert's rows side by side; SwiGLU; down of {@code down} [experts, hidden, width]), each expert's output
     * weighted by {@code weights} [rows, experts] (zero where the row does not take it) and summed over the experts;
     * [rows, hidden].
     */
    static Tensor denseSwiGlu(Tensor x, Tensor gateUp, Tensor down, Tensor weights) {
        long rows = x.shape().sizes()[0];
        int experts = (int) down.shape().sizes()[0], width = (int) down.shape().sizes()[2];
        Tensor both = x.matmul(gateUp.transpose(0, 1)).reshape(rows, experts, 2 * width);
        Tensor act = swiGlu(both, width).mul(weights.reshape(rows, experts, 1));
        // [experts, rows, width] by each expert's down^T [experts, width, hidden], summed over the experts
        return act.transpose(0, 1).matmul(down.transpose(1, 2)).sum(0);
    }

    /** {@code silu(gate) * up} of gate | up side by side along the last of three dimensions, {@code width} each. */
    private static Tensor swiGlu(Tensor both, int width) { return both.slice(2, 0, width).silu().mul(both.slice(2, width, 2 * width)); }
}
