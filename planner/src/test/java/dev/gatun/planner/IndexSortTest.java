package dev.gatun.planner;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

class IndexSortTest {
    /** The indices in the order of a stable sort of boxed indices by key (Arrays.sort of objects is stable). */
    private static int[] expected(List<Integer> keys) {
        Integer[] idx = new Integer[keys.size()];
        for (int i = 0; i < idx.length; i++) idx[i] = i;
        Arrays.sort(idx, Comparator.comparingInt(keys::get));
        return Arrays.stream(idx).mapToInt(Integer::intValue).toArray();
    }

    @Property
    void sortsIndicesByKeyKeepingTiesInIndexOrder(@ForAll @Size(max = 300) List<@IntRange(min = 0, max = 20) Integer> keys) {
        int[] got = IndexSort.sorted(keys.size(), (i, j) -> Integer.compare(keys.get(i), keys.get(j)));
        assertThat(got).containsExactly(expected(keys));
    }

    @Property
    void aReversedTieBreakIsHonoured(@ForAll @Size(max = 200) List<@IntRange(min = 0, max = 5) Integer> keys) {
        int[] got = IndexSort.sorted(keys.size(), (i, j) -> {
            int c = Integer.compare(keys.get(i), keys.get(j));
            return c != 0 ? c : Integer.compare(j, i);
        });
        for (int k = 1; k < got.length; k++) {
            int a = got[k - 1], b = got[k];
            assertThat(keys.get(a) < keys.get(b) || keys.get(a).equals(keys.get(b)) && a > b).as("%d before %d", a, b).isTrue();
        }
        assertThat(Arrays.stream(got).sorted().toArray()).containsExactly(java.util.stream.IntStream.range(0, keys.size()).toArray());
    }

    /** The indices by key, ties by index (falling where asked): a stable sort of boxed indices, reversed ties by hand. */
    private static int[] expectedByKey(long[] keys, boolean fallingTies) {
        Integer[] idx = new Integer[keys.length];
        for (int i = 0; i < idx.length; i++) idx[i] = i;
        Comparator<Integer> byKey = Comparator.comparingLong(i -> keys[i]);
        Arrays.sort(idx, fallingTies ? byKey.thenComparing(Comparator.reverseOrder()) : byKey);
        return Arrays.stream(idx).mapToInt(Integer::intValue).toArray();
    }

    @Property
    void byKeySortsWorkIndicesWithTiesInEitherOrder(@ForAll @Size(max = 300) List<@IntRange(min = 0, max = 30) Integer> keys, @ForAll boolean falling) {
        long[] k = keys.stream().mapToLong(Integer::longValue).toArray();
        assertThat(IndexSort.byKey(k, falling)).containsExactly(expectedByKey(k, falling));
    }

    @Property
    void byKeyTakesKeysBeyondAnIntOrNegative(@ForAll @Size(max = 100) List<@IntRange(min = -3, max = 3) Integer> keys, @ForAll boolean falling) {
        // keys that cannot be packed beside an index: the comparator sort gives the same order
        long[] k = keys.stream().mapToLong(x -> x * (1L << 40)).toArray();
        assertThat(IndexSort.byKey(k, falling)).containsExactly(expectedByKey(k, falling));
    }
}
