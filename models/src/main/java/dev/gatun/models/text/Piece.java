package dev.gatun.models.text;

/**
 * A piece of text on its way to the model: the pre-tokenizers split text into pieces and the model encodes each on
 * its own.
 *
 * @param text    the piece's text, normalized (and, after a byte-level step, written in the byte alphabet)
 * @param atStart whether the piece starts where the input text starts (offset 0 of the original): Metaspace's
 *                {@code prepend_scheme: "first"} marks only such a piece
 */
record Piece(String text, boolean atStart) {}
