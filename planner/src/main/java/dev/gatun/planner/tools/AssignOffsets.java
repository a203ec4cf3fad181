package dev.gatun.planner.tools;

import dev.gatun.planner.OffsetAssigner;
import dev.gatun.planner.OffsetAssigner.Item;

import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.stream.Stream;

/**
 * Offset assignment on its own: reads a buffer-assignment problem in MiniMalloc's CSV format
 * ({@code id,lower,upper,size} with a header line; an optional fifth column {@code alignment}), writes
 * {@code id,offset} and prints the pool size against max-live. A directory runs every {@code *.csv} in it
 * and prints a table.
 *
 * <pre>
 * java -cp planner/target/classes:ir/target/classes dev.gatun.planner.tools.AssignOffsets [options] FILE.csv|DIR
 *   -o PATH       offsets CSV (for a file; "-" or absent: stdout, the summary then goes to stderr)
 *                 or a directory for one offsets CSV per instance (for a directory)
 *   --nodes N     search budget in nodes per pool (default 400000, the planner uses 100000; 0: heuristics only)
 *   --millis M    wall-clock cap of the search per pool (default none; results then depend on speed)
 *   --greedy      the historical single greedy order only
 *   --repeat N    run each instance N times and report the fastest (warm JIT)
 * </pre>
 */
public final class AssignOffsets {
    private AssignOffsets() {}

    /** A malformed problem file: the message names the file, the line and what was wrong. */
    public static final class FormatException extends RuntimeException {
        public FormatException(String message) { super(message); }
    }

    /** One instance's outcome. */
    public record Outcome(String name, List<Item> items, OffsetAssigner.Result result, double millis, List<String> violations) {
        public double ratio() { return result.maxLive() == 0 ? 1.0 : (double) result.size() / result.maxLive(); }
    }

    public static List<Item> parse(Path file) throws IOException {
        return parse(file.getFileName().toString(), Files.readString(file, StandardCharsets.UTF_8));
    }

    /** Parses MiniMalloc's CSV; the first line must be the header {@code id,lower,upper,size[,alignment]}. */
    public static List<Item> parse(String name, String text) {
        var items = new ArrayList<Item>();
        var ids = new HashSet<String>();
        String[] lines = text.split("\\R", -1);
        int columns = -1;
        for (int ln = 0; ln < lines.length; ln++) {
            String line = lines[ln].strip();
            String where = name + ":" + (ln + 1) + ": ";
            if (line.isEmpty() || line.startsWith("#")) continue;
            String[] f = line.split(",", -1);
            if (columns < 0) {
                var header = List.of(f).stream().map(String::strip).toList();
                if (!header.equals(List.of("id", "lower", "upper", "size")) && !header.equals(List.of("id", "lower", "upper", "size", "alignment")))
                    throw new FormatException(where + "expected the header \"id,lower,upper,size\" (optionally \",alignment\"), found \"" + line + "\"");
                columns = f.length;
                continue;
            }
            if (f.length != columns) throw new FormatException(where + "expected " + columns + " fields, found " + f.length + ": \"" + line + "\"");
            String id = f[0].strip();
            if (id.isEmpty()) throw new FormatException(where + "empty id");
            if (!ids.add(id)) throw new FormatException(where + "duplicate id \"" + id + "\"");
            long lower = number(where, "lower", f[1]), upper = number(where, "upper", f[2]), size = number(where, "size", f[3]);
            long alignment = columns == 5 ? number(where, "alignment", f[4]) : 1;
            if (lower < 0) throw new FormatException(where + "lower " + lower + " is negative");
            if (upper < lower) throw new FormatException(where + "upper " + upper + " is before lower " + lower);
            if (size < 0) throw new FormatException(where + "size " + size + " is negative");
            if (alignment < 1) throw new FormatException(where + "alignment " + alignment + " must be positive");
            items.add(new Item(id, lower, upper, size, alignment));
        }
        if (columns < 0) throw new FormatException(name + ": empty file, expected the header \"id,lower,upper,size\"");
        return items;
    }

