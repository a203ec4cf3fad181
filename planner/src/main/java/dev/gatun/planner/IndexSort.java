package dev.gatun.planner;

import java.util.function.IntBinaryOperator;

/**
 * Sorts the indices {@code 0..n-1} of a table by a comparator of two indices, in primitive {@code int} arrays: a pool of
 * a large graph holds tens of thousands of items, and the boxed {@code Integer[]} with comparator chains this replaces
 * was a visible part of planning it. A stable merge sort, so ties keep index order as the list sorts did. Sorting by one
 * key of a planner's size (work indices: below 2^31) packs key and index into one {@code long} and sorts those
 * ({@link #byKey}): no comparator call per comparison, which was most of the pools' sorting time.
 */
final class IndexSort {
    private IndexSort() {}

    /** The indices {@code 0..n-1} in the order of {@code compare} (negative, zero or positive as for a Comparator), stable. */
    static int[] sorted(int n, IntBinaryOperator compare) {
        int[] a = new int[n], tmp = new int[n];
        for (int i = 0; i < n; i++) a[i] = i;
        for (int width = 1; width < n; width *= 2) {
            for (int lo = 0; lo < n; lo += 2 * width) {
                int mid = Math.min(lo + width, n), hi = Math.min(lo + 2 * width, n), i = lo, j = mid, k = lo;
                while (i < mid && j < hi) tmp[k++] = compare.applyAsInt(a[j], a[i]) < 0 ? a[j++] : a[i++];
                while (i < mid) tmp[k++] = a[i++];
                while (j < hi) tmp[k++] = a[j++];
            }
            int[] t = a; a = tmp; tmp = t;
        }
        return a;
    }

    /**
     * The indices {@code 0..n-1} by ascending {@code key[i]}, ties by ascending index ({@code fallingTies}: descending),
     * as {@link #sorted} with that comparator gives them.
     */
    static int[] byKey(long[] key, boolean fallingTies) {
        int n = key.length;
        boolean packable = true;
        for (long k : key) packable &= k >= 0 && k <= Integer.MAX_VALUE;
        if (!packable) return sorted(n, (i, j) -> {
            int c = Long.compare(key[i], key[j]);
            return c != 0 ? c : fallingTies ? Integer.compare(j, i) : Integer.compare(i, j);
        });
        long[] packed = new long[n];
        for (int i = 0; i < n; i++) packed[i] = key[i] << 32 | (fallingTies ? n - 1 - i : i);
        java.util.Arrays.sort(packed);
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            int low = (int) packed[i];
            out[i] = fallingTies ? n - 1 - low : low;
        }
        return out;
    }
}
