package dev.gatun.planner;

import java.util.function.IntBinaryOperator;

/**
 * Sorts the indices {@code 0..n-1} of a table by a comparator of two indices, in primitive {@code int} arrays: a pool of
 * a large graph holds tens of thousands of items, and the boxed {@code Integer[]} with comparator chains this replaces
 * was a visible part of planning it. A stable merge sort, so ties keep index order as the list sorts did.
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
}