    private static long number(String where, String field, String text) {
        try {
            return Long.parseLong(text.strip());
        } catch (NumberFormatException e) {
            throw new FormatException(where + field + " \"" + text.strip() + "\" is not an integer");
        }
    }

    /** Overlaps of live buffers, misaligned or negative offsets; empty when the assignment is valid. */
    public static List<String> violations(List<Item> items, OffsetAssigner.Result r) {
        var bad = new ArrayList<String>();
        long[] off = r.offsets();
        Integer[] byStart = new Integer[items.size()];
        for (int i = 0; i < byStart.length; i++) byStart[i] = i;
        java.util.Arrays.sort(byStart, java.util.Comparator.comparingLong(i -> items.get(i).lower()));
        for (int x = 0; x < byStart.length; x++) {
            int i = byStart[x];
            Item a = items.get(i);
            if (off[i] < 0 || (a.size() > 0 && off[i] + a.size() > r.size())) bad.add(a.id() + " at " + off[i] + " outside the pool of " + r.size());
            if (off[i] % a.alignment() != 0) bad.add(a.id() + " at " + off[i] + " not aligned to " + a.alignment());
            if (a.size() == 0) continue;
            for (int y = x + 1; y < byStart.length && items.get(byStart[y]).lower() < a.upper(); y++) {
                int j = byStart[y];
                Item b = items.get(j);
                if (b.size() == 0 || !(a.lower() < b.upper() && b.lower() < a.upper())) continue;
                if (off[i] < off[j] + b.size() && off[j] < off[i] + a.size()) bad.add(a.id() + "@" + off[i] + " overlaps " + b.id() + "@" + off[j]);
            }
        }
        return bad;
    }

    public static Outcome run(String name, List<Item> items, OffsetAssigner.Options options, int repeat) {
        OffsetAssigner.Result r = null;
        double best = Double.MAX_VALUE;
        for (int k = 0; k < Math.max(1, repeat); k++) {
            long t0 = System.nanoTime();
            r = OffsetAssigner.assign(items, options);
            best = Math.min(best, (System.nanoTime() - t0) / 1e6);
        }
        return new Outcome(name, items, r, best, violations(items, r));
    }

    public static void writeOffsets(Outcome o, PrintStream out) {
        out.println("id,offset");
        for (int i = 0; i < o.items().size(); i++) out.println(o.items().get(i).id() + "," + o.result().offsets()[i]);
    }

    public static String header() {
        return String.format("%-24s %8s %12s %12s %7s %9s  %s", "instance", "buffers", "max-live", "size", "ratio", "ms", "method");
    }

    public static String row(Outcome o) {
        return String.format("%-24s %8d %12d %12d %7.3f %9.1f  %s%s", o.name(), o.items().size(), o.result().maxLive(), o.result().size(),
                o.ratio(), o.millis(), o.result().method(), o.violations().isEmpty() ? "" : "  INVALID: " + o.violations().getFirst());
    }

