// bicg: the two matrix-vector products of a BiCG step, q = A p and s = A^T r,
// for a row-major 4096 x 8192 float matrix with entries in [-1, 1) (p, r in
// [0, 1)), written the naive way (plain pointers, one thread per output
// element, the sum accumulated through the output pointer):
//   bicg_q_kernel  q[i] = q[i] + A[i*ny+j] * p[j] over j, one thread per row
//                  (8192-long row walks, uncoalesced)
//   bicg_s_kernel  s[j] = s[j] + r[i] * A[i*ny+j] over i, one thread per
//                  column (coalesced)
// Each kernel zeroes its output element first.
// Check: q and s in full against double-precision CPU products. The signed
// terms cancel (|q| ~ 30, |s| ~ 21, sums of |terms| ~ 2048 and ~1024), so the
// check has an absolute term: a float emulation of the sums in several orders
// (forward and backward with FMA, forward without, 8-way interleaved,
// pairwise) differs from the double sums by at most 5.0e-4 (q, |q| <= 118)
// and 1.6e-4 (s); abs 5e-3 leaves 10x and is still only 2.5e-6 of the sums
// of |terms|. rel 1e-4 on top.
#include "r3corpus.h"

static const char* kProgram = "bicg";

__global__ void bicg_q_kernel(int nx, int ny, float* A, float* p, float* q) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nx) {
    q[i] = 0.0f;
    for (int j = 0; j < ny; j++) q[i] = q[i] + A[i * ny + j] * p[j];
  }
}

__global__ void bicg_s_kernel(int nx, int ny, float* A, float* r, float* s) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < ny) {
    s[j] = 0.0f;
    for (int i = 0; i < nx; i++) s[j] = s[j] + r[i] * A[i * ny + j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nx = 4096, ny = 8192;  // rows, columns
  const size_t nn = static_cast<size_t>(nx) * ny;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(nn), p(ny), r(nx);
  r3::fill_uniform(A, 611, -1.0, 1.0);
  r3::fill_uniform(p, 612, 0.0, 1.0);
  r3::fill_uniform(r, 613, 0.0, 1.0);
  r3::DeviceArray<float> dA(nn), dp(ny), dr(nx), dq(nx), ds(ny);
  dA.upload(A);
  dp.upload(p);
  dr.upload(r);

  auto qk = [&] { bicg_q_kernel<<<r3::blocks_for(nx, block), block>>>(nx, ny, dA.get(), dp.get(), dq.get()); };
  auto sk = [&] { bicg_s_kernel<<<r3::blocks_for(ny, block), block>>>(nx, ny, dA.get(), dr.get(), ds.get()); };
  qk();
  sk();
  CUDA_CHECK_LAUNCH();
  std::vector<float> q = dq.download();
  std::vector<float> s = ds.download();

  std::vector<double> ref_q(nx, 0.0), ref_s(ny, 0.0);
  for (int i = 0; i < nx; i++) {
    double acc = 0.0;
    for (int j = 0; j < ny; j++) {
      double a = A[static_cast<size_t>(i) * ny + j];
      acc += a * p[j];
      ref_s[j] += static_cast<double>(r[i]) * a;
    }
    ref_q[i] = acc;
  }
  bool ok = r3::check_close("q", q, ref_q, 1e-4, 5e-3);
  ok = r3::check_close("s", s, ref_s, 1e-4, 5e-3) && ok;

  r3::report(kProgram, "bicg_q_kernel", r3::time_median_ms(qk), ok);
  r3::report(kProgram, "bicg_s_kernel", r3::time_median_ms(sk), ok);
  return ok ? 0 : 1;
}
