package dev.gatun.cuda;

/** A 64-byte {@code cudaIpcEventHandle_t}: an immutable value that can travel over any byte channel. */
public final class IpcEventHandle extends OpaqueHandle {
    /** {@code sizeof(cudaIpcEventHandle_t)}. */
    public static final int SIZE = 64;

    private IpcEventHandle(byte[] bytes) { super(bytes, SIZE, "an IPC event handle"); }

    /** A handle from its 64 bytes (copied). */
    public static IpcEventHandle of(byte[] bytes) { return new IpcEventHandle(bytes); }

    public static IpcEventHandle fromHex(String hex) { return of(parseHex(hex)); }
}
