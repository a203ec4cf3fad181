package dev.gatun.ir;

/** A graph that cannot be built, lowered or read: the message names the op, the tensors and what is wrong. */
public class GraphException extends GatunException {
    public GraphException(String message) { super(message); }
    public GraphException(String message, Throwable cause) { super(message, cause); }
}
