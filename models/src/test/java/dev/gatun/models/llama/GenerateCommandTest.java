package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.models.text.ChatTemplate;
import dev.gatun.models.text.Message;
import dev.gatun.models.text.Tokenizer;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code gatun-generate}'s main, in process, on the host backend, over a checkpoint made here: random weights of a tiny
 * Llama whose vocabulary is a shipped tokenizer's (Llama 3 style byte-level BPE, with its chat template). The text it
 * streams is the tokenizer's decoding of the tokens {@link LlamaGenerator} generates from the same ids, greedy and
 * drawn; it comes a token at a time; the same seed gives the same text; bad arguments and a missing directory exit
 * with a message.
 */
class GenerateCommandTest {
    /** A checkpoint directory of random weights and the shipped {@code tokenizer}'s files. */
    static Path checkpoint(Path dir, String tokenizer, long seed) throws IOException {
        Path from;
        try {
            from = Path.of(GenerateCommandTest.class.getResource("/references/tokenizers/" + tokenizer).toURI());
        } catch (java.net.URISyntaxException e) {
            throw new IllegalStateException(e);
        }
        int vocab = Tokenizer.load(from).vocabSize();
        var c = new LlamaConfig(64, 2, 4, 2, 128, vocab, 10000, 1e-5, false);
        LlamaCheckpoint.writeRandom(c, DType.F32, seed, dir);
        for (String f : List.of("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"))
            if (Files.exists(from.resolve(f))) Files.copy(from.resolve(f), dir.resolve(f));
        return dir;
    }

    /** What a run printed: its status, its standard output (and each chunk flushed), its standard error. */
    record Run(int status, String out, List<String> flushed, String err) {}

