// RUN: rewrite shared-tiling block=16,16,1 disjoint=yes
// RUN: rewrite shared-tiling block=16,16,1 disjoint=no
//
// Evolve's shared-tiling template (r3-evolve's tiling, offered by `r3 evolve --proposer
// rules`) on a naive matrix product, for recordings whose launches all used 16x16 blocks and
// passed disjoint matrices. Blocks of that shape whose threads are all active
// (`__syncthreads_and`) take the tiled path: A's and B's values for R3_TK steps of k are loaded
// into shared memory, contiguously along each operand's unit-stride index, and each thread
// reduces over the tile in the original order. Register blocking groups R3_RX x R3_RY blocks:
// the group's first block computes every output of the group, each thread one per block, with
// its sums in registers, and the other blocks return; every output is still computed as the
// same thread of its own block computes it in the original. R3_PARAM lists the knobs' values,
// R3_REQUIRE what a combination must meet (the tiles fit 48 KiB of shared memory); other
// blocks run the original loop. Where the recordings show pointers into one allocation
// (disjoint=no), the template does not apply.
__global__ void gemm(int n, const float *A, const float *B, float *C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[row * n + k] * B[k * n + col];
  C[row * n + col] = acc;
}
