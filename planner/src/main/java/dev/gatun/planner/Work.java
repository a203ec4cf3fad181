package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.planner.kernel.Kernel;

import java.util.List;

/** A unit of scheduled work after fusion: a generated kernel, or an extern call. */
sealed interface Work {
    /** Storages this work writes. */
    List<Buffer> writes();

    /** Storages this work reads. */
    List<Buffer> reads();

    /** {@code notes}: fusion's decisions about this kernel worth explaining, printed under its launch. */
    record KernelWork(Kernel kernel, List<Buffer> writes, List<Buffer> reads, boolean elementwise, List<String> notes) implements Work {
        /** This work with {@code note} printed under its launch after its own notes. */
        KernelWork withNote(String note) {
            var all = new java.util.ArrayList<>(notes);
            all.add(note);
            return new KernelWork(kernel, writes, reads, elementwise, all);
        }
    }

    record ExternWork(ExternBuffer call, List<Buffer> writes, List<Buffer> reads) implements Work {}

    /**
     * A product and the kernels right after it that read it, one launch ({@link ProductEpilogues}) on {@code tiles}: what
     * they read and write, at one point of the order.
     */
    record TiledWork(ExternWork product, List<KernelWork> epilogues, ColumnTiles tiles) implements Work {
        @Override public List<Buffer> writes() {
            return java.util.stream.Stream.concat(product.writes().stream(), epilogues.stream().flatMap(k -> k.writes().stream())).toList();
        }
        @Override public List<Buffer> reads() {
            return java.util.stream.Stream.concat(product.reads().stream(), epilogues.stream().flatMap(k -> k.reads().stream())).toList();
        }
    }
}
