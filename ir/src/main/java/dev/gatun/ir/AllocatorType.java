package dev.gatun.ir;

/**
 * Which allocator a buffer's storage comes from. {@code SYMM_MEM} buffers live in a symmetric pool of a
 * process group (same offset on every rank); the flag survives fixing, copying and comparing layouts.
 */
public record AllocatorType(Kind kind, String group) {
    public enum Kind { DEFAULT, SYMM_MEM }

    public static final AllocatorType DEFAULT = new AllocatorType(Kind.DEFAULT, null);

    public AllocatorType {
        if (kind == Kind.SYMM_MEM && (group == null || group.isBlank()))
            throw new GraphException("a SYMM_MEM allocator needs a group");
        if (kind == Kind.DEFAULT && group != null)
            throw new GraphException("the DEFAULT allocator has no group");
    }

    public static AllocatorType symmMem(String group) { return new AllocatorType(Kind.SYMM_MEM, group); }

    public boolean isSymmetric() { return kind == Kind.SYMM_MEM; }

    @Override public String toString() { return kind == Kind.DEFAULT ? "default" : "symm_mem(\"" + group + "\")"; }
}
