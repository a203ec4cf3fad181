package dev.gatun.planner;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

final class Fingerprint {
    private Fingerprint() {}

    static String of(String text) {
        var d = new Digest();
        d.append(text);
        return d.hex();
    }

    /** Where text goes: a string, or a digest. */
    interface Sink {
        Sink append(String s);
    }

    /** Into a string builder. */
    record Text(StringBuilder sb) implements Sink {
        public Sink append(String s) { sb.append(s); return this; }
    }

    /**
     * SHA-256 of UTF-8 text appended piece by piece, buffered in chunks: the same hash as of the whole text
     * (whole strings are appended, so no character is split between chunks).
     */
    static final class Digest implements Sink {
        private final MessageDigest md;
        private final StringBuilder pending = new StringBuilder(1 << 16);

        Digest() {
            try {
                md = MessageDigest.getInstance("SHA-256");
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException("SHA-256 is missing from this JDK", e);
            }
        }

        public Digest append(String s) {
            pending.append(s);
            if (pending.length() >= 1 << 16) flush();
            return this;
        }

        private void flush() {
            md.update(pending.toString().getBytes(StandardCharsets.UTF_8));
            pending.setLength(0);
        }

        String hex() {
            flush();
            return HexFormat.of().formatHex(md.digest());
        }
    }

    /**
     * Passes text on as {@link String#strip()} would leave it: white space before the first other character is
     * dropped, and a run of white space is held back until something else follows it (so a trailing run is dropped).
     */
    static final class Stripping implements Sink {
        private final Sink out;
        private final StringBuilder held = new StringBuilder();
        private boolean started;

        Stripping(Sink out) { this.out = out; }

        public Stripping append(String s) {
            int start = 0, end = s.length();
            if (!started) while (start < end && Character.isWhitespace(s.charAt(start))) start++;
            while (end > start && Character.isWhitespace(s.charAt(end - 1))) end--;
            if (start == end) {                       // nothing but white space
                if (started) held.append(s, start, s.length());
                return this;
            }
            if (!held.isEmpty()) { out.append(held.toString()); held.setLength(0); }
            out.append(start == 0 && end == s.length() ? s : s.substring(start, end));
            started = true;
            held.append(s, end, s.length());
            return this;
        }

        void finish() { held.setLength(0); }
    }
}
