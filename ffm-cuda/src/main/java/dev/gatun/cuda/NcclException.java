package dev.gatun.cuda;

/** An NCCL call failed; the message holds ncclGetErrorString and ncclGetLastError's text. */
public final class NcclException extends CudaException {
    private static final long serialVersionUID = 1L;
    private final String lastError;

    public NcclException(String call, int code, String errorName, String lastError) {
        super(call + " failed: " + errorName + " (" + code + ")" + (lastError.isEmpty() ? "" : ": " + lastError),
                call, code, errorName, lastError);
        this.lastError = lastError;
    }

    /** The text of ncclGetLastError at the time of the failure (may be empty). */
    public String lastError() { return lastError; }
}
