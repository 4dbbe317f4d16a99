// template_pair: one template kernel, a 5-point binomial smoothing filter
// (1 4 6 4 1)/16 over 2^25 elements with clamped edges, instantiated and
// timed for float and for double.
#include "r3corpus.h"

static const char* kProgram = "template_pair";

template <typename T>
__global__ void smooth1d_kernel(int n, const T* __restrict__ in, T* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int im2 = max(i - 2, 0), im1 = max(i - 1, 0);
  int ip1 = min(i + 1, n - 1), ip2 = min(i + 2, n - 1);
  T s = in[im2] + in[ip2] + T(4) * (in[im1] + in[ip1]) + T(6) * in[i];
  out[i] = s * T(0.0625);
}

template <typename T>
static bool run(const char* kernel_name, int n, double rtol) {
  const unsigned block = R3_BLOCK_SIZE;
  std::vector<T> in(n);
  r3::fill_uniform(in, 221, 0.0, 1.0);
  r3::DeviceArray<T> din(n), dout(n);
  din.upload(in);

  auto launch = [&] {
    smooth1d_kernel<T><<<r3::blocks_for(n, block), block>>>(n, din.get(), dout.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<T> out = dout.download();

  std::vector<double> ref(n);
  for (int i = 0; i < n; ++i) {
    auto at = [&](int j) { return static_cast<double>(in[std::min(std::max(j, 0), n - 1)]); };
    ref[i] = (at(i - 2) + 4.0 * at(i - 1) + 6.0 * at(i) + 4.0 * at(i + 1) + at(i + 2)) / 16.0;
  }
  bool ok = r3::check_close(kernel_name, out, ref, rtol, 0.0);
  r3::report(kProgram, kernel_name, r3::time_median_ms(launch), ok);
  return ok;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 25;
  bool ok = run<float>("smooth1d_kernel<float>", n, 1e-6);
  ok = run<double>("smooth1d_kernel<double>", n, 1e-14) && ok;
  return ok ? 0 : 1;
}
