// gemv_n: y = A x for a row-major 131072 x 512 float matrix, one thread per
// row (each thread walks its own row, so a warp touches 32 rows at once: the
// uncoalesced counterpart of gemv_t). 256 MiB of A per launch.
#include "r3corpus.h"

static const char* kProgram = "gemv_n";

__global__ void gemv_n_kernel(int rows, int cols, const float* __restrict__ A,
                              const float* __restrict__ x, float* __restrict__ y) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* a = A + static_cast<size_t>(r) * cols;
  float acc = 0.0f;
  for (int k = 0; k < cols; ++k) acc += a[k] * x[k];
  y[r] = acc;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 131072, cols = 512;
  const size_t n = static_cast<size_t>(rows) * cols;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> A(n), x(cols);
  r3::fill_uniform(A, 91, 0.0, 1.0);
  r3::fill_uniform(x, 92, 0.0, 1.0);
  r3::DeviceArray<float> dA(n), dx(cols), dy(rows);
  dA.upload(A);
  dx.upload(x);

  auto launch = [&] {
    gemv_n_kernel<<<r3::blocks_for(rows, block), block>>>(rows, cols, dA.get(), dx.get(), dy.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> y = dy.download();

  std::vector<double> ref(rows);
  for (int r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int k = 0; k < cols; ++k) acc += static_cast<double>(A[static_cast<size_t>(r) * cols + k]) * x[k];
    ref[r] = acc;
  }
  bool ok = r3::check_close("y", y, ref, 1e-5, 0.0);

  r3::report(kProgram, "gemv_n_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
