// spmv_csr: y = A x for a generated 2^20 x 2^20 sparse matrix in CSR form
// (8..40 entries per row, about 25M in all; half the columns near the
// diagonal, half random), one thread per row (CSR-scalar). Irregular loop
// trip counts and gathers from x.
#include "r3corpus.h"

static const char* kProgram = "spmv_csr";

__global__ void spmv_csr_kernel(int rows, const int* __restrict__ row_ptr,
                                const int* __restrict__ col_idx, const float* __restrict__ vals,
                                const float* __restrict__ x, float* __restrict__ y) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.0f;
  for (int e = row_ptr[r]; e < row_ptr[r + 1]; ++e) acc += vals[e] * x[col_idx[e]];
  y[r] = acc;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int rows = 1 << 20;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<int> row_ptr(rows + 1, 0);
  for (int r = 0; r < rows; ++r) row_ptr[r + 1] = row_ptr[r] + 8 + static_cast<int>(r3::hash2(151, r) % 33);
  const int nnz = row_ptr[rows];
  std::vector<int> col_idx(nnz);
  std::vector<float> vals(nnz), x(rows);
  for (int r = 0; r < rows; ++r)
    for (int e = row_ptr[r]; e < row_ptr[r + 1]; ++e) {
      uint32_t h = r3::hash2(152, e);
      col_idx[e] = (h & 1) ? static_cast<int>((r + (h >> 1) % 129 + rows - 64) % rows)
                           : static_cast<int>((h >> 1) % rows);
    }
  r3::fill_uniform(vals, 153, 0.0, 1.0);
  r3::fill_uniform(x, 154, 0.0, 1.0);
  std::fprintf(stderr, "  rows %d, nnz %d\n", rows, nnz);

  r3::DeviceArray<int> drow(rows + 1), dcol(nnz);
  r3::DeviceArray<float> dvals(nnz), dx(rows), dy(rows);
  drow.upload(row_ptr);
  dcol.upload(col_idx);
  dvals.upload(vals);
  dx.upload(x);

  auto launch = [&] {
    spmv_csr_kernel<<<r3::blocks_for(rows, block), block>>>(rows, drow.get(), dcol.get(),
                                                            dvals.get(), dx.get(), dy.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<float> y = dy.download();

  std::vector<double> ref(rows);
  for (int r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int e = row_ptr[r]; e < row_ptr[r + 1]; ++e) acc += static_cast<double>(vals[e]) * x[col_idx[e]];
    ref[r] = acc;
  }
  bool ok = r3::check_close("y", y, ref, 1e-5, 0.0);

  r3::report(kProgram, "spmv_csr_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
