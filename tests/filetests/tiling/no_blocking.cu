// RUN: rewrite shared-tiling block=32,8,1 disjoint=yes
//
// Tiling without register blocking: after the loop the kernel reads threadIdx again (the
// per-column bias of its block), which an output computed by another block's thread would get
// wrong, so the template tiles the loop (blocks of 32x8) and offers no R3_RX/R3_RY.
__global__ void gemm_bias(int n, const float *A, const float *B, const float *bias, float *C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc + bias[threadIdx.x];
}
