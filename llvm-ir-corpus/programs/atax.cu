// atax: y = A^T (A x) for a row-major 8192 x 4096 float matrix, written the
// naive way (plain pointers, no __restrict__, one thread per output element,
// each sum accumulated straight into the output through its pointer, so the
// compiler must store it on every iteration):
//   atax_ax_kernel   tmp[i] += A[i*n+j] * x[j] over j, one thread per row i
//                    (each thread walks its own row: uncoalesced)
//   atax_aty_kernel  y[j] += A[i*n+j] * tmp[i] over i, one thread per column j
//                    (a warp reads 32 consecutive floats of a row: coalesced)
// Both kernels zero their output element first, so repeated launches agree.
// Inputs in [0, 1): every sum has positive terms.
// Check: both tmp and y in full against a double-precision CPU product (from
// the same float inputs). Tolerance rel 1e-3: a float sum of n positive terms
// in any order is within n*u (u = 2^-24) of the exact sum, 4.9e-4 for the
// 8192-term sums; y also carries tmp's error (at most 2.4e-4).
#include "r3corpus.h"

static const char* kProgram = "atax";

__global__ void atax_ax_kernel(int m, int n, const float* A, const float* x, float* tmp) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) {
    tmp[i] = 0.0f;
    for (int j = 0; j < n; j++) tmp[i] += A[i * n + j] * x[j];
  }
}

__global__ void atax_aty_kernel(int m, int n, const float* A, const float* tmp, float* y) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) {
    y[j] = 0.0f;
    for (int i = 0; i < m; i++) y[j] += A[i * n + j] * tmp[i];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int m = 8192, n = 4096;  // rows, columns
  const size_t mn = static_cast<size_t>(m) * n;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(mn), x(n);
  r3::fill_uniform(A, 601, 0.0, 1.0);
  r3::fill_uniform(x, 602, 0.0, 1.0);
  r3::DeviceArray<float> dA(mn), dx(n), dtmp(m), dy(n);
  dA.upload(A);
  dx.upload(x);

  auto ax = [&] { atax_ax_kernel<<<r3::blocks_for(m, block), block>>>(m, n, dA.get(), dx.get(), dtmp.get()); };
  auto aty = [&] { atax_aty_kernel<<<r3::blocks_for(n, block), block>>>(m, n, dA.get(), dtmp.get(), dy.get()); };
  ax();
  aty();
  CUDA_CHECK_LAUNCH();
  std::vector<float> tmp = dtmp.download();
  std::vector<float> y = dy.download();

  std::vector<double> ref_tmp(m, 0.0), ref_y(n, 0.0);
  for (int i = 0; i < m; i++) {
    double acc = 0.0;
    for (int j = 0; j < n; j++) acc += static_cast<double>(A[static_cast<size_t>(i) * n + j]) * x[j];
    ref_tmp[i] = acc;
  }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) ref_y[j] += static_cast<double>(A[static_cast<size_t>(i) * n + j]) * ref_tmp[i];
  bool ok = r3::check_close("tmp", tmp, ref_tmp, 1e-3, 0.0);
  ok = r3::check_close("y", y, ref_y, 1e-3, 0.0) && ok;

  r3::report(kProgram, "atax_ax_kernel", r3::time_median_ms(ax), ok);
  r3::report(kProgram, "atax_aty_kernel", r3::time_median_ms(aty), ok);
  return ok ? 0 : 1;
}
