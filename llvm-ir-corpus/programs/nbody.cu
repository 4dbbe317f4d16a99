// nbody: all-pairs gravitational accelerations for 32768 bodies (softened),
// positions and masses as float4, staged through shared memory one block-sized
// tile at a time. 2^30 interactions per launch. Checked on 512 sampled bodies.
#include "r3corpus.h"

static const char* kProgram = "nbody";
constexpr int kBlock = 256;  // tile size == block size

__global__ void nbody_accel_kernel(int n, float eps2, const float4* __restrict__ pos,
                                   float4* __restrict__ acc) {
  __shared__ float4 tile[kBlock];
  int i = blockIdx.x * kBlock + threadIdx.x;
  float4 pi = i < n ? pos[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float ax = 0.0f, ay = 0.0f, az = 0.0f;
  for (int base = 0; base < n; base += kBlock) {
    int j = base + threadIdx.x;
    tile[threadIdx.x] = j < n ? pos[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kBlock; ++k) {
      float4 pj = tile[k];
      float dx = pj.x - pi.x, dy = pj.y - pi.y, dz = pj.z - pi.z;
      float r2 = dx * dx + dy * dy + dz * dz + eps2;
      float inv = rsqrtf(r2);
      float s = pj.w * inv * inv * inv;
      ax += dx * s;
      ay += dy * s;
      az += dz * s;
    }
    __syncthreads();
  }
  if (i < n) acc[i] = make_float4(ax, ay, az, 0.0f);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 32768;
  const float eps2 = 0.01f;

  std::vector<float> raw(4 * static_cast<size_t>(n));
  r3::fill_uniform(raw, 161, -1.0, 1.0);
  std::vector<float4> pos(n);
  for (int i = 0; i < n; ++i)
    pos[i] = make_float4(raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], 1.0f + 0.5f * raw[4 * i + 3]);
  r3::DeviceArray<float4> dpos(n), dacc(n);
  dpos.upload(pos);

  auto launch = [&] {
    nbody_accel_kernel<<<r3::blocks_for(n, kBlock), kBlock>>>(n, eps2, dpos.get(), dacc.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float4> acc = dacc.download();

  const int samples = 512;
  std::vector<double> ref, got;
  r3::Lcg rng(162);
  for (int s = 0; s < samples; ++s) {
    int i = rng.below(n);
    double a[3] = {0.0, 0.0, 0.0};
    for (int j = 0; j < n; ++j) {
      double d[3] = {static_cast<double>(pos[j].x) - pos[i].x, static_cast<double>(pos[j].y) - pos[i].y,
                     static_cast<double>(pos[j].z) - pos[i].z};
      double r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + eps2;
      double sc = pos[j].w / (r2 * std::sqrt(r2));
      for (int c = 0; c < 3; ++c) a[c] += d[c] * sc;
    }
    ref.insert(ref.end(), a, a + 3);
    got.insert(got.end(), {acc[i].x, acc[i].y, acc[i].z});
  }
  double scale = 0.0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  bool ok = r3::check_close("acc(sampled)", got, ref, 1e-3, 1e-4 * scale);

  r3::report(kProgram, "nbody_accel_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
