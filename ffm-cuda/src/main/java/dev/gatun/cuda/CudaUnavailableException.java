package dev.gatun.cuda;

/** Thrown when a GPU feature is used where CUDA (or one of its libraries) is not available. */
public final class CudaUnavailableException extends CudaException {
    private static final long serialVersionUID = 1L;

    public CudaUnavailableException(String reason) {
        super("unavailable: " + reason);
    }
}
