// An application-shaped program for measuring what recording costs: 48 fields of 8M floats
// (1.5 GiB) and 256 small coefficient blocks, ten kernels, a time loop of STEPS steps that
// launches each kernel on a different choice of fields every step (so every launch is a new
// one to the recorder), and a scratch buffer allocated and freed every step. Every kernel is
// index-local, so the result is checked on sampled indices against a host reference.
// Prints the wall time of the loop.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int FIELDS = 48, BLOCKS = 256, KERNELS = 10;
constexpr size_t N = size_t(8) << 20;

struct Coef { float a, b, c, d; };

__global__ void k_axpby(float *y, const float *x, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = k->a * x[i] + k->b * y[i];
}
__global__ void k_fma3(float *y, const float *x, const float *z, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] * z[i] * k->c + y[i] * k->d;
}
__global__ void k_clamp(float *y, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = fminf(fmaxf(y[i], -k->a * 100.f), k->a * 100.f);
}
__global__ void k_relax(float *y, const float *x, const float *z, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = (1.f - k->b) * y[i] + k->b * 0.5f * (x[i] + z[i]);
}
__global__ void k_scale(float *y, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] *= k->d;
}
__global__ void k_copy_to_scratch(float *s, const float *x, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) s[i] = x[i];
}
__global__ void k_add_scratch(float *y, const float *s, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += k->c * s[i];
}
__global__ void k_square_mix(float *y, const float *x, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = 0.5f * y[i] + 0.25f * x[i] * x[i] / (1.f + x[i] * x[i]);
}
__global__ void k_abs_max(float *y, const float *x, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = fmaxf(fabsf(y[i]), fabsf(x[i])) * (y[i] < 0 ? -1.f : 1.f);
}
__global__ void k_lerp(float *y, const float *x, const float *z, const Coef *k, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + k->a * (z[i] - x[i]);
}

static float init(int f, size_t i) { return float((i * 2654435761u + f * 97u) % 2001u) / 1000.f - 1.f; }
static Coef coef(int b) { return {0.5f + b % 7 * 0.05f, 0.1f + b % 5 * 0.1f, 0.3f + b % 3 * 0.2f, 0.9f + b % 4 * 0.02f}; }

// One step of the program, for the device (launch) or for one index on the host (ref).
struct Choice { int y, x, z, b; };
static Choice choose(int step, int kernel) {
  int base = (step * 7 + kernel * 5) % FIELDS;
  return {base, (base + 11 + kernel) % FIELDS, (base + 23 + step) % FIELDS, (step * KERNELS + kernel) % BLOCKS};
}

static void host_step(std::vector<float> &v, int step) {  // v: every field's value at one index
  for (int k = 0; k < KERNELS; ++k) {
    Choice c = choose(step, k);
    Coef q = coef(c.b);
    float &y = v[c.y], x = v[c.x], z = v[c.z];
    switch (k) {
      case 0: y = q.a * x + q.b * y; break;
      case 1: y = x * z * q.c + y * q.d; break;
      case 2: y = fminf(fmaxf(y, -q.a * 100.f), q.a * 100.f); break;
      case 3: y = (1.f - q.b) * y + q.b * 0.5f * (x + z); break;
      case 4: y *= q.d; break;
      case 5: v[FIELDS] = x; break;  // scratch
      case 6: y += q.c * v[FIELDS]; break;
      case 7: y = 0.5f * y + 0.25f * x * x / (1.f + x * x); break;
      case 8: y = fmaxf(fabsf(y), fabsf(x)) * (y < 0 ? -1.f : 1.f); break;
      case 9: y = x + q.a * (z - x); break;
    }
  }
}

int main(int argc, char **argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("many_buffers: no GPU");
    return 0;
  }
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  std::vector<float *> f(FIELDS);
  std::vector<Coef *> k(BLOCKS);
  std::vector<float> h(N);
  for (int i = 0; i < FIELDS; ++i) {
    if (cudaMalloc(&f[i], N * sizeof(float)) != cudaSuccess) return 1;
    for (size_t j = 0; j < N; ++j) h[j] = init(i, j);
    cudaMemcpy(f[i], h.data(), N * sizeof(float), cudaMemcpyHostToDevice);
  }
  for (int b = 0; b < BLOCKS; ++b) {
    Coef c = coef(b);
    if (cudaMalloc(&k[b], sizeof(Coef)) != cudaSuccess) return 1;
    cudaMemcpy(k[b], &c, sizeof c, cudaMemcpyHostToDevice);
  }
  cudaDeviceSynchronize();
  const unsigned grid = unsigned((N + 255) / 256);
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) {
    float *scratch = nullptr;
    if (cudaMalloc(&scratch, N * sizeof(float)) != cudaSuccess) return 1;
    for (int kk = 0; kk < KERNELS; ++kk) {
      Choice c = choose(s, kk);
      float *y = f[c.y], *x = f[c.x], *z = f[c.z];
      Coef *q = k[c.b];
      switch (kk) {
        case 0: k_axpby<<<grid, 256>>>(y, x, q, N); break;
        case 1: k_fma3<<<grid, 256>>>(y, x, z, q, N); break;
        case 2: k_clamp<<<grid, 256>>>(y, q, N); break;
        case 3: k_relax<<<grid, 256>>>(y, x, z, q, N); break;
        case 4: k_scale<<<grid, 256>>>(y, q, N); break;
        case 5: k_copy_to_scratch<<<grid, 256>>>(scratch, x, N); break;
        case 6: k_add_scratch<<<grid, 256>>>(y, scratch, q, N); break;
        case 7: k_square_mix<<<grid, 256>>>(y, x, N); break;
        case 8: k_abs_max<<<grid, 256>>>(y, x, N); break;
        case 9: k_lerp<<<grid, 256>>>(y, x, z, q, N); break;
      }
    }
    cudaFree(scratch);
  }
  cudaError_t e = cudaDeviceSynchronize();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t bad = e != cudaSuccess;
  const size_t samples[] = {0, 1, 12345, N / 3, N / 2 + 7, N - 1};
  for (size_t i : samples) {
    std::vector<float> v(FIELDS + 1);
    for (int j = 0; j < FIELDS; ++j) v[j] = init(j, i);
    for (int s = 0; s < steps; ++s) host_step(v, s);
    for (int j = 0; j < FIELDS; ++j) {
      float got;
      cudaMemcpy(&got, f[j] + i, sizeof got, cudaMemcpyDeviceToHost);
      bad += fabsf(got - v[j]) > 1e-3f * (1.f + fabsf(v[j]));
    }
  }
  std::printf("many_buffers: %s steps=%d launches=%d loop_ms=%.3f\n", bad ? "FAIL" : "PASS", steps, steps * KERNELS,
              ms);
  return bad != 0;
}
