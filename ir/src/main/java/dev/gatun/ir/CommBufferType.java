package dev.gatun.ir;

/** Kinds of communication buffer. Symmetric memory is the one Gatun's collectives run on. */
public enum CommBufferType {
    SYMM_MEM;

    @Override public String toString() { return name(); }
}
