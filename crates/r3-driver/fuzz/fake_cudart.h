/*
 * A CUDA runtime without a GPU, for the harnesses of r3rt.c's dispatch in this directory (the
 * fuzzer, the launch probe and the line reader). Include it after r3rt.c. It knows three kernels,
 * whose parameters are each in an allocation of their own size (fake_args), so that an
 * AddressSanitizer build sees a guard that reads one byte past a parameter or one parameter past
 * the launch's list:
 *   - scale(float *y, const float *x, int n, float a), whose parameters cudart states, as
 *     cudaFuncGetParamInfo does (CUDA 12.x and later);
 *   - axpy(float a, float *x, float *y, int n), which cudart cannot state (as an older driver):
 *     r3rt.c falls back to its mangled name;
 *   - k3(int n, double x), extern "C": nothing states its parameters.
 * Each kernel's module holds its generic entry and variants <name>__r3_t_v1 ... _v6.
 *
 * Environment: FAKE_LACKS, entries (comma-separated) the module lacks: cudart registers them, as
 * it registers any name, and the driver finds none of them (their attributes and launches fail
 * with cudaErrorInvalidDeviceFunction). FAKE_FATBIN, how the fatbinary holds the module: "plain"
 * (the default) an ELF image whose string table names the entries it has; "compressed" that
 * image zstd-compressed, as fatbinary --compress-all writes it, so that no name is in its bytes;
 * "cut" and "overlong" plain, and then an image header cut short by the fatbinary's end, or one
 * whose image runs past it.
 *
 * The calls r3rt.c probes a variant with (cudaFuncGetAttributes, cudaDeviceGetAttribute,
 * cudaFuncGetParamInfo) are counted while a launch call of the program's is in progress
 * (fake_launch_probes): they belong before it (issue 57).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_SCALE "_Z5scalePfPKfif"
#define FAKE_AXPY "_Z4axpyfPfS_i"
#define FAKE_K3 "k3"
#define FAKE_KERNELS 3
#define FAKE_VARIANTS 6

static const char *const fake_names[FAKE_KERNELS] = {FAKE_SCALE, FAKE_AXPY, FAKE_K3};
static const size_t fake_sizes[FAKE_KERNELS][4] = {{8, 8, 4, 4}, {4, 8, 8, 4}, {4, 8, 0, 0}};
static const int fake_nparams[FAKE_KERNELS] = {4, 4, 2};
static const int fake_n_param[FAKE_KERNELS] = {2, 3, 0}; /* which parameter is n */
static char fake_stubs[FAKE_KERNELS]; /* a host stub's address is all cudart keeps of it */

/* What the fake cudart registered: a stub and the entry name it launches. */
static struct { const void *stub; const char *name; } fake_reg[64];
static int fake_nreg;
static cudaError_t fake_last_error;
static const char *fake_ran; /* the entry the last launch ran */
static int fake_print;        /* print "ran <entry>" for each launch */
static int fake_in_launch;    /* inside the program's launch call (fake_launch) */
static int fake_launch_probes; /* probe calls made inside the launch call in progress */
static char fake_device_memory[64]; /* what cudaMalloc hands out: never read */

static void fake_probe(void) {
  if (fake_in_launch) fake_launch_probes++;
}

static cudaError_t fake_fail(cudaError_t e) { return fake_last_error = e; }

/* Whether FAKE_LACKS names the entry. */
static int fake_lacks(const char *name) {
  const char *list = getenv("FAKE_LACKS");
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && !memcmp(p, name, n)) return 1;
    p = comma ? comma + 1 : NULL;
  }
  return 0;
}

/* The entry a registered stub runs, as the driver looks it up in the module: NULL where the
   stub is not registered or the module lacks its entry. */
static const char *fake_entry(const void *stub) {
  for (int i = 0; i < fake_nreg; i++)
    if (fake_reg[i].stub == stub) return fake_lacks(fake_reg[i].name) ? NULL : fake_reg[i].name;
  return NULL;
}

void __real___cudaRegisterFunction(void **h, const char *stub, char *dev, const char *name, int tl, uint3 *tid,
                                   uint3 *bid, dim3 *bd, dim3 *gd, int *ws) {
  if (fake_nreg < (int)(sizeof fake_reg / sizeof *fake_reg)) fake_reg[fake_nreg++].stub = stub, fake_reg[fake_nreg - 1].name = dev;
}
void **__real___cudaRegisterFatBinary(void *fat) { return (void **)fat; }
void __real___cudaRegisterVar(void **h, char *host, char *dev, const char *name, int e, size_t n, int c, int g) {}

