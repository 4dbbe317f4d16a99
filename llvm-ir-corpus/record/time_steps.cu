// Time-step loops as stencil and solver codes write them (issue 31): several kernels per step
// over shared buffers, launched back to back with no synchronization between them, and the
// program ending right after its loop and its timer, with nothing freed and no reset.
//   adi    six kernels per step: coefficients, forward elimination and back substitution along
//          x, then along y (adi_x_coef and adi_y_coef take the same argument bytes)
//   fdtd   three kernels per step, each given the step number t (the source term fict[t]):
//          all three take the same argument bytes
//   jacobi a relaxation sweep and a residual (atomicMax) per step, the two buffers swapped
//          between steps
// Built twice by scripts/gpu-record: as it is (the legacy default stream) and with
// -fgpu-default-stream=per-thread (nvcc: --default-stream per-thread). The program checks its
// results against the same steps in double on the CPU, so recording must not change them.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

static const int N = 768;  // 768 x 768 floats: 2.25 MiB a field
static const int STEPS = 12;
static const float MU = 0.3f;

// ---- ADI: tridiagonal solves per line, one thread per line ------------------------------------

__global__ void adi_x_coef(float* cp, int n, float mu) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float b = 1.0f + 2.0f * mu;
  cp[j * n] = -mu / b;
  for (int i = 1; i < n; i++) cp[j * n + i] = -mu / (b + mu * cp[j * n + i - 1]);
}

__global__ void adi_x_forward(const float* u, const float* cp, float* dp, int n, float mu) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float b = 1.0f + 2.0f * mu;
  dp[j * n] = u[j * n] / b;
  for (int i = 1; i < n; i++) dp[j * n + i] = (u[j * n + i] + mu * dp[j * n + i - 1]) / (b + mu * cp[j * n + i - 1]);
}

__global__ void adi_x_back(float* v, const float* cp, const float* dp, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  v[j * n + n - 1] = dp[j * n + n - 1];
  for (int i = n - 2; i >= 0; i--) v[j * n + i] = dp[j * n + i] - cp[j * n + i] * v[j * n + i + 1];
}

__global__ void adi_y_coef(float* cp, int n, float mu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float b = 1.0f + 2.0f * mu;
  cp[i] = -mu / b;
  for (int j = 1; j < n; j++) cp[j * n + i] = -mu / (b + mu * cp[(j - 1) * n + i]);
}

__global__ void adi_y_forward(const float* v, const float* cp, float* dp, int n, float mu) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float b = 1.0f + 2.0f * mu;
  dp[i] = v[i] / b;
  for (int j = 1; j < n; j++) dp[j * n + i] = (v[j * n + i] + mu * dp[(j - 1) * n + i]) / (b + mu * cp[(j - 1) * n + i]);
}

__global__ void adi_y_back(float* u, const float* cp, const float* dp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  u[(n - 1) * n + i] = dp[(n - 1) * n + i];
  for (int j = n - 2; j >= 0; j--) u[j * n + i] = dp[j * n + i] - cp[j * n + i] * u[(j + 1) * n + i];
}

// ---- FDTD (2D, TE): three field updates per step, each given the step ------------------------

__global__ void fdtd_ey(float* ex, float* ey, float* hz, const float* fict, int n, int t) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  if (i == 0) ey[j] = fict[t];
  else ey[i * n + j] -= 0.5f * (hz[i * n + j] - hz[(i - 1) * n + j]);
}

__global__ void fdtd_ex(float* ex, float* ey, float* hz, const float* fict, int n, int t) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n || j == 0) return;
  ex[i * n + j] -= 0.5f * (hz[i * n + j] - hz[i * n + j - 1]);
}

__global__ void fdtd_hz(float* ex, float* ey, float* hz, const float* fict, int n, int t) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n - 1 || i >= n - 1) return;
  hz[i * n + j] -= 0.7f * (ex[i * n + j + 1] - ex[i * n + j] + ey[(i + 1) * n + j] - ey[i * n + j]);
}

