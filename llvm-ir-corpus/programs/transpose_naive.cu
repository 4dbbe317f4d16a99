// transpose_naive: out = in^T for an 8192 x 4096 float matrix, one element per
// thread: reads are coalesced, writes are strided by the row count.
// 32 x 8 blocks. 2 x 128 MiB of traffic per launch.
#include "r3corpus.h"

static const char* kProgram = "transpose_naive";

__global__ void transpose_naive_kernel(int rows, int cols, const float* __restrict__ in,
                                       float* __restrict__ out) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 8192, cols = 4096;
  const size_t n = static_cast<size_t>(rows) * cols;

  std::vector<float> in(n);
  r3::fill_uniform(in, 111, -1.0, 1.0);
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  dim3 block(32, 8);
  dim3 grid(r3::blocks_for(cols, block.x), r3::blocks_for(rows, block.y));
  auto launch = [&] { transpose_naive_kernel<<<grid, block>>>(rows, cols, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<float> ref(n);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
  bool ok = r3::check_equal("out", out, ref);

  r3::report(kProgram, "transpose_naive_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
