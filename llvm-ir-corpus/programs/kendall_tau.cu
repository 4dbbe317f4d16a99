// kendall_tau: Kendall rank-correlation matrix of 256 sensor channels over
// 3072 samples (row-major, one row per sample), written as a small naive
// application: the samples are ingested in 16 chunks of 192 rows, each chunk
// going through three short per-channel kernels, then one long kernel counts
// concordant and discordant sample pairs for every pair of channels. Plain
// pointers, no __restrict__, one thread per channel or per matrix entry, sums
// and filter state kept through global pointers:
//   kt_calibrate_kernel    x = (raw - dark[j]) * gain[j] over the chunk's rows,
//                          total[j] += x (running channel total): one thread
//                          per channel, a 192-row column sweep (coalesced)
//   kt_filter_kernel       causal exponential low-pass s += alpha (x - s),
//                          y = s, the filter state s kept in state[j] across
//                          chunks (seeded from the first sample): one thread
//                          per channel, serial through the state pointer
//   kt_roughness_kernel    rough[j] += (y[r] - y[r-1])^2 over the chunk's rows
//                          (the step into the chunk included): one thread per
//                          channel
//   kt_concordance_kernel  one thread per entry (j1, j2) of the 256 x 256
//                          matrix; each of the 32640 threads of the upper
//                          triangle runs the loop over all 4717056 sample
//                          pairs i < k, tau[j1*m+j2] += or -= 1 by the signs
//                          of (y[i][j1] - y[k][j1]) (y[i][j2] - y[k][j2]),
//                          then divides by the pair count and mirrors;
//                          the diagonal is 1.
// The long kernel is the program's GPU time: 1.5e11 pair steps, each thread a
// serial chain of 4.7M steps whose running count is stored through the output
// pointer every step, so the y loads after it cannot move ahead of it. On an
// H100 a step costs ~0.23 us of latency (a 4096-sample build ran 1.9 s for
// 8.4M steps), so one launch takes 1.07 s (clang -O3; nvcc 1.05 s), 99.8% of
// the program's GPU time; the short kernels' 256-thread sweeps take 37-46 us
// a launch, 48 launches in all (16 each). The long kernel's data are small:
// y 3 MiB in, tau 256 KiB out. It runs once in the pipeline and once more,
// alone, for its timed line (no warm-up, one timed launch:
// r3::time_median_ms_n), so a program run launches it twice (~2.8 s in all on
// an H100, checks included). The loop line times the one checked run of the
// whole pipeline (48 short launches and the long kernel), not a median of 5
// runs. The short kernels are timed as usual on chunk 1, without resets (the
// work does not depend on the values).
// Data: calibrated x = level[j] + 4 noise + 6 loading[j] factor[r] with level
// in [8, 16), noise and factor in [0, 1), loading in [-1, 1), so x lies in
// [2, 26) and tau spreads over about [-0.45, 0.5]; raw = dark + x / gain with
// dark in [90, 110) and gain in [0.5, 2), so raw - dark is exact in float.
// alpha = 0.125. Equal values within a channel occur (a few per channel):
// their pairs count 0.
// Check, against the CPU (u = 2^-24):
//   x       all, in double from the same float inputs: rel 1e-6 (one rounding).
//   total   rel 1e-3: 3072 positive terms, any order within 3072 u = 1.8e-4.
//   y       all, the double filter of the double x: abs 5e-5. A float step
//           rounds x - s and the update (alpha is a power of two, so with or
//           without FMA), at most 29 u, x carries at most 26 u, and the filter
//           shrinks older errors by 1 - alpha: |y - y_ref| <= 26 u + 29 u /
//           alpha = 1.5e-5 (a float emulation: 4.6e-6).
//   rough   rel 1e-3 against the double y_ref: with y off by at most E =
//           1.5e-5 the sum of squared steps moves by at most 4 E sqrt(3071 /
//           rough) relative, 4.2e-4 for the smallest rough (66.5; all lie in
//           66..228), plus 3072 u for the float sum (emulation: 2.3e-6).
//   tau     exact (float ==) on 128 sampled pairs plus (0, 1), (0, 255) and
//           (254, 255), counted on the CPU from the GPU's own y: the sign of
//           a float difference is exact, the counts (|S| <= 4717056 < 2^24)
//           are exact float integers in any order, and S / 4717056.0f is one
//           correctly rounded division. All 32640 pairs would take one CPU
//           core over a minute (1.5e11 steps); the sampled ones ~0.35 s. The
//           diagonal (== 1) and the mirror (tau[j2][j1] == tau[j1][j2]) are
//           checked everywhere.
#include "r3corpus.h"

