// Runs one case of CudaFlashAttentionBackward's kernels (KERNEL: the program with fb_mma.h in place of its primitives;
// ROWSFORM: the tiled rows kernels, with their BR and NT; SIMPLEFORM: the simple ones) as the backend launches them and prints each gradient's largest error relative to its
// largest element against plain float64 loops (and the stats': L and D). Arguments: B Hq Hkv T S causal window softcap.
#include "harness.h"
#include KERNEL
#include <cstdio>
#include <cstdlib>
#include <random>
#include <memory>
typedef FT T_;
static void launch(emu_dim3 grid, unsigned block, const std::function<void()>& body) {
    gridDim = grid; blockDim.x = block;
    for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        std::barrier<> b(block); bar = &b;
        std::vector<std::unique_ptr<std::barrier<>>> ws; for (unsigned w = 0; w < block / 32; w++) { ws.emplace_back(new std::barrier<>(32)); wbar[w] = ws.back().get(); }
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; t++) th.emplace_back([&, t] { threadIdx.x = t; body(); });
        for (auto& h : th) h.join();
    }
}
static FT rnd(std::mt19937& g) { std::uniform_real_distribution<float> u(-1.f, 1.f); FT x; at_store(&x, u(g)); return x; }
static bool sees(long i, long j, long T, long S, int causal, long w) { if (!causal) return true; long pos = S - T + i; return j <= pos && (w == 0 || j > pos - w); }
int main(int argc, char** argv) {
    int B = atoi(argv[1]), Hq = atoi(argv[2]), Hkv = atoi(argv[3]), T = atoi(argv[4]), S = atoi(argv[5]), causal = atoi(argv[6]), window = atoi(argv[7]);
    double cap = atof(argv[8]); double scale = 1.0 / std::sqrt((double) FD) * 3;
    int G = Hq / Hkv;
    std::mt19937 g(42);
    std::vector<FT> q((size_t) B*Hq*T*FD), k((size_t) B*Hkv*S*FD), v(k.size()), o(q.size()), dout(q.size());
    for (auto& x : q) x = rnd(g); for (auto& x : k) x = rnd(g); for (auto& x : v) x = rnd(g); for (auto& x : dout) x = rnd(g);
    auto F = [](FT x) { return (double) at_f(x); };
    // forward o (double, rounded), then the reference
    std::vector<double> rdq(q.size()), rdk(k.size()), rdv(k.size()), sc(S), rstats((size_t) B*Hq*T*2);
    for (int pass = 0; pass < 2; pass++)
    for (int b = 0; b < B; b++) for (int h = 0; h < Hq; h++) for (int i = 0; i < T; i++) {
        int kvh = h / G; size_t qo = (((size_t) b*Hq + h)*T + i)*FD, to = (((size_t) b*T + i)*Hq + h)*FD;
        double mx = -INFINITY;
        for (int j = 0; j < S; j++) { if (!sees(i,j,T,S,causal,window)) continue; size_t ko = (((size_t) b*Hkv+kvh)*S+j)*FD; double d = 0;
            for (int e = 0; e < FD; e++) d += F(q[qo+e]) * F(k[ko+e]); double s = d * scale; if (cap > 0) s = cap * tanh(s / cap); sc[j] = s; mx = std::max(mx, s); }
        double sum = 0; for (int j = 0; j < S; j++) if (sees(i,j,T,S,causal,window)) sum += exp(sc[j] - mx);
        double lse = mx + log(sum);
        if (pass == 0) {
            for (int e = 0; e < FD; e++) { double a = 0; for (int j = 0; j < S; j++) if (sees(i,j,T,S,causal,window)) a += exp(sc[j]-lse) * F(v[(((size_t) b*Hkv+kvh)*S+j)*FD+e]); at_store(&o[to+e], (float) a); }
            continue;
        }
        double D = 0; for (int e = 0; e < FD; e++) D += F(dout[to+e]) * F(o[to+e]);
        rstats[((((size_t) b*Hq + h)*T + i))*2] = lse; rstats[((((size_t) b*Hq + h)*T + i))*2 + 1] = D;
        for (int j = 0; j < S; j++) { if (!sees(i,j,T,S,causal,window)) continue; size_t ko = (((size_t) b*Hkv+kvh)*S+j)*FD;
            double p = exp(sc[j] - lse), dp = 0; for (int e = 0; e < FD; e++) dp += F(dout[to+e]) * F(v[ko+e]);
            double ds = p * (dp - D); if (cap > 0) ds *= 1 - (sc[j]/cap)*(sc[j]/cap);
            for (int e = 0; e < FD; e++) { rdq[qo+e] += ds*scale*F(k[ko+e]); rdk[ko+e] += ds*scale*F(q[qo+e]); rdv[ko+e] += p*F(dout[to+e]); } }
    }
#if defined(ROWSFORM) || defined(SIMPLEFORM)
    typedef FA A_;
#else
    typedef float A_;
#endif
    std::vector<A_> dq(q.size(), (A_) NAN), stats((size_t) B*Hq*T*2, (A_) NAN), dk((size_t) B*Hq*S*FD, (A_) NAN), dv(dk.size(), (A_) NAN);
#if defined(ROWSFORM)
    launch({(unsigned) ((T+BR-1)/BR), (unsigned) Hq, (unsigned) B}, NT, [&] { fb_rows_dq(q.data(), k.data(), v.data(), o.data(), dout.data(), stats.data(), dq.data(), Hq, Hkv, T, S, (A_) scale, causal, window, (A_) cap); });
    launch({(unsigned) ((S+BR-1)/BR), (unsigned) Hq, (unsigned) B}, NT, [&] { fb_rows_dkv(q.data(), k.data(), v.data(), dout.data(), stats.data(), dk.data(), dv.data(), Hq, Hkv, T, S, (A_) scale, causal, window, (A_) cap); });
#elif defined(SIMPLEFORM)
    launch({(unsigned) ((T+3)/4), (unsigned) Hq, (unsigned) B}, 128, [&] { fb_simple_stats(q.data(), k.data(), o.data(), dout.data(), stats.data(), Hq, Hkv, T, S, (A_) scale, causal, window, (A_) cap); });
    launch({(unsigned) ((T+3)/4), (unsigned) Hq, (unsigned) B}, 128, [&] { fb_simple_dq(q.data(), k.data(), v.data(), dout.data(), stats.data(), dq.data(), Hq, Hkv, T, S, (A_) scale, causal, window, (A_) cap); });
    launch({(unsigned) ((S+3)/4), (unsigned) Hq, (unsigned) B}, 128, [&] { fb_simple_dkv(q.data(), k.data(), v.data(), dout.data(), stats.data(), dk.data(), dv.data(), Hq, Hkv, T, S, (A_) scale, causal, window, (A_) cap); });
#else
    launch({(unsigned) ((T+63)/64), (unsigned) Hq, (unsigned) B}, 128, [&] { fb_mma_stats(q.data(), k.data(), o.data(), dout.data(), stats.data(), dq.data(), Hq, Hkv, T, S, (float) scale, causal, window, (float) cap); });
    launch({(unsigned) ((S+63)/64), (unsigned) Hq, (unsigned) B}, 128, [&] { fb_mma_main(q.data(), k.data(), v.data(), dout.data(), stats.data(), dq.data(), dk.data(), dv.data(), Hq, Hkv, T, S, (float) scale, causal, window, (float) cap); });
#endif
    auto cmp = [](const char* n, auto& got, std::vector<double>& want, auto conv) {
        double big = 0, worst = 0; size_t at = 0;
        for (double x : want) big = std::max(big, std::fabs(x));
        for (size_t i = 0; i < want.size(); i++) { double e = std::fabs(conv(got[i]) - want[i]); if (!(e <= worst)) { worst = e; at = i; } }
        printf("%s %.17g\n", n, worst / big); (void) at;
    };
    cmp("dq", dq, rdq, [](A_ x) { return (double) x; });
    cmp("stats", stats, rstats, [](A_ x) { return (double) x; });
    // each query head's part of dk and dv, summed over the group as the gradient rule sums them
    std::vector<double> sk(k.size()), sv(k.size());
    for (int b = 0; b < B; b++) for (int h = 0; h < Hq; h++) for (size_t x = 0; x < (size_t) S*FD; x++) {
        sk[((size_t) b*Hkv + h/G)*S*FD + x] += dk[((size_t) b*Hq + h)*S*FD + x];
        sv[((size_t) b*Hkv + h/G)*S*FD + x] += dv[((size_t) b*Hq + h)*S*FD + x];
    }
    cmp("dk", sk, rdk, [](double x) { return x; });
    cmp("dv", sv, rdv, [](double x) { return x; });
}
