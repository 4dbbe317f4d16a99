// jacobi2d: one Jacobi sweep of the 2D Laplace equation on an 8192 x 8192
// grid: each interior point becomes the mean of its 4 neighbours, boundary
// points are copied. 2D blocks of 32 x 8 threads.
#include "r3corpus.h"

static const char* kProgram = "jacobi2d";

__global__ void jacobi2d_kernel(int nx, int ny, const float* __restrict__ in,
                                float* __restrict__ out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= nx || y >= ny) return;
  size_t i = static_cast<size_t>(y) * nx + x;
  if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
    out[i] = in[i];
  } else {
    out[i] = 0.25f * (in[i - nx] + in[i + nx] + in[i - 1] + in[i + 1]);
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nx = 8192, ny = 8192;
  const size_t n = static_cast<size_t>(nx) * ny;

  std::vector<float> in(n);
  r3::fill_uniform(in, 51, 0.0, 100.0);
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  dim3 block(32, 8);
  dim3 grid(r3::blocks_for(nx, block.x), r3::blocks_for(ny, block.y));
  auto launch = [&] { jacobi2d_kernel<<<grid, block>>>(nx, ny, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<float> ref(n);
  for (int y = 0; y < ny; ++y)
    for (int x = 0; x < nx; ++x) {
      size_t i = static_cast<size_t>(y) * nx + x;
      bool edge = x == 0 || y == 0 || x == nx - 1 || y == ny - 1;
      ref[i] = edge ? in[i] : 0.25f * (in[i - nx] + in[i + nx] + in[i - 1] + in[i + 1]);
    }
  bool ok = r3::check_close("out", out, ref, 1e-6, 1e-5);

  r3::report(kProgram, "jacobi2d_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
