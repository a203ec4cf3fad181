package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The generated CUDA source of kernels that read an {@code index_select}'s table through its indices (gather fusion)
 * run as host C++ ({@code emulation/emulate.h}, as {@link KernelEmulationTest}: a block's threads as threads, barriers
 * and warp shuffles emulated), with the launch geometry the backend would use, against the reference interpreter:
 * pointwise kernels over f32, bf16 and i64 tables, row kernels summing along the picked rows and across them, i32 and
 * i64 indices at the table's first and last rows and repeated. An index outside the table traps after filling the
 * fault record with index_select's code, the step, the index, its position, the rows and which gather it was, and the
 * element it would have made is never written. Skipped where g++ or CUDA's headers are absent. Not checked here: the
 * device's memory model and speed ({@link GatherFusionGpuTest}).
 */
class GatherKernelEmulationTest {
    @TempDir static Path dir;
    static Path gxx;

    @BeforeAll
    static void find() throws IOException {
        gxx = HostCompiler.gxx();
        assumeTrue(gxx != null && Files.exists(KernelEmulationTest.CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent: skipping the emulation");
        HostCompiler.copy(dir, "/emulation/", "emulate.h");
    }

    /** A graph of one index_select read by one kernel: the table, the indices' type and shape, the reader. */
    record Case(String name, DType table, long[] tableShape, DType ids, long[] idsShape, BiFunction<Tensor, GraphBuilder, Tensor> reader, double tol) {}

    static final List<Case> CASES = List.of(
            new Case("pointwise_f32_i64", DType.F32, new long[]{37, 5}, DType.I64, new long[]{3, 7}, (y, g) -> y.mul(2).add(1), 0),
            new Case("pointwise_bf16_i32", DType.BF16, new long[]{50, 16}, DType.I32, new long[]{9}, (y, g) -> y.add(g.input("b", DType.BF16, 9, 16)), 1e-2),
            new Case("transposed_i64_i32", DType.I64, new long[]{12, 8}, DType.I32, new long[]{5}, (y, g) -> y.transpose(0, 1).mul(3), 0),
            new Case("row_sum_f32_i32", DType.F32, new long[]{40, 300}, DType.I32, new long[]{2, 6}, (y, g) -> y.add(1).sum(2), 1e-5),
            new Case("row_sum_i64_i64", DType.I64, new long[]{9, 4, 3}, DType.I64, new long[]{7}, (y, g) -> y.sum(2), 0),
            new Case("sum_over_picks_f32_i64", DType.F32, new long[]{30, 8}, DType.I64, new long[]{25}, (y, g) -> y.add(1).sum(0), 1e-5));

    static Graph graph(Case c) {
        var g = Gatun.graph(c.name());
        Tensor y = g.input("x", c.table(), dims(c.tableShape())).indexSelect(0, g.input("idx", c.ids(), dims(c.idsShape())));
        g.output("y", c.reader().apply(y, g));
        return g.build();
    }

    /** The case's one kernel (the index_select read through its indices: nothing else is launched). */
    static Kernel kernel(Graph g) {
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(1)), PlanOptions.DEFAULT.withGatherFusion(true));
        var launches = p.steps().stream().filter(Step::isDeviceWork).toList();
        assertThat(launches).as("%s", p).hasSize(1);
        Kernel k = ((Step.Launch) launches.getFirst()).kernel();
        assertThat(k.gathers()).isTrue();
        return k;
    }

    @Test
    void gatheringKernelsComputeWhatTheReferenceComputes() throws Exception {
        var rnd = new Random(11);
        for (Case c : CASES) {
            Graph g = graph(c);
            Kernel k = kernel(g);
            long rows = c.tableShape()[0];
            var in = inputs(g, rnd, rows, -1);
            var r = emulate(k, in, -1);
            assertThat(r.trapped()).as(c.name()).isFalse();
            assertThat(r.record()).as("the fault record stays clear").containsOnly(0);
            NDArray want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("y");
            NDArray got = array(want.dtype(), r.output(), want.shape());
            assertThat(want.mismatch(got, c.tol(), c.tol())).as("%s: %s", c.name(), k.source()).isNull();
        }
    }