cudaError_t __real_cudaLaunchKernel(const void *stub, dim3 g, dim3 b, void **args, size_t sh, cudaStream_t s) {
  const char *e = fake_entry(stub);
  if (!e) return fake_fail(cudaErrorInvalidDeviceFunction);
  if (b.x * b.y * b.z > 1024) return fake_fail(cudaErrorInvalidConfiguration);
  fake_ran = e;
  if (fake_print) printf("ran %s %u %u %d\n", e, g.x, b.x, fake_launch_probes);
  return cudaSuccess;
}
cudaError_t __real_cudaLaunchKernel_ptsz(const void *stub, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s) {
  return __real_cudaLaunchKernel(stub, g, b, a, sh, s);
}
cudaError_t __real_cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f, void **a) {
  return __real_cudaLaunchKernel(f, c->gridDim, c->blockDim, a, c->dynamicSmemBytes, c->stream);
}
cudaError_t __real_cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *c, const void *f, void **a) {
  return __real_cudaLaunchKernelExC(c, f, a);
}
cudaError_t __real_cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int v) {
  return fake_entry(f) ? cudaSuccess : fake_fail(cudaErrorInvalidDeviceFunction);
}
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, const void *f) {
  fake_probe();
  if (!fake_entry(f)) return fake_fail(cudaErrorInvalidDeviceFunction);
  memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->maxDynamicSharedSizeBytes = 48 << 10;
  return cudaSuccess;
}

/* scale's parameters, as cudart states them; the other kernels' as a driver that cannot. */
cudaError_t cudaFuncGetParamInfo(const void *f, size_t index, size_t *offset, size_t *size) {
  fake_probe();
  if (f != &fake_stubs[0]) return fake_fail(cudaErrorNotSupported);
  if (index >= 4) return fake_fail(cudaErrorInvalidValue);
  *offset = index * 8, *size = fake_sizes[0][index];
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
  fake_probe();
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { cudaError_t e = fake_last_error; fake_last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return fake_last_error; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "a fake error"; }
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *c) {
  *c = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
/* Device memory no one reads: the harnesses allocate only for the calls' sake. */
cudaError_t __real_cudaMalloc(void **p, size_t n) {
  *p = fake_device_memory;
  return cudaSuccess;
}
cudaError_t __real_cudaFree(void *p) { return cudaSuccess; }

/* Recording and time-only runs are not these harnesses' business. */
#define FAKE_UNUSED(decl) decl { abort(); }
FAKE_UNUSED(cudaError_t __real_cudaLaunchCooperativeKernel(const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaLaunchCooperativeKernel_ptsz(const void *f, dim3 g, dim3 b, void **a, size_t sh, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaMallocAsync(void **p, size_t n, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaMallocPitch(void **p, size_t *pitch, size_t w, size_t h))
FAKE_UNUSED(cudaError_t __real_cudaMallocManaged(void **p, size_t n, unsigned int f))
FAKE_UNUSED(cudaError_t __real_cudaHostAlloc(void **p, size_t n, unsigned int f))
FAKE_UNUSED(cudaError_t __real_cudaMallocHost(void **p, size_t n))
FAKE_UNUSED(cudaError_t __real_cudaHostRegister(void *p, size_t n, unsigned int f))
FAKE_UNUSED(cudaError_t __real_cudaFreeHost(void *p))
FAKE_UNUSED(cudaError_t __real_cudaHostUnregister(void *p))
FAKE_UNUSED(cudaError_t __real_cudaFreeAsync(void *p, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaFreeAsync_ptsz(void *p, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s))
FAKE_UNUSED(cudaError_t __real_cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m))
FAKE_UNUSED(cudaError_t __real_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g))
FAKE_UNUSED(cudaError_t __real_cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m))
FAKE_UNUSED(cudaError_t __real_cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g))
FAKE_UNUSED(cudaError_t __real_cudaDeviceEnablePeerAccess(int p, unsigned int f))
FAKE_UNUSED(cudaError_t __real_cudaCreateTextureObject(cudaTextureObject_t *t, const struct cudaResourceDesc *r,
                                                       const struct cudaTextureDesc *d, const struct cudaResourceViewDesc *v))
FAKE_UNUSED(cudaError_t __real_cudaCreateSurfaceObject(cudaSurfaceObject_t *s, const struct cudaResourceDesc *r))
FAKE_UNUSED(cudaError_t __real_cudaDeviceReset(void))
FAKE_UNUSED(cudaError_t cudaDeviceSynchronize(void))
FAKE_UNUSED(cudaError_t cudaEventCreate(cudaEvent_t *e))
FAKE_UNUSED(cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f))
FAKE_UNUSED(cudaError_t cudaEventDestroy(cudaEvent_t e))
FAKE_UNUSED(cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s))
FAKE_UNUSED(cudaError_t cudaEventQuery(cudaEvent_t e))
FAKE_UNUSED(cudaError_t cudaEventSynchronize(cudaEvent_t e))
FAKE_UNUSED(cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b))
FAKE_UNUSED(cudaError_t cudaFree(void *p))
FAKE_UNUSED(cudaError_t cudaFreeHost(void *p))
FAKE_UNUSED(cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d))
FAKE_UNUSED(cudaError_t cudaGetFuncBySymbol(cudaFunction_t *f, const void *stub))
FAKE_UNUSED(cudaError_t cudaGetSymbolAddress(void **p, const void *sym))
FAKE_UNUSED(cudaError_t cudaGetSymbolSize(size_t *n, const void *sym))
FAKE_UNUSED(cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int f))
FAKE_UNUSED(cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k))
FAKE_UNUSED(cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st))
FAKE_UNUSED(cudaError_t cudaSetDevice(int d))
FAKE_UNUSED(cudaError_t cudaStreamSynchronize(cudaStream_t s))

