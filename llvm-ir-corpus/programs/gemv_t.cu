// gemv_t: y = A^T x for a row-major 512 x 131072 float matrix, one thread per
// column of A: at every step a warp reads 32 consecutive floats of one row
// (coalesced). 256 MiB of A per launch.
#include "r3corpus.h"

static const char* kProgram = "gemv_t";

__global__ void gemv_t_kernel(int rows, int cols, const float* __restrict__ A,
                              const float* __restrict__ x, float* __restrict__ y) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int r = 0; r < rows; ++r) acc += A[static_cast<size_t>(r) * cols + c] * x[r];
  y[c] = acc;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 512, cols = 131072;
  const size_t n = static_cast<size_t>(rows) * cols;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(n), x(rows);
  r3::fill_uniform(A, 101, 0.0, 1.0);
  r3::fill_uniform(x, 102, 0.0, 1.0);
  r3::DeviceArray<float> dA(n), dx(rows), dy(cols);
  dA.upload(A);
  dx.upload(x);

  auto launch = [&] {
    gemv_t_kernel<<<r3::blocks_for(cols, block), block>>>(rows, cols, dA.get(), dx.get(), dy.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> y = dy.download();

  std::vector<double> ref(cols, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[c] += static_cast<double>(A[static_cast<size_t>(r) * cols + c]) * x[r];
  bool ok = r3::check_close("y", y, ref, 1e-5, 0.0);

  r3::report(kProgram, "gemv_t_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
