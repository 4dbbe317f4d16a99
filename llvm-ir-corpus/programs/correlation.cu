// correlation: the 256 x 256 Pearson correlation matrix of 256 variables
// (columns) over 128 observations (rows) of a row-major float data matrix, in
// four naive 1D kernels (plain pointers, sums accumulated through the output
// pointer on every iteration):
//   corr_mean_kernel       mean[j] += data[i*m+j] over rows, / n: one thread
//                          per column (coalesced column sweep)
//   corr_std_kernel        stddev[j] += (data[i*m+j] - mean[j])^2 over rows,
//                          / n, sqrt (1 if <= eps): one thread per column,
//                          re-reading mean[j] through its pointer each time
//   corr_normalize_kernel  data = (data - mean[j]) / (sqrt(n) stddev[j]), in
//                          place, one thread per element
//   corr_kernel            one thread per row j1 of the matrix runs the
//                          triangular loop j2 = j1+1 .. m-1, each an inner
//                          sum over all n rows into symmat[j1*m+j2] (mirrored
//                          to symmat[j2*m+j1]): a long serial loop, (m-1-j1) n
//                          iterations for thread j1 (32640 for thread 0)
// Data: column offset in [1, 4) + column scale in [0.5, 2) times (noise in
// [0, 1) + a shared factor in [0, 1) times a loading in [-1, 1)), so the
// correlations spread over about [-0.5, 0.5]; the column stddevs lie in
// 0.146..0.84, well clear of eps = 0.1. The normalize kernel updates in
// place: the raw data are restored before each of its timed launches.
// Check: mean, stddev, normalized data and symmat in full against a
// double-precision CPU computation from the same float inputs. Tolerance
// rel 1e-3 (means and variances: sums of 128 positive terms, any order within
// 128 u = 7.6e-6, u = 2^-24) plus abs 5e-5: a correlation is a sum of 128
// products of normalized values whose |terms| add up to at most 1
// (Cauchy-Schwarz), so any order is within 7.6e-6 of the exact value, and two
// orders within 1.5e-5. The float mean and stddev enter the correlation only
// through a relative error of a few u (the mean's to second order).
#include "r3corpus.h"

static const char* kProgram = "correlation";

__global__ void corr_mean_kernel(int n, int m, float float_n, float* data, float* mean) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    mean[j] = 0.0f;
    for (int i = 0; i < n; i++) mean[j] += data[i * m + j];
    mean[j] /= float_n;
  }
}

__global__ void corr_std_kernel(int n, int m, float float_n, float eps, float* data, float* mean,
                                float* stddev) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    stddev[j] = 0.0f;
    for (int i = 0; i < n; i++)
      stddev[j] += (data[i * m + j] - mean[j]) * (data[i * m + j] - mean[j]);
    stddev[j] /= float_n;
    stddev[j] = sqrtf(stddev[j]);
    if (stddev[j] <= eps) stddev[j] = 1.0f;
  }
}

__global__ void corr_normalize_kernel(int n, int m, float float_n, float* data, float* mean,
                                      float* stddev) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n * m) {
    int j = t % m;
    data[t] = (data[t] - mean[j]) / (sqrtf(float_n) * stddev[j]);
  }
}

