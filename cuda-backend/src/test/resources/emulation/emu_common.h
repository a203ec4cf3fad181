// What every host emulation of CUDA kernels starts with (emulate.h, attention/harness.h, flash_backward/harness.h):
// CUDA's own headers for the half types and their host conversions, the standard library the harnesses use, the grid
// and a thread's index as host variables (a block's threads are std::threads, so threadIdx is thread-local), and the
// kernel qualifiers as host C++ (a __shared__ array one static per kernel function, shared by a block's threads).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <vector_types.h>
#include <vector_functions.h>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
inline emu_dim3 gridDim, blockDim, blockIdx;
inline thread_local emu_dim3 threadIdx;
#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
