// bfs_step: one level of top-down breadth-first search on a generated directed
// graph in CSR form (2^22 vertices, 2..14 out-edges each: 70% to nearby
// vertices, 30% random). One thread per frontier vertex; newly reached
// vertices are claimed with atomicCAS on their distance and appended to the
// next frontier with atomicAdd on its length.
// Check: a full BFS from vertex 0 driven level by level from the host must give
// exactly the CPU distances. Timing: the level with the largest frontier, with
// the distances of that moment restored before every launch.
#include "r3corpus.h"

static const char* kProgram = "bfs_step";

__global__ void bfs_step_kernel(int frontier_size, const int* __restrict__ frontier,
                                const int* __restrict__ row_ptr, const int* __restrict__ col_idx,
                                int* __restrict__ dist, int level, int* __restrict__ next,
                                int* __restrict__ next_size) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= frontier_size) return;
  int v = frontier[i];
  for (int e = row_ptr[v]; e < row_ptr[v + 1]; ++e) {
    int u = col_idx[e];
    if (dist[u] == -1 && atomicCAS(&dist[u], -1, level + 1) == -1) next[atomicAdd(next_size, 1)] = u;
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int nv = 1 << 22;
  const unsigned block = R3_BLOCK_SIZE;

  // Graph.
  std::vector<int> row_ptr(nv + 1, 0);
  for (int v = 0; v < nv; ++v) row_ptr[v + 1] = row_ptr[v] + 2 + static_cast<int>(r3::hash2(201, v) % 13);
  const int ne = row_ptr[nv];
  std::vector<int> col_idx(ne);
  for (int v = 0; v < nv; ++v)
    for (int e = row_ptr[v]; e < row_ptr[v + 1]; ++e) {
      uint32_t h = r3::hash2(202, e);
      col_idx[e] = (h % 10 < 7) ? static_cast<int>((v + 1 + (h >> 8) % 512) % nv)
                                : static_cast<int>((h >> 4) % nv);
    }
  std::fprintf(stderr, "  vertices %d, edges %d\n", nv, ne);

  // CPU BFS: distances and level sizes.
  std::vector<int> ref(nv, -1), queue;
  std::vector<int> level_size;
  ref[0] = 0;
  queue.push_back(0);
  for (size_t head = 0, level_end = 1; head < queue.size();) {
    level_size.push_back(static_cast<int>(level_end - head));
    for (; head < level_end; ++head) {
      int v = queue[head];
      for (int e = row_ptr[v]; e < row_ptr[v + 1]; ++e)
        if (ref[col_idx[e]] == -1) ref[col_idx[e]] = ref[v] + 1, queue.push_back(col_idx[e]);
    }
    level_end = queue.size();
  }
  const int timed_level = static_cast<int>(
      std::max_element(level_size.begin(), level_size.end()) - level_size.begin());
  std::fprintf(stderr, "  %zu levels; timing level %d (frontier %d)\n", level_size.size(),
               timed_level, level_size[timed_level]);

  r3::DeviceArray<int> drow(nv + 1), dcol(ne), ddist(nv), dsnap(nv);
  r3::DeviceArray<int> dfront_a(nv), dfront_b(nv), dfront_snap(nv), dcount(1);
  drow.upload(row_ptr);
  dcol.upload(col_idx);
  std::vector<int> dist0(nv, -1);
  dist0[0] = 0;
  ddist.upload(dist0);
  std::vector<int> source(1, 0);
  dfront_a.upload(source);

  // GPU BFS, one launch per level.
  int* cur = dfront_a.get();
  int* nxt = dfront_b.get();
  int size = 1;
  for (int level = 0; size > 0; ++level) {
    if (level == timed_level) {
      CUDA_CHECK(cudaMemcpy(dsnap.get(), ddist.get(), ddist.bytes(), cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(dfront_snap.get(), cur, size * sizeof(int), cudaMemcpyDeviceToDevice));
    }
    dcount.zero();
    bfs_step_kernel<<<r3::blocks_for(size, block), block>>>(size, cur, drow.get(), dcol.get(),
                                                            ddist.get(), level, nxt, dcount.get());
    CUDA_CHECK_LAUNCH();
    size = dcount.download()[0];
    std::swap(cur, nxt);
  }
  bool ok = r3::check_equal("dist", ddist.download(), ref);

  // Timing of the largest level: restore distances, reset the next-frontier length.
  const int tsize = level_size[timed_level];
  auto reset = [&] {
    CUDA_CHECK(cudaMemcpyAsync(ddist.get(), dsnap.get(), ddist.bytes(), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemsetAsync(dcount.get(), 0, sizeof(int)));
  };
  auto launch = [&] {
    bfs_step_kernel<<<r3::blocks_for(tsize, block), block>>>(tsize, dfront_snap.get(), drow.get(),
                                                             dcol.get(), ddist.get(), timed_level,
                                                             dfront_b.get(), dcount.get());
  };
  double ms = r3::time_median_ms(launch, reset);
  int next_count = dcount.download()[0];
  int ref_next = timed_level + 1 < static_cast<int>(level_size.size()) ? level_size[timed_level + 1] : 0;
  ok = r3::check_equal("timed level's next frontier size", &next_count, &ref_next, 1) && ok;

  r3::report(kProgram, "bfs_step_kernel", ms, ok);
  return ok ? 0 : 1;
}
