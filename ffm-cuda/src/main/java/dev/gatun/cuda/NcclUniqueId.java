package dev.gatun.cuda;

/** NCCL's 128-byte {@code ncclUniqueId}: an immutable value that rank 0 creates and sends to the other ranks. */
public final class NcclUniqueId extends OpaqueHandle {
    /** {@code NCCL_UNIQUE_ID_BYTES}. */
    public static final int SIZE = 128;

    private NcclUniqueId(byte[] bytes) { super(bytes, SIZE, "an NCCL unique id"); }

    public static NcclUniqueId of(byte[] bytes) { return new NcclUniqueId(bytes); }

    public static NcclUniqueId fromHex(String hex) { return of(parseHex(hex)); }
}
