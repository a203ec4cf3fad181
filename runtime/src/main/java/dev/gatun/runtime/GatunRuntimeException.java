package dev.gatun.runtime;

/** A failure while running a plan: bad inputs at call time, a closed session, a failed rank, a backend error. */
public class GatunRuntimeException extends dev.gatun.ir.GatunException {
    public GatunRuntimeException(String message) { super(message); }
    public GatunRuntimeException(String message, Throwable cause) { super(message, cause); }
}
