// colwalk_ema: a running exponential average down each column, the state through its output pointer
// One thread per column of a 4096 x 4096 row-major float matrix walks its
// column `sweeps` times (argv[1], default 200) and keeps a running state
// through the output pointer (plain pointers, so clang keeps it in memory at
// every step): state[j] = keep * state[j] + take * data[i*m+j].
// Its twin program (colwalk_energy) has the same loop nest and the same kind of body:
// a search of one is what the deadline prices the other by (issue 55).
// Data: uniform in [0, 1). Check: 32 sampled columns against a double
// recurrence from the same float inputs, rel 1e-4 + abs 1e-5 (the state
// forgets with a time constant of 1000 steps: its float error stays near
// sqrt(1000) u = 1.9e-6 whatever the order of the multiply-adds).
#include "r3corpus.h"

#include <cstdlib>

static const char* kProgram = "colwalk_ema";

__global__ void cw_ema_kernel(int n, int m, int sweeps, float keep, float take, const float* data,
                       float* state) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < m) {
    state[j] = 0.0f;
    for (int s = 0; s < sweeps; s++)
      for (int i = 0; i < n; i++) state[j] = keep * state[j] + take * data[i * m + j];
  }
}

int main(int argc, char** argv) {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 4096, m = 4096;
  const int sweeps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  const float keep = 0.999f, take = 0.001f;
  const size_t nm = static_cast<size_t>(n) * m;
  const unsigned block = R3_BLOCK_SIZE;
  std::vector<float> data(nm);
  r3::fill_uniform(data, 901, 0.0, 1.0);
  r3::DeviceArray<float> ddata(nm), dstate(m);
  ddata.upload(data);
  auto run = [&] {
    cw_ema_kernel<<<r3::blocks_for(m, block), block>>>(n, m, sweeps, keep, take, ddata.get(),
                                                dstate.get());
  };
  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got = dstate.download();
  std::vector<float> sampled, want;
  for (int j = 7; j < m; j += m / 32) {
    double st = 0.0;
    for (int s = 0; s < sweeps; s++)
      for (int i = 0; i < n; i++) {
        double x = data[static_cast<size_t>(i) * m + j];
        st = keep * st + take * x;
      }
    sampled.push_back(got[j]);
    want.push_back(static_cast<float>(st));
  }
  bool ok = r3::check_close("state", sampled, want, 1e-4, 1e-5);
  r3::report(kProgram, "cw_ema_kernel", r3::time_median_ms_n(0, 2, run), ok);
  return ok ? 0 : 1;
}
