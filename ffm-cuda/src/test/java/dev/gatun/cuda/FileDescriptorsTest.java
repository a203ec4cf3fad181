package dev.gatun.cuda;

import dev.gatun.cuda.internal.Libc;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Descriptor passing through libc via FFM, without a GPU: pipes stand in for exported VMM handles. */
class FileDescriptorsTest {
    @Test
    void scmRightsMovesADescriptorOverAUnixSocket(@TempDir Path dir) throws Exception {
        int[] pipe = Libc.pipe();
        Path sock = dir.resolve("fd.sock");
        try (FileDescriptors.Channel server = FileDescriptors.Channel.listen(sock)) {
            CompletableFuture<Integer> received = CompletableFuture.supplyAsync(() -> {
                try (FileDescriptors.Channel peer = server.accept()) {
                    return peer.receive();
                }
            });
            try (FileDescriptors.Channel client = FileDescriptors.Channel.connect(sock)) {
                client.send(pipe[1]);
            }
            int fd = received.get(10, TimeUnit.SECONDS);
            assertThat(fd).isNotEqualTo(pipe[1]).isNotNegative();
            Libc.write(fd, "hello".getBytes(StandardCharsets.UTF_8));
            assertThat(new String(Libc.read(pipe[0], 16), StandardCharsets.UTF_8)).isEqualTo("hello");
            FileDescriptors.close(fd);
        } finally {
            FileDescriptors.close(pipe[0]);
            FileDescriptors.close(pipe[1]);
        }
        assertThat(sock).doesNotExist();
    }

    @Test
    void pidfdGetfdDuplicatesADescriptorOrExplainsTheRefusal() {
        int[] pipe = Libc.pipe();
        try {
            int fd;
            try {
                fd = FileDescriptors.takeFrom(ProcessHandle.current().pid(), pipe[1]);
            } catch (CudaException e) {
                // Some sandboxes refuse pidfd_getfd: the error must say so clearly.
                assertThat(e.errorName()).isIn("EPERM", "ENOSYS", "EACCES");
                assertThat(e.getMessage()).contains("pidfd_").containsAnyOf("kernel", "sandbox", "ptrace");
                return;
            }
            Libc.write(fd, "x".getBytes(StandardCharsets.UTF_8));
            assertThat(Libc.read(pipe[0], 4)).containsExactly('x');
            FileDescriptors.close(fd);
        } finally {
            FileDescriptors.close(pipe[0]);
            FileDescriptors.close(pipe[1]);
        }
    }

    @Test
    void errorsNameTheCallAndErrno(@TempDir Path dir) {
        assertThatThrownBy(() -> FileDescriptors.close(987654))
                .isInstanceOf(CudaException.class).hasMessageContaining("close(987654)").hasMessageContaining("EBADF");
        assertThatThrownBy(() -> FileDescriptors.Channel.connect(dir.resolve("nobody-listens")))
                .isInstanceOf(CudaException.class).hasMessageContaining("connect(").hasMessageContaining("ENOENT");
        assertThatThrownBy(() -> FileDescriptors.takeFrom(ProcessHandle.current().pid(), 987654))
                .isInstanceOf(CudaException.class).hasMessageContaining("pidfd_");
    }
}
