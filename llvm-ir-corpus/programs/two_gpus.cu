// two_gpus: one 1-D field of 2^23 floats split over two GPUs (issue 62), as a
// program that uses several GPUs of a node is written:
//   cudaSetDevice picks each half's GPU; each GPU relaxes its own half
//     (tg_relax_kernel: a 3-point average, 8 steps, ping-pong between two
//     buffers, the half's ends held);
//   device 0 enables peer access to device 1 where the pair allows it;
//   device 1's result is copied to device 0 (cudaMemcpyPeer), where
//     tg_combine_kernel blends the two halves into the whole field;
//   tg_peer_dot_kernel on device 0 multiplies its half by device 1's half,
//     read straight from device 1's memory where peer access is on (else from
//     the copy), one partial sum per block.
// On a machine with one GPU both halves run on device 0 and the program says
// so; the results are the same. Check: every step on the CPU (float, same
// order of operations; FMA contraction allowed for by the tolerance), the dot
// product in double. Timed: each kernel on device 0.
#include "r3corpus.h"

static const char* kProgram = "two_gpus";

__global__ void tg_relax_kernel(int n, const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i == 0 || i == n - 1) {
    out[i] = in[i];
    return;
  }
  out[i] = 0.25f * (in[i - 1] + 2.0f * in[i] + in[i + 1]);
}

__global__ void tg_combine_kernel(int half, float w, const float* a, const float* b, float* whole) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 * half) return;
  // The two halves blended across the seam: each point takes a share of its mirror.
  int j = 2 * half - 1 - i;
  float mine = i < half ? a[i] : b[i - half];
  float mirror = j < half ? a[j] : b[j - half];
  whole[i] = (1.0f - w) * mine + w * mirror;
}

__global__ void tg_peer_dot_kernel(int n, const float* mine, const float* peer, float* partial) {
  // One block of R3_BLOCK_SIZE threads per partial sum, each thread a strided serial sum.
  __shared__ float sums[1024];
  int t = threadIdx.x;
  float s = 0.0f;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) s += mine[i] * peer[i];
  sums[t] = s;
  __syncthreads();
  if (t == 0) {
    float total = 0.0f;
    for (int k = 0; k < static_cast<int>(blockDim.x); ++k) total += sums[k];
    partial[blockIdx.x] = total;
  }
}