    static Run run(String... args) {
        var chunks = new ArrayList<String>();
        var all = new ByteArrayOutputStream();
        var err = new ByteArrayOutputStream();
        int status = GenerateCommand.run(args, new PrintStream(recorder(chunks, all), false, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
        return new Run(status, all.toString(StandardCharsets.UTF_8), chunks, err.toString(StandardCharsets.UTF_8));
    }

    /** A stream keeping all it is written in {@code all} and each flushed chunk as a string in {@code chunks}. */
    static OutputStream recorder(List<String> chunks, ByteArrayOutputStream all) {
        return new OutputStream() {
            final ByteArrayOutputStream pending = new ByteArrayOutputStream();
            @Override public void write(int b) {
                pending.write(b);
                all.write(b);
            }
            @Override public void flush() {
                if (pending.size() > 0) chunks.add(pending.toString(StandardCharsets.UTF_8));
                pending.reset();
            }
        };
    }

    /** The tokens the generator gives for {@code ids} directly, as the command would make it. */
    static int[] generated(Path dir, int[] ids, int n, Sampling sampling) throws IOException {
        try (var ckpt = LlamaCheckpoint.open(dir);
             var gen = new LlamaGenerator(ckpt.config(), List.of(LlamaDecoder.weights(ckpt.config(), ckpt.weights(), 1, 0, DType.F32)), 1, ids.length,
                     ids.length + n - 1, 1, DType.F32, CompileOptions.world(1).backend("host"), !sampling.isPlainGreedy())) {
            return gen.generate(new int[][]{ids}, Generation.of(n).sampling(sampling)).tokens();
        }
    }

    @Test
    void theStreamedTextIsTheGeneratorsTokensDecodedGreedyAndDrawn(@TempDir Path tmp) throws IOException {
        Path dir = checkpoint(tmp, "llama3_bytelevel", 3);
        var tok = Tokenizer.load(dir);
        String prompt = "Hello, wörld: ünïcode ✓ and 日本語";
        int n = 12;
        int[] ids = tok.encode(prompt, true);
        int[] greedy = generated(dir, ids, n, Sampling.GREEDY);
        assertThat(greedy).hasSize(n);
        String want = tok.decode(greedy, true);
        assertThat(want).as("the random model writes some text").isNotBlank();
        var r = run("--model", dir.toString(), "--prompt", prompt, "--max-new-tokens", Integer.toString(n), "--backend", "host");
        assertThat(r.status()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(want + System.lineSeparator());
        assertThat(r.flushed().size()).as("printed as the tokens come: %s", r.flushed()).isGreaterThan(3);
        assertThat(r.err()).contains("loading weights: ").contains(", 21 of 21 tensors").contains(n + " tokens in");
        // drawn: the generator's draws for the same seed, twice alike; another seed writes another text
        var hot = Sampling.temperature(1.5).topK(200).topP(0.95).repetitionPenalty(1.3).seed(17);
        String drawn = tok.decode(generated(dir, ids, n, hot), true);
        String[] sampling = {"--temperature", "1.5", "--top-k", "200", "--top-p", "0.95", "--repetition-penalty", "1.3"};
        for (int i = 0; i < 2; i++) {
            var d = run(concat(new String[]{"--model", dir.toString(), "--prompt", prompt, "--max-new-tokens", Integer.toString(n), "--seed", "17",
                    "--backend", "host"}, sampling));
            assertThat(d.status()).as(d.err()).isZero();
            assertThat(d.out()).isEqualTo(drawn + System.lineSeparator());
        }
        var other = run(concat(new String[]{"--model", dir.toString(), "--prompt", prompt, "--max-new-tokens", Integer.toString(n), "--seed", "18",
                "--backend", "host"}, sampling));
        assertThat(other.out()).isNotEqualTo(drawn + System.lineSeparator());
    }

    /**
     * The tiny checkpoint shipped for trying the command ({@code models/src/test/resources/checkpoints/tiny-llama3}:
     * random weights, the Llama 3 style tokenizer) streams the generator's text on the host, as a user runs it.
     */
    @Test
    void theShippedTinyCheckpointStreamsTextOnTheHost() throws Exception {
        Path dir = Path.of(GenerateCommandTest.class.getResource("/checkpoints/tiny-llama3/config.json").toURI()).getParent();
        var tok = Tokenizer.load(dir);
        String prompt = "The quick brown fox";
        int n = 10;
        String want = tok.decode(generated(dir, tok.encode(prompt, true), n, Sampling.GREEDY), true);
        var r = run("--model", dir.toString(), "--prompt", prompt, "--max-new-tokens", Integer.toString(n), "--backend", "host");
        assertThat(r.status()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(want + System.lineSeparator());
        assertThat(r.flushed().size()).as("printed as the tokens come: %s", r.flushed()).isGreaterThan(2);
        assertThat(r.err()).contains("loading weights: ").contains(n + " tokens in");
    }

    /** With {@code --chat} the prompt is the chat template's rendering of a user message, encoded without adding tokens. */
    @Test
    void chatRendersThePromptWithTheTemplate(@TempDir Path tmp) throws IOException {
        Path dir = checkpoint(tmp, "llama3_bytelevel", 4);
        var tok = Tokenizer.load(dir);
        int[] ids = tok.encode(ChatTemplate.load(dir).render(List.of(Message.user("Hi there")), true), false);
        int n = 6;
        String want = tok.decode(generated(dir, ids, n, Sampling.GREEDY), true);
        var r = run("--model", dir.toString(), "--prompt", "Hi there", "--chat", "--max-new-tokens", Integer.toString(n), "--backend", "host");
        assertThat(r.status()).as(r.err()).isZero();
        assertThat(r.out()).isEqualTo(want + System.lineSeparator());
    }

    /** A multi-byte character split over tokens is printed whole, once its last byte has come. */
    @Test
    void aCharacterSplitOverTokensIsPrintedWhole() {
        var tok = Tokenizer.load(References.dir("llama3_bytelevel"));
        int[] ids = tok.encode("a✓b日", false);
        assertThat(ids.length).as("✓ and 日 are several byte tokens each in this small vocabulary").isGreaterThan(4);
        var chunks = new ArrayList<String>();
        var stream = new GenerateCommand.TextStream(tok, new PrintStream(recorder(chunks, new ByteArrayOutputStream()), false, StandardCharsets.UTF_8));
        for (int id : ids) stream.add(id);
        stream.end();
        assertThat(String.join("", chunks)).isEqualTo("a✓b日" + System.lineSeparator());
        assertThat(chunks).noneMatch(s -> s.contains("\uFFFD")).contains("✓", "日");
    }

    @Test
    void badArgumentsExitWithAMessage(@TempDir Path tmp) {
        var missing = run("--prompt", "x");
        assertThat(missing.status()).isEqualTo(2);
        assertThat(missing.err()).contains("--model DIR is required").contains("usage: gatun-generate");
        assertThat(run("--model", "m", "--prompt", "x", "--top-p", "lots").err()).contains("--top-p lots: not a number");
        assertThat(run("--model", "m", "--prompt", "x", "--temperature", "-1").err()).contains("temperature -1.0: give 0 (greedy)");
        assertThat(run("--model", "m", "--prompt", "x", "--frobnicate").err()).contains("unknown argument '--frobnicate'");
        assertThat(run("--model", "m", "--prompt").err()).contains("--prompt needs a value");
        var help = run("--help");
        assertThat(help.status()).isZero();
        assertThat(help.out()).contains("--repetition-penalty R");
        var nowhere = run("--model", tmp.resolve("nothing").toString(), "--prompt", "x");
        assertThat(nowhere.status()).isEqualTo(1);
        assertThat(nowhere.err()).contains("nothing: no such directory");
    }

    private static String[] concat(String[] a, String[] b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    /** The shipped tokenizers (models/src/test/resources/references/tokenizers). */
    static final class References {
        static Path dir(String name) {
            try {
                return Path.of(References.class.getResource("/references/tokenizers/" + name).toURI());
            } catch (java.net.URISyntaxException e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
