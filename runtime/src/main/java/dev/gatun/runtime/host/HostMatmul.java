package dev.gatun.runtime.host;

import dev.gatun.runtime.spi.Broadcast;

import dev.gatun.ir.DType;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.runtime.Elements;

import java.lang.foreign.MemorySegment;
import java.util.Map;

/**
 * Batched matrix product of row-major operands, batch dimensions broadcast, accumulated in double; an operand marked
 * transposed lies in memory as its transpose (the last two dimensions swapped). The output is written at its own
 * strides: row-major, or a slice of a concatenation (rows a leading dimension apart).
 */
final class HostMatmul {
    private HostMatmul() {}

    static void run(MemorySegment a, PlanBuffer aB, boolean transA, MemorySegment b, PlanBuffer bB, boolean transB, MemorySegment out,
                    PlanBuffer outB, Map<String, Long> env) {
        long[] sa = aB.type().shape().sizes(env), sb = bB.type().shape().sizes(env), so = outB.type().shape().sizes(env);
        int ra = sa.length, rb = sb.length, ro = so.length;
        long m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
        long batches = 1;
        for (int d = 0; d < ro - 2; d++) batches *= so[d];
        DType ta = aB.type().dtype(), tb = bB.type().dtype(), to = outB.type().dtype();
        long[] st = KernelInterpreter.eval(outB.strides(), env);
        long rowStride = st[ro - 2], colStride = st[ro - 1];
        long[] idx = new long[Math.max(0, ro - 2)];
        for (long bi = 0; bi < batches; bi++) {
            KernelInterpreter.unravel(bi, java.util.Arrays.copyOf(so, ro - 2), idx, 0);
            long offA = Broadcast.batchOffset(idx, sa, m * k), offB = Broadcast.batchOffset(idx, sb, k * n), offO = 0;
            for (int d = 0; d < idx.length; d++) offO += idx[d] * st[d];
            for (long i = 0; i < m; i++)
                for (long j = 0; j < n; j++) {
                    double acc = 0;
                    for (long p = 0; p < k; p++)
                        acc += Elements.get(a, ta, offA + (transA ? p * m + i : i * k + p)) * Elements.get(b, tb, offB + (transB ? j * k + p : p * n + j));
                    Elements.set(out, to, offO + i * rowStride + j * colStride, acc);
                }
        }
    }
}
