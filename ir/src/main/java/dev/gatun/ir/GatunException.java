package dev.gatun.ir;

/**
 * The base of every error Gatun reports: {@link GraphException} (a graph that cannot be built or read),
 * {@link CompilationException} (a graph that cannot be lowered, planned or loaded as asked) and
 * {@code dev.gatun.runtime.GatunRuntimeException} (a failure while running a plan). Each message names the call, the
 * op or tensor, what was wrong and, where there is one, the fix. Catch this type to catch them all.
 */
public class GatunException extends RuntimeException {
    public GatunException(String message) { super(message); }
    public GatunException(String message, Throwable cause) { super(message, cause); }
}
