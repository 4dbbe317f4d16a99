// conv2d: 2D convolution (correlation) of a 4096 x 4096 float image with a
// 9 x 9 filter held in __constant__ memory, zero padding at the borders.
// 16 x 16 blocks, one output pixel per thread. 81 FMAs per pixel.
#include "r3corpus.h"

static const char* kProgram = "conv2d";
constexpr int kRadius = 4;
constexpr int kWidth = 2 * kRadius + 1;

__constant__ float c_filter[kWidth * kWidth];

__global__ void conv2d_kernel(int w, int h, const float* __restrict__ in, float* __restrict__ out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float acc = 0.0f;
  for (int fy = 0; fy < kWidth; ++fy) {
    int sy = y + fy - kRadius;
    if (sy < 0 || sy >= h) continue;
#pragma unroll
    for (int fx = 0; fx < kWidth; ++fx) {
      int sx = x + fx - kRadius;
      if (sx >= 0 && sx < w) acc += c_filter[fy * kWidth + fx] * in[static_cast<size_t>(sy) * w + sx];
    }
  }
  out[static_cast<size_t>(y) * w + x] = acc;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int w = 4096, h = 4096;
  const size_t n = static_cast<size_t>(w) * h;

  std::vector<float> in(n), filter(kWidth * kWidth);
  r3::fill_uniform(in, 131, 0.0, 1.0);
  r3::fill_uniform(filter, 132, 0.0, 0.05);
  CUDA_CHECK(cudaMemcpyToSymbol(c_filter, filter.data(), filter.size() * sizeof(float)));
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  dim3 block(16, 16);
  dim3 grid(r3::blocks_for(w, block.x), r3::blocks_for(h, block.y));
  auto launch = [&] { conv2d_kernel<<<grid, block>>>(w, h, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<double> ref(n);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      double acc = 0.0;
      for (int fy = 0; fy < kWidth; ++fy) {
        int sy = y + fy - kRadius;
        if (sy < 0 || sy >= h) continue;
        for (int fx = 0; fx < kWidth; ++fx) {
          int sx = x + fx - kRadius;
          if (sx >= 0 && sx < w) acc += static_cast<double>(filter[fy * kWidth + fx]) * in[static_cast<size_t>(sy) * w + sx];
        }
      }
      ref[static_cast<size_t>(y) * w + x] = acc;
    }
  bool ok = r3::check_close("out", out, ref, 1e-5, 1e-7);

  r3::report(kProgram, "conv2d_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
