// black_scholes: European call and put prices for 2^24 options under the
// Black-Scholes model (logf, sqrtf, expf and erfcf per option; the normal
// CDF is 0.5 * erfc(-d / sqrt 2)). 5 floats of traffic per option.
#include "r3corpus.h"

static const char* kProgram = "black_scholes";

__device__ inline float normal_cdf(float d) { return 0.5f * erfcf(-d * 0.70710678118654752f); }

__global__ void black_scholes_kernel(int n, float rate, float vol, const float* __restrict__ spot,
                                     const float* __restrict__ strike, const float* __restrict__ years,
                                     float* __restrict__ call, float* __restrict__ put) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = spot[i], k = strike[i], t = years[i];
  float vsqrt = vol * sqrtf(t);
  float d1 = (logf(s / k) + (rate + 0.5f * vol * vol) * t) / vsqrt;
  float d2 = d1 - vsqrt;
  float disc = k * expf(-rate * t);
  call[i] = s * normal_cdf(d1) - disc * normal_cdf(d2);
  put[i] = disc * normal_cdf(-d2) - s * normal_cdf(-d1);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 24;
  const float rate = 0.03f, vol = 0.25f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> spot(n), strike(n), years(n);
  r3::fill_uniform(spot, 261, 10.0, 50.0);
  r3::fill_uniform(strike, 262, 10.0, 50.0);
  r3::fill_uniform(years, 263, 0.1, 3.0);
  r3::DeviceArray<float> dspot(n), dstrike(n), dyears(n), dcall(n), dput(n);
  dspot.upload(spot);
  dstrike.upload(strike);
  dyears.upload(years);

  auto launch = [&] {
    black_scholes_kernel<<<r3::blocks_for(n, block), block>>>(n, rate, vol, dspot.get(), dstrike.get(),
                                                              dyears.get(), dcall.get(), dput.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> call = dcall.download(), put = dput.download();

  std::vector<double> ref_call(n), ref_put(n);
  for (int i = 0; i < n; ++i) {
    double s = spot[i], k = strike[i], t = years[i], r = rate, v = vol;
    double vs = v * std::sqrt(t);
    double d1 = (std::log(s / k) + (r + 0.5 * v * v) * t) / vs, d2 = d1 - vs;
    auto cdf = [](double d) { return 0.5 * std::erfc(-d / std::sqrt(2.0)); };
    double disc = k * std::exp(-r * t);
    ref_call[i] = s * cdf(d1) - disc * cdf(d2);
    ref_put[i] = disc * cdf(-d2) - s * cdf(-d1);
  }
  bool ok = r3::check_close("call", call, ref_call, 1e-4, 2e-4);
  ok = r3::check_close("put", put, ref_put, 1e-4, 2e-4) && ok;

  r3::report(kProgram, "black_scholes_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
