package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The weight-streaming product's launches (no GPU needed): every column in exactly one tile, every k-slice given steps,
 * blocks within CUDA's limits, and enough warps for the SMs wherever the shape has the work for them.
 */
class GemvLaunchTest {
    static final int SMS = 132;
    /** {n, k}: the Llama-3.2-1B layers (qkv, o_proj, gate|up, down, lm_head), tensor-parallel halves, small odd shapes. */
    static final int[][] SHAPES = {{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}, {128256, 2048}, {1536, 2048}, {8192, 2048},
            {2048, 4096}, {1024, 2048}, {1, 8}, {37, 2056}, {4099, 64}, {17, 24}};

    @Test
    void everyColumnAndEveryStepOfTheRowIsCoveredOnce() {
        for (DType t : new DType[]{DType.F32, DType.F16, DType.BF16})
            for (CudaGemv.Path path : CudaGemv.Path.values()) {
                if (path == CudaGemv.Path.TENSOR_CORES && t == DType.F32) continue;
                boolean mma = path == CudaGemv.Path.TENSOR_CORES;
                int cols = mma ? 8 : 4, stepVectors = mma ? 4 : 32;
                for (int m = 1; m <= 8; m++)
                    for (int[] nk : SHAPES) {
                        int n = nk[0], k = nk[1];
                        var l = CudaGemv.launch(t, path, m, n, k, SMS);
                        String what = path + " " + t + " m " + m + " n " + n + " k " + k + ": " + l;
                        assertThat(l.warps() % l.slices()).as(what).isZero();
                        assertThat(32 * l.warps()).as(what + " threads a block").isBetween(256, 512);
                        long tiles = (long) l.blocks() * l.tilesPerBlock();
                        assertThat(tiles * cols).as(what + " columns covered").isGreaterThanOrEqualTo(n);
                        assertThat((tiles - l.tilesPerBlock()) * cols).as(what + " no block without columns").isLessThan(n);
                        int steps = Math.ceilDiv(k / (16 / t.byteSize()), stepVectors);
                        // the kernel's slice i is steps [i steps / slices, (i + 1) steps / slices)
                        assertThat(l.slices()).as(what + " every slice has steps").isLessThanOrEqualTo(steps);
                        assertThat(l.sharedBytes()).as(what + " shared memory").isEqualTo(l.slices() == 1 ? 0 : l.warps() * 32 * (mma ? 8 : 4))
                                .isLessThanOrEqualTo(48 * 1024);
                        // a tiled product's launch holds its largest tile in a block, in one pass, its slices fewer or its warps more
                        for (int held : new int[]{2, 8, 64}) {
                            var h = CudaGemv.holding(t, path, m, n, k, SMS, held);
                            assertThat(cols * h.tilesPerBlock()).as(what + " holding " + held).isGreaterThanOrEqualTo(held);
                            assertThat(h.slices()).as(what + " holding " + held).isLessThanOrEqualTo(l.slices());
                            assertThat(h.warps() % h.slices()).as(what + " holding " + held).isZero();
                            if (cols * l.tilesPerBlock() >= held) assertThat(h).as(what + " holding " + held + ": as it was").isEqualTo(l);
                        }
                        assertThat(l.kernel()).as(what).isEqualTo(mma ? "gemv_mma_" + name(t)
                                : "gemv_fma_" + name(t) + "_" + (m == 1 ? 1 : m == 2 ? 2 : m <= 4 ? 4 : 8));
                    }
            }
    }

    @Test
    void fewLongColumnsAreSlicedUntilTheSmsHaveWarpsEnough() {
        // down_proj: 256 tiles of 8 columns, 256 steps of a row: sliced 16 ways, 4096 warps
        var down = CudaGemv.launch(DType.BF16, CudaGemv.Path.TENSOR_CORES, 1, 2048, 8192, SMS);
        assertThat(down.slices()).isEqualTo(16);
        assertThat((long) down.blocks() * down.warps()).isEqualTo(4096);
        // lm_head: 16032 tiles, more warps than 16 an SM already: not sliced
        var head = CudaGemv.launch(DType.BF16, CudaGemv.Path.TENSOR_CORES, 8, 128256, 2048, SMS);
        assertThat(head.slices()).isEqualTo(1);
        assertThat(head.blocks()).isEqualTo(16032 / 8);
        // one vector a row: nothing to slice
        assertThat(CudaGemv.launch(DType.BF16, CudaGemv.Path.TENSOR_CORES, 1, 1, 8, SMS).slices()).isEqualTo(1);
    }

