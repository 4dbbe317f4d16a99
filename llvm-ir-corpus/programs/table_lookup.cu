// table_lookup: an application in miniature around one lookup kernel. A table
// of 2^23 (key, value) pairs is built on the GPU, then each of 2^20 clients
// looks up a basket of keys in it (80% of them present) and sums the values
// (float prices) it finds; small kernels and thrust summarise the results.
// `-k` picks the table, and with it the dominant kernel, so that `table_lookup
// -k 0` and `table_lookup -k 1` are two workloads of one executable (issue 55):
//   -k 0  sorted table: thrust::sort_by_key of the pairs, then
//         tl_search_kernel   one thread per client, 640 lookups, each a binary
//                            search (23 steps) over the 32 MiB of sorted keys
//                            and one gather of its value
//   -k 1  hash table: 2^24 slots of (key, value), open addressing with linear
//         probing at load 0.5, built by
//         tl_clear_kernel    every slot empty (one thread per slot)
//         tl_insert_kernel   one thread per pair, atomicCAS on the slot's key
//         tl_probe_kernel    one thread per client, 4096 lookups, each one hash
//                            and 1.5 (hit) to 2.5 (miss) slots of the 128 MiB
//                            table on average
// then, in both workloads:
//   tl_mean_kernel   mean value found per client (total / hits, float)
//   tl_hist_kernel   64-bin histogram of the clients' hit counts, privatised
//                    in shared memory (any 1D block size)
//   thrust::reduce   grand totals of the sums (double) and hits (64-bit)
//   thrust::sort     the client means ranked (a copy), for their median
// Plain pointers, no __restrict__, the lookup kernels' sums kept through the
// output pointers (total[c] += ..., hits[c] += 1), as the corpus's other
// naive kernels. `-l N` sets the lookups per client (default 640 for -k 0,
// 4096 for -k 1): the dominant kernel's time scales with it.
// Sizing (H200, not yet measured; the lookups per client are what to adjust):
//   tl_search_kernel: 2^20 x 640 = 6.7e8 searches. The 23 loads of a search
//   are a dependent chain; the top ~12 levels stay in L1, the next ~10 hit L2
//   (the 32 MiB of keys fit its 50 MB), the value gather half misses. Every
//   step is one L1 wavefront per thread (the 32 lanes touch 32 lines), so the
//   L1 tag stage bounds it near 132 SMs x 1.98 GHz / 23 = 11e9 searches/s;
//   L2 requests (~11 a search, ~150e9/s) near 14e9/s: at 7..12e9/s a launch
//   takes 56-96 ms.
//   tl_probe_kernel: 2^20 x 4096 = 4.3e9 probes, ~1.2 random 32-byte sectors
//   each, ~0.8 of them from HBM (128 MiB table, 50 MB L2); random sectors at
//   ~1.5-2.4 TB/s of the 4.8 TB/s peak are 47-75e9 sectors/s, so 50-90e9
//   probes/s: 48-86 ms a launch. The 270k resident threads keep enough loads
//   in flight (one each, ~1.5 us loaded latency: 180e9/s) for that.
//   The rest of a workload is small: the pair sort (CUB onesweep, 8M pairs)
//   ~1 ms, clear ~35 us, insert ~1 ms (8M random atomicCAS), mean ~5 us,
//   histogram ~10 us, the reduces and the 2^20-float sort ~0.2 ms: the
//   dominant kernel is ~97% of a workload's GPU time.
// Timing: the dominant kernel one warm-up and 5 timed launches
// (r3::time_median_ms_n), the small kernels as usual (tl_insert_kernel after
// a clear each time, tl_hist_kernel after zeroing the bins, outside the
// timing); the loop line is the median of three more runs of the whole
// pipeline (thrust's calls included, with their allocations and host
// synchronisation) after the checked one, each from the unsorted table: one
// run moved from 79 to 157 ms from process to process in every build while
// its kernels' times agreed within 0.3% (H200, 2026-11-29). A run launches
// the dominant kernel 10 times (~0.8 s).
// Data: key of pair j = mix(j + seed) (a bijection of 32-bit integers, so the
// keys are distinct), its value uniform in [0, 100); query r of client c is
// the key of pair j = hash(c, r) scaled to [0, 1.25 n): present when j < n.
// No key equals the empty-slot marker (checked).
// Check, against the CPU:
//   total, hits  on 4096 sampled clients (every 256th), their lookups
//                answered from the pair index j directly (no table), the
//                float sum in the same order (so equal; rel 1e-6): 0.05 s
//                (-k 0) and 0.26 s (-k 1) of one CPU core, where all clients
//                would take 12 s and 68 s
//   mean         all, rel 1e-6 against total / hits in float from the GPU's
//                own total and hits (one correctly rounded division: equal)
//   hist         exact, all, from the GPU's hits
//   grand sums   from the GPU's total (in double, rel 1e-9: any order) and
//                hits (exact)
//   ranked       exact, the CPU's std::sort of the GPU's means
//   sorted pairs (-k 0) keys strictly ascending, and the order-free sum of a
//                hash of each (key, value) pair equal to the input's: the
//                pairs moved together
#include "r3corpus.h"

