// softmax: numerically stable row-wise softmax of a 16384 x 2048 float matrix,
// one 256-thread block per row: block max, then block sum of exp(x - max),
// then the normalised outputs. Block reductions use warp shuffles plus a
// 32-entry shared array.
#include "r3corpus.h"

static const char* kProgram = "softmax";
constexpr int kBlock = 256;  // multiple of 32, at most 1024

__device__ float block_reduce_max(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : -INFINITY;
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();  // scratch may be reused after this
  return v;
}

__device__ float block_reduce_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  return v;
}

__global__ void softmax_rows_kernel(int cols, const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float scratch[32];
  const float* x = in + static_cast<size_t>(blockIdx.x) * cols;
  float* y = out + static_cast<size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, x[c]);
  m = block_reduce_max(m, scratch);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(x[c] - m);
  s = block_reduce_sum(s, scratch);
  float inv = 1.0f / s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = expf(x[c] - m) * inv;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 16384, cols = 2048;
  const size_t n = static_cast<size_t>(rows) * cols;

  std::vector<float> in(n);
  r3::fill_uniform(in, 181, -8.0, 8.0);
  for (int r = 0; r < rows; ++r) in[static_cast<size_t>(r) * cols + r % cols] += 40.0f;  // large logits
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  auto launch = [&] { softmax_rows_kernel<<<rows, kBlock>>>(cols, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (int r = 0; r < rows; ++r) {
    const float* x = &in[static_cast<size_t>(r) * cols];
    double m = x[0], s = 0.0;
    for (int c = 1; c < cols; ++c) m = std::max(m, static_cast<double>(x[c]));
    for (int c = 0; c < cols; ++c) s += std::exp(x[c] - m);
    for (int c = 0; c < cols; ++c) ref[static_cast<size_t>(r) * cols + c] = std::exp(x[c] - m) / s;
  }
  bool ok = r3::check_close("out", out, ref, 1e-5, 1e-30);

  r3::report(kProgram, "softmax_rows_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
