#include <vector>
#include "r3demo/api.h"
#include "r3demo/kernels.cuh"

template <typename T>
static bool run_axpy(T a, const char* what) {
  const int n = 1000;
  std::vector<T> x(n), y(n), want(n);
  for (int i = 0; i < n; ++i) { x[i] = T(i % 17); y[i] = T(3); want[i] = a * x[i] + y[i]; }
  T *dx, *dy;
  cudaMalloc(&dx, n * sizeof(T));
  cudaMalloc(&dy, n * sizeof(T));
  cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  r3demo::axpy<T><<<(n + 255) / 256, 256>>>(a, dx, dy, n);
  cudaMemcpy(y.data(), dy, n * sizeof(T), cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  return check_equal(y.data(), want.data(), n, what);
}

bool run_templates() { return run_axpy<float>(2.5f, "axpy<float>") && run_axpy<int>(-3, "axpy<int>"); }
