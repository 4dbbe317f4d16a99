// saxpy: z = a * x + y over 2^25 floats (out of place, so repeated launches
// give the same result). Pure bandwidth: 3 x 128 MiB of traffic per launch.
#include "r3corpus.h"

static const char* kProgram = "saxpy";

__global__ void saxpy_kernel(size_t n, float a, const float* __restrict__ x,
                             const float* __restrict__ y, float* __restrict__ z) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) z[i] = a * x[i] + y[i];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const size_t n = size_t(1) << 25;
  const float a = 1.75f;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> x(n), y(n);
  r3::fill_uniform(x, 1, -1.0, 1.0);
  r3::fill_uniform(y, 2, -1.0, 1.0);
  r3::DeviceArray<float> dx(n), dy(n), dz(n);
  dx.upload(x);
  dy.upload(y);

  auto launch = [&] {
    saxpy_kernel<<<r3::blocks_for(n, block), block>>>(n, a, dx.get(), dy.get(), dz.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> z = dz.download();
  std::vector<double> ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = static_cast<double>(a) * x[i] + y[i];
  bool ok = r3::check_close("z", z, ref, 1e-6, 1e-6);

  r3::report(kProgram, "saxpy_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
