// What choosing a variant at launch costs (scripts/bench-dispatch): one tiny kernel launched in
// batches from the host, the host's time per launch call measured. The kernel has a variant
// with launch bounds (written out by hand here, as apply adds it to the PTX) and a dispatch
// table whose guard folds n. In one process, batches of the three ways alternate: cudart's own
// launch (__real_cudaLaunchKernel, what the program calls without r3's runtime), the launch
// through r3's wrapper with the guard holding (the variant runs), and with it refused (n = 2:
// the guard is checked, the generic code runs). A launch's host time varies by hundreds of ns
// with the GPU's queue, so each way is compared with the cudart batch beside it.
//
// `dispatch_bench first malloc|launch` times instead the process's first launch of the kernel
// (issue 57), by the host's clock: the launch call, and the call with the
// cudaDeviceSynchronize after it. The context is made first by a call r3's runtime does not
// wrap, so that neither its creation nor, under CUDA_MODULE_LOADING=EAGER, the loading of the
// modules is timed; then "malloc" allocates (timed apart: that is where r3 now probes the
// variants) before it launches, and "launch" launches before any call r3 sees. Built with
// -DR3_NO_VARIANT and no table, it is the generic-only build.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" cudaError_t __real_cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);

// Where a launch with no memory of its own (p null) says which code ran.
__device__ int bench_ran;

extern "C" __global__ void bench_kernel(int *p, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *(p ? p : &bench_ran) = 1;
}

// R3_VARIANT_ONLY_SM80: the variant exists in the sm_80 image only (a build for two
// architectures where one was tuned), to see a module whose image lacks a registered entry load.
#if !defined(R3_NO_VARIANT) && (!defined(R3_VARIANT_ONLY_SM80) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ == 800)
extern "C" __global__ void __launch_bounds__(256) bench_kernel__r3_bench_v1(int *p, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *(p ? p : &bench_ran) = 2;
}
#endif

static int *p;

// ns per launch call over one batch: through cudart alone (wrapped = false) or r3's wrapper.
static double batch(bool wrapped, int n) {
  const int count = 256;
  void *args[] = {&p, &n};
  dim3 grid(1), block(128);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; i++) {
    if (wrapped)
      cudaLaunchKernel((const void *)bench_kernel, grid, block, args, 0, 0);
    else
      __real_cudaLaunchKernel((const void *)bench_kernel, grid, block, args, 0, 0);
  }
  auto t1 = std::chrono::steady_clock::now();
  cudaDeviceSynchronize();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / count;
}

static int ran() {
  int r = 0;
  cudaMemcpy(&r, p, sizeof r, cudaMemcpyDeviceToHost);
  return r;
}

using bench_clock = std::chrono::steady_clock;

static double us(bench_clock::time_point a, bench_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The process's first launch: "first call_us=... sync_us=... alloc_us=... ran=variant|generic".
static int first(bool malloc_first) {
  // cudaDeviceSynchronize makes the context, and r3's runtime does not see it.
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  int *q = nullptr;
  double alloc_us = -1;
  if (malloc_first) {
    auto a0 = bench_clock::now();
    if (cudaMalloc(&q, sizeof(int)) != cudaSuccess) return 1;
    alloc_us = us(a0, bench_clock::now());
  }
  auto t0 = bench_clock::now();
  bench_kernel<<<1, 128>>>(q, 1);
  auto t1 = bench_clock::now();
  cudaError_t e = cudaDeviceSynchronize();
  auto t2 = bench_clock::now();
  int r = 0;
  if (e != cudaSuccess || cudaGetLastError() != cudaSuccess) return 1;
  if (q ? cudaMemcpy(&r, q, sizeof r, cudaMemcpyDeviceToHost) : cudaMemcpyFromSymbol(&r, bench_ran, sizeof r))
    return 1;
  printf("first call_us=%.2f sync_us=%.2f alloc_us=%.2f ran=%s\n", us(t0, t1), us(t0, t2), alloc_us,
         r == 2 ? "variant" : r == 1 ? "generic" : "none");
  return r ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "first")) return first(!strcmp(argv[2], "malloc"));
  if (cudaMalloc(&p, sizeof(int)) != cudaSuccess) return 1;
  for (int i = 0; i < 20; i++) batch(true, 1), batch(true, 2), batch(false, 1);
  batch(true, 1);
  const char *variant = ran() == 2 ? "variant" : "generic";
  batch(true, 2);
  const char *refused = ran() == 1 ? "generic" : "variant";
  std::vector<double> real, taken, checked, d_taken, d_checked;
  for (int r = 0; r < 300; r++) {
    double a = batch(false, 1), b = batch(true, 1), c = batch(true, 2), a2 = batch(false, 1);
    double base = (a + a2) / 2;
    real.push_back(base), taken.push_back(b), checked.push_back(c);
    d_taken.push_back(b - base), d_checked.push_back(c - base);
  }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
  if (cudaGetLastError() != cudaSuccess) return 1;
  printf("cudart ns=%.1f\n", med(real));
  printf("taken ns=%.1f extra=%.1f ran=%s\n", med(taken), med(d_taken), variant);
  printf("refused ns=%.1f extra=%.1f ran=%s\n", med(checked), med(d_checked), refused);
  return 0;
}
