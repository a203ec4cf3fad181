package dev.gatun.cuda;

/** A 64-byte {@code cudaIpcMemHandle_t}: an immutable value that can travel over any byte channel. */
public final class IpcMemHandle extends OpaqueHandle {
    /** {@code sizeof(cudaIpcMemHandle_t)}. */
    public static final int SIZE = 64;

    private IpcMemHandle(byte[] bytes) { super(bytes, SIZE, "an IPC memory handle"); }

    /** A handle from its 64 bytes (copied). */
    public static IpcMemHandle of(byte[] bytes) { return new IpcMemHandle(bytes); }

    public static IpcMemHandle fromHex(String hex) { return of(parseHex(hex)); }
}