static const char* kProgram = "kendall_tau";

__global__ void kt_calibrate_kernel(int row0, int rows, int m, float* raw, float* dark, float* gain, float* x,
                                    float* total) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    for (int r = row0; r < row0 + rows; r++) {
      x[r * m + j] = (raw[r * m + j] - dark[j]) * gain[j];
      total[j] += x[r * m + j];
    }
  }
}

__global__ void kt_filter_kernel(int row0, int rows, int m, float alpha, float* x, float* state, float* y) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    for (int r = row0; r < row0 + rows; r++) {
      if (r == 0)
        state[j] = x[j];
      else
        state[j] = state[j] + alpha * (x[r * m + j] - state[j]);
      y[r * m + j] = state[j];
    }
  }
}

__global__ void kt_roughness_kernel(int row0, int rows, int m, float* y, float* rough) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    for (int r = row0; r < row0 + rows; r++) {
      if (r > 0) rough[j] += (y[r * m + j] - y[(r - 1) * m + j]) * (y[r * m + j] - y[(r - 1) * m + j]);
    }
  }
}

__global__ void kt_concordance_kernel(int n, int m, float npairs, float* y, float* tau) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < m * m) {
    int j1 = t / m, j2 = t % m;
    if (j1 == j2) tau[t] = 1.0f;
    if (j2 <= j1) return;
    tau[j1 * m + j2] = 0.0f;
    for (int i = 0; i < n - 1; i++) {
      for (int k = i + 1; k < n; k++) {
        float d1 = y[i * m + j1] - y[k * m + j1];
        float d2 = y[i * m + j2] - y[k * m + j2];
        if (d1 * d2 > 0.0f)
          tau[j1 * m + j2] += 1.0f;
        else if (d1 * d2 < 0.0f)
          tau[j1 * m + j2] -= 1.0f;
      }
    }
    tau[j1 * m + j2] /= npairs;
    tau[j2 * m + j1] = tau[j1 * m + j2];
  }
}

