package dev.gatun.cuda;

import dev.gatun.cuda.internal.NativeLibraries;
import dev.gatun.cuda.internal.NativeLibraries.Environment;
import dev.gatun.cuda.internal.NativeLibraries.Lib;
import dev.gatun.cuda.internal.NativeLibraries.LoadResult;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

class LoadingTest {
    private static Environment env(Map<String, String> env, Map<String, String> props, List<String> ldconfig,
                                   List<String> existing, List<String> loadedLog) {
        return new Environment(env::get, props::get, () -> ldconfig, p -> existing.contains(p.toString()), path -> {
            loadedLog.add(path);
            if (!existing.contains(path)) {
                throw new UnsatisfiedLinkError("Can't load library: " + path);
            }
        });
    }

    @Test
    void bogusExplicitPathGivesAClearReasonAndNoFallBack() {
        List<String> log = new ArrayList<>();
        Environment e = env(Map.of(), Map.of("gatun.cuda.cudart.path", "/nope/libcudart.so.13"), List.of(),
                List.of("/usr/local/cuda/lib64/libcudart.so.13"), log);
        LoadResult r = NativeLibraries.load(Lib.CUDART, e);
        assertThat(r.loaded()).isFalse();
        assertThat(r.error()).contains("system property gatun.cuda.cudart.path").contains("/nope/libcudart.so.13")
                .contains("did not load").contains("Can't load library");
        assertThat(log).containsExactly("/nope/libcudart.so.13");
    }

    @Test
    void bogusExplicitPathThroughTheRealLoaderReportsTheLoadersMessage() {
        Environment real = Environment.system();
        Environment e = new Environment(Map.of("GATUN_CUDA_NCCL_PATH", "/definitely/not/libnccl.so.2")::get,
                k -> null, List::of, real.exists(), real.loader());
        LoadResult r = NativeLibraries.load(Lib.NCCL, e);
        assertThat(r.loaded()).isFalse();
        assertThat(r.error()).contains("environment variable GATUN_CUDA_NCCL_PATH").contains("/definitely/not/libnccl.so.2");
    }

    @Test
    void probingOrderIsCudaHomeThenDefaultThenLdLibraryPathThenLdconfigThenStandardDirs() {
        Environment e = env(Map.of("CUDA_HOME", "/opt/cuda", "LD_LIBRARY_PATH", "/a:/b"), Map.of(),
                List.of("/cache/libcuda.so.1", "/cache/libother.so"), List.of(), new ArrayList<>());
        List<String> c = NativeLibraries.candidates(Lib.DRIVER, e);
        assertThat(c).startsWith("/opt/cuda/lib64/libcuda.so.1", "/opt/cuda/lib/libcuda.so.1");
        assertThat(c).containsSubsequence("/opt/cuda/lib64/libcuda.so.1", "/usr/local/cuda/lib64/libcuda.so.1",
                "/a/libcuda.so.1", "/b/libcuda.so.1", "/cache/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
        assertThat(c).doesNotContain("/cache/libother.so").doesNotHaveDuplicates();
    }

    @Test
    void firstExistingCandidateIsLoaded() {
        List<String> log = new ArrayList<>();
        Environment e = env(Map.of("LD_LIBRARY_PATH", "/x"), Map.of(), List.of("/usr/lib/x86_64-linux-gnu/libnccl.so.2"),
                List.of("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/x/libnccl.so.2"), log);
        LoadResult r = NativeLibraries.load(Lib.NCCL, e);
        assertThat(r.path()).isEqualTo("/x/libnccl.so.2");
        assertThat(log).containsExactly("/x/libnccl.so.2");
    }

    @Test
    void missingLibrarySaysWhereItLooked() {
        Environment e = env(Map.of(), Map.of(), List.of(), List.of(), new ArrayList<>());
        LoadResult r = NativeLibraries.load(Lib.NVRTC, e);
        assertThat(r.error()).startsWith("libnvrtc.so.13 not found").contains("/usr/local/cuda/lib64");
    }

    @Test
    void ldconfigOutputIsParsedAndForeignArchitecturesSkipped() {
        List<String> paths = NativeLibraries.parseLdconfig(List.of(
                "1234 libs found in cache `/etc/ld.so.cache'",
                "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2",
                "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1",
                "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"));
        assertThat(paths).containsExactly("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    }

    @Test
    void probeWithoutTheDriverIsUnavailableWithTheLoadersReason() {
        Map<Lib, LoadResult> results = new EnumMap<>(Lib.class);
        for (Lib lib : Lib.values()) {
            results.put(lib, lib == Lib.DRIVER
                    ? new LoadResult(lib, null, "libcuda.so.1 not found (looked in /usr/local/cuda/lib64)")
                    : new LoadResult(lib, "/fake/" + lib.soname, null));
        }
        CudaProbe p = Cuda.doProbe(results);
        assertThat(p.available()).isFalse();
        assertThat(p.deviceCount()).isZero();
        assertThat(p.summary()).isEqualTo("unavailable: libcuda.so.1 not found (looked in /usr/local/cuda/lib64)");
        assertThat(p.failures()).containsOnlyKeys("libcuda.so.1");
        assertThat(p.libraries()).containsEntry("libnccl.so.2", "/fake/libnccl.so.2");
    }

    @Test
    void realProbeNeverThrowsAndExplainsItself() {
        CudaProbe p = Cuda.probe();
        System.out.println("[probe] " + p.summary());
        System.out.println("[probe] details " + p);
        if (p.available()) {
            assertThat(p.deviceCount()).isPositive();
            assertThat(p.driverVersion()).isGreaterThanOrEqualTo(Cuda.MIN_DRIVER_VERSION);
            assertThat(p.reason()).isEmpty();
        } else {
            assertThat(p.summary()).startsWith("unavailable: ").hasSizeGreaterThan("unavailable: ".length() + 5);
            assertThat(Device.count()).isZero();
            org.assertj.core.api.Assertions.assertThatThrownBy(() -> Device.open(0))
                    .isInstanceOf(CudaUnavailableException.class).hasMessageStartingWith("unavailable: ");
        }
    }

    @Test
    void libraryLookupKeysAreStable() {
        assertThat(Lib.CUBLASLT.property()).isEqualTo("gatun.cuda.cublaslt.path");
        assertThat(Lib.DRIVER.envVar()).isEqualTo("GATUN_CUDA_CUDA_PATH");
        assertThat(Path.of(Lib.NCCL.soname).toString()).isEqualTo("libnccl.so.2");
    }
}
