package dev.gatun.runtime.distributed;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A connection flood for tests, from one thread: keeps {@code size} connections to a server open, re-opening each
 * one the server closes at once (at most {@code maxOpens} in all, at most {@code maxOpensPerSecond}), until
 * {@link #stopReopening()}. A quarter of the connections send 80 bytes of garbage, a quarter the first 12 bytes of a
 * client handshake, the rest nothing. {@link #close()} closes whatever is still open.
 */
final class ConnectionFlood implements AutoCloseable {
    private final InetSocketAddress target;
    private final InetAddress from;
    private final int size;
    private final int maxOpens;
    private final int maxOpensPerSecond;
    private final Selector selector;
    private final Thread thread;
    private final Random random = new Random(42);
    private final AtomicInteger opened = new AtomicInteger();
    private final AtomicInteger closedByServer = new AtomicInteger();
    private final AtomicInteger open = new AtomicInteger();
    private final Set<SocketChannel> channels = new HashSet<>(); // flood thread only
    private volatile boolean reopen = true;
    private volatile boolean stop;
    private volatile Throwable failure;

    /** Starts flooding {@code target} from {@code from} (null: any local address). */
    ConnectionFlood(InetSocketAddress target, InetAddress from, int size, int maxOpens, int maxOpensPerSecond) throws IOException {
        this.target = target;
        this.from = from;
        this.size = size;
        this.maxOpens = maxOpens;
        this.maxOpensPerSecond = maxOpensPerSecond;
        this.selector = Selector.open();
        this.thread = Thread.ofPlatform().daemon().name("connection-flood").start(this::loop);
    }

    /** Connections opened so far. */
    int opened() { return opened.get(); }

    /** Connections the server closed (end of stream or reset). */
    int closedByServer() { return closedByServer.get(); }

    /** Connections open now (connecting or connected, not yet closed by the server). */
    int open() { return open.get(); }

    /** From now on a connection the server closes stays closed. */
    void stopReopening() { reopen = false; }

    /** Waits until the server closed every connection; false if some are still open after {@code timeout}. */
    boolean awaitAllClosedByServer(Duration timeout) throws InterruptedException {
        if (reopen) throw new IllegalStateException("stopReopening() first");
        long deadline = System.nanoTime() + timeout.toNanos();
        while (open.get() > 0) {
            if (failure != null) throw new AssertionError("the flood failed", failure);
            if (System.nanoTime() - deadline >= 0) return false;
            Thread.sleep(20);
        }
        return true;
    }

    private void loop() {
        long windowStart = System.nanoTime();
        int inWindow = 0;
        try {
            while (!stop) {
                if (System.nanoTime() - windowStart >= 1_000_000_000L) {
                    windowStart = System.nanoTime();
                    inWindow = 0;
                }
                while (reopen && channels.size() < size && opened.get() < maxOpens && inWindow < maxOpensPerSecond) {
                    openOne();
                    inWindow++;
                }
                selector.select(10);
                for (var it = selector.selectedKeys().iterator(); it.hasNext(); ) {
                    SelectionKey key = it.next();
                    it.remove();
                    serve(key);
                }
            }
        } catch (IOException | RuntimeException e) {
            failure = e;
        } finally {
            for (SocketChannel c : channels) closeQuietly(c);
            channels.clear();
            open.set(0);
            try {
                selector.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
    }

    private void openOne() throws IOException {
        SocketChannel c = SocketChannel.open();
        try {
            c.configureBlocking(false);
            if (from != null) c.bind(new InetSocketAddress(from, 0));
            int n = opened.getAndIncrement();
            boolean now = c.connect(target);
            c.register(selector, now ? SelectionKey.OP_READ : SelectionKey.OP_CONNECT, n);
            channels.add(c);
            open.incrementAndGet();
            if (now) greet(c, n);
        } catch (IOException e) {
            closeQuietly(c);
            throw e;
        }
    }

    /** What connection {@code n} sends once connected: garbage, the start of a handshake, or nothing. */
    private void greet(SocketChannel c, int n) throws IOException {
        ByteBuffer b = switch (n % 4) {
            case 0 -> {
                byte[] junk = new byte[80];
                random.nextBytes(junk);
                yield ByteBuffer.wrap(junk);
            }
            case 1 -> ByteBuffer.allocate(12).putInt(Wire.MAGIC).putInt(Wire.VERSION).putInt(0).flip();
            default -> null;
        };
        if (b != null) c.write(b); // at most 80 bytes into an empty send buffer: written whole
    }

    private void serve(SelectionKey key) {
        SocketChannel c = (SocketChannel) key.channel();
        try {
            if (key.isConnectable()) {
                c.finishConnect();
                key.interestOps(SelectionKey.OP_READ);
                greet(c, (Integer) key.attachment());
            } else if (key.isReadable()) {
                ByteBuffer sink = ByteBuffer.allocate(256);
                if (c.read(sink) >= 0) return; // the server's hello, or whatever it says: stay idle
                closedByServer(c, key);
            }
        } catch (IOException e) { // reset, or refused
            closedByServer(c, key);
        }
    }

    private void closedByServer(SocketChannel c, SelectionKey key) {
        key.cancel();
        closeQuietly(c);
        channels.remove(c);
        open.decrementAndGet();
        closedByServer.incrementAndGet();
    }

    private static void closeQuietly(SocketChannel c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    @Override
    public void close() {
        stop = true;
        selector.wakeup();
        try {
            thread.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) throw new UncheckedIOException(new IOException("the flood thread did not stop"));
    }
}
