// Header-only device helpers, used by lib/templates.cu and src/plain.cu.
#pragma once

namespace r3demo {

__host__ __device__ inline int clamp_index(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

// y[i] = a * x[i] + y[i]; instantiated for float and int in lib/templates.cu.
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[clamp_index(i, n)] + y[i];
}

}  // namespace r3demo
