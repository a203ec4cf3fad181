package dev.gatun.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The multicast guard, only ever against a fake driver: no real cuMulticast* function is reachable from here. */
class MulticastGuardTest {
    static final class FakeDriver implements MulticastDriver {
        final List<String> calls = new ArrayList<>();

        @Override public long granularity(long size, int n, boolean rec) { calls.add("granularity"); return rec ? 1L << 29 : 1L << 21; }
        @Override public long create(long size, int n) { calls.add("create " + size + " " + n); return 0xABCL; }
        @Override public void addDevice(long mc, int dev) { calls.add("addDevice " + dev); }
        @Override public void bindMemory(long mc, long o, long mem, long mo, long s) { calls.add("bind"); }
        @Override public void unbind(long mc, int dev, long o, long s) { calls.add("unbind"); }
        @Override public void release(long mc) { calls.add("release " + Long.toHexString(mc)); }
    }

    private static final Multicast.OptIn YES = Multicast.OptIn.I_ACCEPT_NVLINK_MULTICAST_RISKS;

    @ParameterizedTest
    @CsvSource({"NCCL_NVLS_ENABLE,0", "TORCH_SYMM_MEM_DISABLE_MULTICAST,1", "NVSHMEM_DISABLE_NVLS,1",
                "NCCL_NVLS_ENABLE,false", "NVSHMEM_DISABLE_NVLS,true", "NCCL_NVLS_ENABLE, 0 "})
    void eachKillSwitchRefusesEvenWithOptInAndCallsNothing(String name, String value) {
        FakeDriver fake = new FakeDriver();
        Map<String, String> env = Map.of(name, value);
        assertThatThrownBy(() -> Multicast.create(YES, 1 << 21, 2, env, fake))
                .isInstanceOf(CudaException.class).hasMessageContaining("refused").hasMessageContaining(name);
        assertThatThrownBy(() -> Multicast.granularity(YES, 1 << 21, 2, false, env, fake))
                .isInstanceOf(CudaException.class).hasMessageContaining(name);
        assertThat(fake.calls).isEmpty();
    }

    @Test
    void withoutOptInNothingIsCalled() {
        FakeDriver fake = new FakeDriver();
        assertThatThrownBy(() -> Multicast.create(null, 1 << 21, 2, Map.of(), fake))
                .isInstanceOf(CudaException.class).hasMessageContaining("multicast is off");
        assertThatThrownBy(() -> Multicast.granularity(null, 1 << 21, 2, true, Map.of(), fake))
                .isInstanceOf(CudaException.class);
        assertThat(fake.calls).isEmpty();
        assertThat(Multicast.refusal(null, Map.of())).isPresent();
    }

    @Test
    void optInWithPermissiveEnvironmentReachesTheDriverAndCloseReleasesOnce() {
        FakeDriver fake = new FakeDriver();
        Map<String, String> env = Map.of("NCCL_NVLS_ENABLE", "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "0",
                "NVSHMEM_DISABLE_NVLS", "0");
        assertThat(Multicast.refusal(YES, env)).isEmpty();
        assertThat(Multicast.granularity(YES, 1 << 21, 2, true, env, fake)).isEqualTo(1L << 29);
        Multicast mc = Multicast.create(YES, 1 << 21, 2, env, fake);
        assertThat(mc.handle()).isEqualTo(0xABCL);
        assertThat(mc.size()).isEqualTo(1 << 21);
        mc.close();
        mc.close();
        assertThat(fake.calls).containsExactly("granularity", "create 2097152 2", "release abc");
        assertThatThrownBy(mc::handle).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void concurrentCloseReleasesExactlyOnce() throws Exception {
        FakeDriver fake = new FakeDriver();
        Multicast mc = Multicast.create(YES, 4096, 1, Map.of(), fake);
        Thread[] ts = new Thread[8];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = Thread.ofPlatform().start(mc::close);
        }
        for (Thread t : ts) {
            t.join();
        }
        assertThat(fake.calls.stream().filter(c -> c.startsWith("release"))).hasSize(1);
    }

    @Test
    void thisTestJvmRefusesRealMulticastWhereTheHostForbidsIt() {
        // Where the environment forbids multicast (as on the shared GPU hosts), the public entry point refuses before
        // it even checks for CUDA; where it does not, we do not call it at all.
        Map<String, String> env = System.getenv();
        if (Multicast.refusal(YES, env).isPresent()) {
            assertThatThrownBy(() -> Multicast.create(YES, 1 << 21, 1)).isInstanceOf(CudaException.class)
                    .hasMessageContaining("refused");
        } else {
            assertThat(Multicast.KILL_SWITCHES.keySet()).noneMatch(k ->
                    Multicast.refusal(YES, Map.of(k, Multicast.KILL_SWITCHES.get(k))).isEmpty());
        }
    }
}
