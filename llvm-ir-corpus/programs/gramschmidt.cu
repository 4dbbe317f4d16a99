// gramschmidt: QR factorization A = Q R of a row-major 1024 x 256 float
// matrix by modified Gram-Schmidt, written the naive way: a host loop over
// the 256 columns k launches three small kernels per column (768 launches in
// all), with plain pointers and sums accumulated through the output pointer:
//   gs_norm_kernel    R[k][k] = sqrt(sum_i A[i][k]^2): a single thread (launched
//                     as one block of 32, threads 1..31 idle) runs the whole
//                     1024-long loop, accumulating into R[k*n+k]
//   gs_q_kernel       Q[i][k] = A[i][k] / R[k][k], one thread per row
//   gs_update_kernel  one thread per column j > k (the others return: a
//                     shrinking, triangular set of threads): R[k][j] +=
//                     Q[i][k] A[i][j] over i, then A[i][j] -= Q[i][k] R[k][j]
//                     over i (two 1024-long loops down a column: coalesced)
// A is overwritten (restored before each run of the loop); R's lower triangle
// stays zero. Entries of A in [-1, 1) (well conditioned: R[k][k] in 15..19,
// |R[k][j]| <= 2.3 above the diagonal).
// Check: R and Q in full against modified Gram-Schmidt in double on the CPU
// (from the same float input). A float emulation of the whole factorization
// (R sums forward or backward, with and without FMA, 8-way interleaved,
// pairwise) is within 1.6e-5 of it in R and 1.3e-7 in Q: R to rel 1e-4 +
// abs 2e-4, Q to rel 1e-4 + abs 2e-6 leave over 10x.
// Per launch (corpus.toml, replay): the norm is a sum of 1024 positive terms
// (any order within 1024 u = 6.1e-5 relative, u = 2^-24) and an R[k][j] sum
// differs between summation orders by at most ~1.6e-5: rel 1e-4 + abs 2e-4.
// Timed: each kernel on its own (column 0), and the whole loop.
#include "r3corpus.h"

static const char* kProgram = "gramschmidt";

__global__ void gs_norm_kernel(int k, int m, int n, float* A, float* R) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t == 0) {
    R[k * n + k] = 0.0f;
    for (int i = 0; i < m; i++) R[k * n + k] += A[i * n + k] * A[i * n + k];
    R[k * n + k] = sqrtf(R[k * n + k]);
  }
}

__global__ void gs_q_kernel(int k, int m, int n, float* A, float* R, float* Q) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) Q[i * n + k] = A[i * n + k] / R[k * n + k];
}

__global__ void gs_update_kernel(int k, int m, int n, float* A, float* R, float* Q) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j > k && j < n) {
    R[k * n + j] = 0.0f;
    for (int i = 0; i < m; i++) R[k * n + j] += Q[i * n + k] * A[i * n + j];
    for (int i = 0; i < m; i++) A[i * n + j] -= Q[i * n + k] * R[k * n + j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int m = 1024, n = 256;  // rows, columns
  const size_t mn = static_cast<size_t>(m) * n, nn = static_cast<size_t>(n) * n;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(mn);
  r3::fill_uniform(A, 701, -1.0, 1.0);
  r3::DeviceArray<float> dA(mn), dA_init(mn), dQ(mn), dR(nn);
  dA_init.upload(A);
  dQ.zero();
  dR.zero();

  auto norm = [&](int k) { gs_norm_kernel<<<1, 32>>>(k, m, n, dA.get(), dR.get()); };
  auto q = [&](int k) { gs_q_kernel<<<r3::blocks_for(m, block), block>>>(k, m, n, dA.get(), dR.get(), dQ.get()); };
  auto update = [&](int k) {
    gs_update_kernel<<<r3::blocks_for(n, block), block>>>(k, m, n, dA.get(), dR.get(), dQ.get());
  };
  auto reset = [&] { CUDA_CHECK(cudaMemcpy(dA.get(), dA_init.get(), dA.bytes(), cudaMemcpyDeviceToDevice)); };
  auto run = [&] {
    for (int k = 0; k < n; k++) {
      norm(k);
      q(k);
      update(k);
    }
  };
  reset();
  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> gotQ = dQ.download();
  std::vector<float> gotR = dR.download();

  std::vector<double> a(A.begin(), A.end()), refQ(mn), refR(nn, 0.0);
  for (int k = 0; k < n; k++) {
    double s = 0.0;
    for (int i = 0; i < m; i++) s += a[static_cast<size_t>(i) * n + k] * a[static_cast<size_t>(i) * n + k];
    double rkk = std::sqrt(s);
    refR[static_cast<size_t>(k) * n + k] = rkk;
    for (int i = 0; i < m; i++) refQ[static_cast<size_t>(i) * n + k] = a[static_cast<size_t>(i) * n + k] / rkk;
    for (int j = k + 1; j < n; j++) {
      double r = 0.0;
      for (int i = 0; i < m; i++) r += refQ[static_cast<size_t>(i) * n + k] * a[static_cast<size_t>(i) * n + j];
      refR[static_cast<size_t>(k) * n + j] = r;
      for (int i = 0; i < m; i++) a[static_cast<size_t>(i) * n + j] -= refQ[static_cast<size_t>(i) * n + k] * r;
    }
  }
  bool ok = r3::check_close("R", gotR, refR, 1e-4, 2e-4);
  ok = r3::check_close("Q", gotQ, refQ, 1e-4, 2e-6) && ok;

  r3::report(kProgram, "gs_norm_kernel", r3::time_median_ms([&] { norm(0); }), ok);
  r3::report(kProgram, "gs_q_kernel", r3::time_median_ms([&] { q(0); }), ok);
  r3::report(kProgram, "gs_update_kernel", r3::time_median_ms([&] { update(0); }), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(reset, run), ok);
  return ok ? 0 : 1;
}
