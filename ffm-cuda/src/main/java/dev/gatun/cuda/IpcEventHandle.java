package dev.gatun.cuda;

import java.util.Arrays;
import java.util.HexFormat;

/** A 64-byte {@code cudaIpcEventHandle_t}: an immutable value that can travel over any byte channel. */
public final class IpcEventHandle {
    /** {@code sizeof(cudaIpcEventHandle_t)}. */
    public static final int SIZE = 64;
    private final byte[] bytes;

    private IpcEventHandle(byte[] bytes) {
        this.bytes = bytes;
    }

    /** A handle from its 64 bytes (copied). */
    public static IpcEventHandle of(byte[] bytes) {
        if (bytes.length != SIZE) {
            throw new IllegalArgumentException("an IPC event handle has " + SIZE + " bytes, got " + bytes.length);
        }
        return new IpcEventHandle(bytes.clone());
    }

    public static IpcEventHandle fromHex(String hex) { return of(HexFormat.of().parseHex(hex)); }

    /** A copy of the 64 bytes. */
    public byte[] bytes() { return bytes.clone(); }

    public String toHex() { return HexFormat.of().formatHex(bytes); }

    @Override
    public boolean equals(Object o) { return o instanceof IpcEventHandle h && Arrays.equals(bytes, h.bytes); }

    @Override
    public int hashCode() { return Arrays.hashCode(bytes); }

    @Override
    public String toString() { return "IpcEventHandle[" + toHex() + "]"; }
}
