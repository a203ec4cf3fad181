package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The decode graph of a Llama 3 70B shape (80 layers, tensor-parallel over 8), written by {@link GraphJson} and read
 * back: the same graph, and reading takes time linear in the document (a guard of 5 s for the whole graph; it takes
 * well under a second, and the times of 10, 20, 40 and 80 layers, printed, grow as the layers do).
 */
class DecodeGraphJsonTest {
    static final LlamaConfig LLAMA_70B = new LlamaConfig(8192, 80, 64, 8, 28672, 128256, 500000, 1e-5, false);

    static LlamaConfig layers(int n) {
        var c = LLAMA_70B;
        return new LlamaConfig(c.hiddenSize(), n, c.heads(), c.kvHeads(), c.intermediateSize(), c.vocabSize(), c.ropeTheta(), c.rmsNormEps(),
                c.tieWordEmbeddings());
    }

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void an80LayerDecodeGraphReadsBackWholeAndInLinearTime() {
        Graph warm = LlamaDecoder.decode(layers(10), 8, 1024, 8, DType.BF16);
        for (int i = 0; i < 3; i++) GraphJson.fromJson(GraphJson.toJson(warm));   // warm the reader up
        var report = new StringBuilder();
        long ms80 = 0;
        for (int n : new int[]{10, 20, 40, 80}) {
            Graph g = LlamaDecoder.decode(layers(n), 8, 1024, 8, DType.BF16);
            String json = GraphJson.toJson(g);
            long t0 = System.nanoTime();
            Graph back = GraphJson.fromJson(json);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            report.append(String.format("%d layers: %d nodes, %d KiB of JSON, read in %d ms%n", n, g.nodes().size(), json.length() / 1024, ms));
            assertThat(GraphJson.toJson(back)).as("%d layers", n).isEqualTo(json);
            assertThat(back.nodes()).hasSameSizeAs(g.nodes());
            if (n == 80) ms80 = ms;
        }
        System.out.print(report);
        assertThat(ms80).as("reading the 80-layer decode graph (a guard, not a benchmark):%n%s", report).isLessThan(5_000);
    }
}
