// gemver: a rank-2 update followed by two matrix-vector products on a
// row-major 4096 x 4096 float matrix, written the naive way (plain pointers,
// one thread per output element, sums added in place through the output
// pointer on every iteration):
//   gemver_rank2_kernel  A = A + u1 v1^T + u2 v2^T, in place (32x8 blocks)
//   gemver_x_kernel      x = x + beta A^T y + z: x[i] += beta A[j*n+i] y[j]
//                        over j, one thread per column of A (coalesced), then
//                        x[i] += z[i]
//   gemver_w_kernel      w = w + alpha A x: w[i] += alpha A[i*n+j] x[j] over
//                        j, one thread per row (uncoalesced)
// All three update in place, so A, x and w are restored before every timed
// launch (outside the timing). Inputs in [0, 1), alpha = 1.5, beta = 1.2:
// every sum has positive terms.
// Check: A, x and w in full against a double-precision CPU run of the three
// steps (from the same float inputs). Tolerance rel 1e-3: a float sum of
// ~4100 positive terms in any order is within 4100 u = 2.4e-4 of the exact
// one (u = 2^-24); w also carries x's error, so at most ~5e-4 in all.
#include "r3corpus.h"

static const char* kProgram = "gemver";

__global__ void gemver_rank2_kernel(int n, float* A, float* u1, float* v1, float* u2, float* v2) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < n) A[i * n + j] = A[i * n + j] + u1[i] * v1[j] + u2[i] * v2[j];
}

__global__ void gemver_x_kernel(int n, float beta, float* A, float* y, float* z, float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int j = 0; j < n; j++) x[i] = x[i] + beta * A[j * n + i] * y[j];
    x[i] = x[i] + z[i];
  }
}

__global__ void gemver_w_kernel(int n, float alpha, float* A, float* x, float* w) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int j = 0; j < n; j++) w[i] = w[i] + alpha * A[i * n + j] * x[j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 4096;
  const size_t nn = static_cast<size_t>(n) * n;
  const float alpha = 1.5f, beta = 1.2f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(nn), u1(n), v1(n), u2(n), v2(n), y(n), z(n), x(n), w(n);
  r3::fill_uniform(A, 641, 0.0, 1.0);
  r3::fill_uniform(u1, 642, 0.0, 1.0);
  r3::fill_uniform(v1, 643, 0.0, 1.0);
  r3::fill_uniform(u2, 644, 0.0, 1.0);
  r3::fill_uniform(v2, 645, 0.0, 1.0);
  r3::fill_uniform(y, 646, 0.0, 1.0);
  r3::fill_uniform(z, 647, 0.0, 1.0);
  r3::fill_uniform(x, 648, 0.0, 1.0);
  r3::fill_uniform(w, 649, 0.0, 1.0);
  r3::DeviceArray<float> dA(nn), dA_init(nn), du1(n), dv1(n), du2(n), dv2(n), dy(n), dz(n), dx(n),
      dx_init(n), dw(n), dw_init(n);
  dA_init.upload(A);
  du1.upload(u1);
  dv1.upload(v1);
  du2.upload(u2);
  dv2.upload(v2);
  dy.upload(y);
  dz.upload(z);
  dx_init.upload(x);
  dw_init.upload(w);

  dim3 rblock(32, 8);
  dim3 rgrid(r3::blocks_for(n, rblock.x), r3::blocks_for(n, rblock.y));
  auto rank2 = [&] {
    gemver_rank2_kernel<<<rgrid, rblock>>>(n, dA.get(), du1.get(), dv1.get(), du2.get(), dv2.get());
  };
  auto xk = [&] {
    gemver_x_kernel<<<r3::blocks_for(n, block), block>>>(n, beta, dA.get(), dy.get(), dz.get(), dx.get());
  };
  auto wk = [&] { gemver_w_kernel<<<r3::blocks_for(n, block), block>>>(n, alpha, dA.get(), dx.get(), dw.get()); };
  auto resetA = [&] { CUDA_CHECK(cudaMemcpy(dA.get(), dA_init.get(), dA.bytes(), cudaMemcpyDeviceToDevice)); };
  auto resetx = [&] { CUDA_CHECK(cudaMemcpy(dx.get(), dx_init.get(), dx.bytes(), cudaMemcpyDeviceToDevice)); };
  auto resetw = [&] { CUDA_CHECK(cudaMemcpy(dw.get(), dw_init.get(), dw.bytes(), cudaMemcpyDeviceToDevice)); };
  resetA();
  resetx();
  resetw();
  rank2();
  xk();
  wk();
  CUDA_CHECK_LAUNCH();
  std::vector<float> gotA = dA.download();
  std::vector<float> gotx = dx.download();
  std::vector<float> gotw = dw.download();

  std::vector<double> refA(nn), refx(x.begin(), x.end()), refw(w.begin(), w.end());
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      size_t k = static_cast<size_t>(i) * n + j;
      refA[k] = static_cast<double>(A[k]) + static_cast<double>(u1[i]) * v1[j] +
                static_cast<double>(u2[i]) * v2[j];
    }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++)
      refx[i] += static_cast<double>(beta) * refA[static_cast<size_t>(j) * n + i] * y[j];
  for (int i = 0; i < n; i++) refx[i] += z[i];
  for (int i = 0; i < n; i++) {
    double acc = 0.0;
    for (int j = 0; j < n; j++) acc += refA[static_cast<size_t>(i) * n + j] * refx[j];
    refw[i] += static_cast<double>(alpha) * acc;
  }
  bool ok = r3::check_close("A", gotA, refA, 1e-3, 0.0);
  ok = r3::check_close("x", gotx, refx, 1e-3, 0.0) && ok;
  ok = r3::check_close("w", gotw, refw, 1e-3, 0.0) && ok;

  r3::report(kProgram, "gemver_rank2_kernel", r3::time_median_ms(rank2, resetA), ok);
  r3::report(kProgram, "gemver_x_kernel", r3::time_median_ms(xk, resetx), ok);
  r3::report(kProgram, "gemver_w_kernel", r3::time_median_ms(wk, resetw), ok);
  return ok ? 0 : 1;
}
