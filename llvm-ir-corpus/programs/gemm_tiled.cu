// gemm_tiled: C = A * B for 2048 x 2048 row-major float matrices with 32 x 32
// tiles of A and B staged in shared memory. Blocks of 32 x 8 threads; each
// thread computes 4 outputs of its block's 32 x 32 tile of C (rows ty,
// ty+8, ty+16, ty+24). n must be a multiple of 32. 17 GFLOP per launch.
#include "r3corpus.h"

static const char* kProgram = "gemm_tiled";
constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;

__global__ void gemm_tiled_kernel(int n, const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ C) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  int tx = threadIdx.x, ty = threadIdx.y;
  int col = blockIdx.x * kTile + tx;
  int row0 = blockIdx.y * kTile;
  float acc[kTile / kRowsPerPass] = {};
  for (int t = 0; t < n; t += kTile) {
    for (int r = ty; r < kTile; r += kRowsPerPass) {
      As[r][tx] = A[static_cast<size_t>(row0 + r) * n + t + tx];
      Bs[r][tx] = B[static_cast<size_t>(t + r) * n + col];
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kTile; ++k) {
      float b = Bs[k][tx];
#pragma unroll
      for (int j = 0; j < kTile / kRowsPerPass; ++j) acc[j] += As[ty + j * kRowsPerPass][k] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < kTile / kRowsPerPass; ++j)
    C[static_cast<size_t>(row0 + ty + j * kRowsPerPass) * n + col] = acc[j];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 2048;
  static_assert(2048 % kTile == 0, "n must be a multiple of the tile");
  const size_t nn = static_cast<size_t>(n) * n;

  std::vector<float> A(nn), B(nn);
  r3::fill_uniform(A, 81, 0.0, 1.0);
  r3::fill_uniform(B, 82, 0.0, 1.0);
  r3::DeviceArray<float> dA(nn), dB(nn), dC(nn);
  dA.upload(A);
  dB.upload(B);

  dim3 block(kTile, kRowsPerPass);
  dim3 grid(n / kTile, n / kTile);
  auto launch = [&] { gemm_tiled_kernel<<<grid, block>>>(n, dA.get(), dB.get(), dC.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> C = dC.download();

  const int samples = 4096;
  std::vector<float> got(samples);
  std::vector<double> ref(samples);
  r3::Lcg rng(83);
  for (int s = 0; s < samples; ++s) {
    int r = rng.below(n), c = rng.below(n);
    double acc = 0.0;
    for (int k = 0; k < n; ++k) acc += static_cast<double>(A[static_cast<size_t>(r) * n + k]) * B[static_cast<size_t>(k) * n + c];
    ref[s] = acc;
    got[s] = C[static_cast<size_t>(r) * n + c];
  }
  bool ok = r3::check_close("C(sampled)", got, ref, 1e-4, 0.0);

  r3::report(kProgram, "gemm_tiled_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
