// Runs each kernel once on made-up inputs, checks it against the host, prints a checksum per
// kernel and PASS or FAIL. Without a GPU it says so and exits 0.
#include "kernels.cuh"

#include <cmath>
#include <cstdio>
#include <vector>

template <typename T>
static double checksum(const std::vector<T> &v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += static_cast<double>(v[i]) * static_cast<double>(i % 7 + 1);
  return s;
}

// |got - want| within a relative and an absolute term, element by element.
template <typename T>
static bool close(const std::vector<T> &got, const std::vector<T> &want, double rel, double abs) {
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    if (!(std::fabs(g - w) <= abs + rel * std::fabs(w))) {
      std::fprintf(stderr, "element %zu: got %.9g, want %.9g\n", i, g, w);
      return false;
    }
  }
  return true;
}

template <typename T>
static bool run_axpby(const char *name, int n) {
  std::vector<T> x(n), y(n), want(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<T>(input_value(i, 1));
    y[i] = want[i] = static_cast<T>(input_value(i, 2));
  }
  reference_axpby(static_cast<T>(1.5), x.data(), static_cast<T>(-0.25), want.data(), n);
  T *dx = nullptr, *dy = nullptr;
  if (cudaMalloc(&dx, n * sizeof(T)) != cudaSuccess || cudaMalloc(&dy, n * sizeof(T)) != cudaSuccess) return false;
  cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  launch_axpby(static_cast<T>(1.5), dx, static_cast<T>(-0.25), dy, n);
  bool ok = cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpy(y.data(), dy, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(dx);
  cudaFree(dy);
  ok = ok && close(y, want, 1e-6, 1e-6);
  std::printf("nvcc_app kernel=%s checksum=%.6e %s\n", name, checksum(y), ok ? "PASS" : "FAIL");
  return ok;
}

static bool run_smooth(int n) {
  std::vector<float> in(n), out(n), want(n);
  for (int i = 0; i < n; ++i) in[i] = input_value(i, 3);
  reference_smooth(in.data(), want.data(), n);
  float *din = nullptr, *dout = nullptr;
  if (cudaMalloc(&din, n * sizeof(float)) != cudaSuccess || cudaMalloc(&dout, n * sizeof(float)) != cudaSuccess) return false;
  cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  launch_smooth(din, dout, n);
  bool ok = cudaDeviceSynchronize() == cudaSuccess &&
            cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(din);
  cudaFree(dout);
  // -use_fast_math: the device's sine is approximate.
  ok = ok && close(out, want, 1e-3, 1e-3);
  std::printf("nvcc_app kernel=smooth checksum=%.4e %s\n", checksum(out), ok ? "PASS" : "FAIL");
  return ok;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("nvcc_app: no GPU\n");
    return 0;
  }
  const int n = 1 << 20;
  bool ok = run_axpby<float>("axpby<float>", n);
  ok = run_axpby<double>("axpby<double>", n) && ok;
  ok = run_smooth(n) && ok;
  std::printf("nvcc_app %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
