/*
 * r3rt: r3's recording runtime, linked into programs built by r3-clang++.
 *
 * The driver links every CUDA program with -Wl,--wrap=<fn> for the functions below, so calls
 * from the program's own objects land here first, whether cudart is linked statically or not.
 * With R3_RECORD unset (or 0) each wrapper is one predictable branch and a call to the real
 * function. With R3_RECORD=1:
 *   - device memory from cudaMalloc/cudaMallocAsync/cudaMallocPitch comes from one virtual
 *     address range reserved with cuMemAddressReserve at a fixed address (R3_VA_BASE), mapped
 *     piece by piece with cuMemCreate/cuMemMap; replay reserves the same range, so every
 *     device pointer (in arguments, structs, arrays of pointers, linked data) stays valid;
 *   - for the first R3_RECORD_LAUNCHES (default 4) distinct launches of each kernel
 *     (another grid, block, shared size or argument bytes), it writes launch.json, a prologue
 *     (every live allocation and every registered __device__/__constant__ variable) and an
 *     epilogue (what the launch changed, page by page) into <store>/records/;
 *   - the next R3_NATURAL launches identical to a recorded one (same grid, block, shared size
 *     and argument bytes) run as the program issues them, timed with events: natural.json,
 *     the launch's time in the program's own cache state, which replay compares with its
 *     cold- and warm-L2 times to measure in the regime the program runs in (src/replay/l2.rs).
 * The snapshot format is defined in src/store/records.rs, which reads what this file writes.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#define R3_PAGE 4096u
#define R3_MAX_KERNELS 4096
#define R3_MAX_VARS 4096
#define R3_MAX_FATBINS 4096
#define R3_MAX_ALLOCS 65536
#define R3_MAX_SEEN 64
#define R3_NATURAL 5

cudaError_t __real_cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaMalloc(void **, size_t);
cudaError_t __real_cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t __real_cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t __real_cudaMallocManaged(void **, size_t, unsigned int);
cudaError_t __real_cudaFree(void *);
cudaError_t __real_cudaFreeAsync(void *, cudaStream_t);
cudaError_t __real_cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t __real_cudaDeviceEnablePeerAccess(int, unsigned int);
cudaError_t __real_cudaCreateTextureObject(cudaTextureObject_t *, const struct cudaResourceDesc *,
                                           const struct cudaTextureDesc *, const struct cudaResourceViewDesc *);
cudaError_t __real_cudaCreateSurfaceObject(cudaSurfaceObject_t *, const struct cudaResourceDesc *);
void __real___cudaRegisterFunction(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *,
                                   dim3 *, int *);
void __real___cudaRegisterVar(void **, char *, char *, const char *, int, size_t, int, int);
void **__real___cudaRegisterFatBinary(void *);

/* ---- state ---------------------------------------------------------------------------- */

struct kernel_fn {
  const void *stub; const char *name; void **module; int recorded; uint64_t seen[R3_MAX_SEEN]; int nseen;
  /* natural times (ms) of the launches identical to seen[i] that followed it */
  unsigned char nnatural[R3_MAX_SEEN]; float natural[R3_MAX_SEEN][R3_NATURAL];
};
/* A registered fatbinary: the handle cudart gave for it, and its bytes. Its content hash says which
   compile of which translation unit the program's kernels come from (see src/store/records.rs). */
struct fatbin { void **handle; const unsigned char *data; size_t size; char hash[17]; };
struct device_var { const void *host; const char *name; size_t size; int constant; };
struct alloc { uint64_t addr; size_t size; size_t mapped; CUmemGenericAllocationHandle handle; int live; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int mode = -1; /* -1: not read yet, 0: off, 1: recording */
static struct kernel_fn kernels[R3_MAX_KERNELS];
static int nkernels;
static struct fatbin fatbins[R3_MAX_FATBINS];
static int nfatbins;
static struct device_var vars[R3_MAX_VARS];
static int nvars;
static struct alloc allocs[R3_MAX_ALLOCS];
static int nallocs;
static int launches_per_kernel = 4;
static size_t limit_bytes = (size_t)4 << 30;
static char store_dir[4096];
/* Reasons that make every later launch not replayable. */
static const char *sticky_reason;

/* The virtual range all recorded device memory lives in. */
static uint64_t va_base, va_size, va_next;
static size_t granularity;
static int vmm_failed;

typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_param)(CUfunction, size_t, size_t *, size_t *);
static struct { fn_reserve reserve; fn_create create; fn_map map; fn_access access; fn_unmap unmap;
                fn_release release; fn_gran gran; fn_param param_info; } cu;

