#include "r3demo/api.h"
#include "r3demo/kernels.cuh"

// Reverses `in` into `out`.
__global__ void reverse(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[r3demo::clamp_index(n - 1 - i, n)];
}

bool run_plain() {
  const int n = 777;
  int in[n], out[n], want[n];
  for (int i = 0; i < n; ++i) { in[i] = i * 7; want[n - 1 - i] = i * 7; }
  int *din, *dout;
  cudaMalloc(&din, sizeof in);
  cudaMalloc(&dout, sizeof out);
  cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice);
  reverse<<<(n + 63) / 64, 64>>>(din, dout, n);
  cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost);
  cudaFree(din);
  cudaFree(dout);
  return check_equal(out, want, n, "reverse");
}
