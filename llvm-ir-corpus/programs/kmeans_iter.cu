// kmeans_iter: 100 Lloyd iterations of k-means on 2^21 points of 8 dimensions,
// k = 64 (a fixed iteration count, no early exit). One iteration launches
//   kmeans_label_kernel         nearest centroid per point (centroids read from
//                               global memory), counts the labels that changed
//                               (shared atomic per block, one global atomicAdd)
//   kmeans_partial_sums_kernel  thread (chunk, c) sums the points of its
//                               512-point chunk labelled c, accumulating straight
//                               into its slot in global memory (sum[j] += x[j]
//                               through plain pointers that may alias)
//   kmeans_update_kernel        one block per cluster adds the chunk partials
//                               (shared-memory tree) and divides by the count
// The data are 64 well separated blobs (centres 46.8 apart or more, points
// within 11.4 of theirs), so every label is decided by a wide margin (the
// second nearest centroid is always over 8x as far in squared distance) and
// the GPU must reproduce the CPU's labels exactly.
// Check: a double-precision Lloyd loop on the CPU (it stops once the labels
// repeat: from then on every iteration recomputes the same centroids):
// labels and per-iteration change counts exactly, centroids to 1e-4.
// Timed: each kernel on its own, and the whole 100 iterations.
#include "r3corpus.h"

static const char* kProgram = "kmeans_iter";
constexpr int kDim = 8;              // the label kernel keeps one point in registers
constexpr int kUpdateThreads = 256;  // power of two, a multiple of the dimension

__global__ void kmeans_label_kernel(int n, int k, const float* __restrict__ points,
                                    const float* __restrict__ centroids, int* __restrict__ labels,
                                    int* __restrict__ changes) {
  __shared__ int block_changes;
  if (threadIdx.x == 0) block_changes = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float p[kDim];
    for (int d = 0; d < kDim; ++d) p[d] = points[static_cast<size_t>(i) * kDim + d];
    int best = 0;
    float best_dist = INFINITY;
    for (int c = 0; c < k; ++c) {
      float dist = 0.0f;
      for (int d = 0; d < kDim; ++d) {
        float diff = p[d] - centroids[c * kDim + d];
        dist += diff * diff;
      }
      if (dist < best_dist) {
        best_dist = dist;
        best = c;
      }
    }
    if (labels[i] != best) {
      labels[i] = best;
      atomicAdd(&block_changes, 1);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && block_changes != 0) atomicAdd(changes, block_changes);
}

// Thread t = chunk * k + c owns psums[t * dim .. t * dim + dim) and pcounts[t].
__global__ void kmeans_partial_sums_kernel(int n, int dim, int k, int chunk, const float* points,
                                           const int* labels, float* psums, int* pcounts) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int nchunks = (n + chunk - 1) / chunk;
  if (t >= nchunks * k) return;
  int c = t % k, first = (t / k) * chunk;
  int last = min(n, first + chunk);
  float* sum = psums + static_cast<size_t>(t) * dim;
  int* count = pcounts + t;
  for (int j = 0; j < dim; ++j) sum[j] = 0.0f;
  *count = 0;
  for (int i = first; i < last; ++i) {
    if (labels[i] == c) {
      for (int j = 0; j < dim; ++j) sum[j] += points[static_cast<size_t>(i) * dim + j];
      *count += 1;
    }
  }
}