// clang cannot unroll two of CUB's loops that ask for it, and says so for each sort.
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif
#include <thrust/execution_policy.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>

#include <cstring>

static const char* kProgram = "table_lookup";

static const uint32_t kEmpty = 0xffffffffu;  // a free slot's key
static const uint32_t kKeySeed = 0x2545f491u;
static const uint32_t kQuerySeed = 0x6a09e667u;

// Host and device: the integer mixer of r3corpus.h (a bijection of uint32).
__host__ __device__ inline uint32_t tl_mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Key of pair j.
__host__ __device__ inline uint32_t tl_key(uint32_t j) { return tl_mix(j + kKeySeed); }

// Pair index that lookup r of client c asks for, in [0, span).
__host__ __device__ inline uint32_t tl_query(uint32_t c, uint32_t r, uint32_t span) {
  uint32_t h = tl_mix(tl_mix(c * 0x9e3779b9u + kQuerySeed) ^ r);
  return static_cast<uint32_t>((static_cast<uint64_t>(h) * span) >> 32);
}

// First slot a key tries.
__device__ inline uint32_t tl_slot(uint32_t key, uint32_t mask) {
  return tl_mix(key ^ 0x5bd1e995u) & mask;
}

__global__ void tl_search_kernel(int clients, int lookups, uint32_t span, int n, const uint32_t* keys,
                                 const float* vals, float* total, uint32_t* hits) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < clients) {
    total[c] = 0;
    hits[c] = 0;
    for (int r = 0; r < lookups; r++) {
      uint32_t key = tl_key(tl_query(c, r, span));
      int lo = 0, hi = n;  // the first index whose key is >= key
      while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (keys[mid] < key)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < n && keys[lo] == key) {
        total[c] += vals[lo];
        hits[c] += 1;
      }
    }
  }
}

__global__ void tl_clear_kernel(uint32_t nslots, uint2* slots) {
  uint32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < nslots) slots[s] = make_uint2(kEmpty, 0u);
}

__global__ void tl_insert_kernel(int n, uint32_t mask, const uint32_t* keys, const float* vals,
                                 uint2* slots) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    uint32_t key = keys[i];
    uint32_t s = tl_slot(key, mask);
    for (;;) {
      uint32_t prev = atomicCAS(reinterpret_cast<unsigned int*>(&slots[s].x), kEmpty, key);
      if (prev == kEmpty || prev == key) {
        slots[s].y = __float_as_uint(vals[i]);
        break;
      }
      s = (s + 1) & mask;
    }
  }
}

__global__ void tl_probe_kernel(int clients, int lookups, uint32_t span, uint32_t mask,
                                const uint2* slots, float* total, uint32_t* hits) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < clients) {
    total[c] = 0;
    hits[c] = 0;
    for (int r = 0; r < lookups; r++) {
      uint32_t key = tl_key(tl_query(c, r, span));
      uint32_t s = tl_slot(key, mask);
      for (;;) {
        uint2 e = slots[s];
        if (e.x == key) {
          total[c] += __uint_as_float(e.y);
          hits[c] += 1;
          break;
        }
        if (e.x == kEmpty) break;
        s = (s + 1) & mask;
      }
    }
  }
}

__global__ void tl_mean_kernel(int clients, const float* total, const uint32_t* hits, float* mean) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < clients) mean[c] = hits[c] ? total[c] / static_cast<float>(hits[c]) : 0.0f;
}

static const int kBins = 64;

