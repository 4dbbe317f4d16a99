// maxpool2d: 3 x 3 max pooling with stride 2 and padding 1 over 512 planes
// (batch x channels) of 256 x 256 floats, giving 512 x 128 x 128 outputs.
// 16 x 16 blocks over an output plane, grid.z = plane. Exact check.
#include "r3corpus.h"

static const char* kProgram = "maxpool2d";
constexpr int kWindow = 3, kStride = 2, kPad = 1;

__global__ void maxpool2d_kernel(int h, int w, int oh, int ow, const float* __restrict__ in,
                                 float* __restrict__ out) {
  int ox = blockIdx.x * blockDim.x + threadIdx.x;
  int oy = blockIdx.y * blockDim.y + threadIdx.y;
  int plane = blockIdx.z;
  if (ox >= ow || oy >= oh) return;
  const float* src = in + static_cast<size_t>(plane) * h * w;
  float m = -INFINITY;
  for (int dy = 0; dy < kWindow; ++dy) {
    int y = oy * kStride - kPad + dy;
    if (y < 0 || y >= h) continue;
    for (int dx = 0; dx < kWindow; ++dx) {
      int x = ox * kStride - kPad + dx;
      if (x >= 0 && x < w) m = fmaxf(m, src[static_cast<size_t>(y) * w + x]);
    }
  }
  out[(static_cast<size_t>(plane) * oh + oy) * ow + ox] = m;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int planes = 512, h = 256, w = 256;
  const int oh = (h + 2 * kPad - kWindow) / kStride + 1, ow = (w + 2 * kPad - kWindow) / kStride + 1;
  const size_t n_in = static_cast<size_t>(planes) * h * w, n_out = static_cast<size_t>(planes) * oh * ow;

  std::vector<float> in(n_in);
  r3::fill_uniform(in, 271, -1.0, 1.0);
  r3::DeviceArray<float> din(n_in), dout(n_out);
  din.upload(in);

  dim3 block(16, 16);
  dim3 grid(r3::blocks_for(ow, block.x), r3::blocks_for(oh, block.y), planes);
  auto launch = [&] { maxpool2d_kernel<<<grid, block>>>(h, w, oh, ow, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<float> ref(n_out);
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        float m = -INFINITY;
        for (int y = std::max(oy * kStride - kPad, 0); y <= std::min(oy * kStride - kPad + kWindow - 1, h - 1); ++y)
          for (int x = std::max(ox * kStride - kPad, 0); x <= std::min(ox * kStride - kPad + kWindow - 1, w - 1); ++x)
            m = std::max(m, in[(static_cast<size_t>(p) * h + y) * w + x]);
        ref[(static_cast<size_t>(p) * oh + oy) * ow + ox] = m;
      }
  bool ok = r3::check_equal("out", out, ref);

  r3::report(kProgram, "maxpool2d_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
