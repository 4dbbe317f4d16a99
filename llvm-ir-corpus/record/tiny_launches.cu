// What recording costs a launch it does not record: 200000 launches of a kernel that does
// almost nothing, in two loops. In the first every launch is new to the recorder (a step
// counter among the arguments), so after the first few recorded it is passed straight on; in
// the second every launch repeats one recorded launch, so after its few timed repeats it is
// passed straight on too. Each loop's wall time per launch is printed (launches queue
// asynchronously, as applications issue them; one synchronize at the end of each loop), and the
// result is checked: the counters hold every step's contribution.
#include <chrono>
#include <cstdio>

constexpr int LAUNCHES = 100000, CELLS = 256;

__global__ void tick(unsigned *cells, unsigned step) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < CELLS) cells[i] += step ^ i;
}

__global__ void tock(unsigned *cells) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < CELLS) cells[i] += 1;
}

static double loop_us(bool repeat, unsigned *cells) {
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (unsigned s = 0; s < LAUNCHES; s++) {
    if (repeat) tock<<<1, CELLS>>>(cells);
    else tick<<<1, CELLS>>>(cells, s);
  }
  cudaDeviceSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / LAUNCHES;
}

int main() {
  unsigned *cells = nullptr;
  if (cudaMalloc(&cells, CELLS * sizeof(unsigned)) != cudaSuccess) return 1;
  cudaMemset(cells, 0, CELLS * sizeof(unsigned));
  double fresh = loop_us(false, cells), same = loop_us(true, cells);
  unsigned host[CELLS];
  cudaMemcpy(host, cells, sizeof host, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (unsigned i = 0; i < CELLS; i++) {
    unsigned want = LAUNCHES; /* the tock loop */
    for (unsigned s = 0; s < LAUNCHES; s++) want += s ^ i;
    bad += host[i] != want;
  }
  std::printf("tiny_launches: %s launches=%d new_args_us_per_launch=%.3f repeated_us_per_launch=%.3f\n",
              bad ? "FAIL" : "PASS", 2 * LAUNCHES, fresh, same);
  return bad ? 1 : 0;
}
