package dev.gatun.ir;

/**
 * A well-formed graph that cannot be compiled as asked: no path serves a collective with these options, the plan
 * does not fit, a kernel does not compile, a backend cannot run this world. The message says which and why.
 */
public class CompilationException extends GatunException {
    public CompilationException(String message) { super(message); }
    public CompilationException(String message, Throwable cause) { super(message, cause); }
}
