package dev.gatun.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

class KernelCacheTest {
    private static final String SRC = "extern \"C\" __global__ void k(float* x) { x[0] = 1; }";

    @Test
    void keyIsStableAndChangesWithEveryInput() {
        String base = KernelCache.key(SRC, Map.of("h.h", "int a;"), List.of("-O3"), "sm_90", "13.0");
        assertThat(base).hasSize(64).matches("[0-9a-f]+");
        assertThat(KernelCache.key(SRC, Map.of("h.h", "int a;"), List.of("-O3"), "sm_90", "13.0")).isEqualTo(base);
        Set<String> keys = new HashSet<>(List.of(base,
                KernelCache.key(SRC + " ", Map.of("h.h", "int a;"), List.of("-O3"), "sm_90", "13.0"),
                KernelCache.key(SRC, Map.of("h.h", "int b;"), List.of("-O3"), "sm_90", "13.0"),
                KernelCache.key(SRC, Map.of("g.h", "int a;"), List.of("-O3"), "sm_90", "13.0"),
                KernelCache.key(SRC, Map.of("h.h", "int a;"), List.of("-O2"), "sm_90", "13.0"),
                KernelCache.key(SRC, Map.of("h.h", "int a;"), List.of("-O3"), "sm_80", "13.0"),
                KernelCache.key(SRC, Map.of("h.h", "int a;"), List.of("-O3"), "sm_90", "13.1"),
                // no ambiguity from concatenation
                KernelCache.key(SRC, Map.of(), List.of("-DA", "B"), "sm_90", "13.0"),
                KernelCache.key(SRC, Map.of(), List.of("-DAB"), "sm_90", "13.0")));
        assertThat(keys).hasSize(9);
    }

    @Test
    void headerOrderDoesNotMatter() {
        var a = new java.util.LinkedHashMap<String, String>();
        a.put("a.h", "1");
        a.put("b.h", "2");
        var b = new java.util.LinkedHashMap<String, String>();
        b.put("b.h", "2");
        b.put("a.h", "1");
        assertThat(KernelCache.key(SRC, a, List.of(), "sm_90", "13.0")).isEqualTo(KernelCache.key(SRC, b, List.of(), "sm_90", "13.0"));
    }

    @Test
    void storesAndReadsCubins(@TempDir Path dir) {
        KernelCache cache = KernelCache.at(dir.resolve("nested/kernels"));
        String key = KernelCache.key(SRC, Map.of(), List.of(), "sm_90", "13.0");
        assertThat(cache.get(key)).isEmpty();
        assertThat(cache.put(key, new byte[] {1, 2, 3})).isTrue();
        assertThat(cache.get(key)).hasValueSatisfying(b -> assertThat(b).containsExactly(1, 2, 3));
        assertThat(cache.pathOf(key)).exists().hasFileName(key + ".cubin");
        assertThat(cache.put(key, new byte[] {4})).isTrue();
        assertThat(cache.get(key).orElseThrow()).containsExactly(4);
    }

    @Test
    void defaultDirectoryHonoursPropertyThenEnvThenXdgThenHome() {
        Map<String, String> none = Map.of();
        assertThat(KernelCache.defaultDirectory(Map.of("gatun.kernel.cache", "/p", "user.home", "/h")::get,
                Map.of("GATUN_KERNEL_CACHE", "/e")::get)).isEqualTo(Path.of("/p"));
        assertThat(KernelCache.defaultDirectory(Map.of("user.home", "/h")::get,
                Map.of("GATUN_KERNEL_CACHE", "/e", "XDG_CACHE_HOME", "/x")::get)).isEqualTo(Path.of("/e"));
        assertThat(KernelCache.defaultDirectory(Map.of("user.home", "/h")::get, Map.of("XDG_CACHE_HOME", "/x")::get))
                .isEqualTo(Path.of("/x/gatun/kernels"));
        assertThat(KernelCache.defaultDirectory(Map.of("user.home", "/h")::get, none::get))
                .isEqualTo(Path.of("/h/.cache/gatun/kernels"));
    }
}
