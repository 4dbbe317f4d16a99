// device_global: statistics of 2^26 unsigned ints accumulated straight into a
// __device__ global struct (sum of the even values, count above a threshold,
// maximum): per-thread registers, warp-shuffle reduction, then one set of
// global atomics per warp. The host zeroes the global with
// cudaMemcpyToSymbol before every launch and reads it with
// cudaMemcpyFromSymbol. All integer, checked exactly.
#include "r3corpus.h"

static const char* kProgram = "device_global";
constexpr int kBlocks = 2048;

struct Stats {
  unsigned long long even_sum;
  unsigned int count_above;
  unsigned int max_value;
};

__device__ Stats g_stats;

__global__ void device_global_stats_kernel(size_t n, unsigned threshold,
                                           const unsigned* __restrict__ in) {
  unsigned long long even_sum = 0;
  unsigned count = 0, mx = 0;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    unsigned v = in[i];
    if ((v & 1u) == 0) even_sum += v;
    count += v > threshold;
    mx = max(mx, v);
  }
  // Every thread reaches here, so whole warps take part (blockDim % 32 == 0).
  for (int off = 16; off > 0; off >>= 1) {
    even_sum += __shfl_down_sync(0xffffffffu, even_sum, off);
    count += __shfl_down_sync(0xffffffffu, count, off);
    mx = max(mx, __shfl_down_sync(0xffffffffu, mx, off));
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&g_stats.even_sum, even_sum);
    atomicAdd(&g_stats.count_above, count);
    atomicMax(&g_stats.max_value, mx);
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const size_t n = size_t(1) << 26;
  const unsigned threshold = 3000000000u;
  const unsigned block = 256;

  std::vector<unsigned> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = r3::hash2(231, i) % 4000000000u;
  r3::DeviceArray<unsigned> din(n);
  din.upload(in);

  const Stats zero = {0, 0, 0};
  auto reset = [&] { CUDA_CHECK(cudaMemcpyToSymbolAsync(g_stats, &zero, sizeof zero)); };
  auto launch = [&] { device_global_stats_kernel<<<kBlocks, block>>>(n, threshold, din.get()); };
  reset();
  launch();
  CUDA_CHECK_LAUNCH();
  Stats got;
  CUDA_CHECK(cudaMemcpyFromSymbol(&got, g_stats, sizeof got));

  Stats ref = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    if ((in[i] & 1u) == 0) ref.even_sum += in[i];
    ref.count_above += in[i] > threshold;
    ref.max_value = std::max(ref.max_value, in[i]);
  }
  bool ok = r3::check_equal("even_sum", &got.even_sum, &ref.even_sum, 1);
  ok = r3::check_equal("count_above", &got.count_above, &ref.count_above, 1) && ok;
  ok = r3::check_equal("max_value", &got.max_value, &ref.max_value, 1) && ok;

  r3::report(kProgram, "device_global_stats_kernel", r3::time_median_ms(launch, reset), ok);
  return ok ? 0 : 1;
}
