package dev.gatun.ir;

import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Where each of update_slice's runs lies in its update: against the offsets computed by walking the dimensions before
 * the updated one in row-major order and summing index times stride, for random shapes and strides that fold and
 * that do not.
 */
class UpdateRunsTest {

    /** Run o's first element, by walking the outer dimensions: the independent computation. */
    static long walk(long[] shape, long[] strides, int dim, long o) {
        long off = 0;
        for (int d = dim - 1; d >= 0; d--) {
            off += (o % shape[d]) * strides[d];
            o /= shape[d];
        }
        return off;
    }

    /** Whether the elements from dim on are packed row-major (size-1 dimensions aside). */
    static boolean innerPacked(long[] shape, long[] strides, int dim) {
        long want = 1;
        for (int d = shape.length - 1; d >= dim; d--) {
            if (shape[d] != 1 && strides[d] != want) return false;
            want *= shape[d];
        }
        return true;
    }

    @Test
    void theDecodersUpdatesFold() {
        // a value head of the fused q|k|v product at batch 8: [8, 8 kv heads, 1 position, 64], batch rows 3072 apart
        var v = UpdateRuns.of(new long[]{8, 8, 1, 64}, new long[]{3072, 64, 64, 1}, 2);
        assertThat(v).isEqualTo(new UpdateRuns(8, 64, 3072));
        // packed: one level, runs one after the other
        assertThat(UpdateRuns.of(new long[]{2, 5, 3}, new long[]{15, 3, 1}, 1)).isEqualTo(new UpdateRuns(2, 15, 30));
        // a key transposed to [.., head_dim, 1]: the position's size-1 dimension has any stride
        assertThat(UpdateRuns.of(new long[]{1, 8, 64, 1}, new long[]{512, 64, 1, 7}, 3)).isEqualTo(new UpdateRuns(512, 1, 512));
        // three levels do not fold; nor do runs that are not packed
        assertThat(UpdateRuns.of(new long[]{2, 3, 4, 5}, new long[]{1000, 100, 10, 1}, 3)).isNull();
        assertThat(UpdateRuns.of(new long[]{4, 6}, new long[]{12, 2}, 1)).isNull();
    }

    @Test
    void randomRunsLieWhereTheWalkPutsThem() {
        var rnd = new SplittableRandom(5);
        int folded = 0, refused = 0;
        for (int c = 0; c < 2000; c++) {
            int rank = 1 + rnd.nextInt(5), dim = rnd.nextInt(rank);
            long[] shape = new long[rank], strides = new long[rank];
            for (int d = 0; d < rank; d++) shape[d] = rnd.nextInt(4) == 0 ? 1 : 1 + rnd.nextInt(4);
            // packed strides, then some of them stretched (a view of a bigger tensor) or swapped
            long s = 1;
            for (int d = rank - 1; d >= 0; d--) {
                strides[d] = s;
                s *= shape[d] * (rnd.nextInt(3) == 0 ? 1 + rnd.nextInt(3) : 1);
            }
            if (rnd.nextInt(4) == 0 && rank > 1) {
                int a = rnd.nextInt(rank), b = rnd.nextInt(rank);
                long t = strides[a];
                strides[a] = strides[b];
                strides[b] = t;
            }
            var runs = UpdateRuns.of(shape, strides, dim);
            long count = 1;
            for (int d = 0; d < dim; d++) count *= shape[d];
            if (runs == null) {
                refused++;
                continue;
            }
            assertThat(innerPacked(shape, strides, dim)).as("case %d: folded but its runs are not packed", c).isTrue();
            folded++;
            for (long o = 0; o < count; o++)
                assertThat(runs.offset(o)).as("case %d run %d of shape %s strides %s dim %d", c, o, java.util.Arrays.toString(shape),
                        java.util.Arrays.toString(strides), dim).isEqualTo(walk(shape, strides, dim, o));
        }
        assertThat(folded).isGreaterThan(500);
        assertThat(refused).isGreaterThan(50);
    }
}
