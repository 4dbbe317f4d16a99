// doitgen: the multiresolution kernel A[r][q][:] = A[r][q][:] C4 for a
// 256 x 256 x 256 float array A and a 256 x 256 matrix C4, one slice r at a
// time: a host loop over r launches two small kernels per slice (512 launches
// in all), written the naive way (plain pointers, one thread per (q, p), the
// sum accumulated through the scratch pointer sum[...]):
//   doitgen_sum_kernel   sum[q*np+p] += A[(r*nq+q)*np+s] C4[s*np+p] over s
//                        (A's row is the same for a warp, C4 coalesced)
//   doitgen_copy_kernel  A[(r*nq+q)*np+p] = sum[q*np+p]
// Inputs in [0, 1): positive terms.
// Check: every 8th slice and the last, in full, against a double-precision CPU
// product with the original A. Tolerance rel 1e-4: a float sum of 256
// positive terms in any order is within 256 u = 1.5e-5 of the exact one
// (u = 2^-24), two orders within 3.1e-5; every element is written once, so
// the loop does not compound errors (the per-launch and program checks agree).
// Timed: each kernel on its own (slice 0), and the whole loop over the slices
// (A restored before each run).
#include "r3corpus.h"

static const char* kProgram = "doitgen";

__global__ void doitgen_sum_kernel(int r, int nq, int np, float* A, float* C4, float* sum) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < nq * np) {
    int q = t / np, p = t % np;
    sum[q * np + p] = 0.0f;
    for (int s = 0; s < np; s++) sum[q * np + p] += A[(r * nq + q) * np + s] * C4[s * np + p];
  }
}

__global__ void doitgen_copy_kernel(int r, int nq, int np, float* sum, float* A) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < nq * np) {
    int q = t / np, p = t % np;
    A[(r * nq + q) * np + p] = sum[q * np + p];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nr = 256, nq = 256, np = 256;
  const size_t total = static_cast<size_t>(nr) * nq * np, slice = static_cast<size_t>(nq) * np;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(total), C4(static_cast<size_t>(np) * np);
  r3::fill_uniform(A, 691, 0.0, 1.0);
  r3::fill_uniform(C4, 692, 0.0, 1.0);
  r3::DeviceArray<float> dA(total), dA_init(total), dC4(C4.size()), dsum(slice);
  dA_init.upload(A);
  dC4.upload(C4);

  const unsigned grid = r3::blocks_for(slice, block);
  auto sum = [&](int r) { doitgen_sum_kernel<<<grid, block>>>(r, nq, np, dA.get(), dC4.get(), dsum.get()); };
  auto copy = [&](int r) { doitgen_copy_kernel<<<grid, block>>>(r, nq, np, dsum.get(), dA.get()); };
  auto reset = [&] { CUDA_CHECK(cudaMemcpy(dA.get(), dA_init.get(), dA.bytes(), cudaMemcpyDeviceToDevice)); };
  auto run = [&] {
    for (int r = 0; r < nr; r++) {
      sum(r);
      copy(r);
    }
  };
  reset();
  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dA.download();

  std::vector<float> got_s;
  std::vector<double> ref_s;
  std::vector<double> acc(np);
  for (int r = 0; r < nr; r++) {
    if (r % 8 != 0 && r != nr - 1) continue;
    for (int q = 0; q < nq; q++) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const float* a = &A[(static_cast<size_t>(r) * nq + q) * np];
      for (int s = 0; s < np; s++)
        for (int p = 0; p < np; p++) acc[p] += static_cast<double>(a[s]) * C4[static_cast<size_t>(s) * np + p];
      for (int p = 0; p < np; p++) {
        ref_s.push_back(acc[p]);
        got_s.push_back(got[(static_cast<size_t>(r) * nq + q) * np + p]);
      }
    }
  }
  bool ok = r3::check_close("A (sampled slices)", got_s, ref_s, 1e-4, 0.0);

  r3::report(kProgram, "doitgen_sum_kernel", r3::time_median_ms([&] { sum(0); }), ok);
  r3::report(kProgram, "doitgen_copy_kernel", r3::time_median_ms([&] { copy(0); }), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(reset, run), ok);
  return ok ? 0 : 1;
}
