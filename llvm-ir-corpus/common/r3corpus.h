// Shared helpers for the r3 kernel corpus: error checking, deterministic
// inputs, device buffers, event timing, result checks and the output line.
// Host-only code; every program includes this once.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Block size for kernels that work with any 1D block size
// (block_size_agnostic = true in corpus.toml). Override with -DR3_BLOCK_SIZE=N.
#ifndef R3_BLOCK_SIZE
#define R3_BLOCK_SIZE 256
#endif

#define CUDA_CHECK(call)                                                      \
  do {                                                                        \
    cudaError_t r3_err_ = (call);                                             \
    if (r3_err_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,      \
                   #call, cudaGetErrorString(r3_err_));                       \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

// Use right after a <<<...>>> launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace r3 {

// ---------------------------------------------------------------- inputs ---

// 32-bit integer mixer (xorshift-multiply rounds); deterministic everywhere.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Hash of (seed, index): the i-th value of stream `seed`.
inline uint32_t hash2(uint32_t seed, uint64_t i) {
  uint32_t lo = static_cast<uint32_t>(i);
  uint32_t hi = static_cast<uint32_t>(i >> 32);
  return mix32(mix32(seed * 0x9e3779b9U + hi) ^ lo);
}

// Uniform float in [lo, hi) from 24 random bits.
inline float uniform(uint32_t seed, uint64_t i, float lo, float hi) {
  float u = static_cast<float>(hash2(seed, i) >> 8) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

template <class T>
inline void fill_uniform(std::vector<T>& v, uint32_t seed, double lo, double hi) {
  for (size_t i = 0; i < v.size(); ++i) {
    double u = static_cast<double>(hash2(seed, i) >> 8) * (1.0 / 16777216.0);
    v[i] = static_cast<T>(lo + (hi - lo) * u);
  }
}

// Uniform integers in [0, bound).
template <class T>
inline void fill_int(std::vector<T>& v, uint32_t seed, uint32_t bound) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(hash2(seed, i) % bound);
}

// Small sequential generator (LCG, top bits) for code that wants a stream.
struct Lcg {
  uint64_t state;
  explicit Lcg(uint64_t seed) : state(seed * 2862933555777941757ULL + 3037000493ULL) {}
  uint32_t next() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  }
  uint32_t below(uint32_t bound) { return next() % bound; }
};

// --------------------------------------------------------------- buffers ---

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, bytes())); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

  void upload(const std::vector<T>& h) {
    CUDA_CHECK(cudaMemcpy(p_, h.data(), std::min(h.size(), n_) * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    CUDA_CHECK(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  void zero() { CUDA_CHECK(cudaMemset(p_, 0, bytes())); }

 private:
  T* p_ = nullptr;
  size_t n_;
};

template <class T>
inline void upload(DeviceArray<T>& d, const std::vector<T>& h) { d.upload(h); }

inline unsigned blocks_for(size_t n, unsigned block) {
  return static_cast<unsigned>((n + block - 1) / block);
}

// ------------------------------------------------------------ GPU / output ---

// False (after printing the skip line) when no usable GPU is present.
inline bool gpu_available(const char* program) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    std::printf("r3-corpus program=%s skipped=no-gpu\n", program);
    std::fflush(stdout);
    return false;
  }
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::fprintf(stderr, "[%s] device: %s (sm_%d%d, %d SMs)\n", program, prop.name, prop.major,
               prop.minor, prop.multiProcessorCount);
  return true;
}

inline void report(const char* program, const char* kernel, double ms, bool ok) {
  std::printf("r3-corpus program=%s kernel=%s ms=%.4f check=%s\n", program, kernel, ms,
              ok ? "PASS" : "FAIL");
  std::fflush(stdout);
}

// Whole-program line of a program that times its full loop of launches (all
// kernels, all iterations): ms is the median over 5 runs of that loop.
inline void report_loop(const char* program, double ms, bool ok) {
  std::printf("r3-corpus program=%s loop_ms=%.4f check=%s\n", program, ms, ok ? "PASS" : "FAIL");
  std::fflush(stdout);
}

// ---------------------------------------------------------------- timing ---

inline int reps() {
  const char* s = std::getenv("R3_CORPUS_REPS");
  if (s != nullptr) {
    int r = std::atoi(s);
    if (r > 0) return r;
  }
  return 20;
}

struct NoReset {
  void operator()() const {}
};

// Median time in ms of `launch` (which enqueues one kernel launch, or a few):
// `warmups` untimed launches, then `timed` launches each timed with its own pair
// of events; R3_CORPUS_REPS, when set, lowers `timed` but never raises it.
// `reset` runs before every launch, outside the timed region. For a long kernel
// (~1 s a launch) that a program launches only once or twice, e.g. (0, 1).
template <class Launch, class Reset = NoReset>
double time_median_ms_n(int warmups, int timed, Launch launch, Reset reset = Reset()) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < warmups; ++i) {
    reset();
    launch();
    CUDA_CHECK_LAUNCH();
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> t;
  const int n = std::max(1, std::min(timed, reps()));
  for (int i = 0; i < n; ++i) {
    reset();
    CUDA_CHECK(cudaEventRecord(start));
    launch();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK_LAUNCH();
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return (n % 2) ? t[n / 2] : 0.5 * (static_cast<double>(t[n / 2 - 1]) + t[n / 2]);
}

// Median time in ms of `launch` (which enqueues one kernel launch): 3 warm-up
// launches, then reps() launches each timed with its own pair of events.
// `reset` runs before every launch, outside the timed region.
template <class Launch, class Reset = NoReset>
double time_median_ms(Launch launch, Reset reset = Reset()) {
  return time_median_ms_n(3, reps(), launch, reset);
}

// Median time in ms of 5 runs of a whole loop of launches (`run`), each between its own
// pair of events; `reset` restores the starting state before every run, outside the timing,
// so that every run does the same work. What report_loop prints.
template <class Reset, class Run>
double loop_median_ms(Reset reset, Run run) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> t;
  for (int i = 0; i < 5; ++i) {
    reset();
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaEventRecord(start));
    run();
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK_LAUNCH();
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    t.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ---------------------------------------------------------------- checks ---

// |got - ref| <= atol + rtol * |ref| for every element (NaN fails).
template <class G, class R>
bool check_close(const char* what, const G* got, const R* ref, size_t n, double rtol,
                 double atol) {
  size_t bad = 0;
  double worst = 0.0, worst_ratio = 0.0;
  for (size_t i = 0; i < n; ++i) {
    double g = static_cast<double>(got[i]);
    double r = static_cast<double>(ref[i]);
    double err = std::fabs(g - r);
    double tol = atol + rtol * std::fabs(r);
    if (!(err <= tol)) {
      if (bad < 5)
        std::fprintf(stderr, "  %s[%zu]: got %.9g expected %.9g (err %.3g, tol %.3g)\n", what, i,
                     g, r, err, tol);
      ++bad;
    }
    if (err > worst) worst = err;
    if (tol > 0.0 && err / tol > worst_ratio) worst_ratio = err / tol;
  }
  if (bad)
    std::fprintf(stderr, "  %s: %zu of %zu values out of tolerance\n", what, bad, n);
  else
    std::fprintf(stderr, "  %s: %zu values ok (max abs err %.3g, max err/tol %.3f)\n", what, n,
                 worst, worst_ratio);
  return bad == 0;
}

template <class G, class R>
bool check_close(const char* what, const std::vector<G>& got, const std::vector<R>& ref,
                 double rtol, double atol) {
  if (got.size() != ref.size()) {
    std::fprintf(stderr, "  %s: size %zu, expected %zu\n", what, got.size(), ref.size());
    return false;
  }
  return check_close(what, got.data(), ref.data(), got.size(), rtol, atol);
}

// Exact comparison (integers, or floats produced without rounding).
template <class T>
bool check_equal(const char* what, const T* got, const T* ref, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(got[i] == ref[i])) {
      if (bad < 5)
        std::fprintf(stderr, "  %s[%zu]: got %.17g expected %.17g\n", what, i,
                     static_cast<double>(got[i]), static_cast<double>(ref[i]));
      ++bad;
    }
  }
  if (bad)
    std::fprintf(stderr, "  %s: %zu of %zu values differ\n", what, bad, n);
  else
    std::fprintf(stderr, "  %s: %zu values equal\n", what, n);
  return bad == 0;
}

template <class T>
bool check_equal(const char* what, const std::vector<T>& got, const std::vector<T>& ref) {
  if (got.size() != ref.size()) {
    std::fprintf(stderr, "  %s: size %zu, expected %zu\n", what, got.size(), ref.size());
    return false;
  }
  return check_equal(what, got.data(), ref.data(), got.size());
}

}  // namespace r3
