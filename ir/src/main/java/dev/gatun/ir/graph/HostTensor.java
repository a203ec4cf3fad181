package dev.gatun.ir.graph;

import dev.gatun.ir.DType;

/** A tensor as a host implementation of a user op sees it: element access by row-major index. */
public interface HostTensor {
    DType dtype();

    long[] shape();

    long numel();

    double get(long index);

    void set(long index, double value);
}