    @Test
    void anIndexOutsideTheTableTrapsWithItsRecordAndItsElementIsNeverWritten() throws Exception {
        var rnd = new Random(12);
        for (Case c : List.of(CASES.get(0), CASES.get(1), CASES.get(3))) {
            for (long bad : new long[]{c.tableShape()[0], -1, 1L << 33}) {
                if (c.ids() == DType.I32 && bad == 1L << 33) continue;
                Graph g = graph(c);
                Kernel k = kernel(g);
                long rows = c.tableShape()[0];
                long n = Arrays.stream(c.idsShape()).reduce(1, (a, b) -> a * b);
                int at = (int) (n / 2);
                var in = inputs(g, rnd, rows, -1);
                in.get("idx").setLong(at, bad);
                var r = emulate(k, in, 0x7F);
                String what = c.name() + " index " + bad;
                assertThat(r.trapped()).as(what).isTrue();
                var rec = ByteBuffer.wrap(r.record()).order(ByteOrder.LITTLE_ENDIAN);
                assertThat(rec.getInt(0)).as(what + ": code").isEqualTo(DeviceFault.INDEX_SELECT);
                assertThat(rec.getInt(4)).as(what + ": step").isEqualTo(STEP);
                assertThat(rec.getLong(8)).as(what + ": index").isEqualTo(bad);
                assertThat(rec.getLong(16)).as(what + ": position").isEqualTo(at);
                assertThat(rec.getLong(24)).as(what + ": rows").isEqualTo(rows);
                assertThat(rec.getLong(32)).as(what + ": which gather").isZero();
                // what was written is what the reference makes; the bad index's elements stay as they were (0x7F bytes)
                in.get("idx").setLong(at, 0);
                NDArray want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("y");
                byte[] out = r.output();
                int size = want.dtype().byteSize();
                for (long e = 0; e < want.numel(); e++) {
                    byte[] element = Arrays.copyOfRange(out, (int) (e * size), (int) ((e + 1) * size));
                    boolean untouched = true;
                    for (byte b : element) untouched &= b == 0x7F;
                    if (untouched) continue;
                    NDArray one = array(want.dtype(), element, 1);
                    assertThat(Math.abs(one.get(0) - want.get(e))).as("%s: element %d", what, e).isLessThanOrEqualTo(c.tol() * (1 + Math.abs(want.get(e))));
                    assertThat(readsBad(c, e, at)).as("%s: element %d reads the bad index yet was written", what, e).isFalse();
                }
            }
        }
    }

    /** Whether output element {@code e} of case {@code c} reads index position {@code at}. */
    private static boolean readsBad(Case c, long e, int at) {
        long row = Arrays.stream(c.tableShape()).skip(1).reduce(1, (a, b) -> a * b);
        return switch (c.name()) {
            case "row_sum_f32_i32" -> e == at;                  // one sum per picked row
            default -> e / row == at;                           // pointwise, row-major over (index, row)
        };
    }

    // ------------------------------------------------------------------ the emulation

    record Emulated(byte[] output, byte[] record, boolean trapped) {}

    /** The plan step number the emulated launches report. */
    static final int STEP = 5;
    /** The emulators built, by kernel source (a trap check runs the same kernel as the check of its values). */
    static final Map<String, Path> BUILT = new HashMap<>();

