// Launch-overhead microbenchmark, C side: host time per cuLaunchKernel of an empty kernel.
// Same method as dev.gatun.cuda.LaunchOverhead (Java): batches of 100 launches timed with CLOCK_MONOTONIC,
// a stream synchronize between batches (not timed), median over batches after one warm-up pass.
// Build: nvcc -O2 -o launch_overhead launch_overhead.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__global__ void empty() {}

static double now_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

#define CK(x) do { int rc = (int)(x); if (rc) { fprintf(stderr, "%s failed: %d\n", #x, rc); return 1; } } while (0)

int main(int argc, char** argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 2000, per = 100;
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaFunction_t rf;
    CK(cudaGetFuncBySymbol(&rf, (const void*)empty));
    CUfunction f = (CUfunction)rf;
    double* t = (double*)malloc(sizeof(double) * batches);
    for (int rep = 0; rep < 2; rep++) {
        for (int b = 0; b < batches; b++) {
            double t0 = now_ns();
            for (int i = 0; i < per; i++) CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)s, NULL, NULL));
            double t1 = now_ns();
            CK(cudaStreamSynchronize(s));
            t[b] = (t1 - t0) / per;
        }
    }
    qsort(t, batches, sizeof(double), cmp);
    printf("[bench] C cuLaunchKernel: median %.0f ns/launch, p10 %.0f, p90 %.0f (%d x %d launches)\n",
           t[batches / 2], t[batches / 10], t[batches * 9 / 10], batches, per);
    return 0;
}
