// The host side of AttentionEmulationTest: CudaAttention's kernels compiled as host C++ (g++, -std=c++20 -pthread): a
// block's threads as std::threads, __syncthreads a block barrier, __syncwarp and a warp's shuffles through a slot per
// thread between two barriers of its warp; the step's counter add (PTX in the kernel, replaced by the test with
// at_emu_arrive) and the fault record's claim under a lock; a trap an exception that ends the thread. Not a GPU: it
// checks what the kernels compute (the cut's indexing, the shuffles' reductions, the merge, the update's writes, the
// trap's record), not their speed or memory model.
#pragma once
#include "emu_common.h"
using std::fmaf; using std::fmaxf;
#define GATUN_DEPENDENT_START() do { } while (0)
struct emu_trap {};
inline std::barrier<>* bar = nullptr;
inline std::barrier<>* wbar[32];
inline void __syncwarp() { wbar[threadIdx.x >> 5]->arrive_and_wait(); }
inline void __syncthreads() { bar->arrive_and_wait(); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __expf(float x) { return expf(x); }
inline unsigned long long slots[1024];
inline std::mutex amu;
template <typename T> T shuf(T v, int from) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    unsigned t = threadIdx.x; unsigned long long b = 0; std::memcpy(&b, &v, sizeof(T)); slots[t] = b;
    __syncwarp(); T r; std::memcpy(&r, &slots[(t & ~31u) | (unsigned) (from & 31)], sizeof(T)); __syncwarp(); return r;
}
template <typename T> T __shfl_xor_sync(unsigned, T v, int d) { return shuf(v, (int) ((threadIdx.x & 31) ^ d)); }
template <typename T> T __shfl_sync(unsigned, T v, int s) { return shuf(v, s); }
template <typename T> T __ldg(const T* p) { return *p; }
template <typename T> T __ldcg(const T* p) { return *p; }
inline unsigned at_emu_arrive(unsigned* c) { std::lock_guard<std::mutex> l(amu); return (*c)++; }
inline int atomicCAS(int* p, int cmp, int val) { std::lock_guard<std::mutex> l(amu); int o = *p; if (o == cmp) *p = val; return o; }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
[[noreturn]] inline void __trap() { throw emu_trap{}; }
// CUDA's integer min and max: same-type overloads only, so that a call of mixed types does not compile here
inline int min(int a, int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

// runs body on grid x block threads, a block after another (its threads at once); false where a thread trapped (the
// blocks after it are not run, as a trap ends a GPU's grid)
inline bool launch(emu_dim3 grid, unsigned block, const std::function<void()>& body) {
    gridDim = grid; blockDim.x = block;
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        std::barrier<> b(block); bar = &b;
        std::vector<std::unique_ptr<std::barrier<>>> ws;
        for (unsigned w = 0; w < block / 32; w++) { ws.emplace_back(new std::barrier<>(32)); wbar[w] = ws.back().get(); }
        std::atomic<bool> trapped = false;
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++) th.emplace_back([&, t] { threadIdx.x = t; try { body(); } catch (const emu_trap&) { trapped = true; } });
        for (auto& h : th) h.join();
        if (trapped) return false;
    }
    return true;
}
