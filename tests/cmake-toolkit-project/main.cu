// Scales a vector on the GPU where there is one; without one, says so and succeeds.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no GPU (built and linked only)\n");
    return 0;
  }
  const int n = 1024;
  float host[n];
  for (int i = 0; i < n; ++i) host[i] = float(i);
  float *x = nullptr;
  cudaMalloc(&x, n * sizeof(float));
  cudaMemcpy(x, host, n * sizeof(float), cudaMemcpyHostToDevice);
  scale<<<(n + 255) / 256, 256>>>(x, 2.0f, n);
  cudaMemcpy(host, x, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(x);
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && host[i] == 2.0f * float(i);
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
