// adam_step: 100 steps of the Adam optimizer on 2^22 float parameters, as a
// training loop runs them (issue 61). Each step launches, back to back, with no
// host synchronization and with the same arguments every time:
//   adam_grad_kernel  g = p - target, the gradient of 0.5 |p - target|^2
//   adam_step_kernel  m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
//                     p -= lr m / (sqrt(v) + eps)
// Every buffer is read and written in place, so each launch's inputs are the
// previous launch's outputs: the shape whose recording must hold the state
// before its own launch and after it, whatever the launches after it do.
// (Bias correction is left out, so that the arguments never change; the
// factors tend to 1 after the first steps.) Plain pointers, no __restrict__.
// Check: the same 100 steps on the CPU in double.
// Timed: each kernel on its own, and the whole 100 steps.
#include "r3corpus.h"

static const char* kProgram = "adam_step";

__global__ void adam_grad_kernel(int n, const float* p, const float* target, float* g) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) g[j] = p[j] - target[j];
}

__global__ void adam_step_kernel(int n, float lr, float b1, float b2, float eps, float* p, float* m,
                                 float* v, const float* g) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float gj = g[j];
  float mj = b1 * m[j] + (1.0f - b1) * gj;
  float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
  m[j] = mj;
  v[j] = vj;
  p[j] -= lr * mj / (sqrtf(vj) + eps);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 22, steps = 100;
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> target(n), p0(n);
  r3::fill_uniform(target, 211, -2.0, 2.0);
  r3::fill_uniform(p0, 212, -1.0, 1.0);
  for (int j = 0; j < n; ++j) p0[j] += target[j];

  r3::DeviceArray<float> dtarget(n), dp0(n), dp(n), dm(n), dv(n), dg(n);
  dtarget.upload(target);
  dp0.upload(p0);

  const unsigned grid = r3::blocks_for(n, block);
  auto grad = [&] { adam_grad_kernel<<<grid, block>>>(n, dp.get(), dtarget.get(), dg.get()); };
  auto step = [&] {
    adam_step_kernel<<<grid, block>>>(n, lr, b1, b2, eps, dp.get(), dm.get(), dv.get(), dg.get());
  };
  auto reset = [&] {
    CUDA_CHECK(cudaMemcpy(dp.get(), dp0.get(), dp0.bytes(), cudaMemcpyDeviceToDevice));
    dm.zero();
    dv.zero();
  };
  auto run = [&] {
    for (int s = 0; s < steps; ++s) {
      grad();
      step();
    }
  };
  reset();
  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got_p = dp.download(), got_m = dm.download(), got_v = dv.download();

  std::vector<double> ref_p(p0.begin(), p0.end()), ref_m(n, 0.0), ref_v(n, 0.0);
  for (int s = 0; s < steps; ++s)
    for (int j = 0; j < n; ++j) {
      double g = ref_p[j] - target[j];
      ref_m[j] = b1 * ref_m[j] + (1.0 - b1) * g;
      ref_v[j] = b2 * ref_v[j] + (1.0 - b2) * g * g;
      ref_p[j] -= lr * ref_m[j] / (std::sqrt(ref_v[j]) + eps);
    }
  // Float rounding against double over 100 steps: each step moves p by at most
  // about lr, and its ratio m / sqrt(v) carries a few float ulps.
  bool ok = r3::check_close("p", got_p, ref_p, 1e-4, 1e-5);
  ok = r3::check_close("m", got_m, ref_m, 1e-4, 1e-6) && ok;
  ok = r3::check_close("v", got_v, ref_v, 1e-4, 1e-7) && ok;

  r3::report(kProgram, "adam_grad_kernel", r3::time_median_ms(grad), ok);
  r3::report(kProgram, "adam_step_kernel", r3::time_median_ms(step), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(reset, run), ok);
  return ok ? 0 : 1;
}
