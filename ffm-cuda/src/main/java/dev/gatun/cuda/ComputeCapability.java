package dev.gatun.cuda;

/** A device's compute capability, for example 9.0 on H100/H200. */
public record ComputeCapability(int major, int minor) implements Comparable<ComputeCapability> {
    public ComputeCapability {
        if (major < 1 || minor < 0) {
            throw new IllegalArgumentException("bad compute capability " + major + "." + minor);
        }
    }

    /** The NVRTC/nvcc real architecture name, for example {@code sm_90}. */
    public String arch() {
        return "sm_" + major + minor;
    }

    /** The virtual architecture name, for example {@code compute_90}. */
    public String virtualArch() {
        return "compute_" + major + minor;
    }

    /** Parses {@code 9.0}, {@code sm_90}, {@code compute_90} or {@code sm_100}. */
    public static ComputeCapability parse(String text) {
        String t = text.trim();
        if (t.contains(".")) {
            String[] p = t.split("\\.");
            return new ComputeCapability(Integer.parseInt(p[0]), Integer.parseInt(p[1]));
        }
        String digits = t.replaceFirst("^(sm_|compute_)", "").replaceFirst("[af]$", "");
        if (!digits.matches("\\d{2,3}")) {
            throw new IllegalArgumentException("not a compute capability: " + text);
        }
        return new ComputeCapability(Integer.parseInt(digits.substring(0, digits.length() - 1)),
                digits.charAt(digits.length() - 1) - '0');
    }

    @Override
    public int compareTo(ComputeCapability o) {
        return major != o.major ? Integer.compare(major, o.major) : Integer.compare(minor, o.minor);
    }

    @Override
    public String toString() {
        return major + "." + minor;
    }
}