// Concordant minus discordant sample pairs of two columns (exact).
static long long concordance_count(const std::vector<float>& a, const std::vector<float>& b) {
  long long s = 0;
  const int n = static_cast<int>(a.size());
  for (int i = 0; i < n - 1; i++) {
    const float ai = a[i], bi = b[i];
    int part = 0;
    for (int k = i + 1; k < n; k++)
      part += ((ai > a[k]) - (ai < a[k])) * ((bi > b[k]) - (bi < b[k]));
    s += part;
  }
  return s;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int m = 256, n = 3072, chunk = 192, chunks = n / chunk;  // channels, samples
  const size_t nm = static_cast<size_t>(n) * m, mm = static_cast<size_t>(m) * m;
  const float alpha = 0.125f;
  const long long pairs = static_cast<long long>(n) * (n - 1) / 2;
  const float npairs = static_cast<float>(pairs);  // exact: below 2^24
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> dark(m), gain(m), level(m), loading(m), factor(n), noise(nm), raw(nm);
  r3::fill_uniform(dark, 811, 90.0, 110.0);
  r3::fill_uniform(gain, 812, 0.5, 2.0);
  r3::fill_uniform(level, 813, 8.0, 16.0);
  r3::fill_uniform(loading, 814, -1.0, 1.0);
  r3::fill_uniform(factor, 815, 0.0, 1.0);
  r3::fill_uniform(noise, 816, 0.0, 1.0);
  for (int r = 0; r < n; r++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(r) * m + j;
      float signal = level[j] + 4.0f * noise[k] + 6.0f * loading[j] * factor[r];
      raw[k] = dark[j] + signal / gain[j];
    }
  r3::DeviceArray<float> draw(nm), dx(nm), dy(nm), ddark(m), dgain(m), dtotal(m), dstate(m), drough(m),
      dtau(mm);
  draw.upload(raw);
  ddark.upload(dark);
  dgain.upload(gain);

  const unsigned cgrid = r3::blocks_for(m, block);
  auto calibrate = [&](int c) {
    kt_calibrate_kernel<<<cgrid, block>>>(c * chunk, chunk, m, draw.get(), ddark.get(), dgain.get(), dx.get(),
                                          dtotal.get());
  };
  auto filter = [&](int c) {
    kt_filter_kernel<<<cgrid, block>>>(c * chunk, chunk, m, alpha, dx.get(), dstate.get(), dy.get());
  };
  auto roughness = [&](int c) { kt_roughness_kernel<<<cgrid, block>>>(c * chunk, chunk, m, dy.get(), drough.get()); };
  auto concordance = [&] {
    kt_concordance_kernel<<<r3::blocks_for(mm, block), block>>>(n, m, npairs, dy.get(), dtau.get());
  };
  auto pipeline = [&] {
    for (int c = 0; c < chunks; c++) {
      calibrate(c);
      filter(c);
      roughness(c);
    }
    concordance();
  };
  dtotal.zero();
  dstate.zero();
  drough.zero();
  const double loop_ms = r3::time_median_ms_n(0, 1, pipeline);  // the checked run
  std::vector<float> got_x = dx.download(), got_y = dy.download(), got_total = dtotal.download(),
                     got_rough = drough.download(), got_tau = dtau.download();

  std::vector<double> ref_x(nm), ref_y(nm), ref_total(m, 0.0), ref_rough(m, 0.0), s(m);
  for (int r = 0; r < n; r++)
    for (int j = 0; j < m; j++) {
      size_t k = static_cast<size_t>(r) * m + j;
      ref_x[k] = (static_cast<double>(raw[k]) - dark[j]) * gain[j];
      ref_total[j] += ref_x[k];
      s[j] = r == 0 ? ref_x[k] : s[j] + alpha * (ref_x[k] - s[j]);
      ref_y[k] = s[j];
      if (r > 0) {
        double d = ref_y[k] - ref_y[k - m];
        ref_rough[j] += d * d;
      }
    }
  bool ok = r3::check_close("x", got_x, ref_x, 1e-6, 0.0);
  ok = r3::check_close("total", got_total, ref_total, 1e-3, 0.0) && ok;
  ok = r3::check_close("y", got_y, ref_y, 0.0, 5e-5) && ok;
  ok = r3::check_close("rough", got_rough, ref_rough, 1e-3, 0.0) && ok;

  size_t sym_bad = 0;
  for (int j1 = 0; j1 < m; j1++) {
    if (got_tau[static_cast<size_t>(j1) * m + j1] != 1.0f) ++sym_bad;
    for (int j2 = j1 + 1; j2 < m; j2++)
      if (!(got_tau[static_cast<size_t>(j2) * m + j1] == got_tau[static_cast<size_t>(j1) * m + j2])) ++sym_bad;
  }
  if (sym_bad) {
    std::fprintf(stderr, "  tau: %zu diagonal or mirrored entries wrong\n", sym_bad);
    ok = false;
  }
  std::vector<std::pair<int, int>> sample = {{0, 1}, {0, m - 1}, {m - 2, m - 1}};
  r3::Lcg rng(817);
  while (sample.size() < 131) {
    int a = rng.below(m), b = rng.below(m);
    if (a != b) sample.push_back({std::min(a, b), std::max(a, b)});
  }
  std::vector<float> col1(n), col2(n), got_s, ref_s;
  for (auto [j1, j2] : sample) {
    for (int r = 0; r < n; r++) {
      col1[r] = got_y[static_cast<size_t>(r) * m + j1];
      col2[r] = got_y[static_cast<size_t>(r) * m + j2];
    }
    got_s.push_back(got_tau[static_cast<size_t>(j1) * m + j2]);
    ref_s.push_back(static_cast<float>(concordance_count(col1, col2)) / npairs);
  }
  ok = r3::check_equal("tau (sampled pairs)", got_s, ref_s) && ok;

  r3::report(kProgram, "kt_calibrate_kernel", r3::time_median_ms([&] { calibrate(1); }), ok);
  r3::report(kProgram, "kt_filter_kernel", r3::time_median_ms([&] { filter(1); }), ok);
  r3::report(kProgram, "kt_roughness_kernel", r3::time_median_ms([&] { roughness(1); }), ok);
  r3::report(kProgram, "kt_concordance_kernel", r3::time_median_ms_n(0, 1, concordance), ok);
  r3::report_loop(kProgram, loop_ms, ok);
  return ok ? 0 : 1;
}