// ---- Jacobi: a sweep and its residual, buffers swapped between steps -------------------------

__global__ void jacobi_sweep(const float* in, float* out, int n) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  if (i == 0 || j == 0 || i == n - 1 || j == n - 1) {
    out[i * n + j] = in[i * n + j];
    return;
  }
  out[i * n + j] = 0.25f * (in[(i - 1) * n + j] + in[(i + 1) * n + j] + in[i * n + j - 1] + in[i * n + j + 1]);
}

// The largest |out - in| of the step, as the bits of a non-negative float (ordered like ints).
__global__ void jacobi_residual(const float* in, const float* out, int n, unsigned int* res) {
  int i = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  atomicMax(res, __float_as_uint(fabsf(out[i * n + j] - in[i * n + j])));
}

// ---- the CPU reference, in double --------------------------------------------------------------

static void ref_adi(std::vector<double>& u, int n, double mu) {
  std::vector<double> cp(n), dp(n), v(u.size());
  double b = 1 + 2 * mu;
  for (int dir = 0; dir < 2; dir++) {
    std::vector<double>& src = dir ? v : u;
    std::vector<double>& dst = dir ? u : v;
    for (int line = 0; line < n; line++) {
      auto at = [&](int k) { return dir ? static_cast<size_t>(k) * n + line : static_cast<size_t>(line) * n + k; };
      cp[0] = -mu / b;
      dp[0] = src[at(0)] / b;
      for (int k = 1; k < n; k++) {
        cp[k] = -mu / (b + mu * cp[k - 1]);
        dp[k] = (src[at(k)] + mu * dp[k - 1]) / (b + mu * cp[k - 1]);
      }
      dst[at(n - 1)] = dp[n - 1];
      for (int k = n - 2; k >= 0; k--) dst[at(k)] = dp[k] - cp[k] * dst[at(k + 1)];
    }
  }
}

static void ref_fdtd(std::vector<double>& ex, std::vector<double>& ey, std::vector<double>& hz,
                     const std::vector<double>& fict, int n, int t) {
  for (int j = 0; j < n; j++) ey[j] = fict[t];
  for (int i = 1; i < n; i++)
    for (int j = 0; j < n; j++) ey[i * n + j] -= 0.5 * (hz[i * n + j] - hz[(i - 1) * n + j]);
  for (int i = 0; i < n; i++)
    for (int j = 1; j < n; j++) ex[i * n + j] -= 0.5 * (hz[i * n + j] - hz[i * n + j - 1]);
  for (int i = 0; i < n - 1; i++)
    for (int j = 0; j < n - 1; j++)
      hz[i * n + j] -= 0.7 * (ex[i * n + j + 1] - ex[i * n + j] + ey[(i + 1) * n + j] - ey[i * n + j]);
}

static double ref_jacobi(std::vector<double>& a, std::vector<double>& b, int n) {
  double res = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      size_t k = static_cast<size_t>(i) * n + j;
      bool edge = i == 0 || j == 0 || i == n - 1 || j == n - 1;
      b[k] = edge ? a[k] : 0.25 * (a[k - n] + a[k + n] + a[k - 1] + a[k + 1]);
      res = std::fmax(res, std::fabs(b[k] - a[k]));
    }
  a.swap(b);
  return res;
}

// |got - want| <= tol * (1 + |want|) everywhere: float against double over a dozen steps.
static bool close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  double worst = 0;
  for (size_t k = 0; k < got.size(); k++) worst = std::fmax(worst, std::fabs(got[k] - want[k]) / (1 + std::fabs(want[k])));
  std::printf("program=time_steps part=%s max_rel_err=%.3g\n", what, worst);
  return worst <= tol;
}

static std::vector<float> start_field(int n, int seed) {
  std::vector<float> f(static_cast<size_t>(n) * n);
  for (size_t k = 0; k < f.size(); k++) f[k] = static_cast<float>(((k * 2654435761u + seed * 97u) >> 8) % 1000) / 1000.0f;
  return f;
}

