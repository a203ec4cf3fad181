package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.GatunException;
import dev.gatun.ir.GraphException;
import dev.gatun.models.text.ChatTemplate;
import dev.gatun.models.text.Message;
import dev.gatun.models.text.Tokenizer;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * {@code gatun-generate}: text in, text out. Loads a checkpoint directory (config.json, the safetensors, tokenizer.json,
 * with {@code --chat} the chat template of tokenizer_config.json or chat_template.jinja), encodes the prompt, generates
 * with {@link LlamaGenerator} (greedy, or drawn on the device as the sampling options say) and prints the text to
 * standard output as the tokens come, decoded so far at each step and printed up to the last whole character (a byte
 * of a character split over tokens waits for the rest). Standard error gets a progress line while the weights load and
 * a summary at the end. The generation stops at the checkpoint's end tokens or after {@code --max-new-tokens}.
 *
 * <p>{@link #run} is the command with its streams, returning the exit status (0 done, 1 failed, 2 bad arguments);
 * {@link #main} exits with it.
 */
public final class GenerateCommand {
    private GenerateCommand() {}

    static final String USAGE = """
            usage: gatun-generate --model DIR --prompt TEXT [options]
              --model DIR                a checkpoint directory: config.json, model.safetensors (or its index), tokenizer.json
              --prompt TEXT              the prompt
              --chat                     render the prompt as a user message with the checkpoint's chat template
              --max-new-tokens N         at most N new tokens (default 128)
              --temperature T            0 (the default) for greedy, else tokens are drawn at temperature T
              --top-k K                  keep the K most likely tokens (0: all)
              --top-p P                  keep the most likely tokens until their probability reaches P (1: all)
              --min-p M                  keep tokens at least M times as likely as the most likely (0: all)
              --repetition-penalty R     penalize the tokens seen so far (1: none)
              --seed S                   the seed of the draws (default 0): the same seed, the same text
              --dtype f32|bf16|f16       the weights' and activations' dtype (default f32)
              --backend auto|host|cuda   where to run (default auto: a GPU where there is one)
            """;

    /** The parsed arguments. */
    record Options(Path model, String prompt, boolean chat, int maxNew, Sampling sampling, DType dtype, String backend) {}

    public static void main(String[] args) {
        System.exit(run(args, System.out, System.err));
    }

    /**
     * A bad command line: the message says which argument and what was wrong; {@link #run} prints it (with the usage)
     * and returns 2. Thrown only by this command's own parsing, never by the library it calls.
     */
    static final class UsageException extends GatunException {
        UsageException(String message) { super(message); }
    }

    /** The command with these streams; the exit status. */
    public static int run(String[] args, PrintStream out, PrintStream err) {
        Options o;
        try {
            o = parse(args);
        } catch (UsageException e) {
            err.println("gatun-generate: " + e.getMessage());
            err.print(USAGE);
            return 2;
        }
        if (o == null) {
            out.print(USAGE);
            return 0;
        }
        try {
            generate(o, out, err);
            return 0;
        } catch (UsageException e) {
            out.flush();
            err.println("gatun-generate: " + e.getMessage());
            return 2;
        } catch (GatunException | IOException e) {
            out.flush();
            err.println();
            err.println("gatun-generate: " + e.getMessage());
            return 1;
        }
    }

    /** The options of {@code args}; null where help was asked for; a {@link UsageException} saying what is wrong. */
    static Options parse(String[] args) {
        Map<String, String> v = new java.util.HashMap<>();
        boolean chat = false;
        Set<String> valued = Set.of("--model", "--prompt", "--max-new-tokens", "--temperature", "--top-k", "--top-p", "--min-p", "--repetition-penalty",
                "--seed", "--dtype", "--backend");
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--help") || a.equals("-h")) return null;
            if (a.equals("--chat")) chat = true;
            else if (valued.contains(a)) {
                if (i + 1 >= args.length) throw new UsageException(a + " needs a value");
                v.put(a, args[++i]);
            } else throw new UsageException("unknown argument '" + a + "'");
        }
        if (!v.containsKey("--model")) throw new UsageException("--model DIR is required");
        if (!v.containsKey("--prompt")) throw new UsageException("--prompt TEXT is required");
        int maxNew = whole(v, "--max-new-tokens", 128);
        if (maxNew < 1) throw new UsageException("--max-new-tokens " + maxNew + ": at least 1");
        double temperature = number(v, "--temperature", 0), topP = number(v, "--top-p", 1), minP = number(v, "--min-p", 0);
        double penalty = number(v, "--repetition-penalty", 1);
        int topK = whole(v, "--top-k", 0);
        long seed = seed(v);
        Sampling sampling;
        try {
            sampling = new Sampling(temperature, topK, topP, minP, penalty, seed);
        } catch (GatunException e) {   // Sampling's own range checks, said as this command's usage error
            throw new UsageException("the sampling options: " + e.getMessage());
        }
        String dtype = v.getOrDefault("--dtype", "f32").toLowerCase(Locale.ROOT);
        DType t = switch (dtype) {
            case "f32" -> DType.F32;
            case "bf16" -> DType.BF16;
            case "f16" -> DType.F16;
            default -> throw new UsageException("--dtype " + dtype + ": f32, bf16 or f16");
        };
        String backend = v.getOrDefault("--backend", "auto");
        if (!List.of("auto", "host", "cuda").contains(backend)) throw new UsageException("--backend " + backend + ": auto, host or cuda");
        return new Options(modelPath(v.get("--model")), v.get("--prompt"), chat, maxNew, sampling, t, backend);
    }

    /** {@code --model}'s directory; a name the file system cannot hold (a NUL character) is a usage error. */
    private static Path modelPath(String dir) {
        try {
            return Path.of(dir);
        } catch (java.nio.file.InvalidPathException e) {
            throw new UsageException("--model " + dir + ": not a path (" + e.getReason() + ")");
        }
    }

    /** Option {@code name}'s number, or {@code otherwise}; its errors name it. */
    private static double number(Map<String, String> v, String name, double otherwise) {
        String s = v.get(name);
        if (s == null) return otherwise;
        try {
            return Double.parseDouble(s.strip());
        } catch (NumberFormatException e) {   // the JDK's parse error, said as a usage error naming the option
            throw new UsageException(name + " " + s + ": not a number");
        }
    }

    /** Option {@code name}'s whole number (an int: a larger one is refused, never cut short), or {@code otherwise}. */
    private static int whole(Map<String, String> v, String name, int otherwise) {
        String s = v.get(name);
        if (s == null) return otherwise;
        try {
            return Integer.parseInt(s.strip());
        } catch (NumberFormatException e) {
            throw new UsageException(name + " " + s + ": not a whole number from " + Integer.MIN_VALUE + " to " + Integer.MAX_VALUE);
        }
    }

    /** {@code --seed}: any long, default 0. */
    private static long seed(Map<String, String> v) {
        String s = v.get("--seed");
        if (s == null) return 0;
        try {
            return Long.parseLong(s.strip());
        } catch (NumberFormatException e) {
            throw new UsageException("--seed " + s + ": not a whole number");
        }
    }

    /** Loads, generates and streams the text (see the class comment). */
    static void generate(Options o, PrintStream out, PrintStream err) throws IOException {
        if (!Files.isDirectory(o.model())) throw new GraphException(o.model() + ": no such directory (--model names a checkpoint directory)");
        Tokenizer tok = Tokenizer.load(o.model());
        ChatTemplate chat = o.chat() ? ChatTemplate.load(o.model()) : null;
        int[] ids = chat == null ? tok.encode(o.prompt(), true) : tok.encode(chat.render(List.of(Message.user(o.prompt())), true), false);
        if (ids.length == 0) throw new UsageException("--prompt: the prompt encodes to no tokens; give some text");
        var stops = new LinkedHashSet<>(LlamaCheckpoint.eosTokens(o.model()));
        if (chat != null && chat.variables().containsKey("eos_token")) tok.tokenToId(chat.variables().get("eos_token")).ifPresent(stops::add);
        var options = CompileOptions.world(1);
        if (!o.backend().equals("auto")) options = options.backend(o.backend());
        try (var ckpt = LlamaCheckpoint.open(o.model())) {
            LlamaConfig c = ckpt.config();
            stops.removeIf(t -> t >= c.vocabSize());   // a tokenizer's end token the model cannot write
            var shard = loadWeights(ckpt.weights(), c, o.dtype(), err);
            err.print("compiling for a prompt of " + ids.length + " tokens and " + o.maxNew() + " new ...");
            err.flush();
            try (var gen = new LlamaGenerator(c, List.of(shard), 1, ids.length, ids.length + o.maxNew() - 1, 1, o.dtype(), options, !o.sampling().isPlainGreedy())) {
                err.println(" on " + gen.device());
                var text = new TextStream(tok, out);
                long t0 = System.nanoTime();
                var result = gen.generate(new int[][]{ids}, Generation.of(o.maxNew()).stopAt(stops).stepwise().sampling(o.sampling())
                        .onTokens((step, tokens) -> text.add(tokens[0])));
                text.end();
                double s = (System.nanoTime() - t0) / 1e9;
                err.printf(Locale.ROOT, "%d tokens in %.2f s (%.1f a second)%n", result.tokens().length, s, result.tokens().length / s);
            }
        }
    }

    /**
     * Rank 0's weights of a single-rank run in {@code dtype}, with a progress line on {@code err} as each tensor is read
     * from the files ({@link dev.gatun.runtime.LoadProgress#line()}, rewritten in place).
     */
    static Map<String, NDArray> loadWeights(TensorFiles files, LlamaConfig c, DType dtype, PrintStream err) {
        var shard = LlamaDecoder.weights(c, files, 1, 0, dtype, p -> {
            err.print("\r" + p.line());
            err.flush();
        });
        err.println(" as " + dtype + ", done");
        return shard;
    }

    /**
     * The generated text as the tokens come: each step's tokens so far decoded (special tokens left out) and what is new
     * printed, but for a trailing replacement character, which is a character whose bytes are not all there yet (it is
     * printed at the end if it stays).
     */
    static final class TextStream {
        private final Tokenizer tok;
        private final PrintStream out;
        private final List<Integer> ids = new ArrayList<>();
        private int printed;
        private String text = "";

        TextStream(Tokenizer tok, PrintStream out) {
            this.tok = tok;
            this.out = out;
        }

        /** Takes a step's token ({@link Generation#ENDED}: none) and prints what it completes. */
        void add(int id) {
            if (id == Generation.ENDED) return;
            ids.add(id);
            text = tok.decode(ids.stream().mapToInt(Integer::intValue).toArray(), true);
            int whole = text.length();
            while (whole > printed && text.charAt(whole - 1) == '\uFFFD') whole--;
            if (whole > printed) {
                out.print(text.substring(printed, whole));
                out.flush();
                printed = whole;
            }
        }

        /** Prints what is left and ends the line. */
        void end() {
            if (text.length() > printed) out.print(text.substring(printed));
            out.println();
            out.flush();
        }
    }
}
