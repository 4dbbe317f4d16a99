// A 1 GiB working set for measuring what recording costs: four 256 MiB buffers, one kernel
// that reads three and writes one, launched LAUNCHES times. Prints the wall time of the launch
// loop and checks the result.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void mix4(const float *a, const float *b, const float *c, float *d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] = a[i] * b[i] + c[i];
}

int main(int argc, char **argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("big_working_set: no GPU");
    return 0;
  }
  const int launches = argc > 1 ? std::atoi(argv[1]) : 10;
  const size_t n = (256u << 20) / sizeof(float);
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float(i % 97);
  float *buf[4];
  for (auto &p : buf) {
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return 1;
    cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < launches; ++k) mix4<<<(n + 255) / 256, 256>>>(buf[0], buf[1], buf[2], buf[3], n);
  cudaDeviceSynchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> out(n);
  cudaMemcpy(out.data(), buf[3], n * sizeof(float), cudaMemcpyDeviceToHost);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += out[i] != h[i] * h[i] + h[i];
  std::printf("big_working_set: %s launches=%d loop_ms=%.3f\n", bad ? "FAIL" : "PASS", launches, ms);
  return bad != 0;
}