// Block c: thread t adds coordinate t % dim of chunks t / dim, t / dim + per,
// ... (per = kUpdateThreads / dim), then a tree over threads with the same
// coordinate; an empty cluster keeps its centroid. dim: a power of two.
__global__ void kmeans_update_kernel(int nchunks, int dim, int k, const float* __restrict__ psums,
                                     const int* __restrict__ pcounts,
                                     float* __restrict__ centroids) {
  __shared__ float sbuf[kUpdateThreads];
  __shared__ int cbuf[kUpdateThreads];
  int c = blockIdx.x, t = threadIdx.x, j = t % dim, per = kUpdateThreads / dim;
  float s = 0.0f;
  int cnt = 0;
  for (int ch = t / dim; ch < nchunks; ch += per) {
    s += psums[(static_cast<size_t>(ch) * k + c) * dim + j];
    if (j == 0) cnt += pcounts[static_cast<size_t>(ch) * k + c];
  }
  sbuf[t] = s;
  cbuf[t] = cnt;
  __syncthreads();
  for (int stride = kUpdateThreads / 2; stride >= dim; stride >>= 1) {
    if (t < stride) {
      sbuf[t] += sbuf[t + stride];
      cbuf[t] += cbuf[t + stride];
    }
    __syncthreads();
  }
  if (t < dim && cbuf[0] > 0) centroids[c * dim + t] = sbuf[t] / cbuf[0];
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 21, k = 64, dim = kDim, iters = 100, chunk = 512;
  const int nchunks = (n + chunk - 1) / chunk;
  const unsigned block = R3_BLOCK_SIZE;
  static_assert((kDim & (kDim - 1)) == 0 && kUpdateThreads % kDim == 0, "dim must divide kUpdateThreads");

  // Blob centres in [-60, 60]^8, points within +-4 per coordinate of their
  // centre, starting centroids within +-4 per coordinate of the centres.
  std::vector<float> centres(k * dim), noise(static_cast<size_t>(n) * dim), offsets(k * dim);
  r3::fill_uniform(centres, 401, -60.0, 60.0);
  r3::fill_uniform(noise, 402, -4.0, 4.0);
  r3::fill_uniform(offsets, 404, -4.0, 4.0);
  std::vector<float> points(noise.size()), init(k * dim);
  for (int i = 0; i < n; ++i) {
    int home = r3::hash2(403, i) % k;
    for (int d = 0; d < dim; ++d)
      points[static_cast<size_t>(i) * dim + d] = centres[home * dim + d] + noise[static_cast<size_t>(i) * dim + d];
  }
  for (int e = 0; e < k * dim; ++e) init[e] = centres[e] + offsets[e];

  r3::DeviceArray<float> dpoints(points.size()), dinit(init.size()), dcent(init.size()),
      dpsums(static_cast<size_t>(nchunks) * k * dim);
  r3::DeviceArray<int> dlabels(n), dchanges(iters), dpcounts(static_cast<size_t>(nchunks) * k);
  dpoints.upload(points);
  dinit.upload(init);

  auto label = [&](int it) {
    kmeans_label_kernel<<<r3::blocks_for(n, block), block>>>(n, k, dpoints.get(), dcent.get(),
                                                             dlabels.get(), dchanges.get() + it);
  };
  auto partial = [&] {
    kmeans_partial_sums_kernel<<<r3::blocks_for(static_cast<size_t>(nchunks) * k, block), block>>>(
        n, dim, k, chunk, dpoints.get(), dlabels.get(), dpsums.get(), dpcounts.get());
  };
  auto update = [&] {
    kmeans_update_kernel<<<k, kUpdateThreads>>>(nchunks, dim, k, dpsums.get(), dpcounts.get(), dcent.get());
  };
  // Centroids from the start, labels -1 (all change in the first iteration).
  auto reset = [&] {
    CUDA_CHECK(cudaMemcpy(dcent.get(), dinit.get(), dinit.bytes(), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemset(dlabels.get(), 0xff, dlabels.bytes()));
    dchanges.zero();
  };
  auto run = [&] {
    for (int it = 0; it < iters; ++it) {
      label(it);
      partial();
      update();
    }
  };

  reset();
  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> cent = dcent.download();
  std::vector<int> labels = dlabels.download();
  std::vector<int> changes = dchanges.download();

  std::vector<double> ref_cent(init.begin(), init.end());
  std::vector<int> ref_labels(n, -1), ref_changes(iters, 0);
  for (int it = 0; it < iters; ++it) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      int best = 0;
      double best_dist = INFINITY;
      for (int c = 0; c < k; ++c) {
        double dist = 0.0;
        for (int d = 0; d < dim; ++d) {
          double diff = static_cast<double>(points[static_cast<size_t>(i) * dim + d]) - ref_cent[c * dim + d];
          dist += diff * diff;
        }
        if (dist < best_dist) best_dist = dist, best = c;
      }
      if (ref_labels[i] != best) ref_labels[i] = best, ++changed;
    }
    ref_changes[it] = changed;
    if (changed == 0) break;  // a fixed point: the remaining iterations change nothing
    std::vector<double> sum(k * dim, 0.0);
    std::vector<int> count(k, 0);
    for (int i = 0; i < n; ++i) {
      ++count[ref_labels[i]];
      for (int d = 0; d < dim; ++d) sum[ref_labels[i] * dim + d] += points[static_cast<size_t>(i) * dim + d];
    }
    for (int c = 0; c < k; ++c)
      if (count[c] > 0)
        for (int d = 0; d < dim; ++d) ref_cent[c * dim + d] = sum[c * dim + d] / count[c];
  }
  bool ok = r3::check_equal("labels", labels, ref_labels);
  ok = r3::check_equal("changes", changes, ref_changes) && ok;
  // Float sums of ~32768 points (|x| <= 64) in the kernels' order: a float
  // emulation is off by at most 6.5e-6 from the double means.
  ok = r3::check_close("centroids", cent, ref_cent, 0.0, 1e-4) && ok;

  r3::report(kProgram, "kmeans_label_kernel", r3::time_median_ms([&] { label(0); }), ok);
  r3::report(kProgram, "kmeans_partial_sums_kernel", r3::time_median_ms(partial), ok);
  r3::report(kProgram, "kmeans_update_kernel", r3::time_median_ms(update), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(reset, run), ok);
  return ok ? 0 : 1;
}
