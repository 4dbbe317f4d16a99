// What recording costs a launch it does not record: 200000 launches of a kernel that does
// almost nothing, in two loops. In the first every launch is new to the recorder (a step
// counter among the arguments), so it is passed straight on once the kernel's recordings are
// taken; in the second every launch repeats one recorded launch, passed straight on once its
// repeats are timed. A warm-up before the loops launches both kernels often enough for all
// that recording and timing to happen there, so the loops time only unrecorded launches. Each
// loop's wall time per launch is printed (launches queue asynchronously, as applications issue
// them; one synchronize at the end of each loop), and the result is checked: the counters
// hold every launch's contribution.
#include <chrono>
#include <cstdio>

constexpr int LAUNCHES = 100000, WARMUP = 16, CELLS = 256;

__global__ void tick(unsigned *cells, unsigned step) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < CELLS) cells[i] += step ^ i;
}

__global__ void tock(unsigned *cells) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < CELLS) cells[i] += 1;
}

static double loop_us(bool repeat, unsigned *cells, unsigned first, unsigned launches) {
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (unsigned s = first; s < first + launches; s++) {
    if (repeat) tock<<<1, CELLS>>>(cells);
    else tick<<<1, CELLS>>>(cells, s);
  }
  cudaDeviceSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / launches;
}

int main() {
  unsigned *cells = nullptr;
  if (cudaMalloc(&cells, CELLS * sizeof(unsigned)) != cudaSuccess) return 1;
  cudaMemset(cells, 0, CELLS * sizeof(unsigned));
  loop_us(false, cells, 0, WARMUP);
  loop_us(true, cells, 0, WARMUP);
  double fresh = loop_us(false, cells, WARMUP, LAUNCHES), same = loop_us(true, cells, 0, LAUNCHES);
  unsigned host[CELLS];
  cudaMemcpy(host, cells, sizeof host, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (unsigned i = 0; i < CELLS; i++) {
    unsigned want = WARMUP + LAUNCHES; /* the tock launches */
    for (unsigned s = 0; s < WARMUP + LAUNCHES; s++) want += s ^ i;
    bad += host[i] != want;
  }
  std::printf("tiny_launches: %s launches=%d new_args_us_per_launch=%.3f repeated_us_per_launch=%.3f\n",
              bad ? "FAIL" : "PASS", 2 * LAUNCHES, fresh, same);
  return bad ? 1 : 0;
}
