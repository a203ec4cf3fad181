package dev.gatun.cuda.internal;

import dev.gatun.cuda.CudaException;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.util.Map;

/**
 * The few libc calls that file-descriptor passing needs ({@code syscall} for pidfd_open/pidfd_getfd, Unix sockets
 * with {@code sendmsg}/{@code recvmsg} and SCM_RIGHTS, {@code close}), bound by hand through FFM (libc is in the
 * default lookup; no native code of ours). errno is captured with {@code Linker.Option.captureCallState}. Linux
 * x86-64 and aarch64 layouts.
 */
public final class Libc {
    private static final Linker LINKER = Linker.nativeLinker();
    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option ERRNO_OPT = Linker.Option.captureCallState("errno");

    public static final int AF_UNIX = 1;
    public static final int SOCK_STREAM = 1;
    public static final int SOCK_CLOEXEC = 0x80000;
    public static final int SOL_SOCKET = 1;
    public static final int SCM_RIGHTS = 1;
    public static final int MSG_NOSIGNAL = 0x4000;
    public static final int MSG_CMSG_CLOEXEC = 0x40000000;
    static final boolean AARCH64 = System.getProperty("os.arch").equals("aarch64");
    public static final long SYS_PIDFD_OPEN = 434;   // same number on x86-64 and aarch64
    public static final long SYS_PIDFD_GETFD = 438;

    private static final Map<Integer, String> ERRNO_NAMES = Map.ofEntries(
            Map.entry(1, "EPERM"), Map.entry(2, "ENOENT"), Map.entry(3, "ESRCH"), Map.entry(4, "EINTR"),
            Map.entry(9, "EBADF"), Map.entry(11, "EAGAIN"), Map.entry(13, "EACCES"), Map.entry(22, "EINVAL"),
            Map.entry(24, "EMFILE"), Map.entry(38, "ENOSYS"), Map.entry(98, "EADDRINUSE"), Map.entry(111, "ECONNREFUSED"),
            Map.entry(104, "ECONNRESET"), Map.entry(32, "EPIPE"));

    private static MethodHandle handle(String name, FunctionDescriptor fd, Linker.Option... options) {
        MemorySegment addr = LINKER.defaultLookup().find(name)
                .orElseThrow(() -> new CudaException("libc has no symbol " + name));
        return LINKER.downcallHandle(addr, fd, options);
    }

