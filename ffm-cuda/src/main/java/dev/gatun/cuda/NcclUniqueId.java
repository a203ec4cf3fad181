package dev.gatun.cuda;

import java.util.Arrays;
import java.util.HexFormat;

/** NCCL's 128-byte {@code ncclUniqueId}: an immutable value that rank 0 creates and sends to the other ranks. */
public final class NcclUniqueId {
    /** {@code NCCL_UNIQUE_ID_BYTES}. */
    public static final int SIZE = 128;
    private final byte[] bytes;

    private NcclUniqueId(byte[] bytes) {
        this.bytes = bytes;
    }

    public static NcclUniqueId of(byte[] bytes) {
        if (bytes.length != SIZE) {
            throw new IllegalArgumentException("an NCCL unique id has " + SIZE + " bytes, got " + bytes.length);
        }
        return new NcclUniqueId(bytes.clone());
    }

    public static NcclUniqueId fromHex(String hex) { return of(HexFormat.of().parseHex(hex)); }

    public byte[] bytes() { return bytes.clone(); }

    public String toHex() { return HexFormat.of().formatHex(bytes); }

    @Override
    public boolean equals(Object o) { return o instanceof NcclUniqueId u && Arrays.equals(bytes, u.bytes); }

    @Override
    public int hashCode() { return Arrays.hashCode(bytes); }

    @Override
    public String toString() { return "NcclUniqueId[" + toHex().substring(0, 16) + "...]"; }
}
