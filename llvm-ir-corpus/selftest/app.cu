// A whole CUDA program for the toolchain checks: scripts/setup builds it with clang against the
// assembled SDK; scripts/gpu-check runs that build on the GPU machine.
#include <cstdio>
#include <vector>

__global__ void add_scaled(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("app: no GPU (built and linked only)");
    return 0;
  }
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) { x[i] = float(i % 1000); y[i] = float(i % 7); }
  float *dx = nullptr, *dy = nullptr;
  if (cudaMalloc(&dx, n * sizeof(float)) != cudaSuccess || cudaMalloc(&dy, n * sizeof(float)) != cudaSuccess) {
    std::puts("app: cudaMalloc failed");
    return 1;
  }
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  add_scaled<<<(n + 255) / 256, 256>>>(2.0f, dx, dy, n);
  std::vector<float> out(n);
  if (cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
    std::puts("app: kernel or copy failed");
    return 1;
  }
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += out[i] != 2.0f * x[i] + y[i];
  std::printf("app: %s (%d of %d wrong)\n", wrong ? "FAIL" : "PASS", wrong, n);
  return wrong != 0;
}