    /** Runs every CSV of a directory, printing the table; returns the outcomes. */
    public static List<Outcome> runDirectory(Path dir, OffsetAssigner.Options options, int repeat, Path outDir, PrintStream out) throws IOException {
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) { files = s.filter(p -> p.toString().endsWith(".csv")).sorted().toList(); }
        if (files.isEmpty()) throw new IOException(dir + ": no *.csv files");
        out.println(header());
        var all = new ArrayList<Outcome>();
        double worst = 0, sum = 0;
        for (Path f : files) {
            var o = run(f.getFileName().toString(), parse(f), options, repeat);
            all.add(o);
            out.println(row(o));
            worst = Math.max(worst, o.ratio());
            sum += o.ratio();
            if (outDir != null) {
                Files.createDirectories(outDir);
                try (var ps = new PrintStream(Files.newOutputStream(outDir.resolve(f.getFileName().toString().replace(".csv", ".offsets.csv"))), false, StandardCharsets.UTF_8)) {
                    writeOffsets(o, ps);
                }
            }
        }
        out.printf("%d instances: mean ratio %.3f, worst %.3f, total %.0f ms%n", all.size(), sum / all.size(), worst, all.stream().mapToDouble(Outcome::millis).sum());
        return all;
    }

    /** A bad command line: the message names the argument; {@link #main} prints it with the usage and exits with 2. */
    static final class UsageException extends dev.gatun.ir.GatunException {
        UsageException(String message) { super(message); }
    }

    /** The parsed command line; {@code input} null where help was asked for. */
    record Args(OffsetAssigner.Options options, String outPath, String input, int repeat) {}

    /** The options of {@code args}, or a {@link UsageException} naming what is wrong. */
    static Args parseArgs(String[] args) {
        var options = OffsetAssigner.Options.OFFLINE;
        String outPath = null, input = null;
        int repeat = 1;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "-o" -> outPath = value(args, ++i, "-o");
                case "--nodes" -> options = options.withSearchNodes(whole(args, ++i, "--nodes", 0));
                case "--millis" -> options = options.withSearchMillis(whole(args, ++i, "--millis", 0));
                case "--greedy" -> options = OffsetAssigner.Options.GREEDY_ONLY;
                case "--repeat" -> repeat = (int) Math.min(Integer.MAX_VALUE, whole(args, ++i, "--repeat", 1));
                case "-h", "--help" -> { return new Args(options, outPath, null, repeat); }
                default -> {
                    if (args[i].startsWith("-") || input != null) throw new UsageException("unexpected argument " + args[i]);
                    input = args[i];
                }
            }
        }
        if (input == null) throw new UsageException("no input file or directory");
        return new Args(options, outPath, input, repeat);
    }

    private static String value(String[] args, int i, String option) {
        if (i >= args.length) throw new UsageException(option + " needs a value");
        return args[i];
    }

    private static long whole(String[] args, int i, String option, long least) {
        String v = value(args, i, option);
        try {
            long n = Long.parseLong(v);
            if (n >= least) return n;
        } catch (NumberFormatException e) {
            // said below, naming the option
        }
        throw new UsageException(option + " " + v + ": a whole number, at least " + least);
    }

    public static void main(String[] args) throws IOException {
        Args a;
        try {
            a = parseArgs(args);
        } catch (UsageException e) {
            System.err.println("assign-offsets: " + e.getMessage());
            usage(System.err);
            System.exit(2);
            return;
        }
        if (a.input() == null) {
            usage(System.out);
            return;
        }
        var options = a.options();
        String outPath = a.outPath(), input = a.input();
        int repeat = a.repeat();
        Path in = Path.of(input);
        try {
            if (Files.isDirectory(in)) {
                var all = runDirectory(in, options, repeat, outPath == null ? null : Path.of(outPath), System.out);
                if (all.stream().anyMatch(o -> !o.violations().isEmpty())) System.exit(1);
                return;
            }
            var o = run(in.getFileName().toString(), parse(in), options, repeat);
            boolean toStdout = outPath == null || outPath.equals("-");
            PrintStream summary = toStdout ? System.err : System.out;
            if (toStdout) writeOffsets(o, System.out);
            else try (var ps = new PrintStream(Files.newOutputStream(Path.of(outPath)), false, StandardCharsets.UTF_8)) { writeOffsets(o, ps); }
            summary.printf("%s: %d buffers, pool size %d, max-live %d, ratio %.4f, %.1f ms (%s)%n", o.name(), o.items().size(),
                    o.result().size(), o.result().maxLive(), o.ratio(), o.millis(), o.result().method());
            if (!o.violations().isEmpty()) { System.err.println("INVALID: " + o.violations()); System.exit(1); }
        } catch (FormatException e) {
            System.err.println("assign-offsets: " + e.getMessage());
            System.exit(2);
        } catch (IOException | UncheckedIOException e) {
            System.err.println("assign-offsets: " + e);
            System.exit(2);
        }
    }

    private static void usage(PrintStream out) {
        out.println("usage: AssignOffsets [-o OUT] [--nodes N] [--millis M] [--greedy] [--repeat N] FILE.csv|DIR");
    }
}
