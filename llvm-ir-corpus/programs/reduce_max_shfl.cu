// reduce_max_shfl: maximum of 2^26 floats (both signs). Each warp reduces with
// __shfl_down_sync, warp results meet in shared memory, and each block folds
// its maximum into one global word with atomicMax on an order-preserving
// unsigned encoding of the float. The result word is reset before each launch.
#include "r3corpus.h"

#include <cstring>

static const char* kProgram = "reduce_max_shfl";
constexpr int kBlock = 256;  // multiple of 32
constexpr int kBlocks = 2048;

// Maps floats to unsigned ints so that unsigned order equals float order.
// Takes the float's bit pattern.
__host__ __device__ inline unsigned ordered_key(unsigned bits) {
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

__global__ void reduce_max_shfl_kernel(size_t n, const float* __restrict__ in,
                                       unsigned* __restrict__ result) {
  __shared__ float warp_results[kBlock / 32];
  float m = -INFINITY;
  size_t stride = static_cast<size_t>(gridDim.x) * kBlock;
  for (size_t i = blockIdx.x * static_cast<size_t>(kBlock) + threadIdx.x; i < n; i += stride)
    m = fmaxf(m, in[i]);
  m = warp_max(m);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_results[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < kBlock / 32 ? warp_results[lane] : -INFINITY;
    m = warp_max(m);
    if (lane == 0) atomicMax(result, ordered_key(__float_as_uint(m)));
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const size_t n = size_t(1) << 26;

  std::vector<float> in(n);
  r3::fill_uniform(in, 31, -1000.0, 1000.0);
  in[n / 3 + 12345] = 4321.5f;  // a unique maximum somewhere in the middle
  r3::DeviceArray<float> din(n);
  r3::DeviceArray<unsigned> dresult(1);
  din.upload(in);

  auto reset = [&] { CUDA_CHECK(cudaMemsetAsync(dresult.get(), 0, sizeof(unsigned))); };
  auto launch = [&] { reduce_max_shfl_kernel<<<kBlocks, kBlock>>>(n, din.get(), dresult.get()); };
  reset();
  launch();
  CUDA_CHECK_LAUNCH();
  unsigned got = dresult.download()[0];

  float ref = -INFINITY;
  for (size_t i = 0; i < n; ++i) ref = std::max(ref, in[i]);
  unsigned ref_bits;
  std::memcpy(&ref_bits, &ref, sizeof ref_bits);
  unsigned ref_key = ordered_key(ref_bits);
  bool ok = r3::check_equal("max_key", &got, &ref_key, 1);

  r3::report(kProgram, "reduce_max_shfl_kernel", r3::time_median_ms(launch, reset), ok);
  return ok ? 0 : 1;
}
