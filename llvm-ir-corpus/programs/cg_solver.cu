// cg_solver: conjugate gradients for one backward-Euler step of the 2D heat
// equation, (I - s * Laplacian) x = b with s = 100, on a 4096 x 2048 grid
// (zero values outside the grid). The 5-point matrix is applied matrix-free.
// 200 iterations with no host synchronisation inside the solve: r.r, alpha and
// beta stay in device memory. One iteration launches
//   cg_matvec_kernel        Ap = A p (2D stencil, 32x8 blocks)
//   cg_dot_partials_kernel  p.Ap, one partial per block (warp shuffles)
//   cg_dot_finish_kernel    one block sums the partials: alpha = r.r / p.Ap
//   cg_update_xr_kernel     x += alpha p, r -= alpha Ap
//   cg_dot_partials_kernel  r.r
//   cg_dot_finish_kernel    beta = r.r(new) / r.r(old)
//   cg_update_p_kernel      p = r + beta p
// Check: b is made from a known solution x* (b = A x* in double, rounded to
// float). The condition number of A is about 1 + 8s = 801: float CG reaches
// its accuracy floor (max |x - x*| ~ 3e-6) after about 160 iterations, so
// after 200 x must match x* to 5e-5 (|x*| <= 1.25).
// Timed: each kernel on its own (in-loop shapes), and the whole solve.
#include "r3corpus.h"

static const char* kProgram = "cg_solver";
constexpr int kDotThreads = 256;  // multiple of 32
constexpr int kDotBlocks = 1024;  // partials per dot product; power of two, one finish thread each
enum { kRR = 0, kPAP = 1, kAlpha = 2, kBeta = 3, kScalars = 4 };

// Ap = diag * p - off * (sum of the 4 neighbours); neighbours outside the grid are zero.
__global__ void cg_matvec_kernel(int nx, int ny, float diag, float off, const float* __restrict__ p,
                                 float* __restrict__ Ap) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= nx || j >= ny) return;
  size_t k = static_cast<size_t>(j) * nx + i;
  float nb = 0.0f;
  if (i > 0) nb += p[k - 1];
  if (i < nx - 1) nb += p[k + 1];
  if (j > 0) nb += p[k - nx];
  if (j < ny - 1) nb += p[k + nx];
  Ap[k] = diag * p[k] - off * nb;
}

// partials[block] = this block's share of sum(a[i] * b[i]) (grid-stride loop).
__global__ void cg_dot_partials_kernel(int n, const float* __restrict__ a,
                                       const float* __restrict__ b, float* __restrict__ partials) {
  __shared__ float warp_sums[kDotThreads / 32];
  const unsigned full = 0xffffffffu;
  float acc = 0.0f;
  for (int i = blockIdx.x * kDotThreads + threadIdx.x; i < n; i += gridDim.x * kDotThreads)
    acc += a[i] * b[i];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(full, acc, off);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kDotThreads / 32 ? warp_sums[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(full, acc, off);
    if (lane == 0) partials[blockIdx.x] = acc;
  }
}

// One block of kDotBlocks threads sums the partials (shared-memory tree), then
// mode 0: r.r = sum; mode 1: p.Ap = sum, alpha = r.r / p.Ap;
// mode 2: beta = sum / r.r, r.r = sum, and the new r.r goes to *rr_log.
__global__ void cg_dot_finish_kernel(const float* __restrict__ partials, float* __restrict__ scal,
                                     int mode, float* __restrict__ rr_log) {
  __shared__ float buf[kDotBlocks];
  buf[threadIdx.x] = partials[threadIdx.x];
  __syncthreads();
  for (int s = kDotBlocks / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float sum = buf[0];
    if (mode == 0) {
      scal[kRR] = sum;
    } else if (mode == 1) {
      scal[kPAP] = sum;
      scal[kAlpha] = scal[kRR] / sum;
    } else {
      scal[kBeta] = sum / scal[kRR];
      scal[kRR] = sum;
      *rr_log = sum;
    }
  }
}

__global__ void cg_update_xr_kernel(int n, const float* __restrict__ scal,
                                    const float* __restrict__ p, const float* __restrict__ Ap,
                                    float* __restrict__ x, float* __restrict__ r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float alpha = scal[kAlpha];
  x[i] += alpha * p[i];
  r[i] -= alpha * Ap[i];
}