__global__ void corr_kernel(int n, int m, float* data, float* symmat) {
  int j1 = blockIdx.x * blockDim.x + threadIdx.x;
  if (j1 < m) {
    symmat[j1 * m + j1] = 1.0f;
    for (int j2 = j1 + 1; j2 < m; j2++) {
      symmat[j1 * m + j2] = 0.0f;
      for (int i = 0; i < n; i++) symmat[j1 * m + j2] += data[i * m + j1] * data[i * m + j2];
      symmat[j2 * m + j1] = symmat[j1 * m + j2];
    }
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 128, m = 256;  // observations (rows), variables (columns)
  const size_t nm = static_cast<size_t>(n) * m, mm = static_cast<size_t>(m) * m;
  const float float_n = static_cast<float>(n), eps = 0.1f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> offset(m), scale(m), loading(m), factor(n), noise(nm), data(nm);
  r3::fill_uniform(offset, 661, 1.0, 4.0);
  r3::fill_uniform(scale, 662, 0.5, 2.0);
  r3::fill_uniform(loading, 663, -1.0, 1.0);
  r3::fill_uniform(factor, 664, 0.0, 1.0);
  r3::fill_uniform(noise, 665, 0.0, 1.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(i) * m + j;
      data[k] = offset[j] + scale[j] * (noise[k] + loading[j] * factor[i]);
    }
  r3::DeviceArray<float> draw(nm), ddata(nm), dmean(m), dstd(m), dsym(mm);
  draw.upload(data);

  auto reset = [&] { CUDA_CHECK(cudaMemcpy(ddata.get(), draw.get(), draw.bytes(), cudaMemcpyDeviceToDevice)); };
  auto mean = [&] {
    corr_mean_kernel<<<r3::blocks_for(m, block), block>>>(n, m, float_n, ddata.get(), dmean.get());
  };
  auto stddev = [&] {
    corr_std_kernel<<<r3::blocks_for(m, block), block>>>(n, m, float_n, eps, ddata.get(), dmean.get(), dstd.get());
  };
  auto normalize = [&] {
    corr_normalize_kernel<<<r3::blocks_for(nm, block), block>>>(n, m, float_n, ddata.get(), dmean.get(),
                                                                dstd.get());
  };
  auto corr = [&] { corr_kernel<<<r3::blocks_for(m, block), block>>>(n, m, ddata.get(), dsym.get()); };
  reset();
  mean();
  stddev();
  normalize();
  corr();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got_mean = dmean.download();
  std::vector<float> got_std = dstd.download();
  std::vector<float> got_data = ddata.download();
  std::vector<float> got_sym = dsym.download();

  std::vector<double> ref_mean(m, 0.0), ref_std(m, 0.0), normed(nm), ref_sym(mm, 0.0);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) ref_mean[j] += data[static_cast<size_t>(i) * m + j];
  for (int j = 0; j < m; j++) ref_mean[j] /= n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      double d = data[static_cast<size_t>(i) * m + j] - ref_mean[j];
      ref_std[j] += d * d;
    }
  for (int j = 0; j < m; j++) {
    ref_std[j] = std::sqrt(ref_std[j] / n);
    if (ref_std[j] <= eps) ref_std[j] = 1.0;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(i) * m + j;
      normed[k] = (data[k] - ref_mean[j]) / (std::sqrt(static_cast<double>(n)) * ref_std[j]);
    }
  for (int i = 0; i < n; i++) {
    const double* row = &normed[static_cast<size_t>(i) * m];
    for (int j1 = 0; j1 < m; j1++) {
      double a = row[j1];
      double* out = &ref_sym[static_cast<size_t>(j1) * m];
      for (int j2 = j1 + 1; j2 < m; j2++) out[j2] += a * row[j2];
    }
  }
  for (int j1 = 0; j1 < m; j1++) {
    ref_sym[static_cast<size_t>(j1) * m + j1] = 1.0;
    for (int j2 = j1 + 1; j2 < m; j2++)
      ref_sym[static_cast<size_t>(j2) * m + j1] = ref_sym[static_cast<size_t>(j1) * m + j2];
  }
  bool ok = r3::check_close("mean", got_mean, ref_mean, 1e-3, 5e-5);
  ok = r3::check_close("stddev", got_std, ref_std, 1e-3, 5e-5) && ok;
  ok = r3::check_close("normalized", got_data, normed, 1e-3, 5e-5) && ok;
  ok = r3::check_close("symmat", got_sym, ref_sym, 1e-3, 5e-5) && ok;

  reset();  // time each kernel on the data it sees in the pipeline
  r3::report(kProgram, "corr_mean_kernel", r3::time_median_ms(mean), ok);
  r3::report(kProgram, "corr_std_kernel", r3::time_median_ms(stddev), ok);
  r3::report(kProgram, "corr_normalize_kernel", r3::time_median_ms(normalize, reset), ok);
  r3::report(kProgram, "corr_kernel", r3::time_median_ms(corr), ok);
  return ok ? 0 : 1;
}
