package dev.gatun.ir;

/** The static type of a graph value: element type and shape. */
public record TensorType(DType dtype, Shape shape) {
    public TensorType {
        if (dtype == null || shape == null) throw new GraphException("dtype and shape are required");
    }

    public static TensorType of(DType dtype, long... sizes) { return new TensorType(dtype, Shape.of(sizes)); }

    public int rank() { return shape.rank(); }

    /** Bytes of a static-shaped tensor stored contiguously. */
    public long byteSize() { return shape.numel() * dtype.byteSize(); }

    @Override public String toString() { return dtype.shortName() + shape; }
}