// 8 relaxation steps of one half on the CPU, as the kernel computes them.
static std::vector<float> relax_on_host(std::vector<float> v, int steps) {
  std::vector<float> next(v.size());
  const int n = static_cast<int>(v.size());
  for (int s = 0; s < steps; ++s) {
    next[0] = v[0];
    next[n - 1] = v[n - 1];
    for (int i = 1; i < n - 1; ++i) next[i] = 0.25f * (v[i - 1] + 2.0f * v[i] + v[i + 1]);
    v.swap(next);
  }
  return v;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int half = 1 << 22, steps = 8, dot_blocks = 256;
  const float w = 0.125f;
  const unsigned block = R3_BLOCK_SIZE;
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  const int dev[2] = {0, count > 1 ? 1 : 0};
  int peer = 0;
  if (dev[1] != dev[0]) {
    CUDA_CHECK(cudaDeviceCanAccessPeer(&peer, dev[0], dev[1]));
    if (peer) {
      CUDA_CHECK(cudaSetDevice(dev[0]));
      cudaError_t e = cudaDeviceEnablePeerAccess(dev[1], 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CUDA_CHECK(e);
      (void)cudaGetLastError();
    }
    std::fprintf(stderr, "[%s] two GPUs: halves on devices %d and %d, peer access %s\n", kProgram,
                 dev[0], dev[1], peer ? "on (the dot product reads device 1's memory)"
                                      : "not available (the dot product reads the copy)");
  } else {
    std::fprintf(stderr, "[%s] one GPU: both halves run on device 0 (no peer copy, no peer access)\n",
                 kProgram);
  }

  std::vector<float> h[2] = {std::vector<float>(half), std::vector<float>(half)};
  r3::fill_uniform(h[0], 301, -1.0, 1.0);
  r3::fill_uniform(h[1], 302, -1.0, 1.0);

  // Each half's buffers on its own device.
  CUDA_CHECK(cudaSetDevice(dev[1]));
  r3::DeviceArray<float> b_in(half), b_out(half);
  b_in.upload(h[1]);
  CUDA_CHECK(cudaSetDevice(dev[0]));
  r3::DeviceArray<float> a_in(half), a_out(half), b_copy(half), whole(2 * static_cast<size_t>(half)),
      partial(dot_blocks);
  a_in.upload(h[0]);

  const unsigned grid = r3::blocks_for(half, block);
  // Both halves relaxed at once, a step on each device in turn (launches are asynchronous, so
  // the devices run side by side); steps is even, so each result ends in its `in` buffer.
  r3::DeviceArray<float>* bufs[2][2] = {{&a_in, &a_out}, {&b_in, &b_out}};
  for (int s = 0; s < steps; ++s)
    for (int d : {1, 0}) {
      CUDA_CHECK(cudaSetDevice(dev[d]));
      tg_relax_kernel<<<grid, block>>>(half, bufs[d][s % 2]->get(), bufs[d][1 - s % 2]->get());
      CUDA_CHECK_LAUNCH();
    }
  CUDA_CHECK(cudaSetDevice(dev[1]));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaSetDevice(dev[0]));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyPeer(b_copy.get(), dev[0], b_in.get(), dev[1], b_in.bytes()));
  auto combine = [&] {
    tg_combine_kernel<<<r3::blocks_for(2 * static_cast<size_t>(half), block), block>>>(
        half, w, a_in.get(), b_copy.get(), whole.get());
  };
  // Device 1's memory itself where peer access is on, else the copy on device 0.
  const float* peer_half = peer ? b_in.get() : b_copy.get();
  auto dot = [&] { tg_peer_dot_kernel<<<dot_blocks, block>>>(half, a_in.get(), peer_half, partial.get()); };
  combine();
  dot();
  CUDA_CHECK_LAUNCH();
  std::vector<float> got_a = a_in.download(), got_b = b_copy.download(), got_whole = whole.download();
  std::vector<float> got_partial = partial.download();

  std::vector<float> ref_a = relax_on_host(h[0], steps), ref_b = relax_on_host(h[1], steps);
  std::vector<double> ref_whole(2 * static_cast<size_t>(half));
  for (int i = 0; i < 2 * half; ++i) {
    int j = 2 * half - 1 - i;
    double mine = i < half ? ref_a[i] : ref_b[i - half];
    double mirror = j < half ? ref_a[j] : ref_b[j - half];
    ref_whole[i] = (1.0 - w) * mine + w * mirror;
  }
  double ref_dot = 0.0, got_dot = 0.0, scale = 0.0;
  for (int i = 0; i < half; ++i) {
    ref_dot += static_cast<double>(ref_a[i]) * ref_b[i];
    scale += std::fabs(static_cast<double>(ref_a[i]) * ref_b[i]);
  }
  for (float p : got_partial) got_dot += p;
  // Relaxation: 8 steps of 3-point sums, each within a few float ulps of the CPU's.
  bool ok = r3::check_close("device 0 half", got_a, ref_a, 1e-5, 1e-6);
  ok = r3::check_close("device 1 half (peer copy)", got_b, ref_b, 1e-5, 1e-6) && ok;
  ok = r3::check_close("whole", got_whole, ref_whole, 1e-5, 1e-6) && ok;
  // Float partial sums of 2^22 products in another order: within 1e-5 of the sum of |terms|.
  bool dot_ok = std::fabs(got_dot - ref_dot) <= 1e-5 * scale;
  std::fprintf(stderr, "  dot: got %.6g expected %.6g (%s)\n", got_dot, ref_dot, dot_ok ? "ok" : "FAIL");
  ok = ok && dot_ok;

  // Timed on device 0: one relaxation step, the combine, the dot product.
  CUDA_CHECK(cudaSetDevice(dev[0]));
  auto one_step = [&] { tg_relax_kernel<<<grid, block>>>(half, a_in.get(), a_out.get()); };
  r3::report(kProgram, "tg_relax_kernel", r3::time_median_ms(one_step), ok);
  r3::report(kProgram, "tg_combine_kernel", r3::time_median_ms(combine), ok);
  r3::report(kProgram, "tg_peer_dot_kernel", r3::time_median_ms(dot), ok);
  return ok ? 0 : 1;
}
