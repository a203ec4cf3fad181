package dev.gatun.cuda;

/**
 * An error returned by a CUDA, NVRTC, cuBLAS or NCCL call. Carries the call, the numeric code, the error's
 * name and its description as the library reports them.
 */
public class CudaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String call;
    private final int code;
    private final String errorName;
    private final String description;

    public CudaException(String call, int code, String errorName, String description) {
        super(call + " failed: " + errorName + " (" + code + "): " + description);
        this.call = call;
        this.code = code;
        this.errorName = errorName;
        this.description = description;
    }

    /** For errors detected by Gatun itself (no native error code). */
    public CudaException(String message) {
        super(message);
        this.call = "";
        this.code = 0;
        this.errorName = "";
        this.description = message;
    }

    protected CudaException(String message, String call, int code, String errorName, String description) {
        super(message);
        this.call = call;
        this.code = code;
        this.errorName = errorName;
        this.description = description;
    }

    /** The native call that failed, for example {@code cudaMalloc}. */
    public String call() { return call; }

    /** The numeric error code the library returned. */
    public int code() { return code; }

    /** The error's symbolic name, for example {@code cudaErrorMemoryAllocation}. */
    public String errorName() { return errorName; }

    /** The library's description of the error. */
    public String description() { return description; }
}
