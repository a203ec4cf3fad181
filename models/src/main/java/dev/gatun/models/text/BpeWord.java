package dev.gatun.models.text;

/**
 * The BPE merge loop of one word, as the {@code tokenizers} library runs it: a heap of candidate merges ordered by
 * rank, then by position, over the word's symbols kept as a doubly linked list; the lowest-ranked pair is merged,
 * the pairs it forms with its neighbours are queued, and a queued pair that no longer exists (or that now makes a
 * different token) is dropped when it comes up. O(n log n) in the number of symbols, so a whole document that is one
 * "word" (SentencePiece-style BPE has no pre-tokenizer) encodes in well under a second.
 */
final class BpeWord {
    private BpeWord() {}

    /** Merges the symbols (token ids) in place as far as the rules go and returns the result. */
    static int[] merge(int[] sym, MergeTable merges) {
        int n = sym.length;
        if (n < 2) return sym;
        int[] prev = new int[n], next = new int[n];
        boolean[] removed = new boolean[n];
        LongHeap heap = new LongHeap(n);
        for (int i = 0; i < n; i++) {
            prev[i] = i - 1;
            next[i] = i + 1 < n ? i + 1 : -1;
            if (i + 1 < n) push(heap, merges.rank(sym[i], sym[i + 1]), i);
        }
        while (!heap.isEmpty()) {
            long top = heap.pop();
            int rank = (int) (top >>> 32), pos = (int) top;
            if (removed[pos] || next[pos] < 0) continue;
            int right = next[pos];
            int current = merges.rank(sym[pos], sym[right]);
            int made = merges.newId(rank);
            if (current < 0 || merges.newId(current) != made) continue;   // a stale entry
            sym[pos] = made;
            removed[right] = true;
            next[pos] = next[right];
            if (next[right] >= 0) prev[next[right]] = pos;
            if (prev[pos] >= 0) push(heap, merges.rank(sym[prev[pos]], sym[pos]), prev[pos]);
            if (next[pos] >= 0) push(heap, merges.rank(sym[pos], sym[next[pos]]), pos);
        }
        int kept = 0;
        for (int i = 0; i < n; i++) if (!removed[i]) sym[kept++] = sym[i];
        return java.util.Arrays.copyOf(sym, kept);
    }

    private static void push(LongHeap heap, int rank, int pos) {
        if (rank >= 0) heap.push((long) rank << 32 | pos);
    }

    /** A binary min-heap of {@code long}s: (rank, position) packed so that the order is rank, then position. */
    static final class LongHeap {
        private long[] a;
        private int size;

        LongHeap(int capacity) { a = new long[Math.max(capacity, 4)]; }

        boolean isEmpty() { return size == 0; }

        void push(long v) {
            if (size == a.length) a = java.util.Arrays.copyOf(a, size * 2);
            int i = size++;
            while (i > 0) {
                int parent = (i - 1) >>> 1;
                if (a[parent] <= v) break;
                a[i] = a[parent];
                i = parent;
            }
            a[i] = v;
        }

        long pop() {
            long top = a[0];
            long last = a[--size];
            int i = 0;
            while (true) {
                int child = 2 * i + 1;
                if (child >= size) break;
                if (child + 1 < size && a[child + 1] < a[child]) child++;
                if (a[child] >= last) break;
                a[i] = a[child];
                i = child;
            }
            a[i] = last;
            return top;
        }
    }
}
