package dev.gatun.cuda;

import java.util.Arrays;
import java.util.HexFormat;

/** A 64-byte {@code cudaIpcMemHandle_t}: an immutable value that can travel over any byte channel. */
public final class IpcMemHandle {
    /** {@code sizeof(cudaIpcMemHandle_t)}. */
    public static final int SIZE = 64;
    private final byte[] bytes;

    private IpcMemHandle(byte[] bytes) {
        this.bytes = bytes;
    }

    /** A handle from its 64 bytes (copied). */
    public static IpcMemHandle of(byte[] bytes) {
        if (bytes.length != SIZE) {
            throw new IllegalArgumentException("an IPC memory handle has " + SIZE + " bytes, got " + bytes.length);
        }
        return new IpcMemHandle(bytes.clone());
    }

    public static IpcMemHandle fromHex(String hex) { return of(HexFormat.of().parseHex(hex)); }

    /** A copy of the 64 bytes. */
    public byte[] bytes() { return bytes.clone(); }

    public String toHex() { return HexFormat.of().formatHex(bytes); }

    @Override
    public boolean equals(Object o) { return o instanceof IpcMemHandle h && Arrays.equals(bytes, h.bytes); }

    @Override
    public int hashCode() { return Arrays.hashCode(bytes); }

    @Override
    public String toString() { return "IpcMemHandle[" + toHex() + "]"; }
}