__global__ void tl_hist_kernel(int clients, int lookups, const uint32_t* hits, unsigned int* hist) {
  __shared__ unsigned int local[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < clients) {
    int b = static_cast<int>(static_cast<uint64_t>(hits[c]) * kBins / (lookups + 1));
    atomicAdd(&local[b], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}

static void usage() {
  std::fprintf(stderr, "usage: %s [-k 0|1] [-l LOOKUPS]\n"
               "  -k 0  sorted table, binary search (tl_search_kernel; the default)\n"
               "  -k 1  hash table, linear probing (tl_probe_kernel)\n"
               "  -l N  lookups per client (default 640 for -k 0, 4096 for -k 1)\n",
               kProgram);
}

// Order-free digest of a (key, value) pair.
static uint64_t pair_digest(uint32_t key, float val) {
  uint32_t bits;
  std::memcpy(&bits, &val, sizeof bits);
  return tl_mix(key ^ tl_mix(bits + 0x3c6ef372u));
}

int main(int argc, char** argv) {
  int which = 0, lookups = 0;
  for (int a = 1; a < argc; a++) {
    const bool has_value = a + 1 < argc;
    if (std::strcmp(argv[a], "-k") == 0 && has_value) {
      which = std::atoi(argv[++a]);
    } else if (std::strcmp(argv[a], "-l") == 0 && has_value) {
      lookups = std::atoi(argv[++a]);
      if (lookups < 1) {
        std::fprintf(stderr, "%s: -l needs a positive count of lookups\n", kProgram);
        return 2;
      }
    } else {
      usage();
      return 2;
    }
  }
  if (which != 0 && which != 1) {
    usage();
    return 2;
  }
  if (lookups == 0) lookups = which == 0 ? 640 : 4096;
  if (!r3::gpu_available(kProgram)) return 0;
  std::fprintf(stderr, "[%s] -k %d: %s, %d lookups per client\n", kProgram, which,
               which == 0 ? "sorted table, tl_search_kernel" : "hash table, tl_probe_kernel",
               lookups);

  const int n = 1 << 23, clients = 1 << 20;
  const uint32_t span = n + n / 4;
  const uint32_t nslots = 2u * n, mask = nslots - 1;
  const unsigned block = R3_BLOCK_SIZE;

  // The pairs, in index order (the keys in no order).
  std::vector<uint32_t> keys(n);
  std::vector<float> vals(n);
  uint64_t want_digest = 0;
  for (uint32_t j = 0; j < span; j++) {
    uint32_t key = tl_key(j);
    if (key == kEmpty) {
      std::fprintf(stderr, "%s: pair %u's key is the empty-slot marker: change kKeySeed\n", kProgram, j);
      return 2;
    }
    if (j < static_cast<uint32_t>(n)) {
      keys[j] = key;
      vals[j] = r3::uniform(77, j, 0.0f, 100.0f);
      want_digest += pair_digest(key, vals[j]);
    }
  }

  r3::DeviceArray<uint32_t> dkeys(n), dhits(clients);
  r3::DeviceArray<float> dvals(n), dtotal(clients);
  r3::DeviceArray<uint2> dslots(which == 1 ? nslots : 1);
  r3::DeviceArray<float> dmean(clients), dranked(clients);
  r3::DeviceArray<unsigned int> dhist(kBins);
  auto upload_table = [&] {
    dkeys.upload(keys);
    dvals.upload(vals);
  };

  auto clear = [&] { tl_clear_kernel<<<r3::blocks_for(nslots, block), block>>>(nslots, dslots.get()); };
  auto insert = [&] {
    tl_insert_kernel<<<r3::blocks_for(n, block), block>>>(n, mask, dkeys.get(), dvals.get(), dslots.get());
  };
  auto lookup = [&] {
    if (which == 0)
      tl_search_kernel<<<r3::blocks_for(clients, block), block>>>(clients, lookups, span, n, dkeys.get(),
                                                                  dvals.get(), dtotal.get(), dhits.get());
    else
      tl_probe_kernel<<<r3::blocks_for(clients, block), block>>>(clients, lookups, span, mask,
                                                                 dslots.get(), dtotal.get(), dhits.get());
  };
  auto mean = [&] {
    tl_mean_kernel<<<r3::blocks_for(clients, block), block>>>(clients, dtotal.get(), dhits.get(),
                                                              dmean.get());
  };
  auto zero_hist = [&] { CUDA_CHECK(cudaMemset(dhist.get(), 0, dhist.bytes())); };
  auto hist = [&] {
    tl_hist_kernel<<<r3::blocks_for(clients, block), block>>>(clients, lookups, dhits.get(), dhist.get());
  };

  double grand_total = 0.0;
  unsigned long long grand_hits = 0;
  auto pipeline = [&] {
    if (which == 0) {
      thrust::sort_by_key(thrust::device, dkeys.get(), dkeys.get() + n, dvals.get());
    } else {
      clear();
      insert();
    }
    lookup();
    mean();
    zero_hist();
    hist();
    grand_total = thrust::reduce(thrust::device, dtotal.get(), dtotal.get() + clients, 0.0);
    grand_hits = thrust::reduce(thrust::device, dhits.get(), dhits.get() + clients, 0ull);
    CUDA_CHECK(cudaMemcpy(dranked.get(), dmean.get(), dmean.bytes(), cudaMemcpyDeviceToDevice));
    thrust::sort(thrust::device, dranked.get(), dranked.get() + clients);
  };

  // The checked run.
  upload_table();
  pipeline();
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> total = dtotal.download();
  std::vector<uint32_t> hits = dhits.download();
  std::vector<float> means = dmean.download(), ranked = dranked.download();
  std::vector<unsigned int> bins = dhist.download();
  bool ok = true;

  if (which == 0) {
    std::vector<uint32_t> skeys = dkeys.download();
    std::vector<float> svals = dvals.download();
    size_t unordered = 0;
    uint64_t digest = 0;
    for (int i = 0; i < n; i++) {
      if (i > 0 && !(skeys[i - 1] < skeys[i])) ++unordered;
      digest += pair_digest(skeys[i], svals[i]);
    }
    bool sorted_ok = unordered == 0 && digest == want_digest;
    std::fprintf(stderr, "  sorted pairs: %zu out of order, digest %s\n", unordered,
                 digest == want_digest ? "equal" : "differs");
    ok = sorted_ok && ok;
  }

  // Sampled clients, answered from the pair index.
  std::vector<float> got_total, want_total;
  std::vector<uint32_t> got_hits, want_hits;
  for (int c = 0; c < clients; c += clients / 4096) {
    float t = 0.0f;
    uint32_t h = 0;
    for (int r = 0; r < lookups; r++) {
      uint32_t j = tl_query(static_cast<uint32_t>(c), static_cast<uint32_t>(r), span);
      if (j < static_cast<uint32_t>(n)) {
        t += vals[j];
        h += 1;
      }
    }
    got_total.push_back(total[c]);
    got_hits.push_back(hits[c]);
    want_total.push_back(t);
    want_hits.push_back(h);
  }
  ok = r3::check_close("total (sampled)", got_total, want_total, 1e-6, 0.0) && ok;
  ok = r3::check_equal("hits (sampled)", got_hits, want_hits) && ok;

  std::vector<float> want_mean(clients);
  std::vector<unsigned int> want_bins(kBins, 0);
  double want_grand_total = 0.0;
  unsigned long long want_grand_hits = 0;
  for (int c = 0; c < clients; c++) {
    want_mean[c] = hits[c] ? total[c] / static_cast<float>(hits[c]) : 0.0f;
    want_bins[static_cast<uint64_t>(hits[c]) * kBins / (lookups + 1)] += 1;
    want_grand_total += total[c];
    want_grand_hits += hits[c];
  }
  ok = r3::check_close("mean", means, want_mean, 1e-6, 0.0) && ok;
  ok = r3::check_equal("hist", bins, want_bins) && ok;
  ok = r3::check_close("grand total", &grand_total, &want_grand_total, 1, 1e-9, 0.0) && ok;
  ok = r3::check_equal("grand hits", &grand_hits, &want_grand_hits, 1) && ok;
  std::vector<float> want_ranked = means;
  std::sort(want_ranked.begin(), want_ranked.end());
  ok = r3::check_equal("ranked", ranked, want_ranked) && ok;
  std::fprintf(stderr, "  %llu of %llu lookups found; median client mean %.3f\n", grand_hits,
               static_cast<unsigned long long>(clients) * lookups, ranked[clients / 2]);

  // The whole pipeline three more times, each from the unsorted table, timed: the median.
  double loop_ms = r3::time_median_ms_n(0, 3, pipeline, upload_table);

  if (which == 0) {
    // The table is sorted again: the timed launches search it as the pipeline does.
    r3::report(kProgram, "tl_search_kernel", r3::time_median_ms_n(1, 5, lookup), ok);
  } else {
    r3::report(kProgram, "tl_clear_kernel", r3::time_median_ms(clear), ok);
    r3::report(kProgram, "tl_insert_kernel", r3::time_median_ms(insert, clear), ok);
    r3::report(kProgram, "tl_probe_kernel", r3::time_median_ms_n(1, 5, lookup), ok);
  }
  r3::report(kProgram, "tl_mean_kernel", r3::time_median_ms(mean), ok);
  r3::report(kProgram, "tl_hist_kernel", r3::time_median_ms(hist, zero_hist), ok);
  r3::report_loop(kProgram, loop_ms, ok);
  return ok ? 0 : 1;
}
