package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * {@code topk}: the {@code k} largest elements along the last dimension, largest first, and their positions, as
 * {@code torch.topk(x, k)} on a CPU: two outputs, the values ({@code x}'s dtype, shape {@code [..., k]}) and the
 * indices (always i64, shape {@code [..., k]}). Of equal elements the lower index comes first, and a NaN counts as
 * larger than any number (as in {@link Argmax}), so NaNs come first, in index order. The input is a floating or
 * integer tensor of rank 1 or more whose last dimension is static; k is 1 to that size.
 *
 * <p>This file is all of the op: its attribute, its type inference, its reference (a stable sort of each row's
 * positions, the obvious statement) and its host body (a selection of the k best in one pass, O(n log k) compares and
 * at most k moves a kept element). The CUDA backend's kernel ({@code CudaTopK}) picks the same elements in the same
 * order.
 */
public final class TopK implements OpSpec {
    public static final TopK SPEC = new TopK();

    private TopK() {}

    @Override public String name() { return "topk"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("k", Attribute.Kind.INT)); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        long k = attrs.integer("k");
        if (inputs.size() != 1) throw new GraphException("topk takes one tensor, got " + inputs.size());
        Operand x = inputs.getFirst();
        String call = "topk(" + x.describe() + ", k=" + k + ")";
        int rank = x.type().rank();
        if (rank < 1) throw new GraphException(call + ": " + x.label() + " is a scalar; it has no dimension to take the largest along");
        DType t = x.type().dtype();
        if (t == DType.BOOL) throw new GraphException(call + ": " + x.label() + " is bool; cast it to a number first");
        Dim last = x.type().shape().dim(rank - 1);
        if (!last.isStatic()) throw new GraphException(call + ": the last dimension of " + x.label() + " is symbolic (" + last + "); it must be static");
        if (last.size() > Integer.MAX_VALUE)
            throw new GraphException(call + ": rows of " + last.size() + " elements; topk takes rows of at most 2^31 - 1");
        if (k < 1 || k > last.size())
            throw new GraphException(call + ": k=" + k + " is outside 1 to " + last.size() + ", the size of the last dimension of " + x.label());
        var dims = new ArrayList<>(x.type().shape().dims().subList(0, rank - 1));
        dims.add(Dim.of(k));
        Shape out = new Shape(dims);
        return List.of(new TensorType(t, out), new TensorType(DType.INT64, out));
    }

    /** Each row's positions sorted (stable: equal keys keep index order) by falling value, NaN first; the first k. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.getFirst(), values = outputs.get(0), indices = outputs.get(1);
        int k = (int) attrs.integer("k"), cols = (int) x.shape()[x.shape().length - 1];
        long rows = values.numel() / k;
        boolean exact = !x.dtype().isFloating();
        for (long r = 0; r < rows; r++) {
            long base = r * cols;
            Integer[] order = new Integer[cols];
            for (int j = 0; j < cols; j++) order[j] = j;
            Arrays.sort(order, (a, b) -> exact ? Long.compare(x.getLong(base + b), x.getLong(base + a)) : -compareNaNLargest(x.get(base + a), x.get(base + b)));
            for (int i = 0; i < k; i++) copy(x, base + order[i], values, indices, r * k + i, order[i], exact);
        }
    }

    /** One pass a row keeping the k best so far in order: a later element enters only where it is strictly better. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.getFirst(), values = outputs.get(0), indices = outputs.get(1);
        int k = (int) attrs.integer("k"), cols = (int) x.shape()[x.shape().length - 1];
        long rows = values.numel() / k;
        boolean exact = !x.dtype().isFloating();
        int[] kept = new int[k];
        for (long r = 0; r < rows; r++) {
            long base = r * cols;
            int n = 0;
            for (int j = 0; j < cols; j++) {
                // the first kept place whose element this one beats (strictly: on a tie the earlier index stays ahead)
                int lo = 0, hi = n;
                while (lo < hi) {
                    int mid = (lo + hi) >>> 1;
                    if (beats(x, base + j, base + kept[mid], exact)) hi = mid;
                    else lo = mid + 1;
                }
                if (lo >= k) continue;
                int moved = Math.min(n, k - 1) - lo;
                System.arraycopy(kept, lo, kept, lo + 1, moved);
                kept[lo] = j;
                n = Math.min(n + 1, k);
            }
            for (int i = 0; i < k; i++) copy(x, base + kept[i], values, indices, r * k + i, kept[i], exact);
        }
    }

    /** Whether element {@code a} ranks strictly ahead of element {@code b} by value alone (NaN the largest). */
    private static boolean beats(HostTensor x, long a, long b, boolean exact) {
        return exact ? x.getLong(a) > x.getLong(b) : compareNaNLargest(x.get(a), x.get(b)) > 0;
    }

    /** Compares by value, any NaN above every number and equal to another NaN; -0.0 and 0.0 equal, as torch compares them. */
    private static int compareNaNLargest(double a, double b) {
        boolean na = Double.isNaN(a), nb = Double.isNaN(b);
        if (na || nb) return na == nb ? 0 : na ? 1 : -1;
        return a > b ? 1 : a < b ? -1 : 0;
    }

    private static void copy(HostTensor x, long from, HostTensor values, HostTensor indices, long to, long index, boolean exact) {
        if (exact) values.setLong(to, x.getLong(from));
        else values.set(to, x.get(from));
        indices.setLong(to, index);
    }
}
