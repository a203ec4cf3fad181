package dev.gatun.cuda;

/** NVRTC compilation failed; {@link #log()} holds the compiler's log. */
public final class CompileException extends CudaException {
    private static final long serialVersionUID = 1L;
    private final String log;

    public CompileException(String programName, int code, String errorName, String log) {
        super("NVRTC could not compile " + programName + ": " + errorName + "\n" + log,
                "nvrtcCompileProgram", code, errorName, log);
        this.log = log;
    }

    /** The compile log. */
    public String log() { return log; }
}
