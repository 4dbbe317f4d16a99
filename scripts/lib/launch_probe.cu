// A probe of what a launch costs inside a kernel's time as the corpus programs measure it
// (r3corpus.h: a pair of events around each launch, the GPU idle before it): an empty kernel
// and a kernel that streams 1 MiB, each timed as the corpus times a kernel. Built by nvcc, by
// clang and by r3-clang++ (`scripts/gpu-launch-gap`), the differences are the host code's:
// the kernels do next to nothing.
#include "r3corpus.h"

__global__ void probe_empty_kernel(int) {}

__global__ void probe_stream_kernel(int n, const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + 1.0f;
}

int main() {
  if (!r3::gpu_available("launch_probe")) return 0;
  const int n = 1 << 18;  // 1 MiB of floats in, 1 MiB out
  float *in = nullptr, *out = nullptr;
  CUDA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(in, 0, n * sizeof(float)));
  double empty = r3::time_median_ms([&] { probe_empty_kernel<<<1, 32>>>(n); });
  r3::report("launch_probe", "probe_empty_kernel", empty, true);
  double stream = r3::time_median_ms([&] { probe_stream_kernel<<<(n + 255) / 256, 256>>>(n, in, out); });
  std::vector<float> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  bool ok = host[0] == 1.0f && host[n - 1] == 1.0f;
  r3::report("launch_probe", "probe_stream_kernel", stream, ok);
  CUDA_CHECK(cudaFree(in));
  CUDA_CHECK(cudaFree(out));
  return ok ? 0 : 1;
}
