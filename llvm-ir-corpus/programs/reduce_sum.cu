// reduce_sum: sum of 2^26 floats. Pass 1 (timed): a grid-stride loop per
// thread, then a shared-memory tree reduction per block writes one partial per
// block. Pass 2: one block reduces the partials the same way.
#include "r3corpus.h"

static const char* kProgram = "reduce_sum";
constexpr int kBlock = 256;  // power of two; the tree reduction relies on it
constexpr int kPartials = 2048;

__global__ void reduce_sum_partials_kernel(size_t n, const float* __restrict__ in,
                                           float* __restrict__ partials) {
  __shared__ float buf[kBlock];
  float acc = 0.0f;
  size_t stride = static_cast<size_t>(gridDim.x) * kBlock;
  for (size_t i = blockIdx.x * static_cast<size_t>(kBlock) + threadIdx.x; i < n; i += stride)
    acc += in[i];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = buf[0];
}

__global__ void reduce_sum_final_kernel(int n, const float* __restrict__ partials,
                                        float* __restrict__ result) {
  __shared__ float buf[kBlock];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < n; i += kBlock) acc += partials[i];
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = buf[0];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const size_t n = size_t(1) << 26;

  std::vector<float> in(n);
  r3::fill_uniform(in, 21, 0.0, 1.0);
  r3::DeviceArray<float> din(n), dpart(kPartials), dresult(1);
  din.upload(in);

  auto launch = [&] {
    reduce_sum_partials_kernel<<<kPartials, kBlock>>>(n, din.get(), dpart.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  reduce_sum_final_kernel<<<1, kBlock>>>(kPartials, dpart.get(), dresult.get());
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dresult.download();

  double ref = 0.0;
  for (size_t i = 0; i < n; ++i) ref += in[i];
  bool ok = r3::check_close("sum", got.data(), &ref, 1, 1e-5, 0.0);

  r3::report(kProgram, "reduce_sum_partials_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
