// heat3d: one explicit time step of the 3D heat equation with a 7-point
// stencil on a 512 x 256 x 256 grid (u' = u + alpha * (sum of 6 neighbours
// - 6u)); boundary points are copied. Blocks of 32 x 8 threads cover an
// (x, y) patch of one z plane.
#include "r3corpus.h"

static const char* kProgram = "heat3d";

__global__ void heat3d_kernel(int nx, int ny, int nz, float alpha, const float* __restrict__ in,
                              float* __restrict__ out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z;
  if (x >= nx || y >= ny || z >= nz) return;
  size_t plane = static_cast<size_t>(nx) * ny;
  size_t i = z * plane + static_cast<size_t>(y) * nx + x;
  float c = in[i];
  if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1) {
    out[i] = c;
    return;
  }
  float nb = in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] + in[i - plane] + in[i + plane];
  out[i] = c + alpha * (nb - 6.0f * c);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nx = 512, ny = 256, nz = 256;
  const float alpha = 0.1f;
  const size_t plane = static_cast<size_t>(nx) * ny, n = plane * nz;

  std::vector<float> in(n);
  r3::fill_uniform(in, 61, 1.0, 2.0);
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  dim3 block(32, 8);
  dim3 grid(r3::blocks_for(nx, block.x), r3::blocks_for(ny, block.y), nz);
  auto launch = [&] { heat3d_kernel<<<grid, block>>>(nx, ny, nz, alpha, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) {
        size_t i = z * plane + static_cast<size_t>(y) * nx + x;
        double c = in[i];
        if (x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1) {
          ref[i] = c;
        } else {
          double nb = static_cast<double>(in[i - 1]) + in[i + 1] + in[i - nx] + in[i + nx] +
                      in[i - plane] + in[i + plane];
          ref[i] = c + alpha * (nb - 6.0 * c);
        }
      }
  bool ok = r3::check_close("out", out, ref, 1e-5, 1e-6);

  r3::report(kProgram, "heat3d_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
