package dev.gatun.runtime.distributed;

import dev.gatun.runtime.GatunRuntimeException;

/** A rendezvous failed: bad configuration, a rejected connection, a lost store, a rank that left. */
public class RendezvousException extends GatunRuntimeException {
    public RendezvousException(String message) { super(message); }
    public RendezvousException(String message, Throwable cause) { super(message, cause); }
}
