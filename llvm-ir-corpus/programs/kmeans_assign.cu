// kmeans_assign: the assignment step of k-means: 2^22 points of 8 dimensions,
// 64 centroids staged in shared memory, each thread finds the nearest
// centroid of one point (squared Euclidean distance, lowest index on ties).
// A label counts as correct if its distance matches the true minimum within
// float rounding (near-ties may legitimately differ from the CPU).
#include "r3corpus.h"

static const char* kProgram = "kmeans_assign";
constexpr int kDim = 8;
constexpr int kClusters = 64;

__global__ void kmeans_assign_kernel(int n, const float* __restrict__ points,
                                     const float* __restrict__ centroids, int* __restrict__ labels) {
  __shared__ float cs[kClusters * kDim];
  for (int t = threadIdx.x; t < kClusters * kDim; t += blockDim.x) cs[t] = centroids[t];
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float p[kDim];
#pragma unroll
  for (int d = 0; d < kDim; ++d) p[d] = points[static_cast<size_t>(i) * kDim + d];
  int best = 0;
  float best_dist = INFINITY;
  for (int c = 0; c < kClusters; ++c) {
    float dist = 0.0f;
#pragma unroll
    for (int d = 0; d < kDim; ++d) {
      float diff = p[d] - cs[c * kDim + d];
      dist += diff * diff;
    }
    if (dist < best_dist) {
      best_dist = dist;
      best = c;
    }
  }
  labels[i] = best;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int n = 1 << 22;
  const unsigned block = R3_BLOCK_SIZE;

  std::vector<float> centroids(kClusters * kDim), noise(static_cast<size_t>(n) * kDim);
  r3::fill_uniform(centroids, 171, -10.0, 10.0);
  r3::fill_uniform(noise, 172, -3.0, 3.0);
  std::vector<float> points(noise.size());
  for (int i = 0; i < n; ++i) {
    int home = r3::hash2(173, i) % kClusters;
    for (int d = 0; d < kDim; ++d)
      points[static_cast<size_t>(i) * kDim + d] = centroids[home * kDim + d] + noise[static_cast<size_t>(i) * kDim + d];
  }
  r3::DeviceArray<float> dpoints(points.size()), dcent(centroids.size());
  r3::DeviceArray<int> dlabels(n);
  dpoints.upload(points);
  dcent.upload(centroids);

  auto launch = [&] {
    kmeans_assign_kernel<<<r3::blocks_for(n, block), block>>>(n, dpoints.get(), dcent.get(), dlabels.get());
  };
  launch();
  CUDA_CHECK_LAUNCH();
  std::vector<int> labels = dlabels.download();

  size_t bad = 0, exact = 0, checked = 0;
  for (int i = 0; i < n; i += 3) {
    double dist[kClusters], best = INFINITY;
    int best_c = 0;
    for (int c = 0; c < kClusters; ++c) {
      double s = 0.0;
      for (int d = 0; d < kDim; ++d) {
        double diff = static_cast<double>(points[static_cast<size_t>(i) * kDim + d]) - centroids[c * kDim + d];
        s += diff * diff;
      }
      dist[c] = s;
      if (s < best) best = s, best_c = c;
    }
    int l = labels[i];
    ++checked;
    if (l == best_c) ++exact;
    else if (l < 0 || l >= kClusters || dist[l] > best * (1.0 + 1e-5) + 1e-6) {
      if (bad < 5) std::fprintf(stderr, "  label[%d] = %d, expected %d\n", i, l, best_c);
      ++bad;
    }
  }
  std::fprintf(stderr, "  labels: %zu checked, %zu identical, %zu wrong\n", checked, exact, bad);
  bool ok = bad == 0;

  r3::report(kProgram, "kmeans_assign_kernel", r3::time_median_ms(launch), ok);
  return ok ? 0 : 1;
}
