// Runs the CUDA kernels' source as host C++ (g++, -std=c++20 -pthread) for KernelEmulationTest: blocks one after
// another, a block's threads as std::threads where the kernel meets at barriers or shuffles (else one after another),
// __shared__ arrays shared by them, a warp's shuffle through a slot per thread between two barriers of its warp's 32
// threads (so a warp may shuffle while the block's other warps do something else, as a warp-a-row kernel's do). The half types
// and their conversions are CUDA's own headers' host versions. Not a GPU: it checks what the kernels compute (their
// indexing, order, rounding and ties), not their speed or memory model.
#pragma once
#include "emu_common.h"
// a kernel's dynamic shared memory (the CUDA source's "extern __shared__" array, which KernelEmulationTest points here)
inline float emu_dynamic_shared[16384];

struct emu_trap {};
inline std::barrier<>* emu_block_barrier = nullptr;
// one barrier for each warp of the running block (its threads: 32, or what is left of the block)
inline std::vector<std::unique_ptr<std::barrier<>>> emu_warp_barriers;
inline unsigned long long emu_slots[1024];
inline std::mutex emu_atomic;

inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }

/* A warp shuffle: every thread of the warp posts its value, then reads thread source(t)'s (itself where negative). */
template <typename T, typename F> T emu_shuffle(T v, F source) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    unsigned t = threadIdx.x;
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    emu_slots[t] = bits;
    emu_warp_barriers[t >> 5]->arrive_and_wait();
    T r = v;
    int from = source(t);
    if (from >= 0) std::memcpy(&r, &emu_slots[from], sizeof(T));
    emu_warp_barriers[t >> 5]->arrive_and_wait();
    return r;
}

template <typename T> T __shfl_sync(unsigned, T v, int lane) {
    return emu_shuffle(v, [lane](unsigned t) { return (int) ((t & ~31u) | ((unsigned) lane & 31u)); });
}

template <typename T> T __shfl_down_sync(unsigned, T v, int d) {
    return emu_shuffle(v, [d](unsigned t) { return (t & 31) + d < 32 ? (int) (t + d) : -1; });
}

template <typename T> T __shfl_xor_sync(unsigned, T v, int d) {
    return emu_shuffle(v, [d](unsigned t) { return (int) ((t & ~31u) | ((t & 31u) ^ (unsigned) d)); });
}

// CUDA's integer min and max, which a host's global namespace lacks: same-type overloads only, so that a call of mixed or
// floating types is ambiguous here (a compile error), never converted silently
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// loads: through the caches or past them, the same to a host
using std::fmaf;
template <typename T> T __ldcs(const T* p) { return *p; }
template <typename T> T __ldg(const T* p) { return *p; }
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }

inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
inline long long __double_as_longlong(double f) { long long u; std::memcpy(&u, &f, 8); return u; }
inline int atomicCAS(int* p, int cmp, int val) {
    std::lock_guard<std::mutex> l(emu_atomic);
    int old = *p;
    if (old == cmp) *p = val;
    return old;
}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) {}
[[noreturn]] inline void __trap() { throw emu_trap{}; }

// runs body on (grid x gridY) x block threads; with `together`, a block's threads run at once (barriers, shuffles); false where a
// trap stopped it
inline bool emu_launch(unsigned grid, unsigned gridY, unsigned block, bool together, const std::function<void()>& body) {
    gridDim.x = grid;
    gridDim.y = gridY;
    blockDim.x = block;
    for (unsigned long long b = 0; b < (unsigned long long) grid * gridY; b++) {
        blockIdx.x = (unsigned) (b % grid);
        blockIdx.y = (unsigned) (b / grid);
        if (!together) {
            try {
                for (unsigned t = 0; t < block; t++) { threadIdx.x = t; body(); }
            } catch (const emu_trap&) { return false; }
            continue;
        }
        std::barrier<> barrier(block);
        emu_block_barrier = &barrier;
        emu_warp_barriers.clear();
        for (unsigned w = 0; w < block; w += 32) emu_warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, block - w)));
        std::atomic<bool> trapped = false;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; t++)
            threads.emplace_back([&, t] {
                threadIdx.x = t;
                try { body(); } catch (const emu_trap&) { trapped = true; }
            });
        for (auto& th : threads) th.join();
        if (trapped) return false;
    }
    return true;
}
