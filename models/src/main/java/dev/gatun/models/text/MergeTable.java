package dev.gatun.models.text;

/**
 * The BPE merge rules as an open-addressing hash table from a pair of token ids to the rule's rank (its line in the
 * merges list), and from a rank to the id of the token the merge makes. Keys are the pair packed in a {@code long},
 * so a lookup allocates nothing: the merge loop makes one for every adjacent pair of every word.
 */
final class MergeTable {
    private static final long EMPTY = -1L;   // a packed pair of non-negative ids is never -1

    private final long[] keys;
    private final int[] ranks;
    private final int[] newIds;
    private final int mask;

    MergeTable(int[] left, int[] right, int[] merged) {
        int n = left.length;
        int cap = Integer.highestOneBit(Math.max(4, n * 2 - 1)) << 1;
        keys = new long[cap];
        java.util.Arrays.fill(keys, EMPTY);
        ranks = new int[cap];
        mask = cap - 1;
        newIds = merged.clone();
        // a pair listed twice keeps its last rank, as the library's hash map does
        for (int r = 0; r < n; r++) put(pack(left[r], right[r]), r);
    }

    private static long pack(int a, int b) { return (long) a << 32 | (b & 0xFFFFFFFFL); }

    private int slot(long key) {
        long h = key * 0x9E3779B97F4A7C15L;
        return (int) (h >>> 32) & mask;
    }

    private void put(long key, int rank) {
        int i = slot(key);
        while (keys[i] != EMPTY && keys[i] != key) i = (i + 1) & mask;
        keys[i] = key;
        ranks[i] = rank;
    }

    /** The rank of the merge of {@code a} then {@code b}, or -1 when no rule merges them. */
    int rank(int a, int b) {
        long key = pack(a, b);
        for (int i = slot(key); ; i = (i + 1) & mask) {
            if (keys[i] == key) return ranks[i];
            if (keys[i] == EMPTY) return -1;
        }
    }

    /** The id of the token the merge of this rank makes. */
    int newId(int rank) { return newIds[rank]; }
}
