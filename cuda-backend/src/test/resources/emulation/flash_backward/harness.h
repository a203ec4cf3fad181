// The host side of FlashAttentionBackwardEmulationTest: CudaFlashAttentionBackward's kernels compiled as host C++ (g++,
// -std=c++20 -pthread): a block's threads as std::threads, __syncthreads a block barrier, a warp's shuffles (and the
// emulated mma.sync and ldmatrix of fb_mma.h) through a slot per thread between two barriers of its warp, atomicAdd
// under a lock. Not a GPU: it checks what the kernels compute (indexing, fragments, masks, sums), not their speed.
#pragma once
#include "emu_common.h"
using std::fmaf; using std::fmax;
#undef __noinline__
#define GATUN_DEPENDENT_START() do { } while (0)
inline std::barrier<>* bar = nullptr;
inline std::barrier<>* wbar[32];
inline void warpsync() { wbar[threadIdx.x >> 5]->arrive_and_wait(); }
inline void __syncthreads() { bar->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __expf(float x) { return expf(x); }
inline unsigned long long slots[1024][8];   // a thread's posted values (a shuffle's, a fragment's, an address)
inline std::mutex amu;
inline float atomicAdd(float* p, float v) { std::lock_guard<std::mutex> l(amu); float o = *p; *p = o + v; return o; }
template <typename T> T shuf(T v, int from) {
    unsigned t = threadIdx.x; unsigned long long b = 0; std::memcpy(&b, &v, sizeof(T)); slots[t][0] = b;
    warpsync(); T r; std::memcpy(&r, &slots[(t & ~31u) | (unsigned) from][0], sizeof(T)); warpsync(); return r;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int d) { return shuf(v, (int) ((threadIdx.x & 31) ^ d)); }
template <typename T> T __shfl_sync(unsigned, T v, int s) { return shuf(v, s); }
