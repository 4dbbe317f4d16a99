// layernorm: layer normalisation of each row of a 16384 x 1024 float matrix
// (mean, then variance from a second pass over the row, eps = 1e-5), scaled
// by gamma and shifted by beta per column. One 256-thread block per row.
#include "r3corpus.h"

static const char* kProgram = "layernorm";
constexpr int kBlock = 256;  // multiple of 32, at most 1024

__device__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0.0f;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();
  return v;
}

__global__ void layernorm_rows_kernel(int cols, float eps, const float* __restrict__ in,
                                      const float* __restrict__ gamma, const float* __restrict__ beta,
                                      float* __restrict__ out) {
  __shared__ float scratch[32];
  const float* x = in + static_cast<size_t>(blockIdx.x) * cols;
  float* y = out + static_cast<size_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += x[c];
  float mean = block_sum(s, scratch) / cols;
  float q = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float d = x[c] - mean;
    q += d * d;
  }
  float rstd = rsqrtf(block_sum(q, scratch) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 16384, cols = 1024;
  const float eps = 1e-5f;
  const size_t n = static_cast<size_t>(rows) * cols;

  std::vector<float> in(n), gamma(cols), beta(cols);
  r3::fill_uniform(in, 191, -2.0, 2.0);
  for (int r = 0; r < rows; ++r)  // per-row offset and scale, so rows differ
    for (int c = 0; c < cols; ++c)
      in[static_cast<size_t>(r) * cols + c] = in[static_cast<size_t>(r) * cols + c] * (1 + r % 5) + (r % 17) - 8;
  r3::fill_uniform(gamma, 192, 0.5, 1.5);
  r3::fill_uniform(beta, 193, -0.5, 0.5);
  r3::DeviceArray<float> din(n), dgamma(cols), dbeta(cols), dout(n);
  din.upload(in);
  dgamma.upload(gamma);
  dbeta.upload(beta);

  auto launch = [&] {
    layernorm_rows_kernel<<<rows, kBlock>>>(cols, eps, din.get(), dgamma.get(), dbeta.get(), dout.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (int r = 0; r < rows; ++r) {
    const float* x = &in[static_cast<size_t>(r) * cols];
    double mean = 0.0, var = 0.0;
    for (int c = 0; c < cols; ++c) mean += x[c];
    mean /= cols;
    for (int c = 0; c < cols; ++c) var += (x[c] - mean) * (x[c] - mean);
    double rstd = 1.0 / std::sqrt(var / cols + eps);
    for (int c = 0; c < cols; ++c) ref[static_cast<size_t>(r) * cols + c] = (x[c] - mean) * rstd * gamma[c] + beta[c];
  }
  bool ok = r3::check_close("out", out, ref, 1e-4, 1e-4);

  r3::report(kProgram, "layernorm_rows_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
