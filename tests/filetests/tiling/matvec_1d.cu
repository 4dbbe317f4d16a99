// RUN: rewrite shared-tiling block=256,1,1 disjoint=yes
//
// The tiling template on a one-dimensional kernel, one thread per row (blocks of 256). A is
// read through a tile of R3_TK columns by 256 rows, loaded so that consecutive threads read
// consecutive k of a row (the original's threads read A with a stride of cols); x[k] depends on
// no coordinate, one address for the whole block, and is read as it is. Only the x coordinate
// exists, so register blocking groups blocks along x (R3_RX) alone.
__global__ void matvec(int rows, int cols, const float *A, const float *x, float *y) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float s = 0.0f;
  for (int k = 0; k < cols; ++k) s += A[row * cols + k] * x[k];
  y[row] = s;
}