static void warn(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "r3: warning: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
}

static int recording(void) {
  if (mode >= 0) return mode;
  const char *r = getenv("R3_RECORD");
  mode = r && *r && strcmp(r, "0") != 0;
  if (!mode) return 0;
  const char *n = getenv("R3_RECORD_LAUNCHES");
  if (n && atoi(n) > 0) launches_per_kernel = atoi(n);
  const char *l = getenv("R3_RECORD_LIMIT_MB");
  if (l && atoll(l) > 0) limit_bytes = (size_t)atoll(l) << 20;
  const char *s = getenv("R3_STORE");
  if (s && *s) {
    snprintf(store_dir, sizeof store_dir, "%s", s);
  } else {
    const char *data = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (data && *data) snprintf(store_dir, sizeof store_dir, "%s/r3", data);
    else snprintf(store_dir, sizeof store_dir, "%s/.local/share/r3", home ? home : "/tmp");
  }
  return mode;
}

/* FNV-1a 64: directory keys, launch ids and fatbinary hashes (src/store/records.rs: fnv1a). */
static uint64_t fnv(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull

/* ---- registration --------------------------------------------------------------------- */

/* The wrapper clang and nvcc pass: magic 0x466243b1, version, the fatbinary, and a field unused here.
   The fatbinary starts with magic 0xBA55ED50, u16 version, u16 header size, u64 payload size. */
struct fatbin_wrapper { int magic; int version; const unsigned char *data; const void *unused; };

void **__wrap___cudaRegisterFatBinary(void *fat) {
  void **handle = __real___cudaRegisterFatBinary(fat);
  const struct fatbin_wrapper *w = fat;
  if (!w || w->magic != 0x466243b1 || !w->data) return handle;
  uint32_t magic;
  uint16_t header;
  uint64_t payload;
  memcpy(&magic, w->data, 4);
  memcpy(&header, w->data + 6, 2);
  memcpy(&payload, w->data + 8, 8);
  if (magic != 0xBA55ED50u) return handle;
  pthread_mutex_lock(&lock);
  if (nfatbins < R3_MAX_FATBINS) {
    /* Hashed at the first recorded launch, not here: a program that records nothing pays nothing. */
    fatbins[nfatbins++] = (struct fatbin){handle, w->data, (size_t)header + payload, {0}};
    /* For r3's tests, which check this hash against the driver's without a GPU. */
    if (getenv("R3_PRINT_FATBINS"))
      fprintf(stderr, "r3: fatbin %016llx\n", (unsigned long long)fnv(w->data, (size_t)header + payload, FNV_OFFSET));
  }
  pthread_mutex_unlock(&lock);
  return handle;
}

void __wrap___cudaRegisterFunction(void **h, const char *stub, char *dev, const char *name, int tl, uint3 *tid,
                                   uint3 *bid, dim3 *bd, dim3 *gd, int *ws) {
  pthread_mutex_lock(&lock);
  if (nkernels < R3_MAX_KERNELS) {
    kernels[nkernels].stub = stub;
    kernels[nkernels].name = name ? name : dev;
    kernels[nkernels].module = h;
    nkernels++;
  }
  pthread_mutex_unlock(&lock);
  __real___cudaRegisterFunction(h, stub, dev, name, tl, tid, bid, bd, gd, ws);
}

void __wrap___cudaRegisterVar(void **h, char *host, char *dev, const char *name, int ext, size_t size, int constant,
                              int global) {
  pthread_mutex_lock(&lock);
  if (nvars < R3_MAX_VARS) {
    vars[nvars].host = host;
    vars[nvars].name = name ? name : dev;
    vars[nvars].size = size;
    vars[nvars].constant = constant;
    nvars++;
  }
  pthread_mutex_unlock(&lock);
  __real___cudaRegisterVar(h, host, dev, name, ext, size, constant, global);
}

/* ---- the fixed virtual range ------------------------------------------------------------ */

static int vmm_init(void) {
  if (va_base || vmm_failed) return !vmm_failed;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { vmm_failed = 1; return 0; }
  cu.reserve = (fn_reserve)dlsym(lib, "cuMemAddressReserve");
  cu.create = (fn_create)dlsym(lib, "cuMemCreate");
  cu.map = (fn_map)dlsym(lib, "cuMemMap");
  cu.access = (fn_access)dlsym(lib, "cuMemSetAccess");
  cu.unmap = (fn_unmap)dlsym(lib, "cuMemUnmap");
  cu.release = (fn_release)dlsym(lib, "cuMemRelease");
  cu.gran = (fn_gran)dlsym(lib, "cuMemGetAllocationGranularity");
  cu.param_info = (fn_param)dlsym(lib, "cuFuncGetParamInfo");
  if (!cu.reserve || !cu.create || !cu.map || !cu.access || !cu.unmap || !cu.release || !cu.gran) {
    vmm_failed = 1;
    return 0;
  }
  cudaFree(0); /* creates the primary context */
  int dev = 0;
  cudaGetDevice(&dev);
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if (cu.gran(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) { vmm_failed = 1; return 0; }
  const char *b = getenv("R3_VA_BASE"), *sz = getenv("R3_VA_SIZE_GB");
  uint64_t want = b ? strtoull(b, NULL, 0) : 0x600000000000ull;
  va_size = (sz ? strtoull(sz, NULL, 0) : 512ull) << 30;
  CUdeviceptr got = 0;
  if (cu.reserve(&got, va_size, 0, (CUdeviceptr)want, 0) != CUDA_SUCCESS) { vmm_failed = 1; return 0; }
  va_base = va_next = got;
  if (got != want) warn("device memory range reserved at %s instead of the requested address %s", "another", "R3_VA_BASE");
  return 1;
}

static cudaError_t vmm_alloc(void **ptr, size_t size) {
  size_t mapped = (size + granularity - 1) / granularity * granularity;
  if (mapped == 0) mapped = granularity;
  if (va_next + mapped > va_base + va_size || nallocs >= R3_MAX_ALLOCS) return cudaErrorMemoryAllocation;
  int dev = 0;
  cudaGetDevice(&dev);
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemGenericAllocationHandle h;
  if (cu.create(&h, mapped, &prop, 0) != CUDA_SUCCESS) return cudaErrorMemoryAllocation;
  CUdeviceptr at = va_next;
  if (cu.map(at, mapped, 0, h, 0) != CUDA_SUCCESS) { cu.release(h); return cudaErrorMemoryAllocation; }
  CUmemAccessDesc acc = {0};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (cu.access(at, mapped, &acc, 1) != CUDA_SUCCESS) { cu.unmap(at, mapped); cu.release(h); return cudaErrorMemoryAllocation; }
  va_next += mapped;
  allocs[nallocs++] = (struct alloc){at, size, mapped, h, 1};
  *ptr = (void *)(uintptr_t)at;
  return cudaSuccess;
}

static struct alloc *find_alloc(const void *p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && allocs[i].addr == (uint64_t)(uintptr_t)p) return &allocs[i];
  return NULL;
}

static cudaError_t recorded_malloc(void **ptr, size_t size, cudaError_t (*fallback)(void **, size_t)) {
  pthread_mutex_lock(&lock);
  int ok = vmm_init();
  cudaError_t e = ok ? vmm_alloc(ptr, size) : cudaErrorMemoryAllocation;
  if (!ok && !sticky_reason) sticky_reason = "device memory outside r3's fixed range (CUDA virtual memory management unavailable)";
  pthread_mutex_unlock(&lock);
  return ok ? e : fallback(ptr, size);
}

cudaError_t __wrap_cudaMalloc(void **ptr, size_t size) {
  if (!recording()) return __real_cudaMalloc(ptr, size);
  return recorded_malloc(ptr, size, __real_cudaMalloc);
}

cudaError_t __wrap_cudaMallocAsync(void **ptr, size_t size, cudaStream_t s) {
  if (!recording()) return __real_cudaMallocAsync(ptr, size, s);
  return recorded_malloc(ptr, size, __real_cudaMalloc);
}

cudaError_t __wrap_cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
  if (!recording()) return __real_cudaMallocPitch(ptr, pitch, width, height);
  *pitch = (width + 511) / 512 * 512;
  return recorded_malloc(ptr, *pitch * height, __real_cudaMalloc);
}

