package dev.gatun.models.text;

import dev.gatun.ir.GatunException;

/**
 * A tokenizer or chat template that cannot be read or used as asked: a {@code tokenizer.json} of a kind this
 * package does not implement (named, with the kinds it does), a field missing or of the wrong type, an id outside
 * the vocabulary, a template construct outside the supported Jinja subset (named, with its line and column), or a
 * template's own {@code raise_exception}. It is a {@link GatunException}, so one catch takes it with Gatun's other
 * errors.
 */
public class TokenizerException extends GatunException {
    public TokenizerException(String message) { super(message); }
    public TokenizerException(String message, Throwable cause) { super(message, cause); }
}
