package dev.gatun.runtime;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** A sharded checkpoint read as one set of tensors, and every way its index and its shards can disagree, refused. */
class SafeTensorsIndexTest {
    @TempDir Path dir;

    private Path index(String weightMap) throws IOException {
        Path index = dir.resolve("model.safetensors.index.json");
        Files.writeString(index, "{\"metadata\": {\"total_size\": 28}, \"weight_map\": {" + weightMap + "}}");
        return index;
    }

    /** Two shards: a [2] and b [1] in the first, c [2, 2] in the second. */
    private void shards() throws IOException {
        SafeTensors.write(dir.resolve("one.safetensors"), Map.of("a", NDArray.of(new float[]{1, 2}, 2), "b", NDArray.of(new float[]{3}, 1)), Map.of());
        SafeTensors.write(dir.resolve("two.safetensors"), Map.of("c", NDArray.of(new float[]{4, 5, 6, 7}, 2, 2)), Map.of());
    }

    @Test
    void theShardsReadAsOneSetOfTensors() throws IOException {
        shards();
        Path index = index("\"a\": \"one.safetensors\", \"c\": \"two.safetensors\", \"b\": \"one.safetensors\"");
        try (var files = SafeTensorsIndex.open(index)) {
            assertThat(files.names()).containsExactly("a", "c", "b");
            assertThat(files.get("c").get(3)).isEqualTo(7);
            assertThat(files.get("b").get(0)).isEqualTo(3);
            assertThat(files.entry("c").shape()).containsExactly(2, 2);
            assertThat(files.entry("c").dtype()).isEqualTo(DType.F32);
            assertThat(files.file("a")).isEqualTo(dir.resolve("one.safetensors"));
            assertThat(files.file("c")).isEqualTo(dir.resolve("two.safetensors"));
            assertThat(files.dataBytes()).isEqualTo(28);
            assertThat(files.source()).isEqualTo(index);
            assertThatThrownBy(() -> files.get("d")).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("no tensor 'd'");
        }
    }

    @Test
    void anIndexThatDisagreesWithItsShardsIsRefusedNamingTheTensorAndTheFiles() throws IOException {
        shards();
        // a tensor placed in a shard that does not hold it
        Path index = index("\"a\": \"one.safetensors\", \"b\": \"one.safetensors\", \"c\": \"one.safetensors\"");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining(index.toString())
                .hasMessageContaining("tensor 'c' in 'one.safetensors', which does not hold it");
        // a tensor of a shard that the index does not name
        index("\"a\": \"one.safetensors\", \"c\": \"two.safetensors\"");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class)
                .hasMessageContaining(dir.resolve("one.safetensors").toString()).hasMessageContaining("tensor 'b' is not in the weight_map");
        // the same tensor in two shards: the index places it in one, the other holds it too
        SafeTensors.write(dir.resolve("two.safetensors"), Map.of("c", NDArray.of(new float[]{4, 5, 6, 7}, 2, 2), "b", NDArray.of(new float[]{3}, 1)), Map.of());
        index("\"a\": \"one.safetensors\", \"b\": \"one.safetensors\", \"c\": \"two.safetensors\"");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor 'b' is placed by").hasMessageContaining("in 'one.safetensors', not in this file");
    }

    @Test
    void badIndexesAreRefusedNamingTheFileAndTheField() throws IOException {
        shards();
        Path index = index("\"a\": \"../one.safetensors\"");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("not a plain file name");
        index("\"a\": \"three.safetensors\"");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("'three.safetensors', which is not a file");
        index("\"a\": 3");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("'weight_map' places tensor 'a' in a JSON number");
        index("");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("names no tensor");
        Files.writeString(index, "{\"metadata\": {}}");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("'weight_map' is missing");
        Files.writeString(index, "{\"weight_map\": ");
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining(index.toString()).hasMessageContaining("not JSON");
        // an index far larger than any real one is refused before it is read (sparse: a few bytes on disk)
        try (var ch = java.nio.channels.FileChannel.open(index, java.nio.file.StandardOpenOption.WRITE, java.nio.file.StandardOpenOption.TRUNCATE_EXISTING)) {
            ch.write(java.nio.ByteBuffer.wrap("{}".getBytes()), 1L << 30);
        }
        assertThatThrownBy(() -> SafeTensorsIndex.open(index)).isInstanceOf(GraphException.class).hasMessageContaining("over the");
    }
}
