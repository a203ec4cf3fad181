package dev.gatun.runtime.distributed;

import dev.gatun.runtime.GatunRuntimeException;

import java.util.List;

/** Ranks compiled different plans (their plan fingerprints differ); no rank may run it. */
public final class FingerprintMismatchException extends GatunRuntimeException {
    private final String planName;
    private final List<String> fingerprints;

    public FingerprintMismatchException(String message, String planName, List<String> fingerprints) {
        super(message);
        this.planName = planName;
        this.fingerprints = List.copyOf(fingerprints);
    }

    public String planName() { return planName; }

    /** Every rank's fingerprint, by rank. */
    public List<String> fingerprints() { return fingerprints; }
}