cudaError_t __wrap_cudaMallocManaged(void **ptr, size_t size, unsigned int flags) {
  if (recording()) {
    pthread_mutex_lock(&lock);
    sticky_reason = "managed memory (cudaMallocManaged) in use";
    pthread_mutex_unlock(&lock);
  }
  return __real_cudaMallocManaged(ptr, size, flags);
}

static int recorded_free(void *p) {
  pthread_mutex_lock(&lock);
  struct alloc *a = find_alloc(p);
  if (a) {
    cudaDeviceSynchronize();
    cu.unmap(a->addr, a->mapped);
    cu.release(a->handle);
    a->live = 0;
  }
  pthread_mutex_unlock(&lock);
  return a != NULL;
}

cudaError_t __wrap_cudaFree(void *p) {
  if (recording() && p && recorded_free(p)) return cudaSuccess;
  return __real_cudaFree(p);
}

cudaError_t __wrap_cudaFreeAsync(void *p, cudaStream_t s) {
  if (recording() && p && recorded_free(p)) return cudaSuccess;
  return __real_cudaFreeAsync(p, s);
}

static void mark(const char *why) {
  if (!recording()) return;
  pthread_mutex_lock(&lock);
  if (!sticky_reason) sticky_reason = why;
  pthread_mutex_unlock(&lock);
}

