package dev.gatun.runtime.distributed;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/** All ranks must run the same plan: they exchange plan fingerprints and refuse to run when they differ. */
public final class Fingerprints {
    private Fingerprints() {}

    /** The rendezvous key prefix of fingerprint exchanges. */
    public static final String KEY_PREFIX = "gatun.plan-fingerprint/";

    /**
     * Exchanges {@code fingerprint} of plan {@code planName} with every rank and returns normally only if all are
     * equal; otherwise every rank throws the same {@link FingerprintMismatchException}. A collective call: every rank
     * must make it (the n-th check of a plan name meets the others' n-th).
     */
    public static void check(Rendezvous r, String planName, String fingerprint, Duration timeout) {
        Objects.requireNonNull(planName, "planName");
        Objects.requireNonNull(fingerprint, "fingerprint");
        List<byte[]> all = r.allGather(KEY_PREFIX + planName, fingerprint.getBytes(StandardCharsets.UTF_8), timeout);
        List<String> byRank = new ArrayList<>(all.size());
        for (byte[] b : all) byRank.add(new String(b, StandardCharsets.UTF_8));
        compare(planName, byRank);
    }

    /** Throws {@link FingerprintMismatchException} unless every rank's fingerprint (by rank) is the same. */
    public static void compare(String planName, List<String> byRank) {
        if (byRank.isEmpty()) return;
        String first = byRank.getFirst();
        int odd = -1;
        for (int r = 1; r < byRank.size(); r++) {
            if (!byRank.get(r).equals(first)) {
                odd = r;
                break;
            }
        }
        if (odd < 0) return;
        var msg = new StringBuilder("plan '").append(planName).append("': rank ").append(odd).append(" has fingerprint ")
                .append(shown(byRank.get(odd))).append(" but rank 0 has ").append(shown(first))
                .append("; every rank must compile the same graph with the same options");
        Map<String, List<Integer>> groups = new LinkedHashMap<>();
        for (int r = 0; r < byRank.size(); r++) groups.computeIfAbsent(byRank.get(r), k -> new ArrayList<>()).add(r);
        if (groups.size() > 2 || groups.values().stream().noneMatch(g -> g.size() == 1)) {
            msg.append(" (ranks by fingerprint:");
            groups.forEach((fp, ranks) -> msg.append(' ').append(shown(fp)).append(' ').append(ranks));
            msg.append(')');
        }
        throw new FingerprintMismatchException(msg.toString(), planName, byRank);
    }

    private static String shown(String fp) {
        return fp.isEmpty() ? "(empty)" : fp.length() > 64 ? fp.substring(0, 64) + "..." : fp;
    }
}
