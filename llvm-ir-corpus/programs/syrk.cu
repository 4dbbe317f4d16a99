// syrk: symmetric rank-k update of the lower triangle, C = alpha A A^T + beta C
// for j <= i, A row-major 2048 x 512, C 2048 x 2048, written the naive way:
// one thread per element of C on a 32x8 grid (threadIdx.x along j), threads
// above the diagonal return at once (a triangular domain), and the sum is
// accumulated in place through C's pointer:
//   syrk_kernel  C[i*n+j] *= beta; C[i*n+j] += alpha A[i*m+k] A[j*m+k] over k
// A[i*m+k] is the same for a warp; A[j*m+k] walks 32 different rows
// (uncoalesced). C is restored before every timed launch (outside the
// timing). Inputs in [0, 1), alpha = 1.5, beta = 1.2: positive terms.
// Check: the lower triangle of 256 sampled rows against a double-precision CPU
// computation, and the whole upper triangle unchanged (exact). Tolerance
// rel 1e-4: a float sum of 513 positive terms (each product rounded twice) in
// any order is within ~515 u = 3.1e-5 of the exact one (u = 2^-24), two
// orders within 6.1e-5.
#include "r3corpus.h"

static const char* kProgram = "syrk";

__global__ void syrk_kernel(int n, int m, float alpha, float beta, float* A, float* C) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j <= i) {
    C[i * n + j] *= beta;
    for (int k = 0; k < m; k++) C[i * n + j] += alpha * A[i * m + k] * A[j * m + k];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 2048, m = 512;
  const size_t nm = static_cast<size_t>(n) * m, nn = static_cast<size_t>(n) * n;
  const float alpha = 1.5f, beta = 1.2f;

  std::vector<float> A(nm), C(nn);
  r3::fill_uniform(A, 671, 0.0, 1.0);
  r3::fill_uniform(C, 672, 0.0, 1.0);
  r3::DeviceArray<float> dA(nm), dC(nn), dC_init(nn);
  dA.upload(A);
  dC_init.upload(C);

  dim3 block(32, 8);
  dim3 grid(r3::blocks_for(n, block.x), r3::blocks_for(n, block.y));
  auto reset = [&] { CUDA_CHECK(cudaMemcpy(dC.get(), dC_init.get(), dC.bytes(), cudaMemcpyDeviceToDevice)); };
  auto launch = [&] { syrk_kernel<<<grid, block>>>(n, m, alpha, beta, dA.get(), dC.get()); };
  reset();
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dC.download();

  // Lower triangle of rows i = 8 s + (s % 8), s < 256 (every residue mod 8).
  std::vector<float> got_lo, upper, upper_ref;
  std::vector<double> ref_lo;
  for (int s = 0; s < 256; s++) {
    int i = 8 * s + s % 8;
    for (int j = 0; j <= i; j++) {
      double acc = 0.0;
      for (int k = 0; k < m; k++)
        acc += static_cast<double>(A[static_cast<size_t>(i) * m + k]) * A[static_cast<size_t>(j) * m + k];
      ref_lo.push_back(static_cast<double>(beta) * C[static_cast<size_t>(i) * n + j] +
                       static_cast<double>(alpha) * acc);
      got_lo.push_back(got[static_cast<size_t>(i) * n + j]);
    }
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      upper.push_back(got[static_cast<size_t>(i) * n + j]);
      upper_ref.push_back(C[static_cast<size_t>(i) * n + j]);
    }
  bool ok = r3::check_close("C lower (sampled rows)", got_lo, ref_lo, 1e-4, 0.0);
  ok = r3::check_equal("C upper", upper, upper_ref) && ok;

  r3::report(kProgram, "syrk_kernel", r3::time_median_ms(launch, reset), ok);
  return ok ? 0 : 1;
}
