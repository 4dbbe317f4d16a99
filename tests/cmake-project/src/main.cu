#include <cstdio>
#include "r3demo/api.h"

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no GPU");
    return 0;
  }
  bool ok = run_templates() && run_device_fns() && run_plain();
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    ok = false;
  }
  std::puts(ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
