package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CudaGraph;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Nccl;
import dev.gatun.cuda.NcclComm;
import dev.gatun.cuda.NcclUniqueId;
import dev.gatun.cuda.NcclWindow;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.distributed.Rendezvous;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * NCCL's all-reduce (sum) on ordinary buffers beside the same call on buffers in a symmetric NCCL window, where NCCL
 * 2.27 and newer run their low-latency symmetric kernels (issue: multi-GPU that pays, point 4's NCCL column). Every
 * rank is a thread of this process with a GPU of its own ({@link LocalWorld}; NCCL refuses two ranks on one device).
 *
 * <p>Each cell (dtype, size, memory, in place or not) is one {@code ncclAllReduce} captured in a CUDA graph and
 * replayed: {@code calls} replays each synchronised on its own (the latency's p10, median, p90 and max) and then
 * {@code calls} replays back to back (pipelined: the time divided by the calls). The inputs depend on the rank and the
 * element (f32: {@code (i % 251 + 1) * (r + 1)}, bf16: {@code (i % 4 + 1) * (r + 1)}, so every partial sum is an
 * exact integer); before and after the timing the graph runs once on fresh inputs and every element is compared with
 * the closed form {@code (i % m + 1) * W (W + 1) / 2}. Memory: {@code cudaMalloc} (NCCL's ordinary kernels) and
 * {@code ncclMemAlloc} registered with {@link NcclComm#allocateWindow} (send at offset 0, receive at the next 4 KiB
 * boundary, the same offsets on every rank). Where NCCL declines the window ({@link NcclWindow#isSymmetric()} false)
 * the row says so: its time is the ordinary kernels', not the symmetric ones'.
 *
 * <p>Arguments: {@code --world N} (default 2), {@code --calls N} (default 2000), {@code --sizes B,B,...} (bytes, default
 * 8 B to 64 MiB), {@code --types f32,bf16}, {@code --out FILE} (JSONL, a row per cell and rank). Prints one table
 * (rank 0's times, the slowest rank's median beside them). Needs {@code NCCL_NVLS_ENABLE=0} in the environment.
 * Run: {@code NCCL_NVLS_ENABLE=0 bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.NcclSymmetricBench --out
 * nccl-symmetric.jsonl}.
 */
public final class NcclSymmetricBench {
    private NcclSymmetricBench() {}

    static final long[] DEFAULT_SIZES = {8, 256, 4 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20};
    private static final int WARMUP = 50;
    private static final long ALIGN = 4096;

    /** The two element types, with the period of the inputs (small enough that every partial sum is exact). */
    enum Type {
        F32(Nccl.DataType.FLOAT32, 251), BF16(Nccl.DataType.BFLOAT16, 4);

        final Nccl.DataType nccl;
        final int period;

        Type(Nccl.DataType nccl, int period) {
            this.nccl = nccl;
            this.period = period;
        }

        int bytes() { return nccl.bytes; }
    }

    enum Memory { CUDA_MALLOC, NCCL_WINDOW }

    record Options(int world, int calls, long[] sizes, List<Type> types, Path out) {
        static Options parse(String[] args) {
            Map<String, String> o = new java.util.HashMap<>();
            for (int i = 0; i < args.length; i++) {
                if (!args[i].startsWith("--") || i + 1 >= args.length)
                    throw new IllegalArgumentException("NcclSymmetricBench: expected --name value pairs, got " + Arrays.toString(args));
                o.put(args[i].substring(2), args[++i]);
            }
            long[] sizes = o.containsKey("sizes") ? Arrays.stream(o.get("sizes").split(",")).mapToLong(Long::parseLong).toArray() : DEFAULT_SIZES;
            List<Type> types = Arrays.stream(o.getOrDefault("types", "f32,bf16").split(","))
                    .map(t -> Type.valueOf(t.trim().toUpperCase(Locale.ROOT))).toList();
            return new Options(Integer.parseInt(o.getOrDefault("world", "2")), Integer.parseInt(o.getOrDefault("calls", "2000")), sizes, types,
                    Path.of(o.getOrDefault("out", "nccl-symmetric.jsonl")));
        }
    }

    /** One cell on one rank. {@code symmetric}: null for cudaMalloc'd memory, else whether NCCL made the window. */
    record Row(Type type, long bytes, Memory memory, boolean inPlace, int rank, int world, Boolean symmetric, int calls,
               double p10, double median, double p90, double max, double pipelined, long wrong, long elements) {
        String placement() { return inPlace ? "in place" : "out of place"; }

        String check() { return wrong == 0 ? "ok" : "WRONG " + wrong + " of " + elements; }

        String json(String device, int ncclVersion) {
            return String.format(Locale.ROOT, "{\"bench\":\"nccl_symmetric\",\"world\":%d,\"rank\":%d,\"device\":\"%s\",\"nccl\":%d,"
                            + "\"dtype\":\"%s\",\"bytes\":%d,\"elements\":%d,\"memory\":\"%s\",\"in_place\":%b,\"symmetric_window\":%s,"
                            + "\"calls\":%d,\"latency_p10_us\":%.2f,\"latency_median_us\":%.2f,\"latency_p90_us\":%.2f,\"latency_max_us\":%.2f,"
                            + "\"pipelined_us\":%.3f,\"wrong\":%d}",
                    world, rank, device.replace("\"", "'"), ncclVersion, type.name().toLowerCase(Locale.ROOT), bytes, elements,
                    memory.name().toLowerCase(Locale.ROOT), inPlace, symmetric == null ? "null" : symmetric.toString(), calls, p10, median,
                    p90, max, pipelined, wrong);
        }
    }

    public static void main(String[] args) {
        Options o = Options.parse(args);
        String refusal = refusal(o, System.getenv(), Device.count());
        if (refusal != null) {
            System.err.println(refusal);
            System.exit(2);
        }
        if (!Nccl.hasWindows()) {
            System.err.println("NcclSymmetricBench: this libnccl (" + Nccl.version() + ") has no ncclCommWindowRegister; NCCL 2.27 or newer is needed");
            System.exit(2);
        }
        String[] device = new String[1];
        List<Row> all = measure(o, device);
        printTable(o, all, device[0]);
        write(o.out(), all, device[0], Nccl.version());
        System.exit(all.stream().anyMatch(r -> r.wrong() != 0) ? 1 : 0);
    }

    /** Runs every cell on {@code o.world()} GPUs; returns the rows of every rank, sorted; {@code device[0]}: GPU 0's name. */
    static List<Row> measure(Options o, String[] device) {
        var rows = new ConcurrentLinkedQueue<Row>();
        LocalWorld.run(o.world(), Duration.ofMinutes(30), rv -> rank(rv, o, rows, device));
        List<Row> all = new ArrayList<>(rows);
        all.sort(Comparator.comparing(Row::type).thenComparingLong(Row::bytes).thenComparing(Row::memory)
                .thenComparing(r -> !r.inPlace()).thenComparingInt(Row::rank));
        return all;
    }

    /** Why this machine or environment cannot run the bench, or null. */
    static String refusal(Options o, Map<String, String> env, int gpus) {
        if (!"0".equals(env.getOrDefault("NCCL_NVLS_ENABLE", "").trim()))
            return "NcclSymmetricBench: refused: set NCCL_NVLS_ENABLE=0 (NVLink multicast must stay off on these machines)";
        if (o.calls() < 10)
            return "NcclSymmetricBench: --calls must be at least 10, not " + o.calls();
        if (o.world() < 2)
            return "NcclSymmetricBench: --world must be at least 2, not " + o.world();
        if (gpus < o.world())
            return "NcclSymmetricBench: needs " + o.world() + " GPUs, one a rank (NCCL refuses two ranks on one device); this machine has " + gpus;
        return null;
    }

    private static void rank(Rendezvous rv, Options o, ConcurrentLinkedQueue<Row> rows, String[] deviceName) {
        int r = rv.rank();
        byte[] id = r == 0 ? Nccl.uniqueId().bytes() : null;
        if (r == 0) rv.set("nccl-symmetric/id", id);
        else id = rv.get("nccl-symmetric/id");
        try (Device d = Device.open(r); Stream s = d.createStream(); NcclComm comm = NcclComm.init(d, NcclUniqueId.of(id), o.world(), r)) {
            if (r == 0) deviceName[0] = d.name();
            for (Type t : o.types())
                for (long bytes : o.sizes()) {
                    long n = bytes / t.bytes();
                    if (n == 0) continue;
                    byte[] input = input(t, n, r);
                    try (DeviceBuffer pristine = d.allocate(bytes); DeviceBuffer a = d.allocate(bytes); DeviceBuffer b = d.allocate(bytes)) {
                        pristine.copyFrom(input);
                        var cell = new Cell(rv, o, comm, s, t, n, pristine);
                        rows.add(cell.run(Memory.CUDA_MALLOC, null, a, a));
                        rows.add(cell.run(Memory.CUDA_MALLOC, null, a, b));
                        long stride = (bytes + ALIGN - 1) / ALIGN * ALIGN;
                        try (NcclWindow w = comm.allocateWindow(2 * stride)) {
                            DeviceBuffer send = w.buffer().slice(0, bytes), recv = w.buffer().slice(stride, bytes);
                            rows.add(cell.run(Memory.NCCL_WINDOW, w.isSymmetric(), send, send));
                            rows.add(cell.run(Memory.NCCL_WINDOW, w.isSymmetric(), send, recv));
                        }
                    }
                }
            comm.checkAsyncError();
        }
    }

    /** Rank {@code r}'s input: element i is {@code (i % period + 1) * (r + 1)}, little-endian. */
    static byte[] input(Type t, long n, int r) {
        var out = java.nio.ByteBuffer.allocate(Math.toIntExact(n * t.bytes())).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        for (long i = 0; i < n; i++) {
            float v = (float) ((i % t.period + 1) * (long) (r + 1));
            switch (t) {
                case F32 -> out.putFloat(v);
                case BF16 -> out.putShort((short) (Float.floatToRawIntBits(v) >>> 16)); // small integers: exact
            }
        }
        return out.array();
    }

    /** How many elements of {@code result} differ from the closed form {@code (i % period + 1) * W (W + 1) / 2}. */
    static long wrong(Type t, byte[] result, int world) {
        var in = java.nio.ByteBuffer.wrap(result).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        long n = result.length / t.bytes(), bad = 0, ranks = (long) world * (world + 1) / 2;
        for (long i = 0; i < n; i++) {
            double got = switch (t) {
                case F32 -> in.getFloat();
                case BF16 -> Float.intBitsToFloat((in.getShort() & 0xFFFF) << 16);
            };
            if (got != (double) ((i % t.period + 1) * ranks)) bad++;
        }
        return bad;
    }

    /** One dtype and size on one rank: captures, checks and times the all-reduce for each memory and placement. */
    private record Cell(Rendezvous rv, Options o, NcclComm comm, Stream s, Type t, long n, DeviceBuffer pristine) {
        Row run(Memory memory, Boolean symmetric, DeviceBuffer send, DeviceBuffer recv) {
            CudaGraph graph;
            try (StreamCapture capture = s.beginCapture()) {
                comm.allReduce(send, recv, n, t.nccl, Nccl.RedOp.SUM, s);
                graph = capture.end();
            }
            try (graph; GraphExec exec = graph.instantiate()) {
                long wrong = checked(exec, send, recv);
                for (int i = 0; i < WARMUP; i++) exec.launch(s); // in place the values grow (to inf): the time does not depend on them
                s.synchronize();
                int calls = o.calls();
                double[] lat = new double[calls];
                for (int i = 0; i < calls; i++) {
                    long t0 = System.nanoTime();
                    exec.launch(s);
                    s.synchronize();
                    lat[i] = (System.nanoTime() - t0) / 1e3;
                }
                long t0 = System.nanoTime();
                for (int i = 0; i < calls; i++) exec.launch(s);
                s.synchronize();
                double pipelined = (System.nanoTime() - t0) / 1e3 / calls;
                wrong += checked(exec, send, recv);
                Arrays.sort(lat);
                return new Row(t, n * t.bytes(), memory, send.address() == recv.address(), comm.rank(), comm.size(), symmetric, calls,
                        lat[calls / 10], lat[calls / 2], lat[calls * 9 / 10], lat[calls - 1], pipelined, wrong, n);
            }
        }

        /** Fresh inputs on every rank (no peer still reading the old ones), one replay, every element compared. */
        private long checked(GraphExec exec, DeviceBuffer send, DeviceBuffer recv) {
            s.synchronize();
            rv.barrier("nccl-symmetric/before-reset");
            send.copyFromAsync(pristine, s);
            if (recv.address() != send.address()) recv.memsetAsync(0xFF, s); // NaNs: an element never written counts as wrong
            s.synchronize();
            rv.barrier("nccl-symmetric/after-reset");
            exec.launch(s);
            s.synchronize();
            return NcclSymmetricBench.wrong(t, recv.toByteArray(), comm.size());
        }
    }

    private static void printTable(Options o, List<Row> rows, String device) {
        System.out.printf(Locale.ROOT, "NcclSymmetricBench: world %d (%s, a GPU a rank), NCCL %d, %d calls a cell; times in µs, rank 0's%n",
                o.world(), device, Nccl.version(), o.calls());
        System.out.println("| dtype | bytes | memory | placement | symmetric | p10 | median | p90 | max | pipelined | slowest rank's median | check |");
        System.out.println("| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |");
        for (Row r : rows) {
            if (r.rank() != 0) continue;
            double slowest = rows.stream().filter(x -> x.type() == r.type() && x.bytes() == r.bytes() && x.memory() == r.memory()
                    && x.inPlace() == r.inPlace()).mapToDouble(Row::median).max().orElse(r.median());
            boolean anyWrong = rows.stream().anyMatch(x -> x.type() == r.type() && x.bytes() == r.bytes() && x.memory() == r.memory()
                    && x.inPlace() == r.inPlace() && x.wrong() != 0);
            System.out.printf(Locale.ROOT, "| %s | %d | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %s |%n",
                    r.type().name().toLowerCase(Locale.ROOT), r.bytes(), r.memory() == Memory.CUDA_MALLOC ? "cudaMalloc" : "NCCL window",
                    r.placement(), r.symmetric() == null ? "-" : r.symmetric() ? "yes" : "DECLINED", r.p10(), r.median(), r.p90(), r.max(),
                    r.pipelined(), slowest, anyWrong ? "WRONG (see the JSONL)" : "ok");
        }
    }

    private static void write(Path out, List<Row> rows, String device, int ncclVersion) {
        try {
            Files.write(out, rows.stream().map(r -> r.json(device, ncclVersion)).toList());
            System.out.println("rows: " + out.toAbsolutePath());
        } catch (IOException e) {
            throw new UncheckedIOException("NcclSymmetricBench: cannot write " + out, e);
        }
    }
}