    private static final class H {
        static final MethodHandle SYSCALL3 = handle("syscall", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG),
                Linker.Option.firstVariadicArg(1), ERRNO_OPT);
        static final MethodHandle CLOSE = handle("close", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle SOCKET = handle("socket", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle BIND = handle("bind", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle CONNECT = handle("connect", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle LISTEN = handle("listen", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle ACCEPT = handle("accept", FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS), ERRNO_OPT);
        static final MethodHandle SENDMSG = handle("sendmsg", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle RECVMSG = handle("recvmsg", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT), ERRNO_OPT);
        static final MethodHandle STRERROR = handle("strerror", FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
        static final MethodHandle PIPE = handle("pipe", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS), ERRNO_OPT);
        static final MethodHandle WRITE = handle("write", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG), ERRNO_OPT);
        static final MethodHandle READ = handle("read", FunctionDescriptor.of(ValueLayout.JAVA_LONG,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG), ERRNO_OPT);
    }

    private Libc() {}

    /** The result of a call: its return value and errno. */
    public record Result(long value, int errno) {}

    public static String errnoName(int errno) {
        return ERRNO_NAMES.getOrDefault(errno, "errno " + errno);
    }

    public static String strerror(int errno) {
        try {
            return Errors.cString((MemorySegment) H.STRERROR.invokeExact(errno));
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    /** Throws a CudaException naming {@code call}, the errno name and text, and {@code hint}. */
    public static CudaException failure(String call, int errno, String hint) {
        return new CudaException(call, errno, errnoName(errno), strerror(errno) + (hint.isEmpty() ? "" : "; " + hint));
    }

    private static int errno(MemorySegment state) {
        return (int) ERRNO.get(state, 0L);
    }

    public static Result syscall(long nr, long a, long b, long c) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            long r = (long) H.SYSCALL3.invokeExact(st, nr, a, b, c);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static Result close(int fd) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            int r = (int) H.CLOSE.invokeExact(st, fd);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static Result socket(int domain, int type, int protocol) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            int r = (int) H.SOCKET.invokeExact(st, domain, type, protocol);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** {@code struct sockaddr_un} for {@code path} (at most 107 bytes). */
    public static MemorySegment sockaddrUn(Arena arena, String path) {
        byte[] p = path.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        if (p.length > 107) {
            throw new IllegalArgumentException("Unix socket path longer than 107 bytes: " + path);
        }
        MemorySegment sa = arena.allocate(110, 2);
        sa.set(ValueLayout.JAVA_SHORT, 0, (short) AF_UNIX);
        MemorySegment.copy(p, 0, sa, ValueLayout.JAVA_BYTE, 2, p.length);
        return sa;
    }

    public static Result bind(int fd, MemorySegment addr, int len) {
        return call3(H.BIND, fd, addr, len);
    }

    public static Result connect(int fd, MemorySegment addr, int len) {
        return call3(H.CONNECT, fd, addr, len);
    }

    private static Result call3(MethodHandle mh, int fd, MemorySegment addr, int len) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            int r = (int) mh.invokeExact(st, fd, addr, len);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static Result listen(int fd, int backlog) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            int r = (int) H.LISTEN.invokeExact(st, fd, backlog);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static Result accept(int fd) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            int r = (int) H.ACCEPT.invokeExact(st, fd, MemorySegment.NULL, MemorySegment.NULL);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    // struct msghdr (LP64): name@0, namelen@8, iov@16, iovlen@24, control@32, controllen@40, flags@48; size 56
    // struct cmsghdr: len@0 (size_t), level@8, type@12, data@16; CMSG_SPACE(4) = 24, CMSG_LEN(4) = 20

    /** Sends one byte carrying {@code fdToSend} as SCM_RIGHTS ancillary data. */
    public static Result sendFd(int socket, int fdToSend) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            MemorySegment data = arena.allocateFrom(ValueLayout.JAVA_BYTE, (byte) 'F');
            MemorySegment iov = arena.allocate(16, 8);
            iov.set(ValueLayout.ADDRESS, 0, data);
            iov.set(ValueLayout.JAVA_LONG, 8, 1);
            MemorySegment control = arena.allocate(24, 8);
            control.set(ValueLayout.JAVA_LONG, 0, 20);
            control.set(ValueLayout.JAVA_INT, 8, SOL_SOCKET);
            control.set(ValueLayout.JAVA_INT, 12, SCM_RIGHTS);
            control.set(ValueLayout.JAVA_INT, 16, fdToSend);
            MemorySegment msg = arena.allocate(56, 8);
            msg.set(ValueLayout.ADDRESS, 16, iov);
            msg.set(ValueLayout.JAVA_LONG, 24, 1);
            msg.set(ValueLayout.ADDRESS, 32, control);
            msg.set(ValueLayout.JAVA_LONG, 40, 24);
            long r = (long) H.SENDMSG.invokeExact(st, socket, msg, MSG_NOSIGNAL);
            return new Result(r, r < 0 ? errno(st) : 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** Receives one byte and the descriptor sent with it; value is the new fd, or -1 with errno (0: none came). */
    public static Result receiveFd(int socket) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            MemorySegment data = arena.allocate(1);
            MemorySegment iov = arena.allocate(16, 8);
            iov.set(ValueLayout.ADDRESS, 0, data);
            iov.set(ValueLayout.JAVA_LONG, 8, 1);
            MemorySegment control = arena.allocate(24, 8);
            MemorySegment msg = arena.allocate(56, 8);
            msg.set(ValueLayout.ADDRESS, 16, iov);
            msg.set(ValueLayout.JAVA_LONG, 24, 1);
            msg.set(ValueLayout.ADDRESS, 32, control);
            msg.set(ValueLayout.JAVA_LONG, 40, 24);
            long r = (long) H.RECVMSG.invokeExact(st, socket, msg, MSG_CMSG_CLOEXEC);
            if (r < 0) {
                return new Result(-1, errno(st));
            }
            if (r == 0 || msg.get(ValueLayout.JAVA_LONG, 40) < 20
                    || control.get(ValueLayout.JAVA_INT, 8) != SOL_SOCKET
                    || control.get(ValueLayout.JAVA_INT, 12) != SCM_RIGHTS) {
                return new Result(-1, 0);
            }
            return new Result(control.get(ValueLayout.JAVA_INT, 16), 0);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** {@code pipe(2)}: read end, write end. */
    public static int[] pipe() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            MemorySegment fds = arena.allocate(ValueLayout.JAVA_INT, 2);
            int r = (int) H.PIPE.invokeExact(st, fds);
            if (r < 0) {
                throw failure("pipe", errno(st), "");
            }
            return new int[] {fds.getAtIndex(ValueLayout.JAVA_INT, 0), fds.getAtIndex(ValueLayout.JAVA_INT, 1)};
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static long write(int fd, byte[] bytes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            MemorySegment buf = arena.allocateFrom(ValueLayout.JAVA_BYTE, bytes);
            long r = (long) H.WRITE.invokeExact(st, fd, buf, (long) bytes.length);
            if (r < 0) {
                throw failure("write", errno(st), "");
            }
            return r;
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    public static byte[] read(int fd, int max) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment st = arena.allocate(CAPTURE);
            MemorySegment buf = arena.allocate(max);
            long r = (long) H.READ.invokeExact(st, fd, buf, (long) max);
            if (r < 0) {
                throw failure("read", errno(st), "");
            }
            return buf.asSlice(0, r).toArray(ValueLayout.JAVA_BYTE);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }
}
