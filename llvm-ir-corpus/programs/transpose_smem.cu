// transpose_smem: out = in^T for an 8192 x 4096 float matrix through 32 x 32
// shared-memory tiles padded to 33 columns (no bank conflicts on the
// transposed read), so both global reads and writes are coalesced.
// 32 x 8 blocks, 4 elements per thread.
#include "r3corpus.h"

static const char* kProgram = "transpose_smem";
constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;

__global__ void transpose_smem_kernel(int rows, int cols, const float* __restrict__ in,
                                      float* __restrict__ out) {
  __shared__ float tile[kTile][kTile + 1];
  int c = blockIdx.x * kTile + threadIdx.x;
  int r0 = blockIdx.y * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
    int r = r0 + j;
    if (r < rows && c < cols) tile[j][threadIdx.x] = in[static_cast<size_t>(r) * cols + c];
  }
  __syncthreads();
  // Output tile: rows come from the input columns of this block.
  int oc = r0 + threadIdx.x;
  int or0 = blockIdx.x * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
    int orow = or0 + j;
    if (orow < cols && oc < rows) out[static_cast<size_t>(orow) * rows + oc] = tile[threadIdx.x][j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 8192, cols = 4096;
  const size_t n = static_cast<size_t>(rows) * cols;

  std::vector<float> in(n);
  r3::fill_uniform(in, 121, -1.0, 1.0);
  r3::DeviceArray<float> din(n), dout(n);
  din.upload(in);

  dim3 block(kTile, kRowsPerPass);
  dim3 grid(r3::blocks_for(cols, kTile), r3::blocks_for(rows, kTile));
  auto launch = [&] { transpose_smem_kernel<<<grid, block>>>(rows, cols, din.get(), dout.get()); };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> out = dout.download();

  std::vector<float> ref(n);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
  bool ok = r3::check_equal("out", out, ref);

  r3::report(kProgram, "transpose_smem_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
