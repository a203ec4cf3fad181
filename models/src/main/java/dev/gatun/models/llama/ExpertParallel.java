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
 *   <li>the pairs ordered by destination, stably (a top-k of the negated destinations over all P = N * k pairs, which
 *       keeps equal keys in index order), and the rows for each destination counted (a comparison with each member's
 *       number, summed); the destinations, local ids and sort key computed over the ids' own shape [N, k], one
 *       pointwise launch;</li>
 *   <li>dispatch: the pairs' token rows (picked from x by each pair's token, {@code q / k}, so no [P, H] copy of x is
 *       made; the index_select writes them into the all_to_all's symmetric input itself) and local ids sent by those counts ({@link Tensor#allToAll(String, Tensor,
 *       long)}): each member receives up to {@code capacity} rows (the rest zero: expert 0 on zeros, computed and
 *       dropped);</li>
 *   <li>the local experts on the received rows ({@code expert}: rows [capacity, H] and local ids [capacity] to
 *       results [capacity, H]);</li>
 *   <li>combine: the results sent back by the counts received, which puts them in the order the pairs were sent;
 *       unsorted by the inverse order (a second top-k); weighted by the router and summed over each token's k
 *       choices.</li>
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
        Tensor localId = ids.sub(dest.mul(g.scalar(local, DType.I64))).reshape(p, 1);
        // the pairs by destination, equal destinations in pair order; and the rows for each member
        Tensor order = dest.cast(DType.F64).neg().reshape(p).topk(p).indices();
        Tensor counts = dest.reshape(1, p).eq(g.arange(DType.I64, members).reshape(members, 1)).cast(DType.I64).sum(false, 1);
        // each sent row is its pair's token's row, picked from x itself (pair q is token q / k's: exact in f64 below 2^52
        // pairs, truncated), so no [N * k, H] copy of x is made first
        Tensor rows = x.indexSelect(0, order.cast(DType.F64).div(g.scalar(k, DType.F64)).cast(DType.I64));
        var sent = rows.allToAll(group, counts, capacity);
        // the ids picked as [p, 1] rows, so the index_select writes the all_to_all's input itself (no reshaped view to copy)
        var sentIds = localId.indexSelect(0, order).allToAll(group, counts, capacity);
        Tensor done = expert.apply(sent.values(), sentIds.values().reshape(capacity));
        // back to the senders, in the order they sent; then each pair to its place, weighted, summed over the choices
        Tensor back = done.allToAll(group, sent.counts(), p).values();
        Tensor inverse = order.cast(DType.F64).neg().topk(p).indices();
        // the weights reshaped before the cast, so the cast's reader is the product itself (which computes it, broadcast)
        Tensor w = weights.dtype() == x.dtype() ? weights.reshape(n, k, 1) : weights.reshape(n, k, 1).cast(x.dtype());
        return back.indexSelect(0, inverse).reshape(n, k, h).mul(w).sum(false, 1);
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
