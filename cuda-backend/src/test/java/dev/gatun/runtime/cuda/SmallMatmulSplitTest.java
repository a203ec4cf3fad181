package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * How the small products are cut among blocks ({@link CudaSmallMatmul#split}, no GPU needed): every column in exactly
 * one tile, every row of k in exactly one slice, the partials within the scratch and the tiles within the counters, no
 * more than one wave of blocks, and about one block an SM wherever the shape has the tiles or the rows for it; the
 * attention's shapes on a 132-SM GPU as the class comment gives them.
 */
class SmallMatmulSplitTest {
    static final int[] SMS = {132, 114, 16, 1};
    static final int[] ROWS = {1, 3, 4, 5, 8};
    /** {k, n, batches}: the attention's two products at 544 to 4096 positions, other batches, odd and tiny shapes. */
    static final int[][] SHAPES = {{128, 544, 8}, {544, 128, 8}, {4096, 128, 8}, {128, 4096, 8}, {2048, 128, 8}, {128, 2048, 8},
            {128, 544, 32}, {544, 128, 1}, {1, 1, 1}, {7, 33, 2}, {1000, 72, 3}, {16, 32, 1}, {300, 20, 2}, {64, 100, 5},
            {128, 545, 8}, {545, 127, 8}, {100_000, 8, 1}, {64, 131_072, 4}, {4096, 4096, 64}, {3, 8, 65_535}};

    @Test
    void everyColumnAndRowIsCoveredOnceWithinTheScratchAndOneWave() {
        int checked = 0;
        for (DType t : new DType[]{DType.F32, DType.F16, DType.BF16})
            for (boolean vector : new boolean[]{true, false})
                for (int sms : SMS)
                    for (int m : ROWS)
                        for (int[] s : SHAPES) {
                            int k = s[0], n = s[1], batches = s[2], v = 16 / t.byteSize();
                            if (vector && n % v != 0) continue;
                            var l = CudaSmallMatmul.split(t, vector, m, n, k, batches, sms);
                            String what = t + (vector ? " vectors" : " scalars") + " sms " + sms + " m " + m + " k " + k + " n " + n + " batches " + batches + ": " + l;
                            assertThat(l.vector()).as(what).isEqualTo(vector ? v : 1);
                            assertThat(Integer.bitCount(l.lanes())).as(what + " lanes a power of two").isEqualTo(1);
                            assertThat(l.lanes()).as(what).isBetween(vector ? CudaSmallMatmul.MIN_LANES : 32, 32);
                            assertThat(l.width()).as(what + " tile width").isLessThanOrEqualTo(CudaSmallMatmul.COLUMNS);
                            // columns: every one in a tile, no tile without columns
                            assertThat((long) l.tiles() * l.width()).as(what + " columns covered").isGreaterThanOrEqualTo(n);
                            assertThat((long) (l.tiles() - 1) * l.width()).as(what + " no empty tile").isLessThan(n);
                            // k: slice z is rows [z rows, min(k, (z + 1) rows)): all of k, no empty slice
                            assertThat((long) l.splits() * l.rows()).as(what + " k covered").isGreaterThanOrEqualTo(k);
                            assertThat((long) (l.splits() - 1) * l.rows()).as(what + " no empty slice").isLessThan(k);
                            assertThat(l.splits()).as(what).isBetween(1, CudaSmallMatmul.MAX_SPLITS);
                            assertThat(l.blocks(batches)).as(what).isEqualTo((long) l.tiles() * l.splits() * batches);
                            long tileSets = (long) l.tiles() * batches, wave = (long) CudaSmallMatmul.RESIDENT * sms;
                            if (l.splits() > 1) {
                                assertThat(l.partials(m, batches)).as(what + " partials fit the scratch").isLessThanOrEqualTo(CudaSmallMatmul.SCRATCH_FLOATS)
                                        .isEqualTo(l.blocks(batches) * m * l.width());
                                assertThat(tileSets).as(what + " a counter for each tile").isLessThanOrEqualTo(CudaSmallMatmul.COUNTERS);
                                // split only within one wave of blocks
                                assertThat(l.blocks(batches)).as(what + " one wave").isLessThanOrEqualTo(wave);
                            } else {
                                assertThat(l.partials(m, batches)).as(what).isZero();
                            }
                            // about one block an SM where the shape has it: fewer only where no narrower tile fits one wave
                            // and k cannot be split further (the most slices, a row a group, the wave full, the scratch
                            // full), or where one more slice would give more than one block an SM; never fewer than half
                            // of one an SM unless the shape has no more
                            if (l.blocks(batches) < sms) {
                                boolean narrowest = l.lanes() == (vector ? CudaSmallMatmul.MIN_LANES : 32) || Math.ceilDiv(n, l.width() / 2) * (long) batches > wave;
                                assertThat(narrowest).as(what + " tiles as narrow as they go").isTrue();
                                boolean noMoreSlices = l.splits() == CudaSmallMatmul.MAX_SPLITS || l.rows() <= l.groups() || (l.splits() + 1) * tileSets > wave
                                        || (l.splits() + 1) * tileSets * m * l.width() > CudaSmallMatmul.SCRATCH_FLOATS;
                                assertThat(noMoreSlices || (l.splits() + 1) * tileSets > sms).as(what + " k split as far as it goes").isTrue();
                                if (2 * l.blocks(batches) < sms) assertThat(noMoreSlices).as(what + " at least half a block an SM").isTrue();
                            }
                            // a thread's rows: at most two steps, unless the slices are at their limit
                            int step = CudaSmallMatmul.step(m, l.vector());
                            if (Math.ceilDiv(l.rows(), l.groups()) > 2 * step)
                                assertThat(l.splits() == CudaSmallMatmul.MAX_SPLITS || (l.splits() + 1) * tileSets > wave || tileSets > CudaSmallMatmul.COUNTERS
                                        || (l.splits() + 1) * tileSets * m * l.width() > CudaSmallMatmul.SCRATCH_FLOATS).as(what + " two steps a thread").isTrue();
                            checked++;
                        }
        assertThat(checked).isGreaterThan(1000);
    }

    @Test
    void theAttentionShapesOn132Sms() {
        // scores = q K^T at 544 positions: 68 vectors a row, tiles of 4 (17 a product), 136 blocks: no split
        var scores = CudaSmallMatmul.split(DType.BF16, true, 4, 544, 128, 8, 132);
        assertThat(scores).isEqualTo(new CudaSmallMatmul.Split(8, 4, 17, 1, 128));
        // probabilities times values at 544 positions: one tile of 32 columns is 4 tiles, k in 4 slices of 136: 128 blocks
        var values = CudaSmallMatmul.split(DType.BF16, true, 4, 128, 544, 8, 132);
        assertThat(values).isEqualTo(new CudaSmallMatmul.Split(8, 4, 4, 4, 136));
        // at 4096 positions: 8 slices of 512 rows (8 a thread, two steps), 256 blocks
        assertThat(CudaSmallMatmul.split(DType.BF16, true, 4, 128, 4096, 8, 132)).isEqualTo(new CudaSmallMatmul.Split(8, 4, 4, 8, 512));
        // scores at 4096 positions: tiles of 16 vectors, 256 blocks (tiles of 8 would be two waves)
        assertThat(CudaSmallMatmul.split(DType.BF16, true, 4, 4096, 128, 8, 132)).isEqualTo(new CudaSmallMatmul.Split(8, 16, 32, 1, 128));
        // a row of odd length: one column a lane, 32 a tile
        assertThat(CudaSmallMatmul.split(DType.BF16, false, 4, 545, 128, 8, 132)).isEqualTo(new CudaSmallMatmul.Split(1, 32, 18, 1, 128));
        assertThat(CudaSmallMatmul.kernel(DType.BF16, 4, true)).isEqualTo("small_matmul_vec_bf16_4");
        assertThat(CudaSmallMatmul.kernel(DType.F32, 5, false)).isEqualTo("small_matmul_f32_8");
    }

    @Test
    void bIsReadInVectorsOnlyWhereItsRowsAddressAndDistanceAreWholeVectors() {
        assertThat(CudaSmallMatmul.vectorizable(DType.BF16, 544, 0x1000, 128L * 544)).isTrue();
        assertThat(CudaSmallMatmul.vectorizable(DType.BF16, 128, 0x1000, 0)).as("one B for every product").isTrue();
        assertThat(CudaSmallMatmul.vectorizable(DType.F32, 4, 0x1000, 12)).isTrue();
        assertThat(CudaSmallMatmul.vectorizable(DType.BF16, 545, 0x1000, 128L * 545)).as("odd rows").isFalse();
        assertThat(CudaSmallMatmul.vectorizable(DType.BF16, 100, 0x1000, 6400)).as("rows of 200 bytes").isFalse();
        assertThat(CudaSmallMatmul.vectorizable(DType.BF16, 544, 0x1008, 128L * 544)).as("B's address").isFalse();
        assertThat(CudaSmallMatmul.vectorizable(DType.F32, 4, 0x1000, 5)).as("the products' distance").isFalse();
        assertThat(CudaSmallMatmul.vectorizable(DType.F16, 8, 0x1000, 4)).as("the products' distance").isFalse();
    }

    @Test
    void refusesWhatTheKernelDoesNotTake() {
        assertThatThrownBy(() -> CudaSmallMatmul.split(DType.F64, false, 4, 8, 8, 1, 132)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> CudaSmallMatmul.split(DType.BF16, false, 9, 8, 8, 1, 132)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> CudaSmallMatmul.split(DType.BF16, true, 4, 545, 8, 1, 132)).isInstanceOf(IllegalArgumentException.class);
        assertThat(CudaSmallMatmul.applies(DType.BF16, false, false, 4, 545, 128, 8)).isTrue();
        assertThat(CudaSmallMatmul.applies(DType.BF16, false, true, 4, 544, 128, 8)).isFalse();
        assertThat(CudaSmallMatmul.applies(DType.BF16, false, false, 9, 544, 128, 8)).isFalse();
    }
}