static float* upload(const std::vector<float>& h) {
  float* d = nullptr;
  CHECK(cudaMalloc(&d, h.size() * sizeof(float)));
  CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static std::vector<float> download(const float* d, size_t count) {
  std::vector<float> h(count);
  CHECK(cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

int main() {
  const int n = N, threads = 128;
  const size_t cells = static_cast<size_t>(n) * n;
  const dim3 lines((n + threads - 1) / threads), plane((n + threads - 1) / threads, n);
  std::vector<float> u0 = start_field(n, 1), ex0 = start_field(n, 2), ey0 = start_field(n, 3), hz0 = start_field(n, 4);
  std::vector<float> j0 = start_field(n, 5), fict0(STEPS);
  for (int t = 0; t < STEPS; t++) fict0[t] = static_cast<float>(t);
  float *u = upload(u0), *v = upload(u0), *cp = upload(u0), *dp = upload(u0);
  float *ex = upload(ex0), *ey = upload(ey0), *hz = upload(hz0), *fict = upload(fict0);
  float *ja = upload(j0), *jb = upload(j0);
  unsigned int* res = nullptr;
  CHECK(cudaMalloc(&res, sizeof(unsigned int)));
  CHECK(cudaMemset(res, 0, sizeof(unsigned int)));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));

  CHECK(cudaEventRecord(start));
  for (int t = 0; t < STEPS; t++) {
    adi_x_coef<<<lines, threads>>>(cp, n, MU);
    adi_x_forward<<<lines, threads>>>(u, cp, dp, n, MU);
    adi_x_back<<<lines, threads>>>(v, cp, dp, n);
    adi_y_coef<<<lines, threads>>>(cp, n, MU);
    adi_y_forward<<<lines, threads>>>(v, cp, dp, n, MU);
    adi_y_back<<<lines, threads>>>(u, cp, dp, n);
    fdtd_ey<<<plane, threads>>>(ex, ey, hz, fict, n, t);
    fdtd_ex<<<plane, threads>>>(ex, ey, hz, fict, n, t);
    fdtd_hz<<<plane, threads>>>(ex, ey, hz, fict, n, t);
    jacobi_sweep<<<plane, threads>>>(ja, jb, n);
    jacobi_residual<<<plane, threads>>>(ja, jb, n, res);
    float* swap = ja;
    ja = jb;
    jb = swap;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));

  std::vector<double> ru(u0.begin(), u0.end()), rex(ex0.begin(), ex0.end()), rey(ey0.begin(), ey0.end());
  std::vector<double> rhz(hz0.begin(), hz0.end()), ra(j0.begin(), j0.end()), rb(cells), rfict(fict0.begin(), fict0.end());
  double rres = 0;
  for (int t = 0; t < STEPS; t++) {
    ref_adi(ru, n, MU);
    ref_fdtd(rex, rey, rhz, rfict, n, t);
    rres = std::fmax(rres, ref_jacobi(ra, rb, n));
  }
  unsigned int bits = 0;
  CHECK(cudaMemcpy(&bits, res, sizeof bits, cudaMemcpyDeviceToHost));
  float gres;
  std::memcpy(&gres, &bits, sizeof gres);
  bool ok = close(download(u, cells), ru, 1e-4, "adi");
  ok = close(download(ex, cells), rex, 1e-4, "fdtd_ex") && ok;
  ok = close(download(hz, cells), rhz, 1e-4, "fdtd_hz") && ok;
  ok = close(download(ja, cells), ra, 1e-5, "jacobi") && ok;
  ok = std::fabs(gres - rres) <= 1e-5 * (1 + rres) && ok;
  std::printf("program=time_steps steps=%d launches=%d loop_ms=%.3f residual=%.6g check=%s\n", STEPS, 11 * STEPS, ms,
              gres, ok ? "PASS" : "FAIL");
  // Ends here, as the programs this stands for do: no cudaFree, no cudaDeviceReset.
  return ok ? 0 : 1;
}
