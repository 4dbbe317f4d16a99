// bias_gelu: fused bias add + GELU (tanh approximation) over a 32768 x 1024
// float activation matrix, bias per column, one element per thread.
#include "r3corpus.h"

static const char* kProgram = "bias_gelu";

__device__ inline float gelu_tanh(float v) {
  const float k0 = 0.7978845608f;  // sqrt(2 / pi)
  const float k1 = 0.044715f;
  return 0.5f * v * (1.0f + tanhf(k0 * (v + k1 * v * v * v)));
}

__global__ void bias_gelu_kernel(size_t n, int cols, const float* __restrict__ x,
                                 const float* __restrict__ bias, float* __restrict__ out) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = gelu_tanh(x[i] + bias[i % cols]);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 32768, cols = 1024;
  const size_t n = static_cast<size_t>(rows) * cols;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> x(n), bias(cols);
  r3::fill_uniform(x, 241, -4.0, 4.0);
  r3::fill_uniform(bias, 242, -1.0, 1.0);
  r3::DeviceArray<float> dx(n), dbias(cols), dout(n);
  dx.upload(x);
  dbias.upload(bias);

  auto launch = [&] {
    bias_gelu_kernel<<<r3::blocks_for(n, block), block>>>(n, cols, dx.get(), dbias.get(), dout.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) {
    double v = static_cast<double>(x[i] + bias[i % cols]);  // the sum is rounded to float on the device too
    ref[i] = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  bool ok = r3::check_close("out", out, ref, 1e-5, 2e-6);

  r3::report(kProgram, "bias_gelu_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
