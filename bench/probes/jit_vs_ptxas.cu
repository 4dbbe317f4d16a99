// The same PTX, compiled two ways, timed in one process on the same inputs: by the driver's JIT
// (cuModuleLoadData on the text, what `r3 replay` measured) and by ptxas (a cubin, what a build
// ships). Each module's kernel is oscillators_kernel's signature (llvm-ir-corpus/programs/
// oscillators.cu); the modules are timed in turn, x, v and work restored before each launch.
//   nvcc -O2 -o jit_vs_ptxas jit_vs_ptxas.cu -lcuda
//   [SETS=n] ./jit_vs_ptxas NAME FILE [NAME FILE ...]    (FILE: .ptx text or .cubin)
#include <cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#define CK(x)                                                                 \
  do {                                                                        \
    CUresult r_ = (x);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorString(r_, &s_);                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);    \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

static const char* kKernel = "_Z18oscillators_kerneliifPfS_S_S_S_S_S_";

static std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) { std::fprintf(stderr, "cannot read %s\n", path); std::exit(1); }
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

int main(int argc, char** argv) {
  if (argc < 3 || argc % 2 == 0) { std::fprintf(stderr, "usage: %s NAME FILE [NAME FILE ...]\n", argv[0]); return 2; }
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));

  struct Mod { std::string name; CUfunction f; int regs, local; std::vector<float> ms; };
  std::vector<Mod> mods;
  for (int a = 1; a < argc; a += 2) {
    std::string image = slurp(argv[a + 1]);
    CUmodule m;
    CK(cuModuleLoadData(&m, image.c_str()));
    Mod md{argv[a], nullptr, 0, 0, {}};
    CK(cuModuleGetFunction(&md.f, m, kKernel));
    CK(cuFuncGetAttribute(&md.regs, CU_FUNC_ATTRIBUTE_NUM_REGS, md.f));
    CK(cuFuncGetAttribute(&md.local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, md.f));
    mods.push_back(md);
  }

  const int count = 65536, steps = 4096;
  float dt = 0.01f;
  std::mt19937 rng(7);
  auto uniform = [&](float lo, float hi) {
    std::vector<float> v(count);
    std::uniform_real_distribution<float> d(lo, hi);
    for (auto& e : v) e = d(rng);
    return v;
  };
  std::vector<std::vector<float>> host = {uniform(1, 4), uniform(0.2f, 1), uniform(0.5f, 1), uniform(0.5f, 2),
                                          uniform(-1, 1), uniform(-1, 1), std::vector<float>(count, 0.f)};
  // SETS=n: n copies of the inputs, each after a padding allocation, so at other addresses
  // (and other physical memory); every module is timed on every set.
  const int sets = std::getenv("SETS") ? std::atoi(std::getenv("SETS")) : 1;
  std::vector<std::vector<CUdeviceptr>> all(sets, std::vector<CUdeviceptr>(7));
  for (int k = 0; k < sets; k++) {
    CUdeviceptr pad;
    CK(cuMemAlloc(&pad, (size_t)(64 + 24 * k) << 20));
    for (int i = 0; i < 7; i++) {
      CK(cuMemAlloc(&all[k][i], count * 4));
      CK(cuMemcpyHtoD(all[k][i], host[i].data(), count * 4));
    }
  }
  std::vector<float> first;  // the first module's x after one launch: the others must agree
  CUevent b, e;
  CK(cuEventCreate(&b, 0));
  CK(cuEventCreate(&e, 0));
  const int reps = 21;
  for (int set = 0; set < sets; set++) {
    std::vector<CUdeviceptr>& d = all[set];
    for (int r = 0; r < reps + 1; r++) {
      for (auto& m : mods) {
        for (int i = 4; i < 7; i++) CK(cuMemcpyHtoD(d[i], host[i].data(), count * 4));
        int n = count, s = steps;
        void* args[] = {&n, &s, &dt, &d[0], &d[1], &d[2], &d[3], &d[4], &d[5], &d[6]};
        CK(cuEventRecord(b, 0));
        CK(cuLaunchKernel(m.f, count / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr));
        CK(cuEventRecord(e, 0));
        CK(cuEventSynchronize(e));
        float ms;
        CK(cuEventElapsedTime(&ms, b, e));
        if (r > 0) m.ms.push_back(ms);  // the first round is warm-up
        if (r == reps) {                 // this set done: its median
          std::vector<float> last(m.ms.end() - reps, m.ms.end());
          std::sort(last.begin(), last.end());
          if (sets > 1) std::printf("set %d %-10s median %.4f ms\n", set, m.name.c_str(), last[reps / 2]);
        }
        std::vector<float> x(count);
        CK(cuMemcpyDtoH(x.data(), d[4], count * 4));
        if (first.empty()) first = x;
        double worst = 0;
        for (int i = 0; i < count; i++) worst = std::max(worst, (double)std::abs(x[i] - first[i]));
        if (worst > 1e-3) { std::fprintf(stderr, "%s: x differs from %s by %g\n", m.name.c_str(), mods[0].name.c_str(), worst); return 1; }
      }
    }
  }
  std::printf("%-14s %5s %6s %10s %10s %10s\n", "module", "regs", "local", "median ms", "min ms", "max ms");
  for (auto& m : mods) {
    std::sort(m.ms.begin(), m.ms.end());
    std::printf("%-14s %5d %6d %10.4f %10.4f %10.4f\n", m.name.c_str(), m.regs, m.local, m.ms[m.ms.size() / 2],
                m.ms.front(), m.ms.back());
  }
  return 0;
}
