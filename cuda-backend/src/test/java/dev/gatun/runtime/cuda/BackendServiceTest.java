package dev.gatun.runtime.cuda;

import dev.gatun.runtime.spi.Backend;
import org.junit.jupiter.api.Test;

import java.util.ServiceLoader;

import static org.assertj.core.api.Assertions.assertThat;

/** The runtime finds the CUDA backend through its service loader, from this module's jar alone (on a GPU or not). */
class BackendServiceTest {

    @Test
    void theRuntimeFindsTheCudaBackendAsAService() {
        var found = ServiceLoader.load(Backend.class).stream().map(p -> p.type().getName()).toList();
        assertThat(found).contains(CudaBackend.class.getName(), "dev.gatun.runtime.host.HostBackend");
    }
}
