// device_calls: an elementwise kernel over 2^24 points whose work is spread
// over a chain of __device__ functions: two inlinable, four marked
// __noinline__ (one takes a struct by reference, one returns a struct, one
// writes through pointers), so real calls survive into the device code.
#include "r3corpus.h"

static const char* kProgram = "device_calls";

struct Coeffs {
  float a, b, c, d;
};

__device__ inline float poly3(float x, const Coeffs& k) {
  return ((k.a * x + k.b) * x + k.c) * x + k.d;
}

__device__ __noinline__ float soft_clamp(float x, float limit) { return limit * tanhf(x / limit); }

__device__ __noinline__ float2 rotate(float2 v, float angle) {
  float s = sinf(angle), c = cosf(angle);
  return make_float2(c * v.x - s * v.y, s * v.x + c * v.y);
}

__device__ __noinline__ void split_parts(float x, float* whole, float* frac) {
  *whole = floorf(x);
  *frac = x - *whole;
}

__device__ __noinline__ float combine(float2 v, float w, const Coeffs& k) {
  float whole, frac;
  split_parts(4.0f * w, &whole, &frac);
  return poly3(v.x, k) + soft_clamp(v.y * whole, 2.0f) + frac;
}

__device__ float transform(float x, float y, const Coeffs& k) {
  float2 v = rotate(make_float2(x, y), 0.75f * x);
  return combine(v, y, k);
}

__global__ void device_calls_kernel(int n, Coeffs k, const float* __restrict__ x,
                                    const float* __restrict__ y, float* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = transform(x[i], y[i], k);
}

static double transform_ref(double x, double y, const Coeffs& k) {
  double s = std::sin(0.75 * x), c = std::cos(0.75 * x);
  double vx = c * x - s * y, vy = s * x + c * y;
  double w = 4.0 * static_cast<float>(y);  // same rounding of y as on the device
  double whole = std::floor(w), frac = w - whole;
  double p = ((k.a * vx + k.b) * vx + k.c) * vx + k.d;
  return p + 2.0 * std::tanh(vy * whole / 2.0) + frac;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 24;
  const unsigned block = R3_BLOCK_SIZE;
  const Coeffs k = {0.5f, -0.25f, 1.5f, 0.125f};

  std::vector<float> x(n), y(n);
  r3::fill_uniform(x, 211, -1.0, 1.0);
  r3::fill_uniform(y, 212, -1.0, 1.0);
  r3::DeviceArray<float> dx(n), dy(n), dout(n);
  dx.upload(x);
  dy.upload(y);

  auto launch = [&] {
    device_calls_kernel<<<r3::blocks_for(n, block), block>>>(n, k, dx.get(), dy.get(), dout.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (int i = 0; i < n; ++i) ref[i] = transform_ref(x[i], y[i], k);
  bool ok = r3::check_close("out", out, ref, 1e-5, 1e-5);

  r3::report(kProgram, "device_calls_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
