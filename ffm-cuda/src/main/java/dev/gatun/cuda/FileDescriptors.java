package dev.gatun.cuda;

import dev.gatun.cuda.internal.Libc;

import java.lang.foreign.Arena;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Passing POSIX file descriptors (such as exported VMM handles) between processes of one host, through libc calls
 * made with FFM: {@link #takeFrom} duplicates another process's descriptor with {@code pidfd_open} +
 * {@code pidfd_getfd} (Linux 5.6+, needs ptrace access to that process), and {@link Channel} sends descriptors over a
 * Unix socket with {@code SCM_RIGHTS}. Failures throw {@link CudaException} naming the call, errno and a hint.
 */
public final class FileDescriptors {
    private FileDescriptors() {}

    /** Duplicates descriptor {@code fd} of process {@code pid} into this process; the caller closes the result. */
    public static int takeFrom(long pid, int fd) {
        Libc.Result pidfd = Libc.syscall(Libc.SYS_PIDFD_OPEN, pid, 0, 0);
        if (pidfd.value() < 0) {
            throw Libc.failure("pidfd_open(" + pid + ")", pidfd.errno(), hint(pidfd.errno(), pid));
        }
        try {
            Libc.Result r = Libc.syscall(Libc.SYS_PIDFD_GETFD, pidfd.value(), fd, 0);
            if (r.value() < 0) {
                throw Libc.failure("pidfd_getfd(" + pid + ", " + fd + ")", r.errno(), hint(r.errno(), pid));
            }
            return (int) r.value();
        } finally {
            Libc.close((int) pidfd.value());
        }
    }

    private static String hint(int errno, long pid) {
        return switch (errno) {
            case 1 -> "the kernel refused: this process needs ptrace access to process " + pid
                    + " (same user and kernel.yama.ptrace_scope 0 or 1 with a parent relation, or CAP_SYS_PTRACE); "
                    + "use FileDescriptors.Channel (SCM_RIGHTS) instead";
            case 38 -> "the kernel has no pidfd_open/pidfd_getfd (Linux 5.6 or newer needed, or a sandbox blocks it); "
                    + "use FileDescriptors.Channel (SCM_RIGHTS) instead";
            case 3 -> "no process " + pid;
            case 9 -> "process " + pid + " has no such descriptor";
            default -> "";
        };
    }

    /** Closes a descriptor. */
    public static void close(int fd) {
        Libc.Result r = Libc.close(fd);
        if (r.value() < 0) {
            throw Libc.failure("close(" + fd + ")", r.errno(), "");
        }
    }

    /** A connected Unix stream socket that carries descriptors ({@code SCM_RIGHTS}). */
    public static final class Channel implements AutoCloseable {
        private final int fd;
        private final Path unlinkOnClose;
        private final AtomicBoolean closed = new AtomicBoolean();

        private Channel(int fd, Path unlinkOnClose) {
            this.fd = fd;
            this.unlinkOnClose = unlinkOnClose;
        }

        /** A listening socket bound at {@code path} (removed on close); {@link #accept()} peers. */
        public static Channel listen(Path path) {
            int s = socket();
            try (Arena arena = Arena.ofConfined()) {
                Libc.Result r = Libc.bind(s, Libc.sockaddrUn(arena, path.toString()), 110);
                if (r.value() < 0) {
                    Libc.close(s);
                    throw Libc.failure("bind(" + path + ")", r.errno(), "");
                }
                r = Libc.listen(s, 16);
                if (r.value() < 0) {
                    Libc.close(s);
                    throw Libc.failure("listen", r.errno(), "");
                }
            }
            return new Channel(s, path);
        }

        /** Connects to a listening socket at {@code path}. */
        public static Channel connect(Path path) {
            int s = socket();
            try (Arena arena = Arena.ofConfined()) {
                Libc.Result r = Libc.connect(s, Libc.sockaddrUn(arena, path.toString()), 110);
                if (r.value() < 0) {
                    Libc.close(s);
                    throw Libc.failure("connect(" + path + ")", r.errno(), "");
                }
            }
            return new Channel(s, null);
        }

        private static int socket() {
            Libc.Result r = Libc.socket(Libc.AF_UNIX, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0);
            if (r.value() < 0) {
                throw Libc.failure("socket(AF_UNIX)", r.errno(), "");
            }
            return (int) r.value();
        }

        /** Waits for a peer to connect (on a listening channel). */
        public Channel accept() {
            Libc.Result r = Libc.accept(fd);
            if (r.value() < 0) {
                throw Libc.failure("accept", r.errno(), "");
            }
            return new Channel((int) r.value(), null);
        }

        /** Sends a duplicate of {@code descriptor}; the sender keeps its own. */
        public void send(int descriptor) {
            Libc.Result r = Libc.sendFd(fd, descriptor);
            if (r.value() < 0) {
                throw Libc.failure("sendmsg(SCM_RIGHTS)", r.errno(), "");
            }
        }

        /** Receives a descriptor (blocking); the caller closes it. */
        public int receive() {
            Libc.Result r = Libc.receiveFd(fd);
            if (r.value() < 0) {
                if (r.errno() == 0) {
                    throw new CudaException("recvmsg(SCM_RIGHTS): the peer closed the socket or sent no descriptor");
                }
                throw Libc.failure("recvmsg(SCM_RIGHTS)", r.errno(), "");
            }
            return (int) r.value();
        }

        @Override
        public void close() {
            if (closed.compareAndSet(false, true)) {
                Libc.close(fd);
                if (unlinkOnClose != null) {
                    try {
                        Files.deleteIfExists(unlinkOnClose);
                    } catch (java.io.IOException ignored) {
                        // best effort
                    }
                }
            }
        }

    }
}