cudaError_t __wrap_cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  mark("peer memory access enabled");
  return __real_cudaDeviceEnablePeerAccess(peer, flags);
}

cudaError_t __wrap_cudaCreateTextureObject(cudaTextureObject_t *t, const struct cudaResourceDesc *r,
                                           const struct cudaTextureDesc *d, const struct cudaResourceViewDesc *v) {
  mark("texture objects in use");
  return __real_cudaCreateTextureObject(t, r, d, v);
}

cudaError_t __wrap_cudaCreateSurfaceObject(cudaSurfaceObject_t *s, const struct cudaResourceDesc *r) {
  mark("surface objects in use");
  return __real_cudaCreateSurfaceObject(s, r);
}

/* ---- writing a recording ------------------------------------------------------------------ */


/* The content hash of the fatbinary a kernel was registered from (16 hex digits), or "" when
   it is unknown (registered through another path). The driver stores the same hash with the
   translation unit, which is how a recording finds the kernel module that ran. */
static const char *fatbin_hash(const struct kernel_fn *k) {
  for (int i = 0; i < nfatbins; i++) {
    struct fatbin *f = &fatbins[i];
    if (f->handle != k->module) continue;
    if (!f->hash[0])
      snprintf(f->hash, sizeof f->hash, "%016llx", (unsigned long long)fnv(f->data, f->size, FNV_OFFSET));
    return f->hash;
  }
  return "";
}

/* Where a kernel's recordings go: FNV-1a of "<fatbin hash>/<name>", or of the name alone when
   the fatbinary is unknown (src/store/records.rs: kernel_key), so that same-named kernels of
   two programs never share a directory. */
static uint64_t kernel_dir_key(const struct kernel_fn *k) {
  const char *fb = fatbin_hash(k);
  uint64_t h = FNV_OFFSET;
  if (*fb) {
    h = fnv(fb, strlen(fb), h);
    h = fnv("/", 1, h);
  }
  return fnv(k->name, strlen(k->name), h);
}

struct writer { FILE *f; ZSTD_CCtx *z; char buf[1 << 16]; int failed; };

static void w_bytes(struct writer *w, const void *data, size_t n) {
  ZSTD_inBuffer in = {data, n, 0};
  while (!w->failed && in.pos < in.size) {
    ZSTD_outBuffer out = {w->buf, sizeof w->buf, 0};
    if (ZSTD_isError(ZSTD_compressStream2(w->z, &out, &in, ZSTD_e_continue))) w->failed = 1;
    if (out.pos && fwrite(w->buf, 1, out.pos, w->f) != out.pos) w->failed = 1;
  }
}