/* The fatbinary of all three kernels: the wrapper clang passes, and an image of the layout
   fatbinary writes (a header; an image header, with its flags at byte 40; the image), as
   FAKE_FATBIN says. Built once, in an allocation of exactly its size, so that AddressSanitizer
   sees a reader that goes past its end. */
static struct fatbin_wrapper fake_wrapper = {0x466243b1, 1, NULL, NULL};

static void fake_put(unsigned char *p, size_t at, uint64_t v, size_t bytes) { memcpy(p + at, &v, bytes); }

static void fake_build_image(void) {
  if (fake_wrapper.data) return;
  const char *how = getenv("FAKE_FATBIN") ? getenv("FAKE_FATBIN") : "plain";
  /* The ELF's string table: the sections of the entries the module has. */
  static unsigned char strings[4096];
  size_t n = 0;
  for (int k = 0; k < FAKE_KERNELS; k++)
    for (int v = 0; v <= FAKE_VARIANTS; v++) {
      char name[128];
      int len = v ? snprintf(name, sizeof name, "%s__r3_t_v%d", fake_names[k], v) : snprintf(name, sizeof name, "%s", fake_names[k]);
      if (fake_lacks(name)) continue;
      memcpy(strings + n, ".text.", 6), n += 6;
      memcpy(strings + n, name, (size_t)len + 1), n += (size_t)len + 1;
    }
  int compressed = !strcmp(how, "compressed");
  static unsigned char packed[8192];
  size_t stored = compressed ? ZSTD_compress(packed, sizeof packed, strings, n, 3) : n;
  if (compressed && ZSTD_isError(stored)) abort();
  size_t padded = (stored + 7) & ~(size_t)7, tail = !strcmp(how, "cut") ? 24 : 0;
  size_t size = 16 + 64 + padded + tail;
  unsigned char *p = calloc(1, size);
  if (!p) abort();
  fake_put(p, 0, 0xBA55ED50u, 4), fake_put(p, 4, 1, 2), fake_put(p, 6, 16, 2), fake_put(p, 8, size - 16, 8);
  unsigned char *image = p + 16;
  fake_put(image, 0, 2, 2); /* an ELF */
  fake_put(image, 2, 0x101, 2), fake_put(image, 4, 64, 4);
  fake_put(image, 8, !strcmp(how, "overlong") ? padded + 8 : padded, 8);
  fake_put(image, 28, 90, 4);
  fake_put(image, 40, 0x11 | (compressed ? 0x8000 : 0), 8); /* 64-bit, Linux; zstd */
  if (compressed) fake_put(image, 16, stored, 4), fake_put(image, 56, n, 8);
  memcpy(image + 64, compressed ? packed : strings, stored);
  if (tail) fake_put(image, 64 + padded, 2, 2), fake_put(image, 64 + padded + 4, 64, 4);
  fake_wrapper.data = p;
}

/* The program's registration, as cudart's constructor makes it after the tables' (priority 101). */
static void fake_register(void) {
  fake_build_image();
  void **h = __wrap___cudaRegisterFatBinary(&fake_wrapper);
  for (int k = 0; k < FAKE_KERNELS; k++)
    __wrap___cudaRegisterFunction(h, &fake_stubs[k], (char *)fake_names[k], fake_names[k], -1, NULL, NULL, NULL, NULL,
                                  NULL);
}

/* A launch's argument list for kernel k: one allocation per parameter, of its size, n in its
   parameter n; freed by fake_free_args. */
static void **fake_args(int k, int n) {
  void **args = malloc(sizeof(void *) * (size_t)fake_nparams[k]);
  for (int i = 0; i < fake_nparams[k]; i++) {
    args[i] = calloc(1, fake_sizes[k][i]);
    if (i == fake_n_param[k]) memcpy(args[i], &n, 4);
  }
  return args;
}

static void fake_free_args(int k, void **args) {
  for (int i = 0; i < fake_nparams[k]; i++) free(args[i]);
  free(args);
}

/* One launch of kernel k (n as its int argument, blocks of `threads`), through <<<>>> or
   cudaLaunchKernelEx; the entry that ran, NULL when the launch failed. */
static const char *fake_launch(int k, int n, unsigned threads, int ex) {
  void **args = fake_args(k, n);
  dim3 block = {threads, 1, 1}, grid = {(unsigned)(n + (int)threads - 1) / threads, 1, 1};
  cudaLaunchConfig_t c = {grid, block, 0, 0, NULL, 0};
  fake_ran = NULL;
  fake_in_launch = 1, fake_launch_probes = 0;
  cudaError_t e = ex ? __wrap_cudaLaunchKernelExC(&c, &fake_stubs[k], args)
                     : __wrap_cudaLaunchKernel(&fake_stubs[k], grid, block, args, 0, 0);
  fake_in_launch = 0;
  fake_free_args(k, args);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess ? fake_ran : NULL;
}
