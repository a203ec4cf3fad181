package dev.gatun.models.text;

import dev.gatun.ir.json.Json;

import java.util.Locale;

/**
 * How long encoding and decoding about 1 MB of multilingual text takes with each reference tokenizer (the reference
 * test strings, repeated). A measurement to run by hand, not a test:
 * {@code java -cp models/target/classes:models/target/test-classes:ir/target/classes dev.gatun.models.text.TokenizerBench}.
 * SentencePiece-style tokenizers without a pre-tokenizer merge the whole text as one word, the worst case of the
 * merge loop; byte-level ones hit the word cache. The best of 8 rounds; the thread's CPU time beside the wall time
 * shows what a loaded machine's waiting adds.
 */
public final class TokenizerBench {
    private static final java.lang.management.ThreadMXBean CPU = java.lang.management.ManagementFactory.getThreadMXBean();

    private TokenizerBench() {}

    public static void main(String[] args) {
        StringBuilder sb = new StringBuilder();
        Json.Arr cases = (Json.Arr) References.json("gpt2_bytelevel", "cases.json").get("cases");
        while (sb.length() < 1_000_000) for (Json c : cases.items()) sb.append(References.str((Json.Obj) c, "text")).append('\n');
        String text = sb.toString();
        int bytes = text.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
        System.out.printf(Locale.ROOT, "%d characters, %d UTF-8 bytes%n", text.length(), bytes);
        for (String name : References.TOKENIZERS) {
            Tokenizer tok = Tokenizer.load(References.dir(name));
            double best = Double.MAX_VALUE, bestCpu = Double.MAX_VALUE, bestDecode = Double.MAX_VALUE;
            int[] ids = null;
            for (int round = 0; round < 8; round++) {
                long t0 = System.nanoTime(), c0 = CPU.getCurrentThreadCpuTime();
                ids = tok.encode(text, false);
                long t1 = System.nanoTime(), c1 = CPU.getCurrentThreadCpuTime();
                String back = tok.decode(ids, false);
                long t2 = System.nanoTime();
                if (back.isEmpty()) throw new IllegalStateException();
                best = Math.min(best, (t1 - t0) / 1e6);
                bestCpu = Math.min(bestCpu, (c1 - c0) / 1e6);
                bestDecode = Math.min(bestDecode, (t2 - t1) / 1e6);
            }
            System.out.printf(Locale.ROOT, "%-22s encode %7.1f ms (thread CPU %6.1f ms)  decode %6.1f ms  %d ids%n",
                    name, best, bestCpu, bestDecode, ids.length);
        }
    }
}