__global__ void cg_update_p_kernel(int n, const float* __restrict__ scal, const float* __restrict__ r,
                                   float* __restrict__ p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  p[i] = r[i] + scal[kBeta] * p[i];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nx = 4096, ny = 2048, iters = 200;
  const int n = nx * ny;
  const double s = 100.0;
  const float diag = static_cast<float>(1.0 + 4.0 * s), off = static_cast<float>(s);
  const unsigned block = R3_BLOCK_SIZE;
  const double pi = 3.14159265358979323846;

  // Known solution: a smooth mode plus noise; b = A x* in double.
  std::vector<float> noise(n);
  r3::fill_uniform(noise, 301, -0.25, 0.25);
  std::vector<double> xstar(n);
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      size_t k = static_cast<size_t>(j) * nx + i;
      xstar[k] = std::sin(pi * (i + 1) / (nx + 1)) * std::sin(2.0 * pi * (j + 1) / (ny + 1)) + noise[k];
    }
  std::vector<float> b(n);
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      size_t k = static_cast<size_t>(j) * nx + i;
      double nb = (i > 0 ? xstar[k - 1] : 0.0) + (i < nx - 1 ? xstar[k + 1] : 0.0) +
                  (j > 0 ? xstar[k - nx] : 0.0) + (j < ny - 1 ? xstar[k + nx] : 0.0);
      b[k] = static_cast<float>((1.0 + 4.0 * s) * xstar[k] - s * nb);
    }

  r3::DeviceArray<float> db(n), dx(n), dr(n), dp(n), dAp(n), dpart(kDotBlocks), dscal(kScalars),
      dlog(iters);
  db.upload(b);
  const size_t bytes = db.bytes();

  dim3 sblock(32, 8);
  dim3 sgrid(r3::blocks_for(nx, sblock.x), r3::blocks_for(ny, sblock.y));
  const unsigned vgrid = r3::blocks_for(n, block);
  auto matvec = [&] { cg_matvec_kernel<<<sgrid, sblock>>>(nx, ny, diag, off, dp.get(), dAp.get()); };
  auto dot = [&](const float* a, const float* c) {
    cg_dot_partials_kernel<<<kDotBlocks, kDotThreads>>>(n, a, c, dpart.get());
  };
  auto finish = [&](int mode, float* log) {
    cg_dot_finish_kernel<<<1, kDotBlocks>>>(dpart.get(), dscal.get(), mode, log);
  };
  auto update_xr = [&] {
    cg_update_xr_kernel<<<vgrid, block>>>(n, dscal.get(), dp.get(), dAp.get(), dx.get(), dr.get());
  };
  auto update_p = [&] { cg_update_p_kernel<<<vgrid, block>>>(n, dscal.get(), dr.get(), dp.get()); };

  // x = 0, r = p = b.
  auto reset = [&] {
    dx.zero();
    CUDA_CHECK(cudaMemcpy(dr.get(), db.get(), bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemcpy(dp.get(), db.get(), bytes, cudaMemcpyDeviceToDevice));
    dscal.zero();
    dlog.zero();
  };
  auto solve = [&] {
    dot(dr.get(), dr.get());
    finish(0, nullptr);
    for (int it = 0; it < iters; ++it) {
      matvec();
      dot(dp.get(), dAp.get());
      finish(1, nullptr);
      update_xr();
      dot(dr.get(), dr.get());
      finish(2, dlog.get() + it);
      update_p();
    }
  };

  reset();
  solve();
  CUDA_CHECK_LAUNCH();
  std::vector<float> x = dx.download();
  std::vector<float> rr = dlog.download();

  double bb = 0.0, res = 0.0;
  for (int j = 0; j < ny; ++j)
    for (int i = 0; i < nx; ++i) {
      size_t k = static_cast<size_t>(j) * nx + i;
      double nb = (i > 0 ? x[k - 1] : 0.0) + (i < nx - 1 ? x[k + 1] : 0.0) +
                  (j > 0 ? x[k - nx] : 0.0) + (j < ny - 1 ? x[k + nx] : 0.0);
      double e = b[k] - ((1.0 + 4.0 * s) * x[k] - s * nb);
      bb += static_cast<double>(b[k]) * b[k];
      res += e * e;
    }
  std::fprintf(stderr, "  |b - A x| / |b| = %.3g (true), %.3g (CG recurrence)\n",
               std::sqrt(res / bb), std::sqrt(rr[iters - 1] / bb));
  // A float emulation of this solve (same reduction order, with and without
  // FMA; b rounded to float as here) ends at max |x - x*| = 2.5e-6..2.7e-6,
  // and stays there from iteration ~160 on: 5e-5 leaves a margin of ~20x.
  bool ok = r3::check_close("x", x, xstar, 0.0, 5e-5);

  r3::report(kProgram, "cg_matvec_kernel", r3::time_median_ms(matvec), ok);
  r3::report(kProgram, "cg_dot_partials_kernel",
             r3::time_median_ms([&] { dot(dp.get(), dAp.get()); }), ok);
  r3::report(kProgram, "cg_dot_finish_kernel", r3::time_median_ms([&] { finish(1, nullptr); }), ok);
  r3::report(kProgram, "cg_update_xr_kernel", r3::time_median_ms(update_xr), ok);
  r3::report(kProgram, "cg_update_p_kernel", r3::time_median_ms(update_p), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(reset, solve), ok);
  return ok ? 0 : 1;
}
