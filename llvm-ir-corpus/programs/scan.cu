// scan: inclusive prefix sum of 2^25 ints in three kernels.
//  1. scan_tiles_kernel (timed): each block scans a 1024-element tile
//     (4 items per thread, warp-shuffle scan of thread totals) and writes the
//     tile total.
//  2. scan_tile_totals_kernel: one block turns tile totals into exclusive
//     tile offsets, 1024 at a time with a running carry.
//  3. add_tile_offsets_kernel (timed): out = partial + offset of its tile.
// Every kernel is out of place, so each can be relaunched on its own.
#include "r3corpus.h"

static const char* kProgram = "scan";
constexpr int kThreads = 256;
constexpr int kItems = 4;
constexpr int kTile = kThreads * kItems;
constexpr int kTotalsThreads = 1024;

// Inclusive scan of one value per thread across a block of NT threads
// (NT a multiple of 32, at most 1024). warp_sums holds NT/32 ints of shared
// memory. Ends with a barrier, so it can be called again right away.
template <int NT>
__device__ int block_inclusive_scan(int v, int* warp_sums) {
  const unsigned full = 0xffffffffu;
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int off = 1; off < 32; off <<= 1) {
    int t = __shfl_up_sync(full, v, off);
    if (lane >= off) v += t;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = lane < NT / 32 ? warp_sums[lane] : 0;
    for (int off = 1; off < 32; off <<= 1) {
      int t = __shfl_up_sync(full, w, off);
      if (lane >= off) w += t;
    }
    if (lane < NT / 32) warp_sums[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += warp_sums[warp - 1];
  __syncthreads();
  return v;
}

__global__ void scan_tiles_kernel(int n, const int* __restrict__ in, int* __restrict__ partial,
                                  int* __restrict__ tile_totals) {
  __shared__ int tile[kTile];
  __shared__ int warp_sums[kThreads / 32];
  int base = blockIdx.x * kTile;
  for (int k = 0; k < kItems; ++k) {
    int idx = base + k * kThreads + threadIdx.x;
    tile[k * kThreads + threadIdx.x] = idx < n ? in[idx] : 0;
  }
  __syncthreads();
  int local[kItems];
  int run = 0;
  for (int k = 0; k < kItems; ++k) {
    run += tile[threadIdx.x * kItems + k];
    local[k] = run;
  }
  int incl = block_inclusive_scan<kThreads>(run, warp_sums);
  int excl = incl - run;
  for (int k = 0; k < kItems; ++k) tile[threadIdx.x * kItems + k] = local[k] + excl;
  if (threadIdx.x == kThreads - 1) tile_totals[blockIdx.x] = incl;
  __syncthreads();
  for (int k = 0; k < kItems; ++k) {
    int idx = base + k * kThreads + threadIdx.x;
    if (idx < n) partial[idx] = tile[k * kThreads + threadIdx.x];
  }
}

__global__ void scan_tile_totals_kernel(int count, const int* __restrict__ totals,
                                        int* __restrict__ offsets) {
  __shared__ int warp_sums[kTotalsThreads / 32];
  __shared__ int chunk_total;
  int carry = 0;
  for (int start = 0; start < count; start += kTotalsThreads) {
    int i = start + threadIdx.x;
    int v = i < count ? totals[i] : 0;
    int incl = block_inclusive_scan<kTotalsThreads>(v, warp_sums);
    if (i < count) offsets[i] = carry + incl - v;
    if (threadIdx.x == kTotalsThreads - 1) chunk_total = incl;
    __syncthreads();
    carry += chunk_total;
    __syncthreads();
  }
}

__global__ void add_tile_offsets_kernel(int n, const int* __restrict__ partial,
                                        const int* __restrict__ offsets, int* __restrict__ out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = partial[i] + offsets[i / kTile];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 25;
  const int tiles = (n + kTile - 1) / kTile;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<int> in(n);
  r3::fill_int(in, 41, 16);
  r3::DeviceArray<int> din(n), dpartial(n), dout(n), dtotals(tiles), doffsets(tiles);
  din.upload(in);

  auto scan_tiles = [&] {
    scan_tiles_kernel<<<tiles, kThreads>>>(n, din.get(), dpartial.get(), dtotals.get());
  };
  auto add_offsets = [&] {
    add_tile_offsets_kernel<<<r3::blocks_for(n, block), block>>>(n, dpartial.get(),
                                                                 doffsets.get(), dout.get());
  };
  scan_tiles();
  CUDA_CHECK_LAUNCH();
  scan_tile_totals_kernel<<<1, kTotalsThreads>>>(tiles, dtotals.get(), doffsets.get());
  CUDA_CHECK_LAUNCH();
  add_offsets();
  CUDA_CHECK_LAUNCH();
  std::vector<int> out = dout.download();

  std::vector<int> ref(n);
  int run = 0;
  for (int i = 0; i < n; ++i) ref[i] = run += in[i];
  bool ok = r3::check_equal("prefix", out, ref);

  r3::report(kProgram, "scan_tiles_kernel", r3::time_median_ms(scan_tiles), ok);
  r3::report(kProgram, "add_tile_offsets_kernel", r3::time_median_ms(add_offsets), ok);
  return ok ? 0 : 1;
}
