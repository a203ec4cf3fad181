package dev.gatun.ir.graph;

import java.util.List;

/** A user op's optional host implementation, used by the host backend and the reference interpreter. */
@FunctionalInterface
public interface HostKernel {
    void run(List<HostTensor> inputs, List<HostTensor> outputs, int rank, int worldSize);
}
