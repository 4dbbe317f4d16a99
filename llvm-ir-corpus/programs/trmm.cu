// trmm: triangular matrix product B' = alpha (I + L^T) B, where L is the
// strictly lower triangle of a 2048 x 2048 row-major A and B is 2048 x 1024,
// written the naive way: one thread per element of B' on a 32x8 grid
// (threadIdx.x along j), the loop bound depending on the thread's row
// (k = i+1 .. m-1, so row 0 sums 2047 terms and the last row none), the sum
// accumulated through the output pointer:
//   trmm_kernel  Bout[i*n+j] = B[i*n+j]; Bout[i*n+j] += A[k*m+i] B[k*n+j]
//                over k > i; Bout[i*n+j] = alpha Bout[i*n+j]
// A[k*m+i] is the same for a warp, B[k*n+j] coalesced. Out of place, so
// repeated launches agree. Inputs in [0, 1), alpha = 1.5: positive terms.
// Check: 64 whole rows (every residue mod 32, the first and last rows among
// them) against a double-precision CPU computation. Tolerance rel 5e-4: a
// float sum of at most 2048 positive terms in any order is within
// 2048 u = 1.2e-4 of the exact one (u = 2^-24), two orders within 2.4e-4.
#include "r3corpus.h"

static const char* kProgram = "trmm";

__global__ void trmm_kernel(int m, int n, float alpha, float* A, float* B, float* Bout) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < m && j < n) {
    Bout[i * n + j] = B[i * n + j];
    for (int k = i + 1; k < m; k++) Bout[i * n + j] += A[k * m + i] * B[k * n + j];
    Bout[i * n + j] = alpha * Bout[i * n + j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int m = 2048, n = 1024;
  const size_t mm = static_cast<size_t>(m) * m, mn = static_cast<size_t>(m) * n;
  const float alpha = 1.5f;

  std::vector<float> A(mm), B(mn);
  r3::fill_uniform(A, 681, 0.0, 1.0);
  r3::fill_uniform(B, 682, 0.0, 1.0);
  r3::DeviceArray<float> dA(mm), dB(mn), dBout(mn);
  dA.upload(A);
  dB.upload(B);

  dim3 block(32, 8);
  dim3 grid(r3::blocks_for(n, block.x), r3::blocks_for(m, block.y));
  auto launch = [&] { trmm_kernel<<<grid, block>>>(m, n, alpha, dA.get(), dB.get(), dBout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dBout.download();

  std::vector<float> got_rows;
  std::vector<double> ref_rows;
  for (int s = 0; s < 64; s++) {
    int i = 32 * s + s % 32;
    std::vector<double> row(B.begin() + static_cast<size_t>(i) * n, B.begin() + static_cast<size_t>(i + 1) * n);
    for (int k = i + 1; k < m; k++) {
      double a = A[static_cast<size_t>(k) * m + i];
      for (int j = 0; j < n; j++) row[j] += a * B[static_cast<size_t>(k) * n + j];
    }
    for (int j = 0; j < n; j++) {
      ref_rows.push_back(static_cast<double>(alpha) * row[j]);
      got_rows.push_back(got[static_cast<size_t>(i) * n + j]);
    }
  }
  bool ok = r3::check_close("Bout (sampled rows)", got_rows, ref_rows, 5e-4, 0.0);

  r3::report(kProgram, "trmm_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