    @Test
    void launchesItCannotMakeAreRefusedNamingWhatWasWrong() {
        assertThatThrownBy(() -> CudaGemv.launch(DType.BF16, CudaGemv.Path.TENSOR_CORES, 9, 16, 16, SMS)).hasMessageContaining("9 rows");
        assertThatThrownBy(() -> CudaGemv.launch(DType.F32, CudaGemv.Path.TENSOR_CORES, 1, 16, 16, SMS)).hasMessageContaining("tensor cores of float32");
        assertThatThrownBy(() -> CudaGemv.launch(DType.F64, CudaGemv.Path.CUDA_CORES, 1, 16, 16, SMS)).hasMessageContaining("gemv of f64");
    }

    @Test
    void appliesToOneToEightRowsOfWholeAlignedVectors() {
        assertThat(CudaGemv.applies(DType.BF16, false, true, 1, 1, 2048, 0, 256, 512)).isTrue();
        assertThat(CudaGemv.applies(DType.BF16, false, true, 1, 8, 2048, 0, 256, 512)).as("8 rows of bf16: the tensor cores").isTrue();
        assertThat(CudaGemv.applies(DType.F16, false, true, 1, 2, 2048, 0, 256, 512)).as("2 rows of f16: the tensor cores").isTrue();
        assertThat(CudaGemv.applies(DType.BF16, false, true, 1, 9, 2048, 0, 256, 512)).as("9 rows").isFalse();
        assertThat(CudaGemv.applies(DType.F32, false, true, 1, 1, 2048, 0, 256, 512)).as("1 row of float32").isTrue();
        assertThat(CudaGemv.applies(DType.F32, false, true, 1, 2, 2048, 0, 256, 512)).as("2 rows of float32: cuBLAS, faster there").isFalse();
        assertThat(CudaGemv.applies(DType.F64, false, true, 1, 1, 2048, 0, 256, 512)).as("float64").isFalse();
        assertThat(CudaGemv.applies(DType.BF16, false, true, 1, 1, 2044, 0, 256, 512)).as("k not whole vectors").isFalse();
        assertThat(CudaGemv.applies(DType.BF16, false, true, 1, 1, 2048, 8, 256, 512)).as("x misaligned").isFalse();
        assertThat(CudaGemv.applies(DType.BF16, false, false, 1, 1, 2048, 0, 256, 512)).as("w not transposed").isFalse();
        assertThat(CudaGemv.applies(DType.BF16, false, true, 2, 1, 2048, 0, 256, 512)).as("a batch").isFalse();
    }

    /** A launch with the slices and block size given (GemvChainBench's sweep): the automatic one where they agree, else refused by name. */
    @Test
    void aSlicedLaunchCoversTheColumnsAndRefusesSlicesItCannotGive() {
        for (int[] nk : SHAPES) {
            int n = nk[0], k = nk[1], steps = Math.ceilDiv(k / 8, 32);
            var auto = CudaGemv.launch(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, n, k, SMS);
            assertThat(CudaGemv.sliced(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, n, k, auto.slices(), auto.warps())).isEqualTo(auto);
            for (int slices = 1; slices <= Math.min(16, steps); slices *= 2)
                for (int warps : new int[]{4, 8, 16}) {
                    if (warps % slices != 0) continue;
                    var l = CudaGemv.sliced(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, n, k, slices, warps);
                    assertThat((long) l.blocks() * l.tilesPerBlock() * 4).as(l + " covers " + n).isGreaterThanOrEqualTo(n);
                    assertThat((long) (l.blocks() - 1) * l.tilesPerBlock() * 4).as(l + " no block without columns").isLessThan(n);
                }
        }
        assertThatThrownBy(() -> CudaGemv.sliced(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, 2048, 2048, 16, 8)).hasMessageContaining("16 k-slices in blocks of 8 warps");
        assertThatThrownBy(() -> CudaGemv.sliced(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, 2048, 256, 2, 8)).hasMessageContaining("(1 steps a row)");
        assertThatThrownBy(() -> CudaGemv.sliced(DType.BF16, CudaGemv.Path.CUDA_CORES, 1, 2048, 2048, 1, 32)).hasMessageContaining("blocks of 32 warps");
    }

    private static String name(DType t) { return t == DType.F32 ? "f32" : t == DType.F16 ? "f16" : "bf16"; }
}
