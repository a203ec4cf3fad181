package dev.gatun.ir.json;

import dev.gatun.ir.GraphException;

/** Malformed JSON text: where (1-based line and column) and what was expected there. */
public final class JsonSyntaxException extends GraphException {
    private final int line, column;

    JsonSyntaxException(int line, int column, String message) {
        super("malformed JSON at line " + line + ", column " + column + ": " + message);
        this.line = line;
        this.column = column;
    }

    public int line() { return line; }
    public int column() { return column; }
}
