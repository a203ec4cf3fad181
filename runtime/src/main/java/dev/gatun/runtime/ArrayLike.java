package dev.gatun.runtime;

import dev.gatun.ir.DType;

/**
 * What a session takes as an input: a host {@link NDArray} or a {@link DeviceArray} in the backend's memory. Inputs
 * of one call may mix both.
 */
public sealed interface ArrayLike permits NDArray, DeviceArray {
    DType dtype();

    long[] shape();

    /** Elements in the array. */
    long numel();
}
