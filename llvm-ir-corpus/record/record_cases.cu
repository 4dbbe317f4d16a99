// The five launches the run-time recorder must get right (see issue "Record at run time"):
//  (a) saxpy, (b) a by-value struct holding two device pointers, (c) a kernel walking an array
//  of device pointers, (d) a kernel writing a __device__ global, (e) a template kernel launched
//  with two shapes. The program checks its own results, so recording must not change them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

struct TwoPointers {
  const float *in;
  float *out;
  int n;
  float scale;
};

__device__ unsigned int g_nonzero;

__global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void scale_struct(TwoPointers p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = p.scale * p.in[i];
}

__global__ void sum_rows(float *const *rows, int nrows, int width, float *sums) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= nrows) return;
  float s = 0.f;
  for (int j = 0; j < width; ++j) s += rows[r][j];
  sums[r] = s;
}

__global__ void count_nonzero(const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] != 0.f) atomicAdd(&g_nonzero, 1u);
}

template <int Radius>
__global__ void box_blur(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0.f;
  for (int d = -Radius; d <= Radius; ++d) {
    int j = min(max(i + d, 0), n - 1);
    s += x[j];
  }
  y[i] = s / (2 * Radius + 1);
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("record_cases: no GPU");
    return 0;
  }
  const int n = 1 << 20;
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; ++i) { hx[i] = float(i % 17); hy[i] = float(i % 5); }
  float *x, *y, *z;
  CHECK(cudaMalloc(&x, n * sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMalloc(&z, n * sizeof(float)));
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  int bad = 0;

  saxpy<<<n / 256, 256>>>(3.f, x, y, n);  // (a)
  TwoPointers p{x, z, n, 0.5f};
  scale_struct<<<n / 256, 256>>>(p);  // (b)

  const int rows = 512, width = 1024;  // (c): rows of z, by pointer
  std::vector<float *> hrows(rows);
  for (int r = 0; r < rows; ++r) hrows[r] = z + r * width;
  float **drows, *sums;
  CHECK(cudaMalloc(&drows, rows * sizeof(float *)));
  CHECK(cudaMalloc(&sums, rows * sizeof(float)));
  CHECK(cudaMemcpy(drows, hrows.data(), rows * sizeof(float *), cudaMemcpyHostToDevice));
  sum_rows<<<rows / 128, 128>>>(drows, rows, width, sums);

  unsigned zero = 0;  // (d)
  CHECK(cudaMemcpyToSymbol(g_nonzero, &zero, sizeof zero));
  count_nonzero<<<n / 256, 256>>>(x, n);

  box_blur<2><<<n / 256, 256>>>(x, y, n);  // (e): two shapes of one template
  box_blur<4><<<n / 512, 512>>>(x, z, n);
  CHECK(cudaDeviceSynchronize());

  std::vector<float> oy(n), oz(n), osums(rows);
  unsigned nonzero = 0;
  CHECK(cudaMemcpy(oy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(oz.data(), z, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(osums.data(), sums, rows * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol(&nonzero, g_nonzero, sizeof nonzero));
  for (int r = 0; r < rows; ++r) {
    float s = 0.f;
    for (int j = 0; j < width; ++j) s += 0.5f * hx[r * width + j];
    bad += std::fabs(osums[r] - s) > 1e-3f * std::fabs(s) + 1e-3f;
  }
  unsigned want_nonzero = 0;
  for (int i = 0; i < n; ++i) want_nonzero += hx[i] != 0.f;
  bad += nonzero != want_nonzero;
  for (int i = 0; i < n; ++i) {
    float s2 = 0.f, s4 = 0.f;
    for (int d = -2; d <= 2; ++d) s2 += hx[std::min(std::max(i + d, 0), n - 1)];
    for (int d = -4; d <= 4; ++d) s4 += hx[std::min(std::max(i + d, 0), n - 1)];
    bad += std::fabs(oy[i] - s2 / 5) > 1e-4f || std::fabs(oz[i] - s4 / 9) > 1e-4f;
  }
  std::printf("record_cases: %s (%d wrong)\n", bad ? "FAIL" : "PASS", bad);
  return bad != 0;
}
