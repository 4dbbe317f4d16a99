// histogram: 256-bin histogram of 2^27 bytes (read as 32-bit words). Each
// block counts into a private shared-memory histogram with shared atomics,
// then adds its non-zero bins to the global one with global atomics.
// A quarter of the bytes fall into 8 hot bins, to create contention.
// The global bins are zeroed before every launch (outside the timed region).
#include "r3corpus.h"

static const char* kProgram = "histogram";
constexpr int kBins = 256;
constexpr int kBlocks = 1024;

__global__ void histogram_kernel(size_t nwords, const unsigned* __restrict__ words,
                                 unsigned* __restrict__ bins) {
  __shared__ unsigned local[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < nwords; i += stride) {
    unsigned w = words[i];
    atomicAdd(&local[w & 0xffu], 1u);
    atomicAdd(&local[(w >> 8) & 0xffu], 1u);
    atomicAdd(&local[(w >> 16) & 0xffu], 1u);
    atomicAdd(&local[w >> 24], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&bins[b], local[b]);
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const size_t nbytes = size_t(1) << 27, nwords = nbytes / 4;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<unsigned> words(nwords, 0);
  std::vector<unsigned> ref(kBins, 0);
  for (size_t i = 0; i < nbytes; ++i) {
    uint32_t h = r3::hash2(141, i);
    unsigned byte = (h >> 24) < 64 ? (h & 7u) * 31u : (h & 0xffu);
    words[i / 4] |= byte << (8 * (i % 4));
    ++ref[byte];
  }
  r3::DeviceArray<unsigned> dwords(nwords), dbins(kBins);
  dwords.upload(words);

  auto reset = [&] { CUDA_CHECK(cudaMemsetAsync(dbins.get(), 0, dbins.bytes())); };
  auto launch = [&] { histogram_kernel<<<kBlocks, block>>>(nwords, dwords.get(), dbins.get()); };
  reset();
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<unsigned> bins = dbins.download();
  bool ok = r3::check_equal("bins", bins, ref);

  r3::report(kProgram, "histogram_kernel", r3::time_median_ms(launch, reset), ok);
  return ok ? 0 : 1;
}
