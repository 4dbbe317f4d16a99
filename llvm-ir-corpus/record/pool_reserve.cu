// A pool allocator's reservation, for issue 61 (item 3): one cudaMalloc of 6 GiB up front (more
// than `r3 record`'s per-launch limit of 4096 MiB), of which the program uses two slabs: a
// binary search tree of 2^16 nodes bump-allocated at the pool's start, and its leaves' payloads
// in a second slab 5 GiB in, as a pool that has grown does. The header (the pool's first bytes)
// holds the root's device address, nodes hold their children's and their payload's: the
// lookup kernel reaches everything through pointers stored in the pool. It answers 2^20 queries
// into a buffer of its own. Recorded, the launch reaches 6 GiB and holds about 5 MiB of data:
// r3 records the pool by its pages that hold data (the rest are zeros, every page read) and
// the recording must reproduce. Prints the lookup's time and checks every answer on the host.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct Node {
  uint32_t key;
  uint32_t pad;
  const Node *left, *right;
  const uint32_t *payload; // 4 words, in the second slab
};

__global__ void pool_lookup(const char *pool, const uint32_t *queries, uint32_t *answers, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Node *node = *reinterpret_cast<const Node *const *>(pool);
  uint32_t q = queries[i], found = 0xffffffffu;
  while (node) {
    if (q == node->key) {
      found = node->payload[q & 3];
      break;
    }
    node = q < node->key ? node->left : node->right;
  }
  answers[i] = found;
}

static uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}

// Node k of the balanced tree over keys 2*[lo, hi): its children built first, at their slots.
static int build(std::vector<Node> &nodes, int lo, int hi, const char *base, const char *payloads) {
  if (lo >= hi) return -1;
  int mid = (lo + hi) / 2;
  int l = build(nodes, lo, mid, base, payloads), r = build(nodes, mid + 1, hi, base, payloads);
  Node &n = nodes[mid];
  n.key = 2u * (uint32_t)mid;
  n.pad = 0;
  n.left = l < 0 ? nullptr : reinterpret_cast<const Node *>(base + 8 + (size_t)l * sizeof(Node));
  n.right = r < 0 ? nullptr : reinterpret_cast<const Node *>(base + 8 + (size_t)r * sizeof(Node));
  n.payload = reinterpret_cast<const uint32_t *>(payloads + (size_t)mid * 16);
  return mid;
}

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("pool_reserve: no GPU");
    return 0;
  }
  const size_t reserve = (size_t)6 << 30, payload_at = (size_t)5 << 30;
  const int nodes_n = 1 << 16, queries_n = 1 << 20;
  char *pool = nullptr;
  if (cudaMalloc(&pool, reserve) != cudaSuccess) {
    std::puts("pool_reserve: cannot reserve 6 GiB");
    return 1;
  }
  // Fresh device memory is not promised to be zeros: the pool is cleared once, as a pool
  // allocator that hands out zeroed blocks does.
  cudaMemset(pool, 0, reserve);
  std::vector<Node> nodes(nodes_n);
  int root = build(nodes, 0, nodes_n, pool, pool + payload_at);
  std::vector<uint32_t> payloads((size_t)nodes_n * 4);
  for (size_t j = 0; j < payloads.size(); ++j) payloads[j] = mix((uint32_t)j) | 1u;
  const Node *root_ptr = reinterpret_cast<const Node *>(pool + 8 + (size_t)root * sizeof(Node));
  cudaMemcpy(pool, &root_ptr, 8, cudaMemcpyHostToDevice);
  cudaMemcpy(pool + 8, nodes.data(), nodes.size() * sizeof(Node), cudaMemcpyHostToDevice);
  cudaMemcpy(pool + payload_at, payloads.data(), payloads.size() * 4, cudaMemcpyHostToDevice);
  std::vector<uint32_t> queries(queries_n);
  for (int i = 0; i < queries_n; ++i) queries[i] = mix((uint32_t)i + 77u) % (uint32_t)(2 * nodes_n);
  uint32_t *dq = nullptr, *da = nullptr;
  if (cudaMalloc(&dq, queries_n * 4) != cudaSuccess || cudaMalloc(&da, queries_n * 4) != cudaSuccess) return 1;
  cudaMemcpy(dq, queries.data(), queries_n * 4, cudaMemcpyHostToDevice);
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  pool_lookup<<<(queries_n + 255) / 256, 256>>>(pool, dq, da, queries_n);
  cudaError_t e = cudaDeviceSynchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<uint32_t> answers(queries_n);
  cudaMemcpy(answers.data(), da, queries_n * 4, cudaMemcpyDeviceToHost);
  size_t bad = e != cudaSuccess;
  for (int i = 0; i < queries_n; ++i) {
    uint32_t q = queries[i];
    uint32_t want = q % 2 ? 0xffffffffu : payloads[(size_t)(q / 2) * 4 + (q & 3)];
    bad += answers[i] != want;
  }
  std::printf("pool_reserve: %s reserve_mib=%zu lookup_ms=%.3f\n", bad ? "FAIL" : "PASS", reserve >> 20, ms);
  return bad != 0;
}
