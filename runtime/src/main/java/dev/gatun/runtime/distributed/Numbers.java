package dev.gatun.runtime.distributed;

/**
 * The JDK's number parses without their exception: text that is not a number comes back as NaN or null, and the caller
 * refuses it by name together with the numbers out of range, in one check (rather than throwing a
 * {@code NumberFormatException} of its own to reach the same {@code catch}).
 */
final class Numbers {
    private Numbers() {}

    /** {@code s} (trimmed) as a double, or NaN where it is not a number. */
    static double decimal(String s) {
        try {
            return Double.parseDouble(s.trim());
        } catch (NumberFormatException e) {
            return Double.NaN;
        }
    }

    /** {@code s} (trimmed) as an int, or null where it is not a whole number in int's range. */
    static Integer whole(String s) {
        try {
            return Integer.parseInt(s.trim());
        } catch (NumberFormatException e) {
            return null;
        }
    }
}