    /** Runs {@code k}'s generated source on host threads with {@code in} (by the kernel's input names), the output filled with {@code fill}. */
    static Emulated emulate(Kernel k, Map<String, NDArray> in, int fill) throws IOException, InterruptedException {
        KernelSource src = CudaCodegen.generate(k);
        var geometry = src.geometry(Map.of(), 2);
        Path run = Files.createTempDirectory(dir, k.name());
        var args = new ArrayList<String>();
        var loads = new StringBuilder();
        int b = 0;
        for (PlanBuffer p : k.inputs()) {
            Files.write(run.resolve("b" + b + ".bin"), in.get(p.name()).segment().toArray(ValueLayout.JAVA_BYTE));
            loads.append("    auto b").append(b).append(" = load(\"b").append(b).append(".bin\", 0);\n");
            args.add("(const " + CudaCodegen.storageType(p.dtype()) + "*) b" + b++ + ".data()");
        }
        assertThat(k.stores()).hasSize(1);
        PlanBuffer out = k.stores().getFirst().buffer();
        byte[] init = new byte[(int) (out.shape().numel() * out.dtype().byteSize())];
        Arrays.fill(init, (byte) fill);
        Files.write(run.resolve("out.bin"), init);
        Files.write(run.resolve("rec.bin"), new byte[(int) DeviceFault.RECORD_BYTES]);
        Files.write(run.resolve("claim.bin"), new byte[4]);
        args.add("(" + CudaCodegen.storageType(out.dtype()) + "*) out.data()");
        if (k.gathers()) args.addAll(List.of("(int*) claim.data()", "(gatun_fault*) rec.data()", Integer.toString(STEP)));
        String main = HostCompiler.GENERATED_KERNELS_PRELUDE + """
                SOURCE
                static std::vector<char> load(const char* name, int) {
                    std::ifstream f(name, std::ios::binary);
                    std::vector<char> v((std::istreambuf_iterator<char>(f)), {});
                    v.resize(v.size() + 16);
                    return v;
                }
                static void save(const char* name, const std::vector<char>& v) {
                    std::ofstream f(name, std::ios::binary);
                    f.write(v.data(), (std::streamsize) v.size() - 16);
                }
                int main() {
                LOADS    auto out = load("out.bin", 0), claim = load("claim.bin", 0), rec = load("rec.bin", 0);
                    bool ok = emu_launch(GRID, 1, BLOCK, TOGETHER, [&] { NAME(ARGS); });
                    save("out.bin", out);
                    save("rec.bin", rec);
                    if (!ok) std::printf("TRAP\\n");
                    return 0;
                }
                """.replace("SOURCE", src.source()).replace("LOADS", loads).replace("GRID", Long.toString(geometry.grid()))
                .replace("BLOCK", Integer.toString(geometry.block())).replace("TOGETHER", Boolean.toString(k.isReduction()))
                .replace("NAME", k.name()).replace("ARGS", String.join(", ", args));
        Path binary = BUILT.get(main);
        if (binary == null) {
            Files.writeString(run.resolve("main.cpp"), main);
            Process c = new ProcessBuilder(gxx.toString(), "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-I" + KernelEmulationTest.CUDA_INCLUDE, "-I" + dir,
                    "main.cpp", "-o", "main").directory(run.toFile()).redirectErrorStream(true).start();
            String log = new String(c.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertThat(c.waitFor(300, TimeUnit.SECONDS)).as("g++ finished").isTrue();
            assertThat(c.exitValue()).as("%s\n%s", log, src.source()).isZero();
            binary = run.resolve("main");
            BUILT.put(main, binary);
        }
        Process p = new ProcessBuilder(binary.toString()).directory(run.toFile()).redirectErrorStream(true).start();
        String printed = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("the emulation finished").isTrue();
        assertThat(p.exitValue()).as(printed).isZero();
        return new Emulated(Files.readAllBytes(run.resolve("out.bin")), Files.readAllBytes(run.resolve("rec.bin")), printed.contains("TRAP"));
    }

    /** Random inputs: the indices at the table's last and first rows and anywhere, repeated. */
    static Map<String, NDArray> inputs(Graph g, Random rnd, long rows, long unused) {
        var in = new HashMap<String, NDArray>();
        g.inputs().forEach((name, node) -> {
            long[] shape = node.type().shape().dims().stream().mapToLong(d -> d.size()).toArray();
            int n = (int) Arrays.stream(shape).reduce(1, (a, b) -> a * b);
            DType t = node.type().dtype();
            double[] v = new double[n];
            for (int i = 0; i < n; i++)
                v[i] = name.equals("idx") ? (i % 3 == 0 ? rows - 1 : i % 3 == 1 ? 0 : rnd.nextInt((int) rows))
                        : t == DType.I64 ? rnd.nextInt(2001) - 1000 : rnd.nextDouble() * 2 - 1;
            in.put(name, NDArray.of(t, v, shape));
        });
        return in;
    }

    static NDArray array(DType t, byte[] data, long... shape) {
        var a = NDArray.zeros(t, shape);
        MemorySegment.copy(MemorySegment.ofArray(data), 0, a.segment(), 0, a.byteSize());
        return a;
    }

    static Object[] dims(long[] shape) {
        var out = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) out[i] = shape[i];
        return out;
    }
}
