// KernelEmulationTest's driver: loads the buffers slot<N>.bin named on launches.txt's first line ("slots N..."), makes
// each following launch ("entry grid block arg...", the grid "G" or "GxY"; a pointer argument is a slot number), writes the buffers back, and
// prints TRAP where a kernel trapped (the launches after it are not made, as on a GPU).
#include "emulate.h"
#include "kernels.inc"
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

static std::map<long long, std::vector<char>> memory;

static void* P(long long slot) {
    auto it = memory.find(slot);
    if (it == memory.end()) { std::fprintf(stderr, "no buffer in slot %lld\n", slot); std::exit(2); }
    return it->second.data();
}

using Args = std::vector<long long>;
struct Entry { bool together; std::function<void(const Args&)> run; };

#define S8(o) a[o], a[o + 1], a[o + 2], a[o + 3], a[o + 4], a[o + 5], a[o + 6], a[o + 7]
#define TK(name, T) m[#name] = {true, [](const Args& a) { name((const T*) P(a[0]), (T*) P(a[1]), (long long*) P(a[2]), a[3], (int) a[4], (int) a[5]); }};
#define GA(name, U) m[#name] = {false, [](const Args& a) { name((const U*) P(a[0]), P(a[1]), (int) a[2], (U*) P(a[3]), a[4], a[5], (int) a[6], (int) a[7], \
        S8(8), S8(16), (int*) P(a[24]), (gatun_fault*) P(a[25]), (int) a[26]); }};
#define RT(name, T) m[#name] = {true, [](const Args& a) { name((const T*) P(a[0]), (const T*) P(a[1]), (const long long*) P(a[2]), (T*) P(a[3]), \
        (int) a[4], (int) a[5], (int) a[6], (int) a[7], (int) a[8], (int) a[9], (int*) P(a[10]), (gatun_fault*) P(a[11]), (int) a[12]); }};
#define SA(name, T) m[#name] = {false, [](const Args& a) { name((const T*) P(a[0]), P(a[1]), (int) a[2], (const T*) P(a[3]), (T*) P(a[4]), a[5], a[6], \
        a[7], a[8], (int) a[9], (int) a[10], S8(11), S8(19), S8(27)); }};
#define GV(name, T) m[#name] = {true, [](const Args& a) { name((const T*) P(a[0]), (const T*) P(a[1]), (T*) P(a[2]), (int) a[3], (int) a[4], a[5], \
        (int) a[6], (int) a[7], (int) a[8]); }};
#define GV_FMA(T, NAME) GV(gemv_fma_##NAME##_1, T) GV(gemv_fma_##NAME##_2, T) GV(gemv_fma_##NAME##_4, T) GV(gemv_fma_##NAME##_8, T)

static std::map<std::string, Entry> entries() {
    std::map<std::string, Entry> m;
    TK(topk_f32, float) TK(topk_f64, double) TK(topk_f16, __half) TK(topk_bf16, __nv_bfloat16)
    TK(topk_i8, signed char) TK(topk_i32, int) TK(topk_i64, long long)
    GA(gather_1, unsigned char) GA(gather_2, unsigned short) GA(gather_4, unsigned int) GA(gather_8, unsigned long long)
    m["scatter_check"] = {false, [](const Args& a) { scatter_check(P(a[0]), (int) a[1], a[2], a[3], (int) a[4], (int*) P(a[5]), (gatun_fault*) P(a[6]), (int) a[7]); }};
    SA(scatter_add_f32, float) SA(scatter_add_f64, double) SA(scatter_add_f16, __half) SA(scatter_add_bf16, __nv_bfloat16)
    SA(scatter_add_i8, signed char) SA(scatter_add_i32, int) SA(scatter_add_i64, long long)
    RT(gemv_routed_f32, float) RT(gemv_routed_f16, __half) RT(gemv_routed_bf16, __nv_bfloat16)
    GV_FMA(float, f32) GV_FMA(__half, f16) GV_FMA(__nv_bfloat16, bf16)
    GV(gemv_mma_f16, __half) GV(gemv_mma_bf16, __nv_bfloat16)
    return m;
}

static std::string file(long long slot) { return "slot" + std::to_string(slot) + ".bin"; }

int main() {
    auto table = entries();
    std::ifstream in("launches.txt");
    std::string line, word;
    std::getline(in, line);
    std::istringstream head(line);
    head >> word;
    std::vector<long long> slots;
    for (long long s; head >> s;) {
        std::ifstream f(file(s), std::ios::binary);
        memory[s] = std::vector<char>(std::istreambuf_iterator<char>(f), {});
        memory[s].resize(memory[s].size() + 16);   // never an empty vector's null data
        slots.push_back(s);
    }
    bool trapped = false;
    while (!trapped && std::getline(in, line)) {
        std::istringstream l(line);
        std::string name, grids;
        unsigned grid, gridY = 1, block;
        if (!(l >> name >> grids >> block)) continue;
        // "G" or "GxY": the grid's blocks along x, and along y
        size_t x = grids.find('x');
        grid = (unsigned) std::stoul(grids.substr(0, x));
        if (x != std::string::npos) gridY = (unsigned) std::stoul(grids.substr(x + 1));
        Args args;
        for (long long v; l >> v;) args.push_back(v);
        auto it = table.find(name);
        if (it == table.end()) { std::fprintf(stderr, "no entry point %s\n", name.c_str()); return 2; }
        trapped = !emu_launch(grid, gridY, block, it->second.together, [&] { it->second.run(args); });
    }
    if (trapped) std::printf("TRAP\n");
    for (long long s : slots) {
        std::ofstream f(file(s), std::ios::binary);
        f.write(memory[s].data(), (std::streamsize) memory[s].size() - 16);
    }
    return 0;
}
