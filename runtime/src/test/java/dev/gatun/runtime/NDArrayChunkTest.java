package dev.gatun.runtime;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link NDArray#chunk(int, int)} takes torch.chunk's arguments, the count first, then the dimension, as the DSL's
 * {@code Tensor.chunk(n, dim)} does. The expected parts come from {@link #torchChunk}, plain loops over indices that
 * cut as {@code torch.chunk} does (part p holds indices {@code [p * size / n, (p + 1) * size / n)} of the dimension).
 */
class NDArrayChunkTest {

    /** {@code a[i][j][k] = 100 i + 10 j + k} of shape [2, 4, 6], exact in float64. */
    static NDArray cube() {
        double[] v = new double[2 * 4 * 6];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 6; k++) v[(i * 4 + j) * 6 + k] = 100 * i + 10 * j + k;
        return NDArray.of(DType.F64, v, 2, 4, 6);
    }

    @Test
    void chunkCutsAsTorchChunkDoes() {
        var a = cube();
        // torch.chunk(a, 3, 2): three [2,4,2] parts; part p holds columns 2p and 2p+1 of the last dimension
        var parts = a.chunk(3, 2);
        assertThat(parts).hasSize(3);
        for (int p = 0; p < 3; p++) {
            assertThat(parts.get(p).shape()).containsExactly(2, 4, 2);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 2; k++) assertThat(parts.get(p).get(i, j, k)).isEqualTo(100 * i + 10 * j + 2 * p + k);
        }
        // torch.chunk(a, 2, 1): two [2,2,6] parts, rows 2p and 2p+1 of the middle dimension
        var rows = a.chunk(2, 1);
        for (int p = 0; p < 2; p++)
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    for (int k = 0; k < 6; k++) assertThat(rows.get(p).get(i, j, k)).isEqualTo(100 * i + 10 * (2 * p + j) + k);
        assertThat(a.chunk(3, -1)).isEqualTo(parts);
        assertThat(a.chunk(1, 0)).containsExactly(a);
        assertThat(a.chunk(2, 0).get(1).toDoubleArray()).isEqualTo(Arrays.copyOfRange(a.toDoubleArray(), 24, 48));
    }

    /**
     * Every call on every small vector and matrix, counts and dimensions from -3 to 7: it gives exactly torch.chunk's
     * parts or throws a {@link GatunRuntimeException} that names the argument order. Where the old order
     * {@code (dim, parts)} was a valid call, the new one is refused or means the same cut: an old-order call on a vector
     * or a matrix never silently gives other parts.
     */
    @Test
    void everyCallOnAVectorOrMatrixCutsAsTorchOrIsRefusedNamingTheOrder() {
        int checked = 0, refusedOldOrder = 0;
        for (long[] shape : smallShapes()) {
            double[] v = new double[(int) Arrays.stream(shape).reduce(1, (x, y) -> x * y)];
            for (int i = 0; i < v.length; i++) v[i] = i + 1;
            var a = NDArray.of(DType.F64, v, shape);
            for (int first = -3; first <= 7; first++)
                for (int second = -3; second <= 7; second++) {
                    List<double[]> asTorch = torchChunk(v, shape, first, second);   // first chunks along dimension second
                    List<double[]> oldOrder = torchChunk(v, shape, second, first);  // second parts along dimension first
                    List<NDArray> got;
                    try {
                        got = a.chunk(first, second);
                    } catch (GatunRuntimeException e) {
                        assertThat(asTorch).as("chunk(%d, %d) of %s refused: %s", first, second, Arrays.toString(shape), e.getMessage()).isNull();
                        assertThat(e.getMessage()).contains("chunk(chunks " + first + ", dim " + second + ")").contains("the arguments are (chunks, dim)");
                        if (oldOrder != null) refusedOldOrder++;
                        continue;
                    }
                    assertThat(asTorch).as("chunk(%d, %d) of %s", first, second, Arrays.toString(shape)).isNotNull();
                    assertThat(got.stream().map(NDArray::toDoubleArray).toList()).as("chunk(%d, %d) of %s", first, second, Arrays.toString(shape))
                            .containsExactlyElementsOf(asTorch);
                    if (oldOrder != null)
                        assertThat(oldOrder).as("old-order reading of chunk(%d, %d) of %s", first, second, Arrays.toString(shape))
                                .containsExactlyElementsOf(asTorch);
                    checked++;
                }
        }
        assertThat(checked).isGreaterThan(200);
        assertThat(refusedOldOrder).isGreaterThan(100);
    }

    @Test
    void theOldOrderOfATensorParallelCutIsRefused() {
        var w = NDArray.zeros(DType.F32, 4, 6);
        assertThatThrownBy(() -> w.chunk(1, 2)).isInstanceOf(GatunRuntimeException.class)
                .hasMessage("chunk(chunks 1, dim 2) of f32[4,6]: dimension 2 does not exist (rank 2); the arguments are (chunks, dim),"
                        + " the number of parts first as in torch.chunk (NDArray.chunk used to take (dim, parts))");
        assertThatThrownBy(() -> w.chunk(0, 2)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageStartingWith("chunk(chunks 0, dim 2) of f32[4,6]: 0 chunks asked for; the number of chunks must be at least 1");
        assertThatThrownBy(() -> w.chunk(-1, 3)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("-1 chunks asked for");
    }

    static List<long[]> smallShapes() {
        var out = new ArrayList<long[]>();
        for (long n = 1; n <= 6; n++) out.add(new long[]{n});
        for (long m = 1; m <= 6; m++)
            for (long n = 1; n <= 6; n++) out.add(new long[]{m, n});
        return out;
    }

    /**
     * torch.chunk's parts of the row-major {@code data} of {@code shape}, each row-major, for a count that divides the
     * dimension; null where the call is not valid (a count below 1, a dimension out of range, a size it does not divide).
     */
    static List<double[]> torchChunk(double[] data, long[] shape, int chunks, int dim) {
        int rank = shape.length, d = dim < 0 ? dim + rank : dim;
        if (chunks < 1 || d < 0 || d >= rank || shape[d] % chunks != 0) return null;
        long step = shape[d] / chunks, outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= shape[i];
        for (int i = d + 1; i < rank; i++) inner *= shape[i];
        var parts = new ArrayList<double[]>();
        for (int p = 0; p < chunks; p++) {
            double[] part = new double[(int) (outer * step * inner)];
            int at = 0;
            for (long o = 0; o < outer; o++)
                for (long j = p * step; j < (p + 1) * step; j++)
                    for (long k = 0; k < inner; k++) part[at++] = data[(int) ((o * shape[d] + j) * inner + k)];
            parts.add(part);
        }
        return parts;
    }
}
