package dev.gatun.planner;

import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ExternBuffer;
import dev.gatun.planner.kernel.Kernel;

import java.util.List;

/** A unit of scheduled work after fusion: a generated kernel, or an extern call. */
sealed interface Work {
    /** Storages this work writes. */
    List<Buffer> writes();

    /** Storages this work reads. */
    List<Buffer> reads();

    /** {@code notes}: fusion's decisions about this kernel worth explaining, printed under its launch. */
    record KernelWork(Kernel kernel, List<Buffer> writes, List<Buffer> reads, boolean elementwise, List<String> notes) implements Work {}

    record ExternWork(ExternBuffer call, List<Buffer> writes, List<Buffer> reads) implements Work {}
}
