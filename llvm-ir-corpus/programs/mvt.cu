// mvt: x1 = x1 + A y1 and x2 = x2 + A^T y2 for a row-major 8192 x 8192 float
// matrix, written the naive way: plain pointers, one thread per element of x,
// the product added in place onto the existing x[i] through its pointer on
// every iteration (no local accumulator):
//   mvt_x1_kernel  x1[i] += A[i*n+j] * y1[j], one thread per row (uncoalesced)
//   mvt_x2_kernel  x2[i] += A[j*n+i] * y2[j], one thread per column (coalesced)
// The kernels update in place, so x1 and x2 are restored before every timed
// launch (outside the timing). All inputs in [0, 1): positive terms.
// Check: x1 and x2 in full against double-precision CPU products. Tolerance
// rel 1e-3: a float sum of 8193 positive terms in any order is within
// 8193 u = 4.9e-4 of the exact one (u = 2^-24).
#include "r3corpus.h"

static const char* kProgram = "mvt";

__global__ void mvt_x1_kernel(int n, float* A, float* y1, float* x1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int j = 0; j < n; j++) x1[i] += A[i * n + j] * y1[j];
  }
}

__global__ void mvt_x2_kernel(int n, float* A, float* y2, float* x2) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int j = 0; j < n; j++) x2[i] += A[j * n + i] * y2[j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 8192;
  const size_t nn = static_cast<size_t>(n) * n;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(nn), y1(n), y2(n), x1(n), x2(n);
  r3::fill_uniform(A, 621, 0.0, 1.0);
  r3::fill_uniform(y1, 622, 0.0, 1.0);
  r3::fill_uniform(y2, 623, 0.0, 1.0);
  r3::fill_uniform(x1, 624, 0.0, 1.0);
  r3::fill_uniform(x2, 625, 0.0, 1.0);
  r3::DeviceArray<float> dA(nn), dy1(n), dy2(n), dx1(n), dx2(n), dx1_init(n), dx2_init(n);
  dA.upload(A);
  dy1.upload(y1);
  dy2.upload(y2);
  dx1_init.upload(x1);
  dx2_init.upload(x2);

  auto reset1 = [&] { CUDA_CHECK(cudaMemcpy(dx1.get(), dx1_init.get(), dx1.bytes(), cudaMemcpyDeviceToDevice)); };
  auto reset2 = [&] { CUDA_CHECK(cudaMemcpy(dx2.get(), dx2_init.get(), dx2.bytes(), cudaMemcpyDeviceToDevice)); };
  auto k1 = [&] { mvt_x1_kernel<<<r3::blocks_for(n, block), block>>>(n, dA.get(), dy1.get(), dx1.get()); };
  auto k2 = [&] { mvt_x2_kernel<<<r3::blocks_for(n, block), block>>>(n, dA.get(), dy2.get(), dx2.get()); };
  reset1();
  reset2();
  k1();
  k2();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got1 = dx1.download();
  std::vector<float> got2 = dx2.download();

  std::vector<double> ref1(x1.begin(), x1.end()), ref2(x2.begin(), x2.end());
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      double a = A[static_cast<size_t>(i) * n + j];
      ref1[i] += a * y1[j];
      ref2[j] += a * y2[i];  // A[i*n+j] is A^T's (j, i)
    }
  bool ok = r3::check_close("x1", got1, ref1, 1e-3, 0.0);
  ok = r3::check_close("x2", got2, ref2, 1e-3, 0.0) && ok;

  r3::report(kProgram, "mvt_x1_kernel", r3::time_median_ms(k1, reset1), ok);
  r3::report(kProgram, "mvt_x2_kernel", r3::time_median_ms(k2, reset2), ok);
  return ok ? 0 : 1;
}
