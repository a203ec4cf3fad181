package dev.gatun.cuda;

import java.util.Arrays;
import java.util.HexFormat;

/**
 * A fixed-size opaque value a native library hands out for another process (an IPC handle, an NCCL unique id):
 * immutable bytes that travel over any byte channel, as bytes or hex. Equal when of the same kind and bytes.
 */
public abstract sealed class OpaqueHandle permits IpcMemHandle, IpcEventHandle, NcclUniqueId {
    private final byte[] bytes;

    /** Copies {@code bytes}, which must be exactly {@code size} long ({@code what} names the kind in the error). */
    OpaqueHandle(byte[] bytes, int size, String what) {
        if (bytes.length != size) throw new IllegalArgumentException(what + " has " + size + " bytes, got " + bytes.length);
        this.bytes = bytes.clone();
    }

    static byte[] parseHex(String hex) { return HexFormat.of().parseHex(hex); }

    /** A copy of the bytes. */
    public final byte[] bytes() { return bytes.clone(); }

    public final String toHex() { return HexFormat.of().formatHex(bytes); }

    @Override
    public final boolean equals(Object o) { return o != null && o.getClass() == getClass() && Arrays.equals(bytes, ((OpaqueHandle) o).bytes); }

    @Override
    public final int hashCode() { return Arrays.hashCode(bytes); }

    @Override
    public final String toString() { return getClass().getSimpleName() + "[" + toHex() + "]"; }
}
