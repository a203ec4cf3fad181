// Runs CudaAttention's kernels (attention.h: the program of every cut, entry points plain functions, the counter add
// emulated) as CudaAttention launches them, against plain float64 loops over a mirror of the caches, and prints one line
// a launch: "ok <largest error> <counters left nonzero> <cache elements differing from the mirror>", or
// "trap <code> <step> <position> <cache length>" where the kernel trapped.
// Arguments: dtype (f32, f16, bf16) D P B R S heads update early pos64 position...
//   B batch entries (the caches' leading dimension, B = sequences x heads), R query rows, S the cache's length; update: the
//   launch writes a new key and value at the position (sources [B / heads, D, heads] and [B / heads, heads, D]); early:
//   the early-load form; pos64: the position an int64. Every launch reuses the scratch and counters, as a session does.
#include "harness.h"
#include "attention.h"
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

template <typename T> using Entry = void (*)(const T*, T*, T*, T*, const void*, int, int, long long, float, int, float*, unsigned*, int*,
        gatun_fault*, int, int, const void*, long long, long long, long long, const void*, long long, long long, long long, int, int);

template <typename T> static T rnd(std::mt19937& g) { std::uniform_real_distribution<float> u(-1.f, 1.f); T x; at_store(&x, u(g)); return x; }

template <typename T> static int run(Entry<T> entry, int D, int P, int argc, char** argv) {
    int B = atoi(argv[4]), R = atoi(argv[5]); long long S = atoll(argv[6]);
    int heads = atoi(argv[7]), update = atoi(argv[8]), early = atoi(argv[9]), pos64 = atoi(argv[10]);
    const int ROWS = 4, WARPS = 4;
    int rowBlocks = (R + ROWS - 1) / ROWS, splits = (int) ((S + P - 1) / P), tiles = B * rowBlocks;
    std::mt19937 g(1234 + D + P);
    std::vector<T> q((size_t) B * R * D), kT((size_t) B * D * S), v((size_t) B * S * D), out(q.size());
    for (auto& x : kT) x = rnd<T>(g);
    for (auto& x : v) x = rnd<T>(g);
    auto F = [](T x) { return (double) at_f(x); };
    std::vector<double> mk(kT.size()), mv(v.size());   // the mirror of the caches
    for (size_t i = 0; i < kT.size(); i++) mk[i] = F(kT[i]);
    for (size_t i = 0; i < v.size(); i++) mv[i] = F(v[i]);
    std::vector<float> scratch(splits == 1 ? 1 : (size_t) tiles * splits * ROWS * (D + 2));
    std::vector<unsigned> counters(tiles, 0u);
    int claim = 0;
    gatun_fault fault{};
    int seqs = B / heads;
    std::vector<T> kn((size_t) seqs * D * heads), vn((size_t) seqs * heads * D);
    double scale = 2.0 / std::sqrt((double) D);
    for (int a = 11; a < argc; a++) {
        long long last = atoll(argv[a]);
        for (auto& x : q) x = rnd<T>(g);
        for (auto& x : kn) x = rnd<T>(g);
        for (auto& x : vn) x = rnd<T>(g);
        for (auto& x : out) at_store(&x, NAN);
        int p32 = (int) last; long long p64 = last;
        const void* pos = pos64 ? (const void*) &p64 : (const void*) &p32;
        bool ok = launch({(unsigned) ((splits + WARPS - 1) / WARPS), (unsigned) B, (unsigned) rowBlocks}, 32 * WARPS, [&] {
            entry(q.data(), kT.data(), v.data(), out.data(), pos, pos64, R, S, (float) scale, splits, scratch.data(), counters.data(), &claim, &fault,
                  7, early, kn.data(), (long long) D * heads, 1, heads, vn.data(), (long long) heads * D, D, 1, heads, update);
        });
        if (!ok) { printf("trap %d %d %lld %lld\n", fault.code, fault.step, fault.v[0], fault.v[1]); return 0; }
        if (update)
            for (int x = 0; x < B; x++) for (int e = 0; e < D; e++) {
                int s = x / heads, h = x % heads;
                mk[((size_t) x * D + e) * S + last] = F(kn[((size_t) s * D + e) * heads + h]);
                mv[((size_t) x * S + last) * D + e] = F(vn[((size_t) s * heads + h) * D + e]);
            }
        double worst = 0;
        std::vector<double> sc(S);
        for (int x = 0; x < B; x++) for (int r = 0; r < R; r++) {
            double mx = -INFINITY;
            for (long long j = 0; j <= last; j++) {
                double d = 0;
                for (int e = 0; e < D; e++) d += F(q[((size_t) x * R + r) * D + e]) * mk[((size_t) x * D + e) * S + j];
                sc[j] = d * scale; mx = std::max(mx, sc[j]);
            }
            double sum = 0;
            for (long long j = 0; j <= last; j++) sum += exp(sc[j] - mx);
            for (int e = 0; e < D; e++) {
                double o = 0;
                for (long long j = 0; j <= last; j++) o += exp(sc[j] - mx) / sum * mv[((size_t) x * S + j) * D + e];
                double got = F(out[((size_t) x * R + r) * D + e]), err = std::fabs(got - o);
                if (!(err <= worst)) worst = err;   // NaN (an element never written) is the worst
            }
        }
        long left = 0, differ = 0;
        for (unsigned c : counters) left += c != 0;
        for (size_t i = 0; i < kT.size(); i++) differ += F(kT[i]) != mk[i];
        for (size_t i = 0; i < v.size(); i++) differ += F(v[i]) != mv[i];
        printf("ok %.17g %ld %ld\n", worst, left, differ);
    }
    return 0;
}

int main(int argc, char** argv) {
    std::string t = argv[1];
    int D = atoi(argv[2]), P = atoi(argv[3]);
#define AT_CASE(TY, NAME, DD, PP) \
    if (t == #NAME && D == DD && P == PP) return run<TY>(attention_##NAME##_##DD##_p##PP, D, P, argc, argv);
#define AT_CASES(PP) \
    AT_CASE(float, f32, 16, PP) AT_CASE(__half, f16, 16, PP) AT_CASE(__nv_bfloat16, bf16, 16, PP) \
    AT_CASE(float, f32, 32, PP) AT_CASE(__half, f16, 32, PP) AT_CASE(__nv_bfloat16, bf16, 32, PP) \
    AT_CASE(float, f32, 64, PP) AT_CASE(__half, f16, 64, PP) AT_CASE(__nv_bfloat16, bf16, 64, PP) \
    AT_CASE(__half, f16, 128, PP) AT_CASE(__nv_bfloat16, bf16, 128, PP)
    AT_CASES(32) AT_CASES(16) AT_CASES(8)
    fprintf(stderr, "no entry point for %s %d %d\n", t.c_str(), D, P);
    return 2;
}
