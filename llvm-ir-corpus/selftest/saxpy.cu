// The kernel `r3 selftest` lowers, loads and runs: the smallest end-to-end check of
// IR -> PTX -> GPU. Its device IR (saxpy.ll, made by scripts/regen-selftest-ir) is built into r3.
extern "C" __global__ void r3_saxpy(float a, const float *__restrict__ x, float *__restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
