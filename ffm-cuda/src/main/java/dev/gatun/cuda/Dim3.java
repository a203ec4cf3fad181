package dev.gatun.cuda;

/** Grid or block dimensions. */
public record Dim3(int x, int y, int z) {
    public Dim3 {
        if (x < 1 || y < 1 || z < 1) {
            throw new IllegalArgumentException("dimensions must be positive: " + x + "x" + y + "x" + z);
        }
    }

    public static Dim3 of(int x) { return new Dim3(x, 1, 1); }

    public static Dim3 of(int x, int y) { return new Dim3(x, y, 1); }

    public long volume() { return (long) x * y * z; }
}
