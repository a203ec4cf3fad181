package dev.gatun.runtime.cuda;

import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Stream;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;

import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * The compiled code of one plan on one GPU, made once when the executable is loaded: each plan kernel's CUDA source
 * ({@link CudaCodegen}) and function, the fused collective launches ({@link CollectiveCodegen}), the products with
 * epilogues ({@link TiledProductCodegen}) with their tables on the device, and the user ops' kernels. A call looks its
 * launches up here by the plan's own objects (kernel, step, op name) and compiles nothing.
 */
final class PlanKernels {
    /**
     * A plan kernel, its CUDA source and function, (for folds) the zeroed word its blocks count themselves done on, and
     * (for a {@link KernelSource#persistent} kernel) how many of its blocks fit a multiprocessor at once, else 0.
     */
    record Compiled(dev.gatun.planner.kernel.Kernel kernel, KernelSource source, Kernel function, DeviceBuffer counter, int resident) {}

    /** A fused collective launch's source and its function. */
    record Fused(CollectiveCodegen.FusedSource source, Kernel function) {}

    /** A product with epilogues: its source, its function, its column and item tables on the device. */
    record Tiled(TiledProductCodegen.TiledSource source, Kernel function, DeviceBuffer cols, DeviceBuffer items) {}

    /** Compiles a program's source and returns its kernel of that name. */
    interface Compiler {
        Kernel compile(String programName, String source, String kernelName);
    }

    /** Device memory the tables and counters are made in, named for an error. */
    interface Allocator {
        DeviceBuffer allocate(String what, long bytes);
    }

    private final Map<dev.gatun.planner.kernel.Kernel, Compiled> kernels = new IdentityHashMap<>();
    private final Map<String, Kernel> userKernels = new HashMap<>();
    /** The fused collective launches, by step. */
    private final Map<Step, Fused> fused = new IdentityHashMap<>();
    /** The products with epilogues, by step. */
    private final Map<Step, Tiled> tiled = new IdentityHashMap<>();

    /** Every launch of {@code plan} compiled; block counters zeroed on {@code stream}, before its first launch. */
    PlanKernels(Plan plan, CompileOptions options, int multiprocessors, Stream stream, Compiler compiler, Allocator allocator) {
        compilePlanKernels(plan, stream, compiler, allocator);
        String defines = SymmetricKernels.defines(options.execution().cuda());   // the fused launches are symmetric kernels too
        for (Step s : plan.steps()) {
            // ranks outside the group run the three parts one by one (the kernels above); a world of one has no collective step
            if (s instanceof Step.FusedCollective f && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate(f);
                fused.put(f, new Fused(src, compiler.compile(src.name(), defines + src.source(), src.name())));
            }
            // a batch of barrier-free all-reduces is such a launch too, with nothing around it
            if (s instanceof Step.CollectiveBatch b && b.first().slots() != null && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate("barrier_free_batch_" + fused.size(), null, b, null);
                fused.put(b, new Fused(src, compiler.compile(src.name(), defines + src.source(), src.name())));
            }
            if (s instanceof Step.TiledProduct t) tiled.put(t, compileTiled(t, multiprocessors, compiler, allocator));
            if (s instanceof Step.CallUserOp u && !userKernels.containsKey(u.op().name())) {
                if (u.op().cudaSource() == null)
                    throw new GatunRuntimeException("user op '" + u.op().name() + "' has no CUDA source, so the CUDA backend cannot run it");
                userKernels.put(u.op().name(), compiler.compile(u.op().name(), u.op().cudaSource(), u.op().kernelName()));
            }
        }
    }

    /**
     * The form the plan chose for each row kernel launched on its own ({@code LaunchChoice.Rows} of its
     * {@code Step.Launch}), by identity; a kernel absent runs a block a row (a part of a fused launch, or no row kernel).
     */
    static Map<dev.gatun.planner.kernel.Kernel, LaunchChoice.Rows> rowForms(Plan plan) {
        var out = new IdentityHashMap<dev.gatun.planner.kernel.Kernel, LaunchChoice.Rows>();
        for (Step s : plan.steps())
            if (s instanceof Step.Launch l && plan.choice(l).rows() != null) out.put(l.kernel(), plan.choice(l).rows());
        return out;
    }

    private void compilePlanKernels(Plan plan, Stream stream, Compiler compiler, Allocator allocator) {
        int n = plan.kernels().size(), done = 0;
        long t0 = System.nanoTime();
        var forms = rowForms(plan);
        for (var k : plan.kernels()) {
            KernelSource src = CudaCodegen.generate(k, forms.get(k));
            DeviceBuffer counter = null;
            if (src.counter()) {
                counter = allocator.allocate("kernel " + k.name() + "'s block counter", 4);
                counter.memsetAsync(0, stream); // before the first launch on this stream; the last block sets it back to 0
            }
            Kernel function = compiler.compile(src.name(), src.source(), src.name());
            int resident = src.persistent() ? function.residentBlocksPerMultiprocessor(src.block(), 0) : 0;
            kernels.put(k, new Compiled(k, src, function, counter, resident));
            // progress for plans with many kernels (NVRTC takes up to a second each when the disk cache misses)
            long ms = (System.nanoTime() - t0) / 1_000_000;
            done++;
            if (n >= 8 && ms > 500 && (done % 8 == 0 || done == n))
                CudaExecutable.LOG.log(System.Logger.Level.INFO, "plan {0}: {1}/{2} kernels ready ({3} ms)", plan.name(), done, n, ms);
        }
    }

    /** A product with epilogues compiled, its tables on the device. */
    private static Tiled compileTiled(Step.TiledProduct t, int multiprocessors, Compiler compiler, Allocator allocator) {
        var src = TiledProductCodegen.generate(t, multiprocessors);
        Kernel function = compiler.compile(src.name(), src.source(), src.name());
        DeviceBuffer cols = allocator.allocate(t.name() + "'s column table", (long) src.cols().length * Integer.BYTES);
        cols.copyFrom(src.cols());
        DeviceBuffer items = allocator.allocate(t.name() + "'s item table", (long) src.items().length * Long.BYTES);
        items.copyFrom(src.items());
        return new Tiled(src, function, cols, items);
    }

    /** A plan kernel's compiled form. */
    Compiled kernel(dev.gatun.planner.kernel.Kernel k) { return kernels.get(k); }

    /** A fused collective launch or barrier-free batch's compiled form; null where the step runs its parts instead. */
    Fused fused(Step s) { return fused.get(s); }

    /** A product with epilogues' compiled form. */
    Tiled tiled(Step.TiledProduct t) { return tiled.get(t); }

    /** A user op's kernel, by the op's name. */
    Kernel user(String op) { return userKernels.get(op); }
}
