#include <cstdio>
#include "r3demo/api.h"

__constant__ float kCoeffs[4];
__device__ int gCalls;  // written by the kernel: how many elements it processed

__device__ __noinline__ float poly(float x) {
  return ((kCoeffs[3] * x + kCoeffs[2]) * x + kCoeffs[1]) * x + kCoeffs[0];
}
__device__ float twice(float x) { return 2.0f * x; }

__global__ void eval_poly(const float* x, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = twice(poly(x[i]));
    atomicAdd(&gCalls, 1);
  }
}

bool run_device_fns() {
  const int n = 512;
  const float c[4] = {1.0f, -2.0f, 0.5f, 0.25f};
  float x[n], out[n], want[n];
  for (int i = 0; i < n; ++i) {
    x[i] = (i % 8) * 0.5f;
    want[i] = 2.0f * (((c[3] * x[i] + c[2]) * x[i] + c[1]) * x[i] + c[0]);
  }
  float *dx, *dout;
  int calls = 0;
  cudaMalloc(&dx, sizeof x);
  cudaMalloc(&dout, sizeof out);
  cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
  cudaMemcpyToSymbol(kCoeffs, c, sizeof c);
  cudaMemcpyToSymbol(gCalls, &calls, sizeof calls);
  eval_poly<<<(n + 127) / 128, 128>>>(dx, dout, n);
  cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
  cudaMemcpyFromSymbol(&calls, gCalls, sizeof calls);
  cudaFree(dx);
  cudaFree(dout);
  if (calls != n) std::printf("eval_poly: gCalls = %d, want %d\n", calls, n);
  return check_equal(out, want, n, "eval_poly") && calls == n;
}
