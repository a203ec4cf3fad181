package dev.gatun.cuda;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Base of every native resource: {@link #close()} is idempotent and thread-safe (the first caller releases, later
 * callers return at once); a resource created from a {@link Device} is registered with it and closed with it.
 */
abstract class Resource implements AutoCloseable {
    final Device device;
    private final AtomicBoolean closed = new AtomicBoolean();

    /** @param device owner (may be null for resources without one); {@code register} adds this to its children */
    Resource(Device device, boolean register) {
        this.device = device;
        if (device != null && register) {
            device.adopt(this);
        }
    }

    /** Releases the native resource; called exactly once, with the owning device's context current. */
    abstract void release();

    public final boolean isClosed() {
        return closed.get();
    }

    final void ensureOpen() {
        if (closed.get()) {
            throw new IllegalStateException(getClass().getSimpleName() + " is closed");
        }
        if (device != null && device != this && device.isClosed()) {
            throw new IllegalStateException("the device context owning this " + getClass().getSimpleName() + " is closed");
        }
    }

    @Override
    public final void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        try {
            if (device != null && device != this) {
                device.setCurrentRaw();
            }
            release();
        } finally {
            if (device != null && device != this) {
                device.disown(this);
            }
        }
    }
}
