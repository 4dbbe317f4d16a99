// covariance: the 1024 x 1024 covariance matrix of 1024 variables (columns)
// over 2048 observations (rows) of a row-major float data matrix, in three
// naive kernels (plain pointers, one thread per output element, sums
// accumulated through the output pointer):
//   cov_mean_kernel    mean[j] += data[i*m+j] over all rows i, then / n: one
//                      thread per column (a coalesced column sweep)
//   cov_center_kernel  data[i*m+j] -= mean[j], in place (32x8 blocks)
//   cov_kernel         symmat[j1*m+j2] += data[i*m+j1] * data[i*m+j2] over
//                      i, / (n - 1), mirrored to symmat[j2*m+j1]: one thread
//                      per (j1, j2) on a 32x8 grid, only the upper triangle
//                      j2 >= j1 works (the rest return at once)
// Data: column offset in [0, 4) + noise in [0, 1) + a shared factor in [0, 1)
// times a column loading in [-1, 1), so covariances range over about
// [-0.08, 0.17]. The centering kernel updates in place: the raw data are
// restored before each of its timed launches (and before the timing).
// Check: mean, centered data and the whole symmat against a double-precision
// CPU computation from the same float inputs. Tolerance rel 1e-3 (means:
// sums of 2048 positive terms, any order within 2048 u = 1.2e-4, u = 2^-24)
// plus abs 5e-5: a covariance is a sum of 2048 products whose |terms| add up
// to at most (n - 1) / 6 (Cauchy-Schwarz; every variance is at most 1/6), so
// any summation order is within 2048 u / 6 = 2.0e-5 of the exact value, two
// orders within 4.1e-5. The float mean's error enters the covariance only to
// second order (the centered columns sum to 0).
#include "r3corpus.h"

static const char* kProgram = "covariance";

__global__ void cov_mean_kernel(int n, int m, float float_n, float* data, float* mean) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    mean[j] = 0.0f;
    for (int i = 0; i < n; i++) mean[j] += data[i * m + j];
    mean[j] /= float_n;
  }
}

__global__ void cov_center_kernel(int n, int m, float* data, float* mean) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < n && j < m) data[i * m + j] -= mean[j];
}

__global__ void cov_kernel(int n, int m, float float_n, float* data, float* symmat) {
  int j2 = blockIdx.x * blockDim.x + threadIdx.x;
  int j1 = blockIdx.y * blockDim.y + threadIdx.y;
  if (j1 < m && j2 < m && j2 >= j1) {
    symmat[j1 * m + j2] = 0.0f;
    for (int i = 0; i < n; i++) symmat[j1 * m + j2] += data[i * m + j1] * data[i * m + j2];
    symmat[j1 * m + j2] /= (float_n - 1.0f);
    symmat[j2 * m + j1] = symmat[j1 * m + j2];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 2048, m = 1024;  // observations (rows), variables (columns)
  const size_t nm = static_cast<size_t>(n) * m, mm = static_cast<size_t>(m) * m;
  const float float_n = static_cast<float>(n);
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> offset(m), loading(m), factor(n), noise(nm), data(nm);
  r3::fill_uniform(offset, 651, 0.0, 4.0);
  r3::fill_uniform(loading, 652, -1.0, 1.0);
  r3::fill_uniform(factor, 653, 0.0, 1.0);
  r3::fill_uniform(noise, 654, 0.0, 1.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(i) * m + j;
      data[k] = offset[j] + noise[k] + loading[j] * factor[i];
    }
  r3::DeviceArray<float> draw(nm), ddata(nm), dmean(m), dsym(mm);
  draw.upload(data);

  dim3 block2(32, 8);
  dim3 cgrid(r3::blocks_for(m, block2.x), r3::blocks_for(n, block2.y));
  dim3 sgrid(r3::blocks_for(m, block2.x), r3::blocks_for(m, block2.y));
  auto reset = [&] { CUDA_CHECK(cudaMemcpy(ddata.get(), draw.get(), draw.bytes(), cudaMemcpyDeviceToDevice)); };
  auto mean = [&] {
    cov_mean_kernel<<<r3::blocks_for(m, block), block>>>(n, m, float_n, ddata.get(), dmean.get());
  };
  auto center = [&] { cov_center_kernel<<<cgrid, block2>>>(n, m, ddata.get(), dmean.get()); };
  auto cov = [&] { cov_kernel<<<sgrid, block2>>>(n, m, float_n, ddata.get(), dsym.get()); };
  reset();
  mean();
  center();
  cov();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got_mean = dmean.download();
  std::vector<float> got_data = ddata.download();
  std::vector<float> got_sym = dsym.download();

  std::vector<double> ref_mean(m, 0.0), centered(nm), ref_sym(mm, 0.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) ref_mean[j] += data[static_cast<size_t>(i) * m + j];
  for (int j = 0; j < m; j++) ref_mean[j] /= n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(i) * m + j;
      centered[k] = data[k] - ref_mean[j];
    }
  for (int i = 0; i < n; i++) {
    const double* row = &centered[static_cast<size_t>(i) * m];
    for (int j1 = 0; j1 < m; j1++) {
      double a = row[j1];
      double* out = &ref_sym[static_cast<size_t>(j1) * m];
      for (int j2 = j1; j2 < m; j2++) out[j2] += a * row[j2];
    }
  }
  for (int j1 = 0; j1 < m; j1++)
    for (int j2 = j1; j2 < m; j2++) {
      double c = ref_sym[static_cast<size_t>(j1) * m + j2] / (n - 1);
      ref_sym[static_cast<size_t>(j1) * m + j2] = c;
      ref_sym[static_cast<size_t>(j2) * m + j1] = c;
    }
  bool ok = r3::check_close("mean", got_mean, ref_mean, 1e-3, 5e-5);
  ok = r3::check_close("centered", got_data, centered, 1e-3, 5e-5) && ok;
  ok = r3::check_close("symmat", got_sym, ref_sym, 1e-3, 5e-5) && ok;

  reset();  // time each kernel on the data it sees in the pipeline
  r3::report(kProgram, "cov_mean_kernel", r3::time_median_ms(mean), ok);
  r3::report(kProgram, "cov_center_kernel", r3::time_median_ms(center, reset), ok);
  r3::report(kProgram, "cov_kernel", r3::time_median_ms(cov), ok);
  return ok ? 0 : 1;
}
