// gesummv: y = alpha A x + beta B x for two row-major 6144 x 6144 float
// matrices, written the naive way: one thread per row, both products
// accumulated at once through two output pointers (tmp[i] and y[i] are
// loaded, added to and stored on every iteration: plain pointers, no
// __restrict__), then combined in y[i]:
//   gesummv_kernel  tmp[i] += A[i*n+j] x[j]; y[i] += B[i*n+j] x[j] over j;
//                   y[i] = alpha tmp[i] + beta y[i]
// Two uncoalesced row walks per thread. Both outputs are zeroed first.
// All inputs in [0, 1), alpha = 1.5, beta = 1.2: positive terms.
// Check: tmp and y in full against double-precision CPU products. Tolerance
// rel 1e-3: a float sum of 6144 positive terms in any order is within
// 6144 u = 3.7e-4 of the exact one (u = 2^-24); y adds a few roundings.
#include "r3corpus.h"

static const char* kProgram = "gesummv";

__global__ void gesummv_kernel(int n, float alpha, float beta, float* A, float* B, float* x,
                               float* tmp, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    tmp[i] = 0.0f;
    y[i] = 0.0f;
    for (int j = 0; j < n; j++) {
      tmp[i] += A[i * n + j] * x[j];
      y[i] += B[i * n + j] * x[j];
    }
    y[i] = alpha * tmp[i] + beta * y[i];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 6144;
  const size_t nn = static_cast<size_t>(n) * n;
  const float alpha = 1.5f, beta = 1.2f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(nn), B(nn), x(n);
  r3::fill_uniform(A, 631, 0.0, 1.0);
  r3::fill_uniform(B, 632, 0.0, 1.0);
  r3::fill_uniform(x, 633, 0.0, 1.0);
  r3::DeviceArray<float> dA(nn), dB(nn), dx(n), dtmp(n), dy(n);
  dA.upload(A);
  dB.upload(B);
  dx.upload(x);

  auto launch = [&] {
    gesummv_kernel<<<r3::blocks_for(n, block), block>>>(n, alpha, beta, dA.get(), dB.get(), dx.get(),
                                                         dtmp.get(), dy.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> tmp = dtmp.download();
  std::vector<float> y = dy.download();

  std::vector<double> ref_tmp(n), ref_y(n);
  for (int i = 0; i < n; i++) {
    double sa = 0.0, sb = 0.0;
    for (int j = 0; j < n; j++) {
      sa += static_cast<double>(A[static_cast<size_t>(i) * n + j]) * x[j];
      sb += static_cast<double>(B[static_cast<size_t>(i) * n + j]) * x[j];
    }
    ref_tmp[i] = sa;
    ref_y[i] = static_cast<double>(alpha) * sa + static_cast<double>(beta) * sb;
  }
  bool ok = r3::check_close("tmp", tmp, ref_tmp, 1e-3, 0.0);
  ok = r3::check_close("y", y, ref_y, 1e-3, 0.0) && ok;

  r3::report(kProgram, "gesummv_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