static void w_u8(struct writer *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(struct writer *w, uint16_t v) { w_bytes(w, &v, 2); }
static void w_u32(struct writer *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_u64(struct writer *w, uint64_t v) { w_bytes(w, &v, 8); }

static int w_open(struct writer *w, const char *path) {
  memset(w, 0, sizeof *w);
  w->f = fopen(path, "wb");
  w->z = ZSTD_createCCtx();
  if (!w->f || !w->z) return 0;
  ZSTD_CCtx_setParameter(w->z, ZSTD_c_compressionLevel, 3);
  ZSTD_CCtx_setParameter(w->z, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(w->z, ZSTD_c_nbWorkers, 4); /* ignored where libzstd has no threads */
  w_bytes(w, "R3SNAP01", 8);
  return 1;
}

static int w_close(struct writer *w) {
  w_bytes(w, "R3END\0\0\0", 8);
  ZSTD_inBuffer in = {NULL, 0, 0};
  size_t left;
  do {
    ZSTD_outBuffer out = {w->buf, sizeof w->buf, 0};
    left = ZSTD_compressStream2(w->z, &out, &in, ZSTD_e_end);
    if (ZSTD_isError(left)) { w->failed = 1; break; }
    if (out.pos && fwrite(w->buf, 1, out.pos, w->f) != out.pos) w->failed = 1;
  } while (left);
  ZSTD_freeCCtx(w->z);
  if (fflush(w->f) || fsync(fileno(w->f))) w->failed = 1;
  if (fclose(w->f)) w->failed = 1;
  return !w->failed;
}

enum { KIND_ALLOC = 0, KIND_GLOBAL = 1 };
enum { ENC_FULL = 0, ENC_UNCHANGED = 1, ENC_PAGES = 2 };

struct region { uint8_t kind; uint64_t addr; size_t size; const char *name; unsigned char *before, *after; };

static void w_region_head(struct writer *w, const struct region *r, uint8_t enc) {
  size_t nlen = r->name ? strlen(r->name) : 0;
  w_u8(w, r->kind);
  w_u8(w, enc);
  w_u16(w, (uint16_t)nlen);
  w_u32(w, R3_PAGE);
  w_u64(w, r->addr);
  w_u64(w, r->size);
  if (nlen) w_bytes(w, r->name, nlen);
}

static void write_prologue(struct writer *w, struct region *rs, int n) {
  w_u32(w, 1);
  w_u32(w, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    w_region_head(w, &rs[i], ENC_FULL);
    w_bytes(w, rs[i].before, rs[i].size);
  }
}

static size_t write_epilogue(struct writer *w, struct region *rs, int n) {
  size_t changed = 0;
  w_u32(w, 1);
  w_u32(w, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    struct region *r = &rs[i];
    uint64_t pages = (r->size + R3_PAGE - 1) / R3_PAGE, diff = 0;
    for (uint64_t p = 0; p < pages; p++) {
      size_t off = p * R3_PAGE, len = r->size - off < R3_PAGE ? r->size - off : R3_PAGE;
      diff += memcmp(r->before + off, r->after + off, len) != 0;
    }
    w_region_head(w, r, diff ? ENC_PAGES : ENC_UNCHANGED);
    if (!diff) continue;
    w_u64(w, diff);
    for (uint64_t p = 0; p < pages; p++) {
      size_t off = p * R3_PAGE, len = r->size - off < R3_PAGE ? r->size - off : R3_PAGE;
      if (memcmp(r->before + off, r->after + off, len) == 0) continue;
      w_u64(w, p);
      w_bytes(w, r->after + off, len);
      changed += len;
    }
  }
  return changed;
}

static int snapshot(struct region *rs, int n, int after) {
  for (int i = 0; i < n; i++) {
    unsigned char *dst = after ? rs[i].after : rs[i].before;
    if (rs[i].size && cudaMemcpy(dst, (void *)(uintptr_t)rs[i].addr, rs[i].size, cudaMemcpyDeviceToHost) != cudaSuccess)
      return 0;
  }
  return 1;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

struct launch {
  const char *name;
  dim3 grid, block;
  size_t shmem;
  unsigned char *args;
  size_t args_size;
  size_t offsets[256], sizes[256];
  int nparams;
  uint64_t id;
  const char *fatbin;
};

static int mkdirs(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0777) && errno != EEXIST) return 0;
    *p = '/';
  }
  return !mkdir(tmp, 0777) || errno == EEXIST;
}

static void write_launch_json(const char *dir, const struct launch *l, const char *not_replayable, double ms,
                              double first_ms, size_t bytes_in, size_t bytes_changed, int nregions) {
  char path[4200];
  snprintf(path, sizeof path, "%s/launch.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return;
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  char exe[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) exe[0] = 0;
  struct cudaDeviceProp prop;
  int have_prop = cudaGetDeviceProperties(&prop, dev) == cudaSuccess;
  fprintf(f, "{\n  \"format\": 1,\n  \"kernel\": ");
  json_str(f, l->name);
  if (have_prop) {
    fprintf(f, ",\n  \"gpu\": ");
    json_str(f, prop.name);
  }
  if (l->fatbin && *l->fatbin) {
    fprintf(f, ",\n  \"fatbin\": ");
    json_str(f, l->fatbin);
  }
  fprintf(f, ",\n  \"arch\": \"sm_%d%d\",\n  \"grid\": [%u, %u, %u],\n  \"block\": [%u, %u, %u],\n", major, minor,
          l->grid.x, l->grid.y, l->grid.z, l->block.x, l->block.y, l->block.z);
  fprintf(f, "  \"shared_bytes\": %zu,\n  \"params\": [", l->shmem);
  for (int i = 0; i < l->nparams; i++) {
    fprintf(f, "%s{\"offset\": %zu, \"size\": %zu}", i ? ", " : "", l->offsets[i], l->sizes[i]);
  }
  fprintf(f, "],\n  \"args_hex\": \"");
  for (size_t i = 0; i < l->args_size; i++) fprintf(f, "%02x", l->args[i]);
  fprintf(f, "\",\n  \"va_base\": %llu,\n  \"va_size\": %llu,\n", (unsigned long long)va_base,
          (unsigned long long)va_size);
  fprintf(f, "  \"in_app_ms\": %.6f,\n  \"first_launch_ms\": %.6f,\n  \"regions\": %d,\n  \"bytes_in\": %zu,\n  \"bytes_changed\": %zu,\n", ms,
          first_ms, nregions, bytes_in, bytes_changed);
  fprintf(f, "  \"replayable\": %s,\n  \"not_replayable\": ", not_replayable ? "false" : "true");
  if (not_replayable) json_str(f, not_replayable);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"program\": ");
  json_str(f, exe);
  fprintf(f, ",\n  \"pid\": %d,\n  \"unix_time\": %lld\n}\n", (int)getpid(), (long long)time(NULL));
  fflush(f);
  fsync(fileno(f));
  fclose(f);
}

/* Collects the regions a kernel can reach: live allocations and registered variables. */
static int collect_regions(struct region *rs, int max) {
  int n = 0;
  for (int i = 0; i < nallocs && n < max; i++) {
    if (!allocs[i].live) continue;
    rs[n++] = (struct region){KIND_ALLOC, allocs[i].addr, allocs[i].size, NULL, NULL, NULL};
  }
  for (int i = 0; i < nvars && n < max; i++) {
    void *dev = NULL;
    size_t size = 0;
    if (cudaGetSymbolAddress(&dev, vars[i].host) != cudaSuccess) { cudaGetLastError(); continue; }
    if (cudaGetSymbolSize(&size, vars[i].host) != cudaSuccess) size = vars[i].size;
    rs[n++] = (struct region){KIND_GLOBAL, (uint64_t)(uintptr_t)dev, size, vars[i].name, NULL, NULL};
  }
  return n;
}

static int restore_regions(struct region *rs, int n, int after) {
  for (int i = 0; i < n; i++) {
    if (!rs[i].size || memcmp(rs[i].before, rs[i].after, rs[i].size) == 0) continue;
    const unsigned char *src = after ? rs[i].after : rs[i].before;
    if (cudaMemcpy((void *)(uintptr_t)rs[i].addr, src, rs[i].size, cudaMemcpyHostToDevice) != cudaSuccess) return 0;
  }
  return 1;
}

/* One launch with events around it, waited for: the launch's status, and its time in *ms (-1 when
   it could not be timed; the launch happens either way). */
static cudaError_t time_one(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream,
                            float *ms) {
  *ms = -1;
  cudaEvent_t a, b;
  if (cudaEventCreate(&a) != cudaSuccess) return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  if (cudaEventCreate(&b) != cudaSuccess) {
    cudaEventDestroy(a);
    return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  }
  cudaEventRecord(a, stream);
  cudaError_t e = __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  float t;
  if (e == cudaSuccess && cudaEventRecord(b, stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
      cudaEventElapsedTime(&t, a, b) == cudaSuccess)
    *ms = t;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return e;
}

/* Median of three warm launches, each on the inputs the first launch saw. */
static double warm_time(struct region *rs, int n, const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                        cudaStream_t stream) {
  float t[3];
  for (int k = 0; k < 3; k++) {
    if (!restore_regions(rs, n, 0)) return -1;
    time_one(stub, grid, block, args, shmem, stream, &t[k]);
  }
  restore_regions(rs, n, 1);
  cudaDeviceSynchronize();
  float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
  return t[2] < lo ? lo : (t[2] > hi ? hi : t[2]);
}

static int param_layout(const void *stub, void **args, struct launch *l) {
  cudaFunction_t fn;
  if (!cu.param_info || cudaGetFuncBySymbol(&fn, stub) != cudaSuccess) return 0;
  size_t total = 0;
  for (l->nparams = 0; l->nparams < 256; l->nparams++) {
    size_t off, size;
    if (cu.param_info((CUfunction)fn, (size_t)l->nparams, &off, &size) != CUDA_SUCCESS) break;
    l->offsets[l->nparams] = off;
    l->sizes[l->nparams] = size;
    if (off + size > total) total = off + size;
  }
  l->args = calloc(1, total ? total : 1);
  l->args_size = total;
  for (int i = 0; i < l->nparams; i++) memcpy(l->args + l->offsets[i], args[i], l->sizes[i]);
  return 1;
}

static struct kernel_fn *find_kernel(const void *stub) {
  for (int i = 0; i < nkernels; i++)
    if (kernels[i].stub == stub) return &kernels[i];
  return NULL;
}

static void recording_dir(char *dir, size_t n, const struct kernel_fn *k, uint64_t id) {
  snprintf(dir, n, "%s/records/%016llx/%016llx", store_dir, (unsigned long long)kernel_dir_key(k),
           (unsigned long long)id);
}

/* natural.json of a recorded launch, replaced whole (temp file, rename): never half-written. */
static void write_natural(const struct kernel_fn *k, int seen) {
  char dir[4096], path[4200], tmp[4300];
  recording_dir(dir, sizeof dir, k, k->seen[seen]);
  snprintf(path, sizeof path, "%s/natural.json", dir);
  snprintf(tmp, sizeof tmp, "%s/.natural-%d.tmp", dir, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return; /* not recorded (or not writable): nothing to add to */
  fprintf(f, "{\n  \"format\": 1,\n  \"natural_ms\": [");
  for (int j = 0; j < k->nnatural[seen]; j++) fprintf(f, "%s%.6f", j ? ", " : "", k->natural[seen][j]);
  fprintf(f, "]\n}\n");
  if (fclose(f) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

/* A launch identical to recorded launch `seen`: runs as issued, and the first R3_NATURAL are
   timed in whatever cache state the program left (no snapshot, no restore around them). */
static cudaError_t natural_launch(struct kernel_fn *k, int seen, const void *stub, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t stream) {
  if (k->nnatural[seen] >= R3_NATURAL) return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  float ms;
  cudaError_t e = time_one(stub, grid, block, args, shmem, stream, &ms);
  if (ms > 0) {
    k->natural[seen][k->nnatural[seen]++] = ms;
    write_natural(k, seen);
  }
  return e;
}

static cudaError_t record_launch(struct kernel_fn *k, const void *stub, dim3 grid, dim3 block, void **args,
                                 size_t shmem, cudaStream_t stream, const char *why_not) {
  struct launch l = {k->name, grid, block, shmem, NULL, 0, {0}, {0}, 0, 0, NULL};
  if (!param_layout(stub, args, &l)) return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  l.fatbin = fatbin_hash(k);
  uint64_t h = fnv(&grid, sizeof grid, FNV_OFFSET);
  h = fnv(&block, sizeof block, h);
  h = fnv(&shmem, sizeof shmem, h);
  l.id = fnv(l.args, l.args_size, h);
  for (int i = 0; i < k->nseen; i++)
    if (k->seen[i] == l.id) { free(l.args); return natural_launch(k, i, stub, grid, block, args, shmem, stream); }
  if (k->recorded >= launches_per_kernel || k->nseen >= R3_MAX_SEEN) {
    free(l.args);
    return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  }
  k->seen[k->nseen++] = l.id;
  k->recorded++;

  char dir[4096], tmp[4200];
  recording_dir(dir, sizeof dir, k, l.id);
  snprintf(tmp, sizeof tmp, "%s/records/.tmp-%d-%016llx", store_dir, (int)getpid(), (unsigned long long)l.id);
  char parent[4200];
  snprintf(parent, sizeof parent, "%s", dir);
  *strrchr(parent, '/') = 0;
  if (!mkdirs(parent) || !mkdirs(tmp)) {
    warn("cannot write recordings under %s%s; launches run unrecorded", store_dir, "");
    free(l.args);
    return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  }

  static struct region rs[R3_MAX_ALLOCS];
  cudaDeviceSynchronize();
  int n = why_not ? 0 : collect_regions(rs, R3_MAX_ALLOCS);
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += rs[i].size;
  char limit_msg[256];
  if (!why_not && bytes > limit_bytes) {
    snprintf(limit_msg, sizeof limit_msg, "working set %zu MiB is over the limit of %zu MiB (raise R3_RECORD_LIMIT_MB)",
             bytes >> 20, limit_bytes >> 20);
    why_not = limit_msg;
    n = 0;
  }
  int ok = 1;
  for (int i = 0; i < n && ok; i++) {
    rs[i].before = malloc(rs[i].size ? rs[i].size : 1);
    rs[i].after = malloc(rs[i].size ? rs[i].size : 1);
    ok = rs[i].before && rs[i].after;
  }
  if (!why_not && ok) ok = snapshot(rs, n, 0);
  struct writer w;
  char path[4300];
  if (!why_not && ok) {
    snprintf(path, sizeof path, "%s/prologue.r3snap", tmp);
    ok = w_open(&w, path);
    if (ok) write_prologue(&w, rs, n);
    ok = ok && w_close(&w);
  }
  float ms;
  cudaError_t result = time_one(stub, grid, block, args, shmem, stream, &ms);
  if (ms < 0) ms = 0; /* launch.json's time of a launch that could not be timed, as before */
  size_t changed = 0;
  double first_ms = ms;
  if (result == cudaSuccess && !why_not && ok) {
    ok = snapshot(rs, n, 1);
    snprintf(path, sizeof path, "%s/epilogue.r3snap", tmp);
    if (ok) ok = w_open(&w, path);
    if (ok) {
      changed = write_epilogue(&w, rs, n);
      ok = w_close(&w);
    }
    /* The first launch pays for lazy module loading: time it again, warm, on restored inputs,
       then put back exactly what the first launch left, so the program sees no difference. */
    if (ok) ms = warm_time(rs, n, stub, grid, block, args, shmem, stream);
  }
  for (int i = 0; i < n; i++) { free(rs[i].before); free(rs[i].after); }
  if (result != cudaSuccess) why_not = "the launch itself failed";
  else if (!ok && !why_not) why_not = "snapshot failed (device copy or write error)";
  write_launch_json(tmp, &l, why_not, ms, first_ms, bytes, changed, n);
  if (rename(tmp, dir) != 0) warn("cannot move a recording into %s (%s)", dir, strerror(errno));
  free(l.args);
  return result;
}

cudaError_t __wrap_cudaLaunchKernel(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                                    cudaStream_t stream) {
  if (!recording()) return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  pthread_mutex_lock(&lock);
  struct kernel_fn *k = find_kernel(stub);
  cudaError_t e = k ? record_launch(k, stub, grid, block, args, shmem, stream, sticky_reason)
                    : __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  pthread_mutex_unlock(&lock);
  return e;
}

cudaError_t __wrap_cudaLaunchCooperativeKernel(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                                               cudaStream_t stream) {
  if (!recording()) return __real_cudaLaunchCooperativeKernel(stub, grid, block, args, shmem, stream);
  pthread_mutex_lock(&lock);
  struct kernel_fn *k = find_kernel(stub);
  cudaError_t e;
  if (k && k->recorded < launches_per_kernel) {
    /* Recorded as a launch that cannot be replayed; it runs as the program asked. */
    k->recorded++;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/records/%016llx/cooperative-%d", store_dir, (unsigned long long)kernel_dir_key(k),
             k->recorded);
    struct launch l = {k->name, grid, block, shmem, (unsigned char *)"", 0, {0}, {0}, 0, 0, fatbin_hash(k)};
    if (mkdirs(dir)) write_launch_json(dir, &l, "cooperative launch", 0, 0, 0, 0, 0);
  }
  e = __real_cudaLaunchCooperativeKernel(stub, grid, block, args, shmem, stream);
  pthread_mutex_unlock(&lock);
  return e;
}

cudaError_t __wrap_cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
  mark("CUDA graphs in use");
  return __real_cudaGraphLaunch(g, s);
}
