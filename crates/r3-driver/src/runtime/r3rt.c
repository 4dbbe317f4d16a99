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
 *     device pointer (in arguments, structs, arrays of pointers, linked data) stays valid.
 *     Freed memory stays mapped for the next allocation of its size (up to R3_RECORD_CACHE_MB),
 *     as a caching allocator would keep it: a program that allocates and frees in a loop pays
 *     for cuMemCreate/cuMemMap once, not every iteration, and never runs out of address range;
 *   - for the first R3_RECORD_LAUNCHES (default 4) distinct launches of each kernel
 *     (another grid, block, shared size or argument bytes), it writes launch.json, a prologue
 *     and an epilogue (what the launch changed, page by page) into <store>/records/. The
 *     prologue holds what the launch can reach: every registered __device__/__constant__
 *     variable, the allocations its arguments point into, and, transitively, the allocations
 *     those regions hold pointers into (R3_RECORD_SNAPSHOT=full: every live allocation).
 *     A pointer the scan misses cannot give a wrong result: replay maps only what was
 *     recorded, so the baseline itself faults on such a recording and it is reported;
 *     and, past those, one launch that repeats an earlier one and is larger than every
 *     recorded launch of its kernel (repeat_earns_recording: the launch the program repeats);
 *   - the next R3_NATURAL launches identical to a recorded one (same grid, block, shared size
 *     and argument bytes) run as the program issues them, timed with events: natural.json,
 *     the launch's time in the program's own cache state, which replay compares with its
 *     cold- and warm-L2 times to measure in the regime the program runs in (src/replay/l2.rs).
 * Recording costs what is recorded: other launches pay a table lookup, an argument hash and,
 * where not identical to a recorded one, two event records (the census times them); a recorded
 * launch's snapshots are compressed and written on a thread of its own while the
 * launch runs and after the program goes on (struct finisher), and the three warm
 * re-launches for the in-app time run only when they are cheap (see warm_relaunches).
 * R3_RECORD_MAX_S and R3_RECORD_KERNEL_MB cap the time spent recording and the bytes
 * written per kernel; R3_RECORD_PROGRESS=1 prints progress on stderr, and
 * R3_RECORD_STATS names a file that gets what the run recorded and where the time went
 * (`r3 record` sets both and prints the summary; crates/r3-record reads the file); R3_RECORD_RUN
 * names the `r3 record` run, kept in each launch.json (`run`), by which it tells its own
 * recordings from those of other programs recording into the store at the same time.
 * While recording, every launch is also counted (the census, in the same file): per kernel,
 * the launches identical to each recorded one, and the others' count and total threads, the
 * others each timed between two CUDA events as a time-only run times them (below), from which
 * r3 estimates each kernel's share of the program's GPU time (crates/r3-store/src/programs.rs).
 *
 * With R3_TIME_ONLY=1 instead (`r3 record --time-only`) nothing is recorded and memory is the
 * program's own: every launch runs as in a build without r3 (dispatch included) between two
 * CUDA events on its stream (each kernel loaded before its first on a device, so that no lazy
 * load is timed), from a pool of R3_TIME_ONLY_EVENTS pairs (default 1024); the oldest pair is waited for when the pool is full, the rest before cudaDeviceReset and at exit,
 * and each kernel's launches and summed GPU time go to R3_RECORD_STATS ("timing").
 * The snapshot format is defined in src/store/records.rs, which reads what this file writes.
 *
 * In builds with r3's apply, the same wrappers choose each launch's code (see "dispatch" below):
 * a kernel may have variants beside its generic entry (launch bounds, values folded into
 * constants), listed in a table the host compile hands to r3_dispatch_add; a launch runs the
 * first variant whose guard holds, else the generic code. What the driver says of a variant on
 * a device (its architecture, its limits, which loads it) is asked at the program's first
 * allocation or free there, not inside a launch (dispatch_prepare). R3_DISPATCH=0 turns this
 * off at run time; recording (R3_RECORD=1) always runs the generic code, which is what r3 tunes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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
#define R3_UNRECORDED 8
#define R3_NATURAL 5
#define R3_KERNEL_TABLE 8192 /* a power of two above R3_MAX_KERNELS */
#define R3_MAX_ARGS 32768     /* bytes of kernel parameters (CUDA allows 32764) */
#define R3_WARM_BUDGET_MS 50.0
#define R3_WORKERS 8            /* compression threads at most */
#define R3_INFLIGHT 4           /* recordings being finished at once, at most */
#define R3_CHUNK (4u << 20)     /* bytes per compressed frame */
#define R3_ARENA_CHUNKS 256
#define R3_ARENA_MIN ((size_t)64 << 20)
#define R3_HUGE ((size_t)2 << 20)
#define R3_SCAN_SLICE ((size_t)16 << 20) /* bytes of a region worth scanning on several threads */
#define R3_STAGE_BYTES ((size_t)8 << 20) /* a pinned staging buffer (one per copy worker) */
#define R3_STAGE_MIN ((size_t)1 << 20)   /* a smaller device copy is a plain cudaMemcpy */
#define R3_RESTORE_RUNS 64                 /* more runs of changed pages: restored in one copy */
#define R3_FINISHER_NICE 10                /* nice value of the threads that write recordings */
#define R3_SPARSE_MIN ((size_t)1 << 20)    /* an allocation this large may be recorded by its pages */
#define R3_ARENA_MAPS 1024                 /* sparse regions' host mappings of one arena */

cudaError_t __real_cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaLaunchCooperativeKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaMalloc(void **, size_t);
cudaError_t __real_cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t __real_cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t __real_cudaMallocManaged(void **, size_t, unsigned int);
cudaError_t __real_cudaHostAlloc(void **, size_t, unsigned int);
cudaError_t __real_cudaMallocHost(void **, size_t);
cudaError_t __real_cudaHostRegister(void *, size_t, unsigned int);
cudaError_t __real_cudaFreeHost(void *);
cudaError_t __real_cudaHostUnregister(void *);
cudaError_t __real_cudaFree(void *);
cudaError_t __real_cudaFreeAsync(void *, cudaStream_t);
cudaError_t __real_cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t __real_cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t __real_cudaStreamEndCapture(cudaStream_t, cudaGraph_t *);
cudaError_t __real_cudaDeviceEnablePeerAccess(int, unsigned int);
cudaError_t __real_cudaCreateTextureObject(cudaTextureObject_t *, const struct cudaResourceDesc *,
                                           const struct cudaTextureDesc *, const struct cudaResourceViewDesc *);
cudaError_t __real_cudaCreateSurfaceObject(cudaSurfaceObject_t *, const struct cudaResourceDesc *);
void __real___cudaRegisterFunction(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *,
                                   dim3 *, int *);
void __real___cudaRegisterVar(void **, char *, char *, const char *, int, size_t, int, int);
void **__real___cudaRegisterFatBinary(void *);
cudaError_t __real_cudaFuncSetAttribute(const void *, enum cudaFuncAttribute, int);
cudaError_t __real_cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t __real_cudaDeviceReset(void);

/* ---- state ---------------------------------------------------------------------------- */

/* A kernel's parameter layout (cuFuncGetParamInfo), read at its first launch. */
struct layout { int nparams; size_t size; size_t offsets[256], sizes[256]; };

/* Of a kernel's launches from a recorded one on (itself included) that had a layout, those with
   its grid and block, and those with each of its first R3_RECUR_PARAMS parameters' bytes: what a
   variant guarded on its values would run for. A loop's counter passed by value (k of a
   Gram-Schmidt step) recurs in one launch of the loop's; a specialization on it is a variant the
   program almost never runs. */
#define R3_RECUR_PARAMS 16
struct recur {
  uint64_t compared, dims_same, arg_same[R3_RECUR_PARAMS];
  dim3 grid, block;
  unsigned char *bytes; /* the recorded launch's parameter buffer */
};

struct kernel_fn {
  const void *stub; const char *name; void **module;
  struct layout *layout; int no_layout;
  int launched, recorded, capped; size_t bytes_written;
  uint64_t seen[R3_MAX_SEEN]; int nseen;
  /* natural times (ms) of the launches identical to seen[i] that followed it */
  unsigned char nnatural[R3_MAX_SEEN]; float natural[R3_MAX_SEEN][R3_NATURAL];
  /* The census, while recording: every launch; those identical to seen[i] (itself included);
     the others (not recorded, or of a kind r3 does not record), and their threads in all; of
     those, the ones timed by events (census_timing_begin), their threads and GPU time (ms). */
  uint64_t census_launches, census_same[R3_MAX_SEEN], census_other, census_timed;
  double census_other_threads, census_timed_threads, census_timed_ms;
  /* How often each recorded launch's values recur (the census; allocated as it is recorded). */
  struct recur *recur[R3_MAX_SEEN];
  /* With R3_TIME_ONLY: launches, those timed, and their GPU time summed (ms); the devices its
     generic code was loaded on before its first timed launch there (time_only_preload), a bit
     each. */
  uint64_t time_launches, time_timed;
  double time_ms;
  uint64_t time_loaded;
  /* Past its recorded launches (repeat_earns_recording): the most threads of one, the last
     R3_UNRECORDED launches larger than that (by hash), and whether one that repeated has been
     recorded. */
  double recorded_threads_max;
  uint64_t unrecorded[R3_UNRECORDED]; int nunrecorded, unrecorded_next, repeat_recorded;
};
/* A registered fatbinary: the handle cudart gave for it, and its bytes. Its content hash says which
   compile of which translation unit the program's kernels come from (see src/store/records.rs). */
struct fatbin { void **handle; const unsigned char *data; size_t size; char hash[17]; };
struct device_var { const void *host; const char *name; size_t size; int constant; };
/* A slot of the fixed range: `hole` bytes of address range at `addr`, of which `mapped` are backed
   by device memory; live (the program's), cached (freed, kept mapped for reuse) or empty; `device`:
   the device whose memory backs it (the one current at the cudaMalloc that mapped it). */
enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_CACHED = 2 };
struct alloc { uint64_t addr; size_t size, mapped, hole; CUmemGenericAllocationHandle handle; int state, device; };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int mode = -1; /* -1: not read yet, 0: off, 1: recording */
static int time_only; /* R3_TIME_ONLY=1 (with mode 0): launches timed, nothing recorded */
static struct kernel_fn kernels[R3_MAX_KERNELS];
static int nkernels;
static int kernel_index[R3_KERNEL_TABLE]; /* open addressing by stub: index + 1, 0 empty */
static struct fatbin fatbins[R3_MAX_FATBINS];
static int nfatbins;
static struct device_var vars[R3_MAX_VARS];
static int nvars;
static struct alloc allocs[R3_MAX_ALLOCS];
static int nallocs;
static size_t cached_bytes;

/* What R3_RECORD_* asked for (read once, in recording()). */
static struct {
  int launches_per_kernel;
  size_t limit_bytes;     /* per launch: a larger reachable working set is not recorded */
  size_t kernel_bytes;    /* per kernel: bytes written before it stops being recorded; 0 none */
  double max_seconds;     /* recording time for the whole run; 0 none */
  size_t cache_bytes;     /* freed memory kept mapped for reuse */
  int full_snapshot;      /* every live allocation, not only the reachable ones */
  int warm;               /* warm re-launches: -1 when cheap, 0 never, 1 always */
  int progress;
  int zstd_level;
  int inflight;           /* recordings being finished at once */
  int sync;               /* files synced before a recording is renamed into place */
  size_t host_bytes;      /* host memory the recording slots may hold before draining */
  char stats_path[4096];
  char run[65];           /* R3_RECORD_RUN: the `r3 record` run, written into each launch.json */
} opt = {4, (size_t)4 << 30, 0, 0, (size_t)2 << 30, 0, -1, 0, 1, R3_INFLIGHT, 1, 0, "", ""};
static char store_dir[4096];
/* Reasons that make every later launch not replayable. */
static const char *sticky_reason;

/* Where the run's recording time went, for progress and R3_RECORD_STATS. */
static struct {
  /* start: the runtime's first call (CLOCK_MONOTONIC); the *_unix times (CLOCK_REALTIME) place
     the run's ends for `r3 record`, which measures the whole process (write_stats). */
  double start, start_unix, exit_unix, handler_unix;
  double record_s, context_s, copy_s, host_s, scan_s, write_s, wait_s, exit_wait_s, background_s, relaunch_s, natural_s,
      alloc_s;
  uint64_t launches, recorded, not_replayable, bytes_in, bytes_written, regions, regions_skipped;
  uint64_t allocs, allocs_reused, frees, relaunched;
  uint64_t unknown_launches; /* of stubs with no registration (the census; time-only counts them as a kernel) */
  int kernels_seen, kernels_capped, time_capped;
  double last_progress;
} st;

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

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static long long env_ll(const char *name, long long fallback) {
  const char *v = getenv(name);
  return v && *v ? atoll(v) : fallback;
}

static void at_exit(void);
static void time_only_start(void);

/* Defined by r3's link where the program calls CUDA IPC (runtime.rs: IPC_SYMBOL): memory another
   process opens must be cudaMalloc's own, and a recording maps the program's memory itself. */
extern const char r3_program_uses_cuda_ipc __attribute__((weak));

static int recording(void) {
  if (mode >= 0) return mode;
  const char *r = getenv("R3_RECORD");
  mode = r && *r && strcmp(r, "0") != 0;
  if (mode && &r3_program_uses_cuda_ipc) {
    mode = 0;
    fprintf(stderr, "r3: this program calls CUDA IPC (cudaIpcGetMemHandle), whose memory must be cudaMalloc's own: "
                    "nothing is recorded, and the program runs as built\n");
  }
  if (!mode) {
    time_only_start();
    return 0;
  }
  if (env_ll("R3_RECORD_LAUNCHES", 0) > 0) opt.launches_per_kernel = (int)env_ll("R3_RECORD_LAUNCHES", 0);
  if (env_ll("R3_RECORD_LIMIT_MB", 0) > 0) opt.limit_bytes = (size_t)env_ll("R3_RECORD_LIMIT_MB", 0) << 20;
  if (env_ll("R3_RECORD_KERNEL_MB", 0) > 0) opt.kernel_bytes = (size_t)env_ll("R3_RECORD_KERNEL_MB", 0) << 20;
  if (env_ll("R3_RECORD_CACHE_MB", -1) >= 0) opt.cache_bytes = (size_t)env_ll("R3_RECORD_CACHE_MB", 0) << 20;
  const char *t = getenv("R3_RECORD_MAX_S");
  if (t && atof(t) > 0) opt.max_seconds = atof(t);
  const char *snap = getenv("R3_RECORD_SNAPSHOT");
  opt.full_snapshot = snap && strcmp(snap, "full") == 0;
  const char *warm = getenv("R3_RECORD_WARM");
  if (warm && *warm) opt.warm = strcmp(warm, "0") == 0 ? 0 : strcmp(warm, "1") == 0 ? 1 : -1;
  opt.progress = env_ll("R3_RECORD_PROGRESS", 0) > 0;
  long long level = env_ll("R3_RECORD_ZSTD_LEVEL", 1);
  opt.zstd_level = level < 1 ? 1 : level > 19 ? 19 : (int)level;
  long long inflight = env_ll("R3_RECORD_INFLIGHT", R3_INFLIGHT);
  opt.inflight = inflight < 1 ? 1 : inflight > R3_INFLIGHT ? R3_INFLIGHT : (int)inflight;
  opt.sync = env_ll("R3_RECORD_SYNC", 1) != 0;
  /* A quarter of the machine's memory unless told: snapshots are host copies of device data. */
  long long host_mb = env_ll("R3_RECORD_HOST_MB", -1);
  opt.host_bytes = host_mb >= 0 ? (size_t)host_mb << 20
                                : (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE) / 4;
  const char *sp = getenv("R3_RECORD_STATS");
  if (sp && *sp) snprintf(opt.stats_path, sizeof opt.stats_path, "%s", sp);
  /* Letters, digits, '-' and '_' only: it goes into JSON as it is. */
  const char *run = getenv("R3_RECORD_RUN");
  for (size_t i = 0; run && run[i] && i + 1 < sizeof opt.run; i++) {
    char c = run[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_')) {
      opt.run[0] = 0;
      break;
    }
    opt.run[i] = c, opt.run[i + 1] = 0;
  }
  const char *s = getenv("R3_STORE");
  if (s && *s) {
    snprintf(store_dir, sizeof store_dir, "%s", s);
  } else {
    const char *data = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (data && *data) snprintf(store_dir, sizeof store_dir, "%s/r3", data);
    else snprintf(store_dir, sizeof store_dir, "%s/.local/share/r3", home ? home : "/tmp");
  }
  st.start = now_s();
  st.start_unix = clock_s(CLOCK_REALTIME);
  atexit(at_exit);
  return mode;
}

/* Recording starts with the program, before its first CUDA call, so that the runtime's clock
   covers the whole run (the program's own work before that call included). */
__attribute__((constructor)) static void start_with_the_program(void) { recording(); }

/* FNV-1a 64: directory keys, launch ids and fatbinary hashes (src/store/records.rs: fnv1a). */
static uint64_t fnv(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull

/* The first probe of a kernel's stub in kernel_index (Fibonacci hashing). */
static unsigned stub_slot(const void *stub) {
  return (unsigned)(((uint64_t)(uintptr_t)stub * 0x9E3779B97F4A7C15ull) >> 51) & (R3_KERNEL_TABLE - 1);
}

/* ---- dispatch: variants chosen at launch ---------------------------------------------------- */

/* A variant as the table states it (crates/r3-apply/src/dispatch.rs writes the table): the
   generic kernel's name, the architecture it was compiled for, its own entry, and its guard:
   at most max_threads threads per block (0: any), the block and grid it folded, and the bytes
   of the arguments it folded; relaunch_x (0: none) runs a launch of one-dimensional blocks with
   blocks of that many threads and the grid that keeps its threads, as replay ran it
   (src/replay/session.rs, shape).

   The table is data a build wrote, and a winners file a person edited went into it, so it is
   read as untrusted: every number is checked to its end and its range, every index against the
   kernel's parameters before a guard reads an argument, and a line that fails is skipped (its
   kernel runs its generic code) and named under R3_DISPATCH_VERBOSE=1, as is a line beyond a
   limit. dispatch.rs's parse_line reads a line exactly as parse_line here does, and holds the
   same limits (tests/it/dispatch_grammar.rs feeds both the same lines), so that apply counts
   only what the runtime takes. */
#define R3_MAX_VARIANTS 4096         /* in all the program's tables (dispatch.rs: MAX_VARIANTS) */
#define R3_MAX_VARIANTS_PER_KERNEL 4 /* of one kernel for one architecture (MAX_VARIANTS_PER_KERNEL) */
#define R3_MAX_FOLDED 16             /* folded arguments of one variant (MAX_FOLDED_ARGS) */
#define R3_MAX_FOLDED_BYTES 8        /* of one folded argument, a scalar (MAX_FOLDED_BYTES) */
#define R3_MAX_PARAM_INDEX 32767     /* CUDA passes at most 32764 bytes of parameters (MAX_PARAM_INDEX) */
#define R3_MAX_SM 9999               /* the largest N of sm_<N> (MAX_SM) */
#define R3_MAX_SHIPPED 4096          /* "s" lines in all the program's tables (MAX_SHIPPED) */
#define R3_MAX_DEVICES 64
struct folded { unsigned index; int size; unsigned char bytes[R3_MAX_FOLDED_BYTES]; };
struct variant_def {
  char *kernel, *arch, *entry; unsigned sm, max_threads, relaunch_x;
  int has_block, has_grid; unsigned block[3], grid[3];
  int nargs; struct folded args[R3_MAX_FOLDED];
};
/* A variant registered with one fatbinary: its own address is the stub cudart knows it by.
   Per device: 0 not probed, 1 usable, 2 not (another architecture, or not in the module), and
   the limits the driver reports for it there. args_fit: whether the arguments it folds are the
   kernel's parameters, of the sizes it folds (0 not asked yet, 1 yes, 2 no). */
struct variant {
  const struct variant_def *def;
  unsigned char state[R3_MAX_DEVICES];
  int max_threads[R3_MAX_DEVICES];
  int max_dynamic_shared[R3_MAX_DEVICES];
  int args_fit;
};
struct dispatch { const void *stub; int n; struct variant **v; };

static struct variant_def vdefs[R3_MAX_VARIANTS];
static int nvdefs;
/* The table's "s <kernel> <arch> <kernel hash> <ptx hash>,..." lines: the tuned code each kernel
   ships, as apply built it; a time-only run passes them on ("shipped"), so that r3 knows which
   code it timed (crates/r3-apply/src/dispatch.rs writes and reads them). */
static char *shipped[R3_MAX_SHIPPED];
static int nshipped;
static struct dispatch *dispatch_index[R3_KERNEL_TABLE]; /* open addressing by generic stub */
static int ndispatch;                                     /* kernels with a variant */
/* The devices on which every registered variant has been probed (a bit each): a launch there
   reads what the probe found and asks the driver nothing. */
static uint64_t dispatch_ready;
static int dispatch_off;
static int dispatch_verbose; /* R3_DISPATCH_VERBOSE=1: what dispatch decided once, on stderr */

static void dispatch_say(const char *what, const char *entry, const char *why) {
  if (dispatch_verbose) fprintf(stderr, "r3: dispatch: %s %s%s%s\n", entry, what, why ? ": " : "", why ? why : "");
}

/* A skipped table line, quoted in part: its bytes are whatever the table held. */
static void dispatch_say_line(int number, const char *l, size_t n, const char *why) {
  if (!dispatch_verbose) return;
  char quoted[81];
  size_t k = 0;
  for (; k < n && k < sizeof quoted - 1; k++) quoted[k] = l[k] > ' ' && l[k] < 127 ? l[k] : l[k] == ' ' ? ' ' : '?';
  quoted[k] = 0;
  fprintf(stderr, "r3: dispatch: table line %d skipped: %s: \"%s%s\"\n", number, why, quoted, n > k ? "..." : "");
}

/* A field of a table line: its bytes, not NUL-terminated (the line is the caller's). */
struct field { const char *p; size_t n; };

static int field_is(struct field f, const char *s) { return f.n == strlen(s) && !memcmp(f.p, s, f.n); }

/* A number as apply writes it: decimal digits only (no sign, no space, no leading zero) and at
   most max. strtoul would take "-1" as 4294967295 and "abc" as 0. */
static int parse_number(struct field f, unsigned long long max, unsigned *out) {
  if (f.n == 0 || f.n > 10 || (f.n > 1 && f.p[0] == '0')) return 0;
  unsigned long long v = 0;
  for (size_t i = 0; i < f.n; i++) {
    if (f.p[i] < '0' || f.p[i] > '9') return 0;
    v = v * 10 + (unsigned)(f.p[i] - '0');
  }
  if (v > max) return 0;
  *out = (unsigned)v;
  return 1;
}

/* A kernel's or entry's name: printable ASCII without spaces, as every mangled name is. */
static int is_name(struct field f) {
  for (size_t i = 0; i < f.n; i++)
    if (f.p[i] <= ' ' || f.p[i] >= 127) return 0;
  return f.n > 0;
}

/* "sm_<N>" with an optional "a" or "f" (sm_90a: the same device, its arch-specific features). */
static int parse_arch(struct field f, unsigned *sm) {
  if (f.n < 4 || memcmp(f.p, "sm_", 3)) return 0;
  struct field num = {f.p + 3, f.n - 3};
  if (f.p[f.n - 1] == 'a' || f.p[f.n - 1] == 'f') num.n--;
  return parse_number(num, R3_MAX_SM, sm) && *sm > 0;
}

/* "x,y,z" (each at least 1) into d: 1; "-": 0; anything else: -1. */
static int parse_dims(struct field f, unsigned d[3]) {
  if (field_is(f, "-")) return 0;
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    const char *comma = memchr(f.p + at, ',', f.n - at);
    size_t stop = comma ? (size_t)(comma - f.p) : f.n;
    if ((i < 2) != (comma != NULL)) return -1;
    if (!parse_number((struct field){f.p + at, stop - at}, 0xffffffffull, &d[i]) || !d[i]) return -1;
    at = stop + 1;
  }
  return 1;
}

static int hex_digit(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

/* "<index>:<hex>": a parameter's index and its bytes, 1 to R3_MAX_FOLDED_BYTES of them in
   lowercase hex, as dispatch.rs writes them. Whether the kernel has that parameter, of that
   size, is known at launch (folded_args_fit). */
static int parse_folded(struct field f, struct folded *out) {
  const char *colon = memchr(f.p, ':', f.n);
  if (!colon) return 0;
  struct field index = {f.p, (size_t)(colon - f.p)}, hex = {colon + 1, f.n - index.n - 1};
  if (!parse_number(index, R3_MAX_PARAM_INDEX, &out->index)) return 0;
  if (hex.n == 0 || hex.n % 2 || hex.n / 2 > R3_MAX_FOLDED_BYTES) return 0;
  for (size_t k = 0; k < hex.n / 2; k++) {
    int a = hex_digit(hex.p[2 * k]), b = hex_digit(hex.p[2 * k + 1]);
    if (a < 0 || b < 0) return 0;
    out->bytes[k] = (unsigned char)(a << 4 | b);
  }
  out->size = (int)(hex.n / 2);
  return 1;
}

enum { LINE_BAD, LINE_VARIANT, LINE_SHIPPED };

/* One table line (n bytes at l, without its newline):
     v <kernel> <arch> <entry> <max threads> <block x,y,z or -> <grid x,y,z or -> <relaunch x> <n> <index:hex>...
     s <what the kernel ships>
   fields one space apart. LINE_VARIANT fills d (its names allocated), LINE_SHIPPED leaves the
   text after "s " to the caller, LINE_BAD says why. */
static int parse_line(const char *l, size_t n, struct variant_def *d, const char **why) {
  if (n >= 2 && !memcmp(l, "s ", 2)) {
    for (size_t i = 2; i < n; i++)
      if (l[i] < ' ' || l[i] >= 127) return *why = "a shipped line of other than printable ASCII", LINE_BAD;
    return n > 2 ? LINE_SHIPPED : (*why = "an empty shipped line", LINE_BAD);
  }
  if (n == 0) return *why = "an empty line", LINE_BAD;
  struct field f[9 + R3_MAX_FOLDED];
  int nf = 0;
  for (size_t at = 0;;) {
    const char *space = memchr(l + at, ' ', n - at);
    size_t stop = space ? (size_t)(space - l) : n;
    if (stop == at) return *why = "an empty field (two spaces, or one at an end)", LINE_BAD;
    if (nf == 9 + R3_MAX_FOLDED) return *why = "more fields than a variant has", LINE_BAD;
    f[nf++] = (struct field){l + at, stop - at};
    if (stop == n) break;
    at = stop + 1;
  }
  if (!field_is(f[0], "v")) return *why = "neither a variant (v) nor a shipped (s) line", LINE_BAD;
  if (nf < 9) return *why = "fewer fields than a variant has", LINE_BAD;
  memset(d, 0, sizeof *d);
  unsigned nargs;
  if (!is_name(f[1]) || !is_name(f[3])) return *why = "a kernel or entry name of other than printable ASCII", LINE_BAD;
  if (!parse_arch(f[2], &d->sm)) return *why = "an architecture other than sm_<N>", LINE_BAD;
  if (!parse_number(f[4], 0xffffffffull, &d->max_threads)) return *why = "max threads is not a number", LINE_BAD;
  if ((d->has_block = parse_dims(f[5], d->block)) < 0) return *why = "a block other than x,y,z or -", LINE_BAD;
  if ((d->has_grid = parse_dims(f[6], d->grid)) < 0) return *why = "a grid other than x,y,z or -", LINE_BAD;
  if (!parse_number(f[7], 0xffffffffull, &d->relaunch_x)) return *why = "the relaunch block is not a number", LINE_BAD;
  if (!parse_number(f[8], R3_MAX_FOLDED, &nargs)) return *why = "the folded argument count is not a number up to 16", LINE_BAD;
  if ((unsigned)nf != 9 + nargs) return *why = "not as many folded arguments as stated", LINE_BAD;
  d->nargs = (int)nargs;
  for (int i = 0; i < d->nargs; i++) {
    if (!parse_folded(f[9 + i], &d->args[i])) return *why = "a folded argument other than <index>:<lowercase hex of 1 to 8 bytes>", LINE_BAD;
    for (int j = 0; j < i; j++)
      if (d->args[j].index == d->args[i].index) return *why = "an argument folded twice", LINE_BAD;
  }
  d->kernel = strndup(f[1].p, f[1].n), d->arch = strndup(f[2].p, f[2].n), d->entry = strndup(f[3].p, f[3].n);
  if (d->kernel && d->arch && d->entry) return LINE_VARIANT;
  free(d->kernel), free(d->arch), free(d->entry);
  return *why = "out of memory", LINE_BAD;
}

/* Called by the constructor of each translation unit built with tuned code, before cudart's
   registration (priority 101): its table, kept until the kernels are registered. */
void r3_dispatch_add(const char *table) {
  const char *off = getenv("R3_DISPATCH"), *verbose = getenv("R3_DISPATCH_VERBOSE");
  if (off && !strcmp(off, "0")) dispatch_off = 1;
  dispatch_verbose = verbose && !strcmp(verbose, "1");
  if (!table) return;
  if (strncmp(table, "r3-dispatch 1", 13) || (table[13] && table[13] != '\n')) {
    dispatch_say_line(1, table, strlen(table), "the table is not of format r3-dispatch 1; its kernels run their generic code");
    return;
  }
  pthread_mutex_lock(&lock);
  int number = 1;
  for (const char *l = table + 13; *l == '\n' && l[1];) {
    const char *start = l + 1, *nl = strchr(start, '\n');
    size_t n = nl ? (size_t)(nl - start) : strlen(start);
    l = start + n, number++;
    const char *why = NULL;
    struct variant_def d;
    switch (parse_line(start, n, &d, &why)) {
    case LINE_SHIPPED:
      if (nshipped == R3_MAX_SHIPPED) dispatch_say_line(number, start, n, "more shipped lines than the 4096 r3rt keeps");
      else if ((shipped[nshipped] = strndup(start + 2, n - 2))) nshipped++;
      break;
    case LINE_VARIANT:
      if (nvdefs == R3_MAX_VARIANTS) {
        dispatch_say_line(number, start, n, "more variants than the 4096 r3rt keeps");
        free(d.kernel), free(d.arch), free(d.entry);
      } else {
        vdefs[nvdefs] = d;
        dispatch_say("listed", vdefs[nvdefs++].entry, NULL);
      }
      break;
    default:
      dispatch_say_line(number, start, n, why);
    }
  }
  pthread_mutex_unlock(&lock);
}

static struct dispatch *find_dispatch(const void *stub) {
  for (unsigned i = stub_slot(stub);; i = (i + 1) & (R3_KERNEL_TABLE - 1)) {
    struct dispatch *d = __atomic_load_n(&dispatch_index[i], __ATOMIC_ACQUIRE);
    if (!d || d->stub == stub) return d;
  }
}

/* A fatbinary's images follow its header, each behind a header of its own: u16 kind, u16
   version, u32 the header's size, u64 the image's size with its padding, ..., u64 flags at byte
   40 (as CUDA 13's fatbinary writes them, and those before it). An image flagged compressed
   (zstd; lz4 in older ones) holds no name in its bytes: fatbinary compresses PTX by default and,
   with --compress-all (clang's -Xcuda-fatbinary --compress-all), every image. */
#define FATBIN_IMAGE_HEADER_MIN 48
#define FATBIN_IMAGE_FLAGS 40
#define FATBIN_COMPRESSED_LZ4 0x2000u
#define FATBIN_COMPRESSED_ZSTD 0x8000u

/* NULL when every image of the fatbinary (size bytes at p) is in its bytes as is, so that a
   name missing from them is missing from the module; else why r3 cannot tell. */
static const char *fatbin_unsearchable(const unsigned char *p, size_t size) {
  static const char *const layout = "r3 cannot read its module's fatbinary";
  uint16_t header;
  if (size < 16) return layout;
  memcpy(&header, p + 6, 2);
  if (header < 16 || header > size) return layout;
  for (size_t at = header; at < size;) {
    uint32_t image_header;
    uint64_t padded, flags;
    if (size - at < FATBIN_IMAGE_HEADER_MIN) return layout;
    memcpy(&image_header, p + at + 4, 4);
    memcpy(&padded, p + at + 8, 8);
    memcpy(&flags, p + at + FATBIN_IMAGE_FLAGS, 8);
    if (image_header < FATBIN_IMAGE_HEADER_MIN || image_header > size - at || padded > size - at - image_header)
      return layout;
    if (flags & (FATBIN_COMPRESSED_LZ4 | FATBIN_COMPRESSED_ZSTD)) return "its module's fatbinary is compressed";
    at += image_header + (size_t)padded;
  }
  return NULL;
}

/* Whether the module registered as handle h has an entry of that name: 1 it has, 0 it has not,
   -1 r3 cannot tell (*why says why). The name in the fatbinary's bytes settles it where every
   image is there as is: so a variant is not registered with another translation unit's module
   that has a kernel of the same name. Where r3 cannot tell, the variant is registered all the
   same and the driver's own lookup decides at its first launch on a device (variant_usable): a
   module without it then runs the generic code. */
static int fatbin_has(void **h, const char *entry, const char **why) {
  for (int i = 0; i < nfatbins; i++) {
    if (fatbins[i].handle != h) continue;
    if (memmem(fatbins[i].data, fatbins[i].size, entry, strlen(entry) + 1)) return 1;
    return (*why = fatbin_unsearchable(fatbins[i].data, fatbins[i].size)) ? -1 : 0;
  }
  *why = "r3 cannot read its module's fatbinary";
  return -1;
}

/* After cudart registered kernel `name` as `stub` from module h: its variants in the tables,
   each registered under a stub of its own, in table order, up to R3_MAX_VARIANTS_PER_KERNEL per
   architecture (an entry listed twice for one architecture, as two translation units
   instantiating the same template list it, counts once). Under lock. */
static void register_variants(void **h, const void *stub, const char *name) {
  struct dispatch *d = NULL;
  for (int i = 0; i < nvdefs; i++) {
    const struct variant_def *def = &vdefs[i];
    if (strcmp(def->kernel, name)) continue;
    const char *unsure = NULL;
    int has = fatbin_has(h, def->entry, &unsure);
    if (!has) {
      dispatch_say("not registered", def->entry, "its name is not in this module's fatbinary");
      continue;
    }
    if (!d && ndispatch == R3_MAX_KERNELS) {
      dispatch_say("not registered", def->entry, "more kernels with variants than the 4096 r3rt keeps");
      return;
    }
    int same_arch = 0, listed = 0;
    for (int j = 0; d && j < d->n; j++) {
      same_arch += !strcmp(d->v[j]->def->arch, def->arch);
      listed |= !strcmp(d->v[j]->def->arch, def->arch) && !strcmp(d->v[j]->def->entry, def->entry);
    }
    if (listed) {
      dispatch_say("not registered again", def->entry, "listed twice for one architecture");
      continue;
    }
    if (same_arch == R3_MAX_VARIANTS_PER_KERNEL) {
      dispatch_say("not registered", def->entry, "its kernel has 4 variants for this architecture already, the most r3rt runs");
      continue;
    }
    if (!d && !(d = calloc(1, sizeof *d))) return;
    struct variant **grown = realloc(d->v, sizeof *d->v * (size_t)(d->n + 1));
    struct variant *v = grown ? calloc(1, sizeof *v) : NULL;
    if (grown) d->v = grown;
    if (!v) break;
    v->def = def;
    __real___cudaRegisterFunction(h, (const char *)v, def->entry, def->entry, -1, NULL, NULL, NULL, NULL, NULL);
    d->v[d->n++] = v;
    if (has < 0) {
      char why[160];
      snprintf(why, sizeof why, "%s, so the driver says at its first launch whether the module has it", unsure);
      dispatch_say("registered", def->entry, why);
    } else {
      dispatch_say("registered", def->entry, NULL);
    }
  }
  if (!d) return;
  if (!d->n) {
    free(d);
    return;
  }
  d->stub = stub;
  unsigned i = stub_slot(stub);
  while (dispatch_index[i]) i = (i + 1) & (R3_KERNEL_TABLE - 1);
  __atomic_store_n(&dispatch_index[i], d, __ATOMIC_RELEASE);
  ndispatch++;
  /* A module registered after the program's first calls (a library it opens later): its
     variants are probed at the next allocation or free on each device. */
  __atomic_store_n(&dispatch_ready, 0, __ATOMIC_RELEASE);
}

/* A device's architecture as the table writes it (90 for sm_90), asked once; 0 where the
   driver does not say. Under lock, with no error of the program's pending. */
static unsigned device_sm[R3_MAX_DEVICES];
static unsigned device_arch(int dev) {
  if (device_sm[dev]) return device_sm[dev];
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return device_sm[dev] = (unsigned)(major * 10 + minor);
}

/* Asks the driver whether variant v can run on device dev and with what limits. Asking loads
   the variant's code under CUDA's lazy loading, which is why it happens before the launch that
   needs it where r3 can (dispatch_prepare). A failed probe leaves no error behind. Under lock,
   with no error of the program's pending. */
static void probe_variant(struct variant *v, int dev) {
  struct cudaFuncAttributes a;
  cudaError_t e;
  int state = 2;
  if (device_arch(dev) != v->def->sm) {
    dispatch_say("not usable", v->def->entry, "the device is of another architecture");
  } else if ((e = cudaFuncGetAttributes(&a, v)) == cudaSuccess) {
    v->max_threads[dev] = a.maxThreadsPerBlock;
    v->max_dynamic_shared[dev] = a.maxDynamicSharedSizeBytes;
    state = 1;
    dispatch_say("usable", v->def->entry, NULL);
  } else {
    (void)cudaGetLastError();
    dispatch_say("not usable", v->def->entry, cudaGetErrorString(e));
  }
  __atomic_store_n(&v->state[dev], (unsigned char)state, __ATOMIC_RELEASE);
}

/* Whether variant v can run on device dev. Normally probed before the launch; a program whose
   first call r3 sees on the device is this launch has it probed here, once: that launch pays
   what the probe costs, and the variant runs from it on. Running the generic code instead would
   only move the probe to the next launch (the first timed one, after a program's warm-up
   launch) and leave a program of one launch without its variant. With an error of the
   program's pending, r3 does not probe (and the launch runs the generic code). */
static int variant_usable(struct variant *v, int dev) {
  if (dev < 0 || dev >= R3_MAX_DEVICES) return 0;
  int state = __atomic_load_n(&v->state[dev], __ATOMIC_ACQUIRE);
  if (state) return state == 1;
  if (cudaPeekAtLastError() != cudaSuccess) {
    dispatch_say("not probed", v->def->entry, "an error of the program's is pending");
    return 0;
  }
  pthread_mutex_lock(&lock);
  if (!v->state[dev]) {
    dispatch_say("probed at its first launch", v->def->entry, "no allocation or free of the program's came first on the device");
    probe_variant(v, dev);
  }
  state = v->state[dev];
  pthread_mutex_unlock(&lock);
  return state == 1;
}

static void args_fit_probe(struct variant *v, const void *stub);

/* Every variant not yet probed on the calling thread's device, probed now, so that a
   variant's first launch costs what the generic code's does (issue 57: a program of one launch
   ran 16 to 18 us slower with its variant, five times what the variant gained in replay).
   Called after a call of the program's that succeeded on the device and needed its context: an
   allocation or a free. Most programs allocate before they launch, and with nothing of theirs
   running yet at the first allocation, loading code (which may wait for the device) waits for
   nothing; once per device, and only for variants no launch has probed yet, otherwise.
   cudaSetDevice, cudaMemcpy and the event calls would catch a few programs more, but r3rt
   makes those calls itself, and wrapped they would come back here. Not with an error of the
   program's pending (the next call tries again); `call` names the program's call, for
   R3_DISPATCH_VERBOSE. */
static void dispatch_prepare(const char *call) {
  int dev;
  if (cudaPeekAtLastError() != cudaSuccess) return;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (dev < 0 || dev >= R3_MAX_DEVICES || __atomic_load_n(&dispatch_ready, __ATOMIC_ACQUIRE) >> dev & 1) return;
  pthread_mutex_lock(&lock);
  int probed = 0;
  for (int i = 0; i < R3_KERNEL_TABLE; i++) {
    struct dispatch *d = dispatch_index[i];
    for (int j = 0; d && j < d->n; j++) {
      struct variant *v = d->v[j];
      /* Asked of every variant, usable here or not: a launch reads the guard before it knows
         the device. */
      if (v->def->nargs && !v->args_fit) args_fit_probe(v, d->stub);
      if (!v->state[dev]) probe_variant(v, dev), probed++;
    }
  }
  __atomic_or_fetch(&dispatch_ready, 1ull << dev, __ATOMIC_RELEASE);
  if (dispatch_verbose && probed)
    fprintf(stderr, "r3: dispatch: %d variant%s probed on device %d in the program's %s, outside its launches\n", probed,
            probed == 1 ? "" : "s", dev, call);
  pthread_mutex_unlock(&lock);
}

/* A call of the program's that returned e: where it succeeded, the device's variants probed. */
static cudaError_t dispatch_after(cudaError_t e, const char *call) {
  if (e == cudaSuccess && ndispatch && !dispatch_off && !recording()) dispatch_prepare(call);
  return e;
}

/* ---- a kernel's parameters, which a folded argument must be one of ---------------------------- */

/* Where neither cudart nor the driver can state a kernel's parameters (cuFuncGetParamInfo came
   with CUDA 12.4), its name can, for a C++ kernel at namespace scope: the Itanium C++ ABI spells
   the parameters' types in it. Read here for arithmetic types, pointers, references and class
   types (whose size the name does not give); a name with anything else (a nested or template
   name, function, array or vector types, address spaces) is not read, nor is an extern "C"
   kernel's. */
struct mangled { const char *p, *end; int nsub; long sub[64]; };

/* A candidate for later substitution (S_, S0_, ...), in the order the ABI numbers them. */
static long mangled_candidate(struct mangled *m, long size) {
  if (m->nsub == (int)(sizeof m->sub / sizeof *m->sub)) return -1;
  return m->sub[m->nsub++] = size;
}

/* <length><identifier>, the name of a function or class at namespace scope. */
static int mangled_source_name(struct mangled *m) {
  size_t len = 0;
  if (m->p == m->end || *m->p < '1' || *m->p > '9') return 0;
  for (; m->p < m->end && *m->p >= '0' && *m->p <= '9'; m->p++)
    if ((len = len * 10 + (size_t)(*m->p - '0')) > 4096) return 0;
  if ((size_t)(m->end - m->p) < len) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = m->p[i];
    if (!(c == '_' || c == '$' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return 0;
  }
  m->p += len;
  return 1;
}

/* One parameter type: its size in bytes, 0 when the name does not give it, -1 when not read. */
static long mangled_type(struct mangled *m, int depth) {
  if (m->p == m->end || depth > 16) return -1;
  char c = *m->p++;
  switch (c) {
  case 'b': case 'c': case 'a': case 'h': return 1;
  case 's': case 't': return 2;
  case 'i': case 'j': case 'f': case 'w': return 4;
  case 'l': case 'm': case 'x': case 'y': case 'd': return 8;
  case 'n': case 'o': return 16;
  case 'D':
    if (m->p == m->end) return -1;
    c = *m->p++;
    return c == 'u' ? 1 : c == 's' ? 2 : c == 'i' ? 4 : c == 'n' ? 8 : -1;
  case 'P': case 'R': case 'O':
    return mangled_type(m, depth + 1) < 0 ? -1 : mangled_candidate(m, 8);
  case 'r': case 'V': case 'K': {
    /* [r][V][K] <type>: the qualified type is one candidate, after its unqualified one. */
    m->p--;
    if (m->p < m->end && *m->p == 'r') m->p++;
    if (m->p < m->end && *m->p == 'V') m->p++;
    if (m->p < m->end && *m->p == 'K') m->p++;
    long size = mangled_type(m, depth + 1);
    return size < 0 ? -1 : mangled_candidate(m, size);
  }
  case 'S': {
    /* S_ is the first candidate, S<base 36>_ the one after that number; St, Sa, ... (std::) are not read. */
    unsigned long n = 0;
    int digits = 0;
    for (; m->p < m->end && *m->p != '_'; m->p++, digits++) {
      char s = *m->p;
      if (digits == 4 || !((s >= '0' && s <= '9') || (s >= 'A' && s <= 'Z'))) return -1;
      n = n * 36 + (unsigned long)(s <= '9' ? s - '0' : s - 'A' + 10);
    }
    if (m->p == m->end) return -1;
    m->p++;
    n = digits ? n + 1 : 0;
    return n < (unsigned long)m->nsub ? m->sub[n] : -1;
  }
  default:
    if (c < '1' || c > '9') return -1;
    m->p--;
    return mangled_source_name(m) ? mangled_candidate(m, 0) : -1;
  }
}

/* From kernel `name`: 1 when it has parameter `index`, *size its bytes (0: not given); 0 when it
   has no such parameter; -1 when the name is not read. */
static int mangled_param(const char *name, unsigned index, size_t *size) {
  struct mangled m = {name, name + strlen(name), 0, {0}};
  if (m.end - m.p < 2 || memcmp(m.p, "_Z", 2)) return -1;
  m.p += 2;
  if (m.p < m.end && *m.p == 'L') m.p++; /* internal linkage: a static kernel */
  if (!mangled_source_name(&m) || m.p == m.end) return -1;
  if (m.end - m.p == 1 && *m.p == 'v') return 0; /* no parameters */
  int found = 0;
  for (unsigned i = 0; m.p < m.end; i++) {
    long s = mangled_type(&m, 0);
    if (s < 0) return -1;
    if (i == index) found = 1, *size = (size_t)s;
  }
  return found;
}

/* cudart states a kernel's parameters by its stub since CUDA 12.x (weak: a program linked with an
   older cudart has none); the driver by its function since 12.4, reached only where the program's
   cudart loaded it already. */
extern cudaError_t cudaFuncGetParamInfo(const void *, size_t, size_t *, size_t *) __attribute__((weak));
static fn_param dispatch_param_info;
static int dispatch_param_info_sought;

/* Parameter `index` of kernel `name`, launched as `stub`: 1 with *size its bytes, 0 when the
   kernel has no such parameter, -1 when nothing can say. The driver's word first, the name's
   where it has none. Under lock, with no error of the program's pending. */
static int param_size(const void *stub, const char *name, unsigned index, size_t *size) {
  size_t offset;
  if (cudaFuncGetParamInfo) {
    cudaError_t e = cudaFuncGetParamInfo(stub, index, &offset, size);
    if (e == cudaSuccess) return 1;
    (void)cudaGetLastError();
    if (e == cudaErrorInvalidValue) return 0;
  }
  if (!dispatch_param_info_sought) {
    dispatch_param_info_sought = 1;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (lib) dispatch_param_info = (fn_param)dlsym(lib, "cuFuncGetParamInfo");
  }
  cudaFunction_t fn;
  if (dispatch_param_info) {
    if (cudaGetFuncBySymbol(&fn, stub) == cudaSuccess) {
      CUresult r = dispatch_param_info((CUfunction)fn, index, &offset, size);
      if (r == CUDA_SUCCESS) return 1;
      if (r == CUDA_ERROR_INVALID_VALUE) return 0;
    } else {
      (void)cudaGetLastError();
    }
  }
  int r = mangled_param(name, index, size);
  return r == 1 && *size == 0 ? -1 : r;
}

/* Whether every argument variant v folds is a parameter of the kernel launched as stub, of the
   size folded. A launch's argument array holds one pointer per parameter, each to that
   parameter's bytes, so a guard that read any other would read past the program's memory; a
   variant nothing can vouch for this way never runs. Asked once per variant, not while an error
   of the program's is pending (asking could clear it): by dispatch_prepare, or at the first
   launch whose other guards hold. Under lock. */
static void args_fit_probe(struct variant *v, const void *stub) {
  const struct variant_def *d = v->def;
  char why[160] = "";
  for (int i = 0; i < d->nargs && !why[0]; i++) {
    size_t size = 0;
    int r = param_size(stub, d->kernel, d->args[i].index, &size);
    if (r < 0)
      snprintf(why, sizeof why, "nothing states the kernel's parameters (a CUDA driver before 12.4), so argument %u cannot be checked", d->args[i].index);
    else if (r == 0)
      snprintf(why, sizeof why, "it folds argument %u, which the kernel does not have", d->args[i].index);
    else if (size != (size_t)d->args[i].size)
      snprintf(why, sizeof why, "it folds %d bytes of argument %u, which has %zu", d->args[i].size, d->args[i].index, size);
  }
  if (why[0]) dispatch_say("not usable", d->entry, why);
  __atomic_store_n(&v->args_fit, why[0] ? 2 : 1, __ATOMIC_RELEASE);
}

static int folded_args_fit(struct variant *v, const void *stub) {
  int fit = __atomic_load_n(&v->args_fit, __ATOMIC_ACQUIRE);
  if (fit) return fit == 1;
  if (cudaPeekAtLastError() != cudaSuccess) return 0;
  pthread_mutex_lock(&lock);
  if (!v->args_fit) args_fit_probe(v, stub);
  fit = v->args_fit;
  pthread_mutex_unlock(&lock);
  return fit == 1;
}

/* Threads per block the variant would run the launch with. */
static unsigned long long variant_threads(const struct variant_def *d, dim3 block) {
  return d->relaunch_x ? d->relaunch_x : (unsigned long long)block.x * block.y * block.z;
}

static int guard_holds(struct variant *v, const void *stub, dim3 grid, dim3 block, void **args) {
  const struct variant_def *d = v->def;
  if (d->relaunch_x && (block.y != 1 || block.z != 1)) return 0;
  if (d->max_threads && variant_threads(d, block) > d->max_threads) return 0;
  if (d->has_block == 1 && (block.x != d->block[0] || block.y != d->block[1] || block.z != d->block[2])) return 0;
  if (d->has_grid == 1 && (grid.x != d->grid[0] || grid.y != d->grid[1] || grid.z != d->grid[2])) return 0;
  if (d->nargs && (!args || !folded_args_fit(v, stub))) return 0;
  for (int i = 0; i < d->nargs; i++)
    if (memcmp(args[d->args[i].index], d->args[i].bytes, (size_t)d->args[i].size)) return 0;
  return 1;
}

/* The code a launch runs: the first variant whose guard holds and that the device can run
   with this block and shared memory, else the generic stub. A variant that relaunches with
   another block size sets *grid and *block to the shape it runs. */
static const void *choose(const void *stub, dim3 *grid, dim3 *block, void **args, size_t shmem, int relaunch_ok) {
  struct dispatch *d = find_dispatch(stub);
  if (!d) return stub;
  int dev = -1;
  for (int i = 0; i < d->n; i++) {
    struct variant *v = d->v[i];
    const struct variant_def *def = v->def;
    if (!guard_holds(v, stub, *grid, *block, args) || (def->relaunch_x && !relaunch_ok)) continue;
    if (dev < 0 && cudaGetDevice(&dev) != cudaSuccess) return stub;
    if (!variant_usable(v, dev)) continue;
    if (variant_threads(def, *block) > (unsigned long long)v->max_threads[dev] ||
        shmem > (size_t)v->max_dynamic_shared[dev])
      continue;
    if (def->relaunch_x) {
      unsigned long long total = (unsigned long long)grid->x * block->x;
      unsigned long long gx = (total + def->relaunch_x - 1) / def->relaunch_x;
      if (gx == 0 || gx > 0x7fffffffull) continue;
      grid->x = (unsigned)gx, block->x = def->relaunch_x;
    }
    return v;
  }
  return stub;
}

/* The stub a launch runs, its shape adjusted where the variant relaunches (never a cooperative
   launch's: its grid must fit the GPU at once). Evaluate it before the launch's arguments. */
#define DISPATCHED(stub, grid, block, args, shmem, relaunch_ok) \
  (ndispatch && !dispatch_off ? choose(stub, &(grid), &(block), args, shmem, relaunch_ok) : (stub))

/* cudaLaunchKernelEx (the C++ template calls this): chosen like any launch, the shape in a copy
   of the program's configuration; never relaunched with another block size where the launch
   has attributes (a cluster's dimensions must divide the grid, a cooperative grid fit the GPU).
   Not recorded: r3 record counts these launches, and records none of them. */
typedef cudaError_t (*launch_ex_fn)(const cudaLaunchConfig_t *, const void *, void **);

/* Time-only runs and the census (defined below, with the other launches). */
struct timing;
static struct timing *timing_begin(cudaStream_t s);
static void time_only_preload(const void *stub, const void *code);
static void timing_end(struct timing *t, const void *stub, cudaStream_t s, cudaError_t e);
static struct kernel_fn *census_unrecorded(const void *stub, dim3 grid, dim3 block);
static struct timing *census_timing_begin(struct kernel_fn *k, cudaStream_t s);
static void census_timing_end(struct timing *t, struct kernel_fn *k, dim3 grid, dim3 block, cudaStream_t s,
                              cudaError_t e);
static cudaStream_t per_thread(cudaStream_t s);

/* R3_TIME_ONLY: `call`, a launch of `stub` running `code` (its generic code or a variant),
   between the two events of a pair recorded on stream `events_on` (where the launch goes), the
   code loaded first (time_only_preload); returns the launch's status. */
#define TIMED_LAUNCH(stub, code, events_on, call)            \
  do {                                                       \
    pthread_mutex_lock(&lock);                               \
    time_only_preload((stub), (code));                       \
    struct timing *timed_ = timing_begin(events_on);         \
    cudaError_t e_ = (call);                                 \
    timing_end(timed_, (stub), (events_on), e_);             \
    pthread_mutex_unlock(&lock);                             \
    return e_;                                               \
  } while (0)

/* While recording these launches run as issued, counted and timed by the census with the
   kernel's launches that are not recorded. per_thread_code: the _ptsz entry point, whose stream
   0 is the calling thread's default stream. */
static cudaError_t launch_ex(launch_ex_fn real, int per_thread_code, const cudaLaunchConfig_t *config,
                             const void *func, void **args) {
  if (!config) return real(config, func, args);
  if (recording()) {
    cudaStream_t s = per_thread_code ? per_thread(config->stream) : config->stream;
    pthread_mutex_lock(&lock);
    struct kernel_fn *k = census_unrecorded(func, config->gridDim, config->blockDim);
    struct timing *t = census_timing_begin(k, s);
    cudaError_t e = real(config, func, args);
    census_timing_end(t, k, config->gridDim, config->blockDim, s, e);
    pthread_mutex_unlock(&lock);
    return e;
  }
  if (!time_only && (!ndispatch || dispatch_off)) return real(config, func, args);
  cudaLaunchConfig_t c = *config;
  const void *f = DISPATCHED(func, c.gridDim, c.blockDim, args, c.dynamicSmemBytes, c.numAttrs == 0);
  if (time_only) TIMED_LAUNCH(func, f, per_thread_code ? per_thread(c.stream) : c.stream, real(&c, f, args));
  return real(&c, f, args);
}

cudaError_t __wrap_cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
  return launch_ex(__real_cudaLaunchKernelExC, 0, config, func, args);
}

/* An attribute the program sets on a kernel holds for its variants too (a larger dynamic
   shared memory above all, without which a launch that needs it could not run a variant);
   their limits change with it, so they are probed again: here, on the device where the
   program set it, if r3 had probed them there, as the program sets attributes before it
   launches; on the other devices at the program's next allocation or free there (or launch). */
cudaError_t __wrap_cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  cudaError_t e = __real_cudaFuncSetAttribute(func, attr, value);
  struct dispatch *d = ndispatch && e == cudaSuccess ? find_dispatch(func) : NULL;
  if (!d) return e;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < d->n; i++) {
    if (__real_cudaFuncSetAttribute(d->v[i], attr, value) != cudaSuccess) (void)cudaGetLastError();
    memset(d->v[i]->state, 0, sizeof d->v[i]->state);
  }
  int dev = -1;
  uint64_t ready = __atomic_load_n(&dispatch_ready, __ATOMIC_ACQUIRE), keep = 0;
  if (!dispatch_off && cudaPeekAtLastError() == cudaSuccess && cudaGetDevice(&dev) == cudaSuccess && dev >= 0 &&
      dev < R3_MAX_DEVICES && ready >> dev & 1) {
    for (int i = 0; i < d->n; i++) probe_variant(d->v[i], dev);
    keep = 1ull << dev;
  }
  __atomic_store_n(&dispatch_ready, ready & keep, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
  return e;
}

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
    unsigned i = stub_slot(stub);
    while (kernel_index[i]) i = (i + 1) & (R3_KERNEL_TABLE - 1);
    kernel_index[i] = ++nkernels;
  }
  pthread_mutex_unlock(&lock);
  __real___cudaRegisterFunction(h, stub, dev, name, tl, tid, bid, bd, gd, ws);
  if (nvdefs) {
    pthread_mutex_lock(&lock);
    register_variants(h, stub, name ? name : dev);
    pthread_mutex_unlock(&lock);
  }
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
  double t0 = now_s();
  __real_cudaFree(0); /* creates the primary context: the program pays for it without r3 too */
  st.context_s = now_s() - t0;
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

/* Per device, the devices that enabled peer access to its memory (a bit each): memory r3 maps
   is reached only by the devices granted it (cuMemSetAccess), which cudaDeviceEnablePeerAccess
   does not do for it as it does for cudaMalloc's; r3 grants it, to the memory mapped before
   and after, as that call would. */
static uint64_t peers_of[R3_MAX_DEVICES];

/* Grants device `to` read and write access to [at, at + bytes). */
static int vmm_grant(uint64_t at, size_t bytes, int to) {
  CUmemAccessDesc acc = {0};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = to;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cu.access(at, bytes, &acc, 1) == CUDA_SUCCESS;
}

/* Maps fresh memory of device dev over [at, at + bytes), reached by dev and its peers. */
static int vmm_map(uint64_t at, size_t bytes, int dev, CUmemGenericAllocationHandle *h) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if (cu.create(h, bytes, &prop, 0) != CUDA_SUCCESS) return 0;
  if (cu.map(at, bytes, 0, *h, 0) != CUDA_SUCCESS) { cu.release(*h); return 0; }
  if (!vmm_grant(at, bytes, dev)) { cu.unmap(at, bytes); cu.release(*h); return 0; }
  uint64_t peers = dev >= 0 && dev < R3_MAX_DEVICES ? peers_of[dev] : 0;
  for (int p = 0; p < R3_MAX_DEVICES; p++)
    if (peers >> p & 1 && !vmm_grant(at, bytes, p)) warn("memory mapped for the program not granted to a %s device (%s failed): a kernel there that reads it faults", "peer", "cuMemSetAccess");
  return 1;
}

static void vmm_unmap(struct alloc *a) {
  cu.unmap(a->addr, a->mapped);
  cu.release(a->handle);
  if (a->state == SLOT_CACHED) cached_bytes -= a->mapped;
  a->state = SLOT_EMPTY;
  a->mapped = 0;
}

static int slot_by_addr(const void *a, const void *b) {
  uint64_t x = allocs[*(const int *)a].addr, y = allocs[*(const int *)b].addr;
  return x < y ? -1 : x > y;
}

/* Gives back every cached slot's memory, joins neighbouring empty ranges, and returns the
   empty range at the top to the unused part: what a larger allocation may need after many
   allocations and frees of other sizes. */
static void vmm_release_cached(void) {
  static int empty[R3_MAX_ALLOCS];
  int n = 0;
  for (int i = 0; i < nallocs; i++) {
    if (allocs[i].state == SLOT_CACHED) vmm_unmap(&allocs[i]);
    if (allocs[i].state == SLOT_EMPTY && allocs[i].hole) empty[n++] = i;
  }
  qsort(empty, (size_t)n, sizeof empty[0], slot_by_addr);
  for (int k = n - 1; k > 0; k--) {
    struct alloc *lo = &allocs[empty[k - 1]], *hi = &allocs[empty[k]];
    if (lo->addr + lo->hole != hi->addr) continue;
    lo->hole += hi->hole;
    hi->hole = 0;
  }
  for (int k = n - 1; k >= 0; k--) {
    struct alloc *a = &allocs[empty[k]];
    if (!a->hole) continue;
    if (a->addr + a->hole == va_next) { va_next = a->addr; a->hole = 0; }
    break;
  }
}

/* The slot for a new allocation of `need` mapped bytes: the smallest cached one that fits
   without wasting more than an eighth of it, else an empty one whose range fits, else new range
   at the top (an entry of the table without range first). -1 when none can be had. */
static int vmm_pick(size_t need, int dev, int *reuse) {
  int best = -1, hole = -1, spare = -1;
  for (int i = 0; i < nallocs; i++) {
    struct alloc *a = &allocs[i];
    /* Cached memory is its device's: an allocation on another device maps its own. */
    if (a->state == SLOT_CACHED && a->device == dev && a->mapped >= need && a->mapped - need <= need / 8 &&
        (best < 0 || a->mapped < allocs[best].mapped))
      best = i;
    if (a->state == SLOT_EMPTY && a->hole >= need && (hole < 0 || a->hole < allocs[hole].hole)) hole = i;
    if (a->state == SLOT_EMPTY && !a->hole && spare < 0) spare = i;
  }
  *reuse = best >= 0;
  if (best >= 0) return best;
  if (spare < 0 && nallocs < R3_MAX_ALLOCS) spare = nallocs++;
  if (hole >= 0) {
    /* The rest of the range stays free for later allocations, in its own entry. */
    if (allocs[hole].hole > need && spare >= 0) {
      allocs[spare] = (struct alloc){allocs[hole].addr + need, 0, 0, allocs[hole].hole - need, 0, SLOT_EMPTY};
      allocs[hole].hole = need;
    }
    return hole;
  }
  if (spare < 0 || va_next + need > va_base + va_size) return -1;
  allocs[spare] = (struct alloc){va_next, 0, 0, need, 0, SLOT_EMPTY};
  va_next += need;
  return spare;
}

static cudaError_t vmm_alloc(void **ptr, size_t size) {
  size_t need = (size + granularity - 1) / granularity * granularity;
  if (need == 0) need = granularity;
  int dev = 0;
  cudaGetDevice(&dev);
  for (int attempt = 0; attempt < 2; attempt++) {
    /* Out of memory or range: the cache may hold what the program needs back. */
    if (attempt) vmm_release_cached();
    int reuse = 0, i = vmm_pick(need, dev, &reuse);
    if (i < 0) continue;
    struct alloc *a = &allocs[i];
    if (reuse) {
      cached_bytes -= a->mapped;
      st.allocs_reused++;
    } else if (vmm_map(a->addr, need, dev, &a->handle)) {
      a->mapped = need;
      a->device = dev;
    } else {
      continue;
    }
    a->size = size;
    a->state = SLOT_LIVE;
    st.allocs++;
    *ptr = (void *)(uintptr_t)a->addr;
    return cudaSuccess;
  }
  return cudaErrorMemoryAllocation;
}

static struct alloc *find_alloc(const void *p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].state == SLOT_LIVE && allocs[i].addr == (uint64_t)(uintptr_t)p) return &allocs[i];
  return NULL;
}

static cudaError_t recorded_malloc(void **ptr, size_t size, cudaError_t (*fallback)(void **, size_t)) {
  pthread_mutex_lock(&lock);
  double t0 = now_s(), context_before = st.context_s;
  int ok = vmm_init();
  cudaError_t e = ok ? vmm_alloc(ptr, size) : cudaErrorMemoryAllocation;
  if (!ok && !sticky_reason) sticky_reason = "device memory outside r3's fixed range (CUDA virtual memory management unavailable)";
  st.alloc_s += now_s() - t0 - (st.context_s - context_before);
  pthread_mutex_unlock(&lock);
  return ok ? e : fallback(ptr, size);
}

cudaError_t __wrap_cudaMalloc(void **ptr, size_t size) {
  if (!recording()) return dispatch_after(__real_cudaMalloc(ptr, size), "cudaMalloc");
  return recorded_malloc(ptr, size, __real_cudaMalloc);
}

/* Captures into a CUDA graph in progress (cudaStreamBeginCapture to cudaStreamEndCapture). While
   one is, nothing is recorded: a recording synchronizes the device, copies its memory and maps
   new memory, calls a capture in its default (global) mode forbids from any thread, which
   invalidate it, and the program's cudaStreamEndCapture then fails (cuda-samples'
   simpleCudaGraphs, graphMemoryNodes and graphConditionalNodes exited 1 under `r3 record`, H200,
   2026-11-29). A launch captured runs later, inside the graph. */
static int captures_open;

static void capture_began(cudaError_t e) {
  if (e == cudaSuccess) __atomic_add_fetch(&captures_open, 1, __ATOMIC_SEQ_CST);
}

/* The capture ends with cudaStreamEndCapture whether it succeeds or reports the capture
   invalidated; any other error ended none. */
static void capture_ended(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorStreamCaptureInvalidated) return;
  int n = __atomic_load_n(&captures_open, __ATOMIC_SEQ_CST);
  while (n > 0 && !__atomic_compare_exchange_n(&captures_open, &n, n - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
}

/* Whether work on stream s now would be captured into a graph, or break a capture: any capture
   begun through the wrappers below, or s capturing (one begun another way, e.g. to a graph);
   a stream whose state cannot be read counts as capturing (the legacy stream answers with an
   error while a blocking stream captures). */
static int capturing(cudaStream_t s) {
  if (__atomic_load_n(&captures_open, __ATOMIC_SEQ_CST) > 0) return 1;
  enum cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &c) != cudaSuccess || c != cudaStreamCaptureStatusNone;
}

cudaError_t __wrap_cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  cudaError_t e = __real_cudaStreamBeginCapture(s, mode);
  capture_began(e);
  return e;
}

cudaError_t __wrap_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
  cudaError_t e = __real_cudaStreamEndCapture(s, graph);
  capture_ended(e);
  return e;
}

cudaError_t __wrap_cudaMallocAsync(void **ptr, size_t size, cudaStream_t s) {
  /* Inside a capture it is the graph's allocation, made when the graph runs. */
  if (!recording() || capturing(s)) return dispatch_after(__real_cudaMallocAsync(ptr, size, s), "cudaMallocAsync");
  return recorded_malloc(ptr, size, __real_cudaMalloc);
}

cudaError_t __wrap_cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
  if (!recording()) return dispatch_after(__real_cudaMallocPitch(ptr, pitch, width, height), "cudaMallocPitch");
  *pitch = (width + 511) / 512 * 512;
  return recorded_malloc(ptr, *pitch * height, __real_cudaMalloc);
}

cudaError_t __wrap_cudaMallocManaged(void **ptr, size_t size, unsigned int flags) {
  if (recording()) {
    pthread_mutex_lock(&lock);
    sticky_reason = "managed memory (cudaMallocManaged) in use";
    pthread_mutex_unlock(&lock);
  }
  return dispatch_after(__real_cudaMallocManaged(ptr, size, flags), "cudaMallocManaged");
}

/* Pinned host memory (cudaHostAlloc, cudaMallocHost, cudaHostRegister). A kernel reaches it by
   its host address, which no replay process has: a launch that is passed such an address is
   recorded as not replayable, with the reason, instead of failing on replay with an illegal
   address (BabelStream's dot_kernel writes its partial sums there, LULESH its time step). */
#define R3_PINNED 1024
static struct { uint64_t addr, size; } pinned_host[R3_PINNED];
static int npinned_host, pinned_lost;

static void pinned_add(void *p, size_t size) {
  if (!recording() || !p) return;
  pthread_mutex_lock(&lock);
  if (npinned_host < R3_PINNED) pinned_host[npinned_host].addr = (uint64_t)(uintptr_t)p, pinned_host[npinned_host++].size = size;
  else pinned_lost = 1;
  pthread_mutex_unlock(&lock);
}

static void pinned_remove(void *p) {
  if (!recording() || !p) return;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < npinned_host; i++)
    if (pinned_host[i].addr == (uint64_t)(uintptr_t)p) {
      pinned_host[i] = pinned_host[--npinned_host];
      break;
    }
  pthread_mutex_unlock(&lock);
}

/* Why a launch with these argument bytes cannot be replayed because of pinned host memory, or
   NULL: every aligned 8-byte word is taken as a possible pointer, as the snapshot does. */
static const char *pinned_argument(const unsigned char *args, size_t size) {
  if (!npinned_host && !pinned_lost) return NULL;
  if (pinned_lost) return "more pinned host regions than r3 follows (cudaHostAlloc / cudaMallocHost / cudaHostRegister)";
  for (size_t off = 0; off + 8 <= size; off += 8) {
    uint64_t v;
    memcpy(&v, args + off, 8);
    for (int i = 0; i < npinned_host; i++)
      if (v >= pinned_host[i].addr && v < pinned_host[i].addr + pinned_host[i].size)
        return "an argument points to pinned host memory (cudaHostAlloc / cudaMallocHost / cudaHostRegister), which a replay cannot map";
  }
  return NULL;
}

cudaError_t __wrap_cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  cudaError_t e = __real_cudaHostAlloc(ptr, size, flags);
  if (e == cudaSuccess) pinned_add(*ptr, size);
  return dispatch_after(e, "cudaHostAlloc");
}

cudaError_t __wrap_cudaMallocHost(void **ptr, size_t size) {
  cudaError_t e = __real_cudaMallocHost(ptr, size);
  if (e == cudaSuccess) pinned_add(*ptr, size);
  return dispatch_after(e, "cudaMallocHost");
}

cudaError_t __wrap_cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  cudaError_t e = __real_cudaHostRegister(ptr, size, flags);
  if (e == cudaSuccess) pinned_add(ptr, size);
  return dispatch_after(e, "cudaHostRegister");
}

cudaError_t __wrap_cudaFreeHost(void *ptr) {
  pinned_remove(ptr);
  return __real_cudaFreeHost(ptr);
}

cudaError_t __wrap_cudaHostUnregister(void *ptr) {
  pinned_remove(ptr);
  return __real_cudaHostUnregister(ptr);
}

/* Frees like cudaFree (which waits for the device): the memory stays mapped for a later
   allocation of its size while the cache has room, and is given back otherwise. */
static int recorded_free(void *p) {
  pthread_mutex_lock(&lock);
  double t0 = now_s();
  struct alloc *a = find_alloc(p);
  if (a) {
    cudaDeviceSynchronize();
    if (cached_bytes + a->mapped <= opt.cache_bytes) {
      a->state = SLOT_CACHED;
      cached_bytes += a->mapped;
    } else {
      vmm_unmap(a);
    }
    st.frees++;
  }
  st.alloc_s += now_s() - t0;
  pthread_mutex_unlock(&lock);
  return a != NULL;
}

cudaError_t __wrap_cudaFree(void *p) {
  if (recording() && p && recorded_free(p)) return cudaSuccess;
  /* cudaFree(0) is how many programs create the context before they time anything. */
  return dispatch_after(__real_cudaFree(p), "cudaFree");
}

cudaError_t __wrap_cudaFreeAsync(void *p, cudaStream_t s) {
  if (recording() && p && recorded_free(p)) return cudaSuccess;
  return dispatch_after(__real_cudaFreeAsync(p, s), "cudaFreeAsync");
}

static void mark(const char *why) {
  if (!recording()) return;
  pthread_mutex_lock(&lock);
  if (!sticky_reason) sticky_reason = why;
  pthread_mutex_unlock(&lock);
}

/* The calling thread's device may now reach peer's memory: where r3 maps the program's memory,
   it grants that device access to peer's, mapped so far and from now on (vmm_map), as CUDA does
   for cudaMalloc's. A launch stays replayable unless it reaches another device's memory
   (snapshot_before). */
cudaError_t __wrap_cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  cudaError_t e = __real_cudaDeviceEnablePeerAccess(peer, flags);
  int dev = -1;
  if ((e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) || !recording() || cudaGetDevice(&dev) != cudaSuccess ||
      dev < 0 || dev >= R3_MAX_DEVICES || peer < 0 || peer >= R3_MAX_DEVICES)
    return e;
  pthread_mutex_lock(&lock);
  if (!(peers_of[peer] >> dev & 1)) {
    peers_of[peer] |= 1ull << dev;
    for (int i = 0; i < nallocs; i++)
      if (allocs[i].state != SLOT_EMPTY && allocs[i].mapped && allocs[i].device == peer &&
          !vmm_grant(allocs[i].addr, allocs[i].mapped, dev))
        warn("memory mapped for the program not granted to a %s device (%s failed): a kernel there that reads it faults", "peer", "cuMemSetAccess");
  }
  pthread_mutex_unlock(&lock);
  return e;
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

/* A snapshot file: the byte stream cut into R3_CHUNK pieces, each compressed as its own zstd
   frame (with checksum) on one of up to R3_WORKERS threads, written in order. A reader sees
   one stream: zstd decoders read concatenated frames as one (src/store/records.rs). The
   static libzstd that programs link has no threads of its own. */
/* Closes f once its bytes are on the disk: a recording is renamed into place only after every
   file in it is complete and synced, so neither a killed program nor a crash of the machine
   leaves a recording that reads as whole but is not. On the finisher thread: the program does
   not wait for the disk (except at exit, for the recordings still in flight). R3_RECORD_SYNC=0
   (r3 record --no-sync) skips the sync: a crash of the machine may then leave a recording
   whose files are short, which every read finds by their sums. */
static int fclose_synced(FILE *f) {
  int bad = fflush(f) != 0 || (opt.sync && fsync(fileno(f)) != 0);
  return fclose(f) != 0 || bad;
}

/* r3sum64, the whole-file check of a snapshot file that launch.json keeps (src/store/records.rs:
   file_sum): each 8-byte little-endian word of the file, mixed by murmur3's finalizer, is folded
   into a running FNV-style product, a last short word zero-padded, then the byte count. A frame
   lost, repeated, moved or taken from another file changes it, which the frames' own checksums
   cannot see. */
struct filesum { uint64_t h, len; unsigned char carry[8]; int ncarry; };

static uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

static void sum_word(struct filesum *s, uint64_t w) { s->h = (s->h ^ fmix64(w)) * 0x100000001b3ull; }

static void sum_update(struct filesum *s, const unsigned char *p, size_t n) {
  s->len += n;
  while (n) {
    if (!s->ncarry && n >= 8) {
      uint64_t w;
      memcpy(&w, p, 8);
      sum_word(s, w);
      p += 8, n -= 8;
      continue;
    }
    s->carry[s->ncarry++] = *p++;
    n--;
    if (s->ncarry == 8) {
      uint64_t w;
      memcpy(&w, s->carry, 8);
      sum_word(s, w);
      s->ncarry = 0;
    }
  }
}

static uint64_t sum_final(struct filesum *s) {
  if (s->ncarry) {
    uint64_t w = 0;
    memcpy(&w, s->carry, (size_t)s->ncarry);
    sum_word(s, w);
  }
  sum_word(s, s->len);
  return s->h;
}

struct writer {
  FILE *f; int failed; size_t written;
  size_t flushed;     /* bytes handed to the kernel, whose writeback has been started */
  struct filesum sum; /* of the bytes written, in order */
  int workers, cur;
  unsigned char *in[R3_WORKERS], *out[R3_WORKERS];
  const unsigned char *src[R3_WORKERS]; /* a chunk compressed where it lies, or NULL: in[] */
  size_t fill[R3_WORKERS], outn[R3_WORKERS];
  ZSTD_CCtx *z[R3_WORKERS];
};
struct frame_job { struct writer *w; int i; };

static void *compress_frame(void *p) {
  struct frame_job *j = p;
  struct writer *w = j->w;
  const unsigned char *src = w->src[j->i] ? w->src[j->i] : w->in[j->i];
  size_t n = ZSTD_compress2(w->z[j->i], w->out[j->i], ZSTD_compressBound(R3_CHUNK), src, w->fill[j->i]);
  w->outn[j->i] = ZSTD_isError(n) ? 0 : n;
  if (ZSTD_isError(n)) w->failed = 1;
  return NULL;
}

/* Starts the disk writes of what was written so far without waiting for them, so that the
   fsync before the rename (fclose_synced) waits only for the last frames: the program's exit
   waits for recordings in flight, and a file synced at its end alone cost gemv_t 1.66x of its
   plain run (H100 host, 2026-11-25), against 1.22x without the sync. */
static void start_writeback(struct writer *w) {
  if (!opt.sync || w->failed || w->written - w->flushed < R3_CHUNK || fflush(w->f) != 0) return;
  sync_file_range(fileno(w->f), (off_t)w->flushed, (off_t)(w->written - w->flushed), SYNC_FILE_RANGE_WRITE);
  w->flushed = w->written;
}

/* Compresses the first n chunks at once and writes their frames in order. */
static void w_flush(struct writer *w, int n) {
  pthread_t th[R3_WORKERS];
  struct frame_job jobs[R3_WORKERS];
  int started[R3_WORKERS] = {0};
  for (int i = 0; i < n; i++) {
    jobs[i] = (struct frame_job){w, i};
    started[i] = i > 0 && pthread_create(&th[i], NULL, compress_frame, &jobs[i]) == 0;
    if (!started[i] && i > 0) compress_frame(&jobs[i]);
  }
  if (n > 0) compress_frame(&jobs[0]);
  for (int i = 0; i < n; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    if (!w->failed && fwrite(w->out[i], 1, w->outn[i], w->f) != w->outn[i]) w->failed = 1;
    sum_update(&w->sum, w->out[i], w->outn[i]);
    w->written += w->outn[i];
    w->fill[i] = 0;
    w->src[i] = NULL;
  }
  w->cur = 0;
  start_writeback(w);
}

/* A run of at least a chunk is compressed where it lies, chunk by chunk, not copied first: the
   snapshot's host buffers outlive the writer. */
static void w_run(struct writer *w, const unsigned char *p, size_t n) {
  if (w->fill[w->cur] && ++w->cur == w->workers) w_flush(w, w->workers);
  while (!w->failed && n) {
    size_t take = n < R3_CHUNK ? n : R3_CHUNK;
    w->src[w->cur] = p;
    w->fill[w->cur] = take;
    p += take;
    n -= take;
    if (++w->cur == w->workers) w_flush(w, w->workers);
  }
}

static void w_bytes(struct writer *w, const void *data, size_t n) {
  const unsigned char *p = data;
  if (n >= R3_CHUNK) {
    w_run(w, p, n);
    return;
  }
  while (!w->failed && n) {
    size_t room = R3_CHUNK - w->fill[w->cur], take = n < room ? n : room;
    memcpy(w->in[w->cur] + w->fill[w->cur], p, take);
    w->fill[w->cur] += take;
    p += take;
    n -= take;
    if (w->fill[w->cur] < R3_CHUNK) break;
    if (++w->cur == w->workers) w_flush(w, w->workers);
  }
}

static void w_u8(struct writer *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(struct writer *w, uint16_t v) { w_bytes(w, &v, 2); }
static void w_u32(struct writer *w, uint32_t v) { w_bytes(w, &v, 4); }
static void w_u64(struct writer *w, uint64_t v) { w_bytes(w, &v, 8); }

/* Compression threads: R3_RECORD_THREADS, or one fewer than the CPUs, 1 to R3_WORKERS. */
static int w_workers(void) {
  long n = env_ll("R3_RECORD_THREADS", sysconf(_SC_NPROCESSORS_ONLN) - 1);
  return n < 1 ? 1 : n > R3_WORKERS ? R3_WORKERS : (int)n;
}

static void w_free(struct writer *w) {
  for (int i = 0; i < R3_WORKERS; i++) {
    free(w->in[i]);
    free(w->out[i]);
    ZSTD_freeCCtx(w->z[i]);
  }
}

static int w_open(struct writer *w, const char *path) {
  memset(w, 0, sizeof *w);
  w->workers = w_workers();
  for (int i = 0; i < w->workers; i++) {
    w->in[i] = malloc(R3_CHUNK);
    w->out[i] = malloc(ZSTD_compressBound(R3_CHUNK));
    w->z[i] = ZSTD_createCCtx();
    if (!w->in[i] || !w->out[i] || !w->z[i]) { w_free(w); return 0; }
    ZSTD_CCtx_setParameter(w->z[i], ZSTD_c_compressionLevel, opt.zstd_level);
    ZSTD_CCtx_setParameter(w->z[i], ZSTD_c_checksumFlag, 1);
  }
  w->f = fopen(path, "wb");
  if (!w->f) { w_free(w); return 0; }
  w->sum.h = FNV_OFFSET;
  w_bytes(w, "R3SNAP01", 8);
  return 1;
}

static int w_close(struct writer *w) {
  w_bytes(w, "R3END\0\0\0", 8);
  w_flush(w, w->cur + (w->fill[w->cur] > 0));
  w_free(w);
  if (fclose_synced(w->f)) w->failed = 1;
  return !w->failed;
}

enum { KIND_ALLOC = 0, KIND_GLOBAL = 1 };
enum { ENC_FULL = 0, ENC_UNCHANGED = 1, ENC_PAGES = 2 };

/* A sparse region (present != NULL) is one of a launch whose whole working set is over the
   limit (snapshot_before): its before and after buffers are host mappings as large as the
   region, of which only the pages holding data (present) and the changed pages (dirty) are
   ever written, so the rest stay zero and take no memory. Its prologue holds those pages
   alone; the reader fills the rest with zeros. Nothing is guessed: every page was read, and a
   page left out is a page of zeros. */
struct region {
  uint8_t kind; uint64_t addr; size_t size; const char *name; unsigned char *before, *after;
  unsigned char *dirty; /* per page: the launch changed it (after holds those pages only) */
  size_t changed;       /* bytes of the changed pages */
  unsigned char *present; /* sparse only: per page, it holds data (a page not present is zeros) */
  size_t kept;            /* sparse only: bytes of the present pages */
};

static size_t region_pages(const struct region *r) { return (r->size + R3_PAGE - 1) / R3_PAGE; }

/* Bytes of page p of r (the last one may be short). */
static size_t page_bytes(const struct region *r, size_t p) {
  size_t off = p * R3_PAGE;
  return r->size - off < R3_PAGE ? r->size - off : R3_PAGE;
}

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

/* Writes the pages of r marked in `which` (ENC_PAGES): their count, then each one's index
   and bytes. Returns their bytes. */
static size_t write_pages(struct writer *w, const struct region *r, const unsigned char *which,
                          const unsigned char *from) {
  uint64_t pages = region_pages(r), count = 0;
  size_t bytes = 0;
  for (uint64_t p = 0; p < pages; p++) count += which[p];
  w_u64(w, count);
  for (uint64_t p = 0; p < pages; p++) {
    if (!which[p]) continue;
    size_t len = page_bytes(r, p);
    w_u64(w, p);
    w_bytes(w, from + p * R3_PAGE, len);
    bytes += len;
  }
  return bytes;
}

static void write_prologue(struct writer *w, struct region *rs, int n) {
  w_u32(w, 1);
  w_u32(w, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    if (rs[i].present) {
      w_region_head(w, &rs[i], ENC_PAGES);
      write_pages(w, &rs[i], rs[i].present, rs[i].before);
      continue;
    }
    w_region_head(w, &rs[i], ENC_FULL);
    w_bytes(w, rs[i].before, rs[i].size);
  }
}

/* Writes the changed pages of each region; returns their bytes. */
static size_t write_epilogue(struct writer *w, struct region *rs, int n) {
  size_t changed = 0;
  w_u32(w, 1);
  w_u32(w, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    struct region *r = &rs[i];
    uint64_t pages = region_pages(r), diff = 0;
    for (uint64_t p = 0; p < pages; p++) diff += r->dirty[p];
    w_region_head(w, r, diff ? ENC_PAGES : ENC_UNCHANGED);
    if (diff) changed += write_pages(w, r, r->dirty, r->after);
  }
  return changed;
}

/* Host memory for snapshots: chunks kept for the whole run and reused by every recording, so
   each page is touched once, not once per recording (a fresh page costs more than copying into
   it: about 0.15-0.25 s per GiB on an H100 host, 2026-11-25). Two arenas: the bytes before the
   launch and after it; each recording slot (struct slot) has its own pair, and `arenas` is the
   pair of the recording being taken. The after arena's buffers are as large as their regions,
   but only the pages the launch changed are written (copy_after), so only those are touched. */
struct host_chunk { unsigned char *p; size_t cap, used; };
struct host_map { void *p; size_t n; };
struct arena {
  struct host_chunk c[R3_ARENA_CHUNKS]; int n;
  struct host_map maps[R3_ARENA_MAPS]; int nmaps; /* sparse regions' buffers, this recording's */
};
static struct arena *arenas;

static void arenas_reset(void) {
  for (int a = 0; a < 2; a++) {
    for (int i = 0; i < arenas[a].n; i++) arenas[a].c[i].used = 0;
    for (int i = 0; i < arenas[a].nmaps; i++) munmap(arenas[a].maps[i].p, arenas[a].maps[i].n);
    arenas[a].nmaps = 0;
  }
}

/* A sparse region's buffer: address space as large as the region, zero until written, and
   memory only for the pages written (struct region). Unmapped by the next arenas_reset. */
static unsigned char *map_take(struct arena *a, size_t n) {
  if (a->nmaps == R3_ARENA_MAPS) return NULL;
  void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  a->maps[a->nmaps++] = (struct host_map){p, n ? n : 1};
  return p;
}

static void chunk_free(struct host_chunk *c) { free(c->p); }

static size_t arena_bytes(const struct arena *a) {
  size_t n = 0;
  for (int i = 0; i < a->n; i++) n += a->c[i].cap;
  return n;
}

/* Drops the chunks this recording has not used that are too small for n bytes. */
static void arena_trim(struct arena *a, size_t n) {
  for (int i = 0; i < a->n;) {
    struct host_chunk *c = &a->c[i];
    if (c->used || c->cap >= n) { i++; continue; }
    chunk_free(c);
    *c = a->c[--a->n];
  }
}

static unsigned char *arena_take(struct arena *a, size_t n) {
  n = n ? (n + 63) & ~(size_t)63 : 64;
  for (int i = 0; i < a->n; i++) {
    struct host_chunk *c = &a->c[i];
    if (c->cap - c->used < n) continue;
    c->used += n;
    return c->p + c->used - n;
  }
  arena_trim(a, n);
  if (a->n == R3_ARENA_CHUNKS) return NULL;
  struct host_chunk *c = &a->c[a->n];
  size_t cap = (n > R3_ARENA_MIN ? n : R3_ARENA_MIN) + R3_HUGE - 1;
  cap -= cap % R3_HUGE;
  double t0 = now_s();
  /* In huge pages where the kernel gives them: a 2 MiB page is touched at a fraction of the
     cost of 512 small ones. */
  if (posix_memalign((void **)&c->p, R3_HUGE, cap) != 0) c->p = NULL;
  if (!c->p) return NULL;
  madvise(c->p, cap, MADV_HUGEPAGE);
  st.host_s += now_s() - t0;
  c->cap = cap;
  c->used = n;
  a->n++;
  return c->p;
}

/* ---- device copies through pinned staging buffers ---------------------------------------- */

/* Snapshot buffers are plain memory: pinning them is cheap once they are touched, but the
   touching is what costs, and a copy into plain memory through the driver runs on one thread.
   So a large copy goes through small pinned buffers, one per worker thread, allocated once:
   each worker takes the next piece, copies it between the device and its buffer (on the legacy
   stream, which orders the copy after the program's work as cudaMemcpy would) and between its
   buffer and the snapshot, touching the snapshot's fresh pages in parallel with the others,
   while their pieces cross the link. An epilogue piece is compared with the prologue page by
   page and only the changed pages are kept. */
/* A staging buffer and its event belong to the device that was current where they were made:
   an event cannot be recorded on another device's stream. */
struct stager { unsigned char *buf; cudaEvent_t done; int state; /* 0 untried, 1 ready, -1 failed */ int device; };
static struct stager stagers[R3_WORKERS];

enum copy_kind { TO_HOST, TO_DEVICE, CHANGED_TO_HOST, DATA_TO_HOST };
struct staged_copy {
  unsigned char *host; uint64_t dev; size_t n, next; enum copy_kind kind; int failed;
  struct region *r; /* CHANGED_TO_HOST: host is r->after, compared with r->before;
                       DATA_TO_HOST: host is a sparse r->before, which keeps the pages holding data */
  int device;        /* current on the launching thread; made current on each copy thread */
};
struct staged_job { struct staged_copy *c; struct stager *s; };

static int stager_ready(struct stager *s, int device) {
  if (s->state == 0) {
    s->state = -1;
    s->device = device;
    /* The real calls: r3's own staging buffer is no user memory, and the wrappers take `lock`,
       which the launch that stages copies already holds (it deadlocked every recording on a
       GPU). */
    if (__real_cudaHostAlloc((void **)&s->buf, R3_STAGE_BYTES, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    if (cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      __real_cudaFreeHost(s->buf);
      return 0;
    }
    s->state = 1;
  }
  return s->state > 0 && s->device == device;
}

/* Keeps the pages of src (the region's bytes at off) that differ from the prologue: copied to
   the after buffer and marked dirty. Returns the bytes kept. */
static size_t keep_changed(struct region *r, size_t off, const unsigned char *src, size_t len) {
  size_t kept = 0;
  for (size_t at = 0; at < len; at += R3_PAGE) {
    size_t n = len - at < R3_PAGE ? len - at : R3_PAGE;
    if (memcmp(r->before + off + at, src + at, n) == 0) continue;
    if (r->after + off + at != src + at) memcpy(r->after + off + at, src + at, n);
    r->dirty[(off + at) / R3_PAGE] = 1;
    kept += n;
  }
  return kept;
}

static int all_zero(const unsigned char *p, size_t n) {
  uint64_t acc = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    acc |= w;
  }
  for (; i < n; i++) acc |= p[i];
  return acc == 0;
}

/* Keeps the pages of src (the sparse region's bytes at off) that hold data: copied to the
   before buffer and marked present. Returns the bytes kept. */
static size_t keep_data(struct region *r, size_t off, const unsigned char *src, size_t len) {
  size_t kept = 0;
  for (size_t at = 0; at < len; at += R3_PAGE) {
    size_t n = len - at < R3_PAGE ? len - at : R3_PAGE;
    if (all_zero(src + at, n)) continue;
    memcpy(r->before + off + at, src + at, n);
    r->present[(off + at) / R3_PAGE] = 1;
    kept += n;
  }
  return kept;
}

/* What a piece of a copy to the host does with the bytes that crossed into buf. */
static void land_piece(struct staged_copy *c, size_t off, const unsigned char *buf, size_t len) {
  if (c->kind == TO_HOST) memcpy(c->host + off, buf, len);
  if (c->kind == CHANGED_TO_HOST) __atomic_fetch_add(&c->r->changed, keep_changed(c->r, off, buf, len), __ATOMIC_RELAXED);
  if (c->kind == DATA_TO_HOST) __atomic_fetch_add(&c->r->kept, keep_data(c->r, off, buf, len), __ATOMIC_RELAXED);
}

static void *staged_worker(void *p) {
  struct staged_job *j = p;
  struct staged_copy *c = j->c;
  unsigned char *buf = j->s->buf;
  for (;;) {
    size_t off = __atomic_fetch_add(&c->next, R3_STAGE_BYTES, __ATOMIC_RELAXED);
    if (off >= c->n || __atomic_load_n(&c->failed, __ATOMIC_RELAXED)) break;
    size_t len = c->n - off < R3_STAGE_BYTES ? c->n - off : R3_STAGE_BYTES;
    void *dev = (void *)(uintptr_t)(c->dev + off);
    if (c->kind == TO_DEVICE) memcpy(buf, c->host + off, len);
    int ok = (c->kind == TO_DEVICE ? cudaMemcpyAsync(dev, buf, len, cudaMemcpyHostToDevice, cudaStreamLegacy)
                                   : cudaMemcpyAsync(buf, dev, len, cudaMemcpyDeviceToHost, cudaStreamLegacy)) ==
                 cudaSuccess &&
             cudaEventRecord(j->s->done, cudaStreamLegacy) == cudaSuccess &&
             cudaEventSynchronize(j->s->done) == cudaSuccess;
    if (!ok) {
      __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
      break;
    }
    if (c->kind != TO_DEVICE) land_piece(c, off, buf, len);
  }
  return NULL;
}

/* A new thread's current device is device 0, not the program's: a program that runs on
   another GPU would have its copies ordered on the wrong device's stream, and their events
   refused. */
static void *staged_thread(void *p) {
  struct staged_job *j = p;
  if (cudaSetDevice(j->c->device) != cudaSuccess) {
    cudaGetLastError();
    return NULL; /* the other workers take its pieces */
  }
  return staged_worker(p);
}

static int w_workers(void);

/* A sparse region's copy to the host without staging buffers: piece by piece through a
   plain buffer, so that its zero pages are never written (struct region). */
static int sparse_copy_plain(struct staged_copy *c) {
  size_t piece = c->n < R3_STAGE_BYTES ? c->n : R3_STAGE_BYTES;
  unsigned char *buf = malloc(piece);
  if (!buf) return 0;
  int ok = 1;
  for (size_t off = 0; ok && off < c->n; off += piece) {
    size_t len = c->n - off < piece ? c->n - off : piece;
    ok = cudaMemcpy(buf, (void *)(uintptr_t)(c->dev + off), len, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (ok) land_piece(c, off, buf, len);
  }
  free(buf);
  return ok;
}

/* Copies n bytes between host memory and the device; returns 1 when every byte crossed. A
   small copy, or one with no staging buffer to be had, is a plain cudaMemcpy (for
   CHANGED_TO_HOST into the whole after buffer, then compared in place; for a sparse region
   through a small buffer). */
static int device_copy(struct staged_copy c) {
  if (!c.n) return 1;
  double t0 = now_s();
  size_t pieces = (c.n + R3_STAGE_BYTES - 1) / R3_STAGE_BYTES;
  int t = 0, want = c.n < R3_STAGE_MIN ? 0 : pieces < (size_t)w_workers() ? (int)pieces : w_workers();
  if (want && cudaGetDevice(&c.device) != cudaSuccess) want = 0;
  while (t < want && stager_ready(&stagers[t], c.device)) t++;
  int ok;
  if (!t && c.kind != TO_DEVICE && c.r && c.r->present) {
    ok = sparse_copy_plain(&c);
  } else if (!t) {
    void *dev = (void *)(uintptr_t)c.dev;
    ok = (c.kind == TO_DEVICE ? cudaMemcpy(dev, c.host, c.n, cudaMemcpyHostToDevice)
                              : cudaMemcpy(c.host, dev, c.n, cudaMemcpyDeviceToHost)) == cudaSuccess;
    if (ok && c.kind == CHANGED_TO_HOST) c.r->changed = keep_changed(c.r, 0, c.host, c.n);
  } else {
    struct staged_job jobs[R3_WORKERS];
    pthread_t th[R3_WORKERS];
    int started[R3_WORKERS] = {0};
    for (int i = 0; i < t; i++) {
      jobs[i] = (struct staged_job){&c, &stagers[i]};
      started[i] = i > 0 && pthread_create(&th[i], NULL, staged_thread, &jobs[i]) == 0;
    }
    staged_worker(&jobs[0]);
    for (int i = 1; i < t; i++)
      if (started[i]) pthread_join(th[i], NULL);
    ok = !c.failed && c.next >= c.n;
  }
  if (c.kind != TO_DEVICE) st.copy_s += now_s() - t0; /* restores count as warm re-launch time */
  return ok;
}

/* Copies one region's bytes out of the device into its before buffer. */
static int copy_before(struct region *r) {
  r->before = arena_take(&arenas[0], r->size);
  return r->before && device_copy((struct staged_copy){r->before, r->addr, r->size, 0, TO_HOST, 0, r});
}

/* Copies one sparse region's pages that hold data out of the device (struct region). */
static int copy_before_sparse(struct region *r) {
  size_t pages = region_pages(r);
  r->present = arena_take(&arenas[0], pages);
  r->before = map_take(&arenas[0], r->size);
  if (!r->present || !r->before) return 0;
  memset(r->present, 0, pages);
  r->kept = 0;
  return device_copy((struct staged_copy){r->before, r->addr, r->size, 0, DATA_TO_HOST, 0, r});
}

/* Copies the pages of one region that the launch changed into its after buffer. */
static int copy_after(struct region *r) {
  size_t pages = region_pages(r);
  r->dirty = arena_take(&arenas[1], pages);
  r->after = r->present ? map_take(&arenas[1], r->size) : arena_take(&arenas[1], r->size);
  if (!r->dirty || !r->after) return 0;
  memset(r->dirty, 0, pages);
  r->changed = 0;
  return device_copy((struct staged_copy){r->after, r->addr, r->size, 0, CHANGED_TO_HOST, 0, r});
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
  const unsigned char *args;
  const struct layout *layout; /* NULL: no parameters known */
  uint64_t id;
  const char *fatbin;
};

/* What recording one launch found and cost, for launch.json. */
struct outcome {
  const char *not_replayable;
  double ms, first_ms, record_ms;
  const char *in_app_from;
  size_t bytes_in, bytes_changed, bytes_written;
  size_t bytes_reached; /* the reachable allocations' bytes: more than bytes_in where some are sparse */
  int regions, regions_skipped, sparse_regions;
  /* The snapshot files as written: name, bytes and r3sum64, checked when they are read. */
  int nfiles;
  struct { const char *name; size_t bytes; uint64_t sum; } files[2];
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

/* The device a launch ran on, read on the launching thread: launch.json is written on the
   finisher's, which makes no CUDA call (see struct finisher). */
struct gpu_info { int major, minor, named, device; char name[256]; };

static struct gpu_info gpu_info_now(void) {
  static struct gpu_info known[64];
  static unsigned char have[64];
  struct gpu_info g = {0};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev >= 0 && dev < 64 && have[dev]) return known[dev];
  g.device = dev;
  cudaDeviceGetAttribute(&g.major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&g.minor, cudaDevAttrComputeCapabilityMinor, dev);
  struct cudaDeviceProp prop;
  if ((g.named = cudaGetDeviceProperties(&prop, dev) == cudaSuccess)) snprintf(g.name, sizeof g.name, "%s", prop.name);
  if (dev >= 0 && dev < R3_MAX_DEVICES) known[dev] = g, have[dev] = 1;
  return g;
}

/* Returns 1 when launch.json is complete and synced. */
static int write_launch_json(const char *dir, const struct launch *l, const struct outcome *o,
                             const struct gpu_info *g) {
  char path[4200];
  snprintf(path, sizeof path, "%s/launch.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 0;
  char exe[4096] = {0};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) exe[0] = 0;
  fprintf(f, "{\n  \"format\": 1,\n  \"kernel\": ");
  json_str(f, l->name);
  if (g->named) {
    fprintf(f, ",\n  \"gpu\": ");
    json_str(f, g->name);
  }
  /* The device the launch ran on, as the program numbers them: a program may use several. */
  if (g->device >= 0) fprintf(f, ",\n  \"device\": %d", g->device);
  if (l->fatbin && *l->fatbin) {
    fprintf(f, ",\n  \"fatbin\": ");
    json_str(f, l->fatbin);
  }
  fprintf(f, ",\n  \"arch\": \"sm_%d%d\",\n  \"grid\": [%u, %u, %u],\n  \"block\": [%u, %u, %u],\n", g->major, g->minor,
          l->grid.x, l->grid.y, l->grid.z, l->block.x, l->block.y, l->block.z);
  fprintf(f, "  \"shared_bytes\": %zu,\n  \"params\": [", l->shmem);
  const struct layout *lay = l->layout;
  for (int i = 0; lay && i < lay->nparams; i++)
    fprintf(f, "%s{\"offset\": %zu, \"size\": %zu}", i ? ", " : "", lay->offsets[i], lay->sizes[i]);
  fprintf(f, "],\n  \"args_hex\": \"");
  for (size_t i = 0; lay && i < lay->size; i++) fprintf(f, "%02x", l->args[i]);
  fprintf(f, "\",\n  \"va_base\": %llu,\n  \"va_size\": %llu,\n", (unsigned long long)va_base,
          (unsigned long long)va_size);
  fprintf(f, "  \"in_app_ms\": %.6f,\n  \"in_app_from\": \"%s\",\n  \"first_launch_ms\": %.6f,\n", o->ms,
          o->in_app_from, o->first_ms);
  fprintf(f, "  \"snapshot\": \"%s\",\n  \"regions\": %d,\n  \"regions_skipped\": %d,\n",
          opt.full_snapshot ? "full" : "reachable", o->regions, o->regions_skipped);
  fprintf(f, "  \"bytes_in\": %zu,\n  \"bytes_changed\": %zu,\n  \"bytes_written\": %zu,\n  \"record_ms\": %.3f,\n",
          o->bytes_in, o->bytes_changed, o->bytes_written, o->record_ms);
  /* Allocations recorded by their pages that hold data: what the launch reaches is more than
     bytes_in, the rest zeros. */
  if (o->sparse_regions)
    fprintf(f, "  \"sparse_regions\": %d,\n  \"bytes_reachable\": %zu,\n", o->sparse_regions, o->bytes_reached);
  fprintf(f, "  \"files\": [");
  for (int i = 0; i < o->nfiles; i++)
    fprintf(f, "%s{\"name\": \"%s\", \"bytes\": %zu, \"sum\": \"%016llx\"}", i ? ", " : "", o->files[i].name,
            o->files[i].bytes, (unsigned long long)o->files[i].sum);
  fprintf(f, "],\n");
  fprintf(f, "  \"replayable\": %s,\n  \"not_replayable\": ", o->not_replayable ? "false" : "true");
  if (o->not_replayable) json_str(f, o->not_replayable);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"program\": ");
  json_str(f, exe);
  fprintf(f, ",\n  \"pid\": %d,\n  \"unix_time\": %lld", (int)getpid(), (long long)time(NULL));
  if (opt.run[0]) fprintf(f, ",\n  \"run\": \"%s\"", opt.run);
  fprintf(f, "\n}\n");
  return !fclose_synced(f);
}

/* ---- what a launch can reach -------------------------------------------------------------- */

/* Live allocations in address order (rebuilt for each recorded launch): `end` covers the
   mapped slack too, so a pointer one past a buffer's end still finds it. */
struct live { uint64_t addr, end; size_t size; int device; };
static struct live live[R3_MAX_ALLOCS];
static int nlive;

static int by_addr(const void *a, const void *b) {
  uint64_t x = ((const struct live *)a)->addr, y = ((const struct live *)b)->addr;
  return x < y ? -1 : x > y;
}

static void build_live(void) {
  nlive = 0;
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].state == SLOT_LIVE)
      live[nlive++] = (struct live){allocs[i].addr, allocs[i].addr + allocs[i].mapped, allocs[i].size, allocs[i].device};
  qsort(live, (size_t)nlive, sizeof live[0], by_addr);
}

/* The live allocation that address v points into, or -1. */
static int live_at(uint64_t v) {
  if (v - va_base >= va_next - va_base) return -1;
  int lo = 0, hi = nlive - 1, at = -1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    if (live[mid].addr <= v) { at = mid; lo = mid + 1; }
    else hi = mid - 1;
  }
  return at >= 0 && v < live[at].end ? at : -1;
}

/* Marks live allocation j and queues it, unless it was marked before. */
static void enqueue(int j, unsigned char *marked, int *queue, int *nqueue) {
  if (marked[j]) return;
  marked[j] = 1;
  queue[(*nqueue)++] = j;
}

/* Sets hit[j] for each live allocation j that an 8-byte word of p at a multiple of `step` below
   `end` points into. */
struct scan_job { const unsigned char *p; size_t begin, end, n, step; unsigned char *hit; };

static void *scan_slice(void *arg) {
  struct scan_job *j = arg;
  for (size_t off = j->begin; off < j->end && off + 8 <= j->n; off += j->step) {
    uint64_t v;
    memcpy(&v, j->p + off, 8);
    int a = live_at(v);
    if (a >= 0) j->hit[a] = 1;
  }
  return NULL;
}

/* Marks the live allocations that the 8-byte words of p[0..n) (every `step` bytes) point into,
   and queues the ones not marked before. Any word that looks like a pointer counts: a value
   that only looks like one costs a larger snapshot, never a wrong one. A large region is
   scanned in slices on the compression threads' count of threads. */
static void scan_words(const unsigned char *p, size_t n, size_t step, unsigned char *marked, int *queue,
                       int *nqueue) {
  static unsigned char hits[R3_WORKERS][R3_MAX_ALLOCS];
  double t0 = now_s();
  int t = n >= R3_SCAN_SLICE ? w_workers() : 1;
  if (t == 1) {
    for (size_t off = 0; off + 8 <= n; off += step) {
      uint64_t v;
      memcpy(&v, p + off, 8);
      int j = live_at(v);
      if (j >= 0) enqueue(j, marked, queue, nqueue);
    }
    st.scan_s += now_s() - t0;
    return;
  }
  size_t len = (n / (size_t)t + step - 1) / step * step;
  struct scan_job jobs[R3_WORKERS];
  pthread_t th[R3_WORKERS];
  int started[R3_WORKERS] = {0};
  for (int i = 0; i < t; i++) {
    memset(hits[i], 0, (size_t)nlive);
    jobs[i] = (struct scan_job){p, (size_t)i * len, (size_t)(i + 1) * len, n, step, hits[i]};
    started[i] = i > 0 && pthread_create(&th[i], NULL, scan_slice, &jobs[i]) == 0;
    if (i > 0 && !started[i]) scan_slice(&jobs[i]);
  }
  scan_slice(&jobs[0]);
  for (int i = 1; i < t; i++)
    if (started[i]) pthread_join(th[i], NULL);
  for (int i = 0; i < t; i++)
    for (int j = 0; j < nlive; j++)
      if (hits[i][j]) enqueue(j, marked, queue, nqueue);
  st.scan_s += now_s() - t0;
}

/* The regions' buffers go back to the arenas, for the next recording. */
static void free_regions(struct region *rs, int n) {
  for (int i = 0; i < n; i++) rs[i].before = rs[i].after = rs[i].present = NULL;
  arenas_reset();
}

/* scan_words over a region's copied bytes: for a sparse one, its runs of pages holding data
   (zeros point nowhere). */
static void scan_region(const struct region *r, unsigned char *marked, int *queue, int *nqueue) {
  if (!r->present) {
    scan_words(r->before, r->size, 8, marked, queue, nqueue);
    return;
  }
  size_t pages = region_pages(r);
  for (size_t p = 0; p < pages;) {
    if (!r->present[p]) { p++; continue; }
    size_t q = p;
    while (q < pages && r->present[q]) q++;
    size_t off = p * R3_PAGE, end = q * R3_PAGE < r->size ? q * R3_PAGE : r->size;
    scan_words(r->before + off, end - off, 8, marked, queue, nqueue);
    p = q;
  }
}

/* The regions launch l can reach, each copied out (before): every registered variable, the
   live allocations its arguments point into and, transitively, those that copied regions hold
   pointers into (with R3_RECORD_SNAPSHOT=full, every live allocation). Allocations come first,
   in address order. With `sparse`, allocations of R3_SPARSE_MIN or more are copied as sparse
   regions and count against the limit by their pages that hold data. Returns the count, -2
   over the limit, or -1, each with the reason in why; *reached is the allocations' bytes. */
static int snapshot_pass(struct region *rs, const struct launch *l, int sparse, size_t *bytes, size_t *reached,
                         int *skipped, char *why, size_t whyn) {
  static unsigned char marked[R3_MAX_ALLOCS];
  static int queue[R3_MAX_ALLOCS];
  static struct region vs[R3_MAX_VARS];
  int nqueue = 0, nv = 0, n = 0;
  build_live();
  memset(marked, 0, (size_t)nlive);
  *bytes = *reached = 0;
  for (int i = 0; i < nvars; i++) {
    void *dev = NULL;
    size_t size = 0;
    if (cudaGetSymbolAddress(&dev, vars[i].host) != cudaSuccess) { cudaGetLastError(); continue; }
    if (cudaGetSymbolSize(&size, vars[i].host) != cudaSuccess) size = vars[i].size;
    vs[nv] = (struct region){KIND_GLOBAL, (uint64_t)(uintptr_t)dev, size, vars[i].name, NULL, NULL, NULL, 0};
    *bytes += size;
    if (!copy_before(&vs[nv++])) goto copy_failed;
    scan_words(vs[nv - 1].before, size, 8, marked, queue, &nqueue);
  }
  if (opt.full_snapshot) {
    for (int j = 0; j < nlive; j++) enqueue(j, marked, queue, &nqueue); /* variables may have queued some */
  } else if (l->layout) {
    scan_words(l->args, l->layout->size, 4, marked, queue, &nqueue);
  }
  static struct region found[R3_MAX_ALLOCS];
  int launch_dev = -1;
  if (cudaGetDevice(&launch_dev) != cudaSuccess) launch_dev = -1;
  for (int q = 0; q < nqueue; q++) {
    struct live *a = &live[queue[q]];
    /* Another device's memory, reached through peer access: replayed on one GPU, the launch
       would read it from its own memory, not over the link as in the program. */
    if (!opt.full_snapshot && launch_dev >= 0 && a->device != launch_dev) {
      snprintf(why, whyn, "the launch on device %d reaches memory of device %d (peer access): one GPU's replay would not time it as the program runs it",
               launch_dev, a->device);
      free_regions(found, q);
      free_regions(vs, nv);
      return -1;
    }
    found[q] = (struct region){KIND_ALLOC, a->addr, a->size, NULL, NULL, NULL, NULL, 0};
    *reached += a->size;
    int by_pages = sparse && a->size >= R3_SPARSE_MIN;
    /* A whole region is counted before it is copied; a sparse one once its pages are read. */
    if (!by_pages) *bytes += a->size;
    if (*bytes <= opt.limit_bytes && !(by_pages ? copy_before_sparse(&found[q]) : copy_before(&found[q]))) {
      free_regions(found, q + 1);
      goto copy_failed;
    }
    if (by_pages) *bytes += found[q].kept;
    if (*bytes > opt.limit_bytes) {
      if (sparse)
        snprintf(why, whyn, "reachable working set over the limit of %zu MiB, counting only the pages that hold data "
                 "(%zu MiB of data in the %zu MiB read; raise R3_RECORD_LIMIT_MB)",
                 opt.limit_bytes >> 20, *bytes >> 20, *reached >> 20);
      else
        snprintf(why, whyn, "reachable working set over the limit of %zu MiB (raise R3_RECORD_LIMIT_MB)",
                 opt.limit_bytes >> 20);
      free_regions(found, q + 1);
      free_regions(vs, nv);
      return -2;
    }
    if (!opt.full_snapshot) scan_region(&found[q], marked, queue, &nqueue);
  }
  /* Allocations in address order, the order of live[]. */
  static int found_at[R3_MAX_ALLOCS];
  for (int q = 0; q < nqueue; q++) found_at[queue[q]] = q;
  for (int j = 0; j < nlive; j++) {
    if (marked[j]) rs[n++] = found[found_at[j]];
    else (*skipped)++;
  }
  for (int i = 0; i < nv; i++) rs[n++] = vs[i];
  return n;
copy_failed:
  free_regions(vs, nv);
  snprintf(why, whyn, "snapshot failed (device copy or host memory)");
  return -1;
}

/* snapshot_pass, whole regions first; where those pass the limit, once more with the large
   allocations by their pages that hold data (a pool reserved up front and little used). The
   second pass decides by what the launch reaches, not by the order it was found in. Returns
   the count, or -1 with the reason in why. */
static int snapshot_before(struct region *rs, const struct launch *l, size_t *bytes, size_t *reached, int *sparse,
                           int *skipped, char *why, size_t whyn) {
  *sparse = 0;
  int n = snapshot_pass(rs, l, 0, bytes, reached, skipped, why, whyn);
  if (n == -2) n = snapshot_pass(rs, l, 1, bytes, reached, skipped, why, whyn);
  for (int i = 0; i < n; i++) *sparse += rs[i].present != NULL;
  return n < 0 ? -1 : n;
}

static int snapshot_after(struct region *rs, int n) {
  for (int i = 0; i < n; i++)
    if (!copy_after(&rs[i])) return 0;
  return 1;
}

/* The sizes of the regions the launch changed: what a restore copies back. */
static size_t changed_regions_bytes(const struct region *rs, int n) {
  size_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += rs[i].changed ? rs[i].size : 0;
  return bytes;
}

static int copy_to_device(unsigned char *host, uint64_t dev, size_t n) {
  return device_copy((struct staged_copy){host, dev, n, 0, TO_DEVICE, 0, NULL});
}

/* Runs of changed pages in r, counted up to `enough`. */
static int dirty_runs(const struct region *r, int enough) {
  size_t pages = region_pages(r);
  int runs = 0;
  for (size_t p = 0; p < pages && runs < enough; p++) runs += r->dirty[p] && (p == 0 || !r->dirty[p - 1]);
  return runs;
}

/* Where page p of sparse region r comes from in a restore: 0 zeros, 1 its before buffer, 2
   its after buffer (after: as the launch left it). */
static int sparse_source(const struct region *r, size_t p, int after) {
  return after && r->dirty[p] ? 2 : r->present[p] ? 1 : 0;
}

/* Copies n zero bytes to dev, from one zeroed buffer of R3_STAGE_BYTES. */
static int zeros_to_device(uint64_t dev, size_t n) {
  static unsigned char *zeros;
  if (!zeros && !(zeros = calloc(1, R3_STAGE_BYTES))) return 0;
  for (size_t off = 0; off < n; off += R3_STAGE_BYTES)
    if (!copy_to_device(zeros, dev + off, n - off < R3_STAGE_BYTES ? n - off : R3_STAGE_BYTES)) return 0;
  return 1;
}

/* Puts a sparse region back whole, before the launch or as it left it, in runs of pages of
   one source: zeros, the before buffer or the after buffer (sparse_source). */
static int restore_sparse(struct region *r, int after) {
  size_t pages = region_pages(r);
  for (size_t p = 0; p < pages;) {
    int from = sparse_source(r, p, after);
    size_t q = p;
    while (q < pages && sparse_source(r, q, after) == from) q++;
    size_t off = p * R3_PAGE, end = q * R3_PAGE < r->size ? q * R3_PAGE : r->size;
    int ok = from == 0 ? zeros_to_device(r->addr + off, end - off)
                       : copy_to_device((from == 1 ? r->before : r->after) + off, r->addr + off, end - off);
    if (!ok) return 0;
    p = q;
  }
  return 1;
}

/* Puts a changed region back as the launch left it: its prologue, then its changed pages from
   the after buffer; with many scattered runs of changed pages, the after buffer is completed
   from the prologue first and copied whole. */
static int restore_after(struct region *r) {
  if (r->present) return restore_sparse(r, 1);
  size_t pages = region_pages(r);
  if (dirty_runs(r, R3_RESTORE_RUNS + 1) > R3_RESTORE_RUNS) {
    for (size_t p = 0; p < pages; p++)
      if (!r->dirty[p]) memcpy(r->after + p * R3_PAGE, r->before + p * R3_PAGE, page_bytes(r, p));
    return copy_to_device(r->after, r->addr, r->size);
  }
  if (!copy_to_device(r->before, r->addr, r->size)) return 0;
  for (size_t p = 0; p < pages;) {
    if (!r->dirty[p]) { p++; continue; }
    size_t q = p;
    while (q < pages && r->dirty[q]) q++;
    size_t off = p * R3_PAGE, end = q * R3_PAGE < r->size ? q * R3_PAGE : r->size;
    if (!copy_to_device(r->after + off, r->addr + off, end - off)) return 0;
    p = q;
  }
  return 1;
}

/* Puts back the before (or after) bytes of every region the launch changed. */
static int restore_changed(struct region *rs, int n, int after) {
  for (int i = 0; i < n; i++) {
    if (!rs[i].changed) continue;
    int ok = after ? restore_after(&rs[i])
             : rs[i].present ? restore_sparse(&rs[i], 0)
             : copy_to_device(rs[i].before, rs[i].addr, rs[i].size);
    if (!ok) return 0;
  }
  return 1;
}

/* ---- timing ------------------------------------------------------------------------------ */

/* Loads kernel code f before a timed launch of it: CUDA loads a kernel lazily, inside its first
   launch in a context, where the events around that launch would time the load too (0.15 to 0.18
   ms a program on an H100); asking the driver about the function loads it, as dispatch's probe
   of a variant does. As there, a failed probe leaves no error behind, and with an error of the
   program's pending nothing is asked (the load is then timed). 1 when it asked. */
static int load_before_timing(const void *f) {
  if (cudaPeekAtLastError() != cudaSuccess) return 0;
  struct cudaFuncAttributes a;
  if (cudaFuncGetAttributes(&a, f) != cudaSuccess) (void)cudaGetLastError();
  return 1;
}

/* One launch with events around it, waited for: the launch's status, and its time in *ms (-1 when
   it could not be timed; the launch happens either way). The kernel is loaded first
   (load_before_timing). */
static cudaError_t time_one(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream,
                            float *ms) {
  *ms = -1;
  load_before_timing(stub);
  cudaEvent_t a, b;
  int have_a = cudaEventCreate(&a) == cudaSuccess, have_b = have_a && cudaEventCreate(&b) == cudaSuccess;
  if (!have_b) {
    if (have_a) cudaEventDestroy(a);
    /* Waited for all the same: the epilogue's copies must come after it, whatever its stream. */
    cudaError_t e = __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
    cudaStreamSynchronize(stream);
    return e;
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

/* Whether to time warm re-launches for the in-app time: always with R3_RECORD_WARM=1, never
   with 0, and otherwise when finding what changed (the regions compared, at about 20 GB/s),
   three launches and three restores of the changed regions (estimated from the first launch and
   their bytes at 8 GB/s) take under R3_WARM_BUDGET_MS. Marks the changed regions when it says
   yes. The first launch's time is the in-app time otherwise (the kernel loaded before it: see
   time_one), and the program's own repeated launches (natural.json) say more. */
static int warm_relaunches(double first_ms, struct region *rs, int n, size_t bytes_in) {
  if (opt.warm == 0) return 0;
  if (opt.warm < 0 && 3.0 * first_ms + (double)bytes_in / 20e6 > R3_WARM_BUDGET_MS) return 0;
  size_t restored = changed_regions_bytes(rs, n);
  return opt.warm > 0 || 3.0 * (first_ms + (double)restored / 8e6) <= R3_WARM_BUDGET_MS;
}

/* Median of three warm launches, each on the inputs the first launch saw; then the state the
   first launch left is put back, so the program sees no difference. */
static double warm_time(struct region *rs, int n, const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                        cudaStream_t stream) {
  double t0 = now_s();
  float t[3];
  for (int k = 0; k < 3; k++) {
    if (!restore_changed(rs, n, 0)) return -1;
    /* A small restore is a cudaMemcpy from pageable memory, which may return before its bytes
       land, on the legacy stream, which a non-blocking stream does not wait for. */
    cudaDeviceSynchronize();
    time_one(stub, grid, block, args, shmem, stream, &t[k]);
  }
  restore_changed(rs, n, 1);
  cudaDeviceSynchronize();
  st.relaunch_s += now_s() - t0;
  st.relaunched++;
  float lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
  return t[2] < lo ? lo : (t[2] > hi ? hi : t[2]);
}

/* ---- kernels and launches ------------------------------------------------------------------- */

static struct kernel_fn *find_kernel(const void *stub) {
  unsigned i = stub_slot(stub);
  for (int probe = 0; kernel_index[i] && probe < R3_KERNEL_TABLE; probe++, i = (i + 1) & (R3_KERNEL_TABLE - 1))
    if (kernels[kernel_index[i] - 1].stub == stub) return &kernels[kernel_index[i] - 1];
  return NULL;
}

/* The kernel's parameter layout, read once; NULL when the driver cannot say (then its launches
   run unrecorded). */
static const struct layout *layout_of(struct kernel_fn *k, const void *stub) {
  if (k->layout || k->no_layout) return k->layout;
  k->no_layout = 1;
  cudaFunction_t fn;
  vmm_init(); /* loads the driver entry points, cuFuncGetParamInfo among them */
  if (!cu.param_info || cudaGetFuncBySymbol(&fn, stub) != cudaSuccess) return NULL;
  struct layout *lay = calloc(1, sizeof *lay);
  if (!lay) return NULL;
  for (lay->nparams = 0; lay->nparams < 256; lay->nparams++) {
    size_t off, size;
    if (cu.param_info((CUfunction)fn, (size_t)lay->nparams, &off, &size) != CUDA_SUCCESS) break;
    lay->offsets[lay->nparams] = off;
    lay->sizes[lay->nparams] = size;
    if (off + size > lay->size) lay->size = off + size;
  }
  if (lay->size > R3_MAX_ARGS) { free(lay); return NULL; }
  k->no_layout = 0;
  return k->layout = lay;
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

static int defer_natural(const struct kernel_fn *k, int seen);

/* A launch identical to recorded launch `seen`: runs as issued, and the first R3_NATURAL are
   timed in whatever cache state the program left (no snapshot, no restore around them). */
static cudaError_t natural_launch(struct kernel_fn *k, int seen, const void *stub, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t stream) {
  if (k->nnatural[seen] >= R3_NATURAL || st.time_capped)
    return __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  double t0 = now_s();
  float ms;
  cudaError_t e = time_one(stub, grid, block, args, shmem, stream, &ms);
  if (ms > 0) {
    k->natural[seen][k->nnatural[seen]++] = ms;
    if (!defer_natural(k, seen)) write_natural(k, seen);
  }
  st.natural_s += now_s() - t0;
  return e;
}

/* Whether launches identical to a recorded one still have natural times to give. */
static int natural_pending(const struct kernel_fn *k) {
  if (st.time_capped) return 0;
  for (int i = 0; i < k->nseen; i++)
    if (k->nnatural[i] < R3_NATURAL) return 1;
  return 0;
}

static void progress(void) {
  double t = now_s();
  if (!opt.progress || t - st.last_progress < 1.0) return;
  st.last_progress = t;
  fprintf(stderr, "r3: recording: %d kernels seen, %llu launches recorded, %.1f MiB written, %.1f s spent recording\n",
          st.kernels_seen, (unsigned long long)st.recorded, (double)st.bytes_written / (1 << 20), st.record_s);
}

/* The caps, after each recorded launch: R3_RECORD_KERNEL_MB per kernel, R3_RECORD_MAX_S for the run. */
static void apply_caps(struct kernel_fn *k) {
  if (opt.kernel_bytes && !k->capped && k->bytes_written >= opt.kernel_bytes) {
    k->capped = 1;
    st.kernels_capped++;
  }
  if (opt.max_seconds > 0 && !st.time_capped && st.record_s >= opt.max_seconds) {
    st.time_capped = 1;
    char s[32];
    snprintf(s, sizeof s, "%.1f", st.record_s);
    warn("recording stopped after %s s (R3_RECORD_MAX_S%s); later launches run unrecorded", s, "");
  }
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Moves the complete recording `tmp` to `dir`. A recording of the same launch from an earlier
   run (the program recorded again: same kernel, shape and argument bytes) is replaced, since
   the user asked for this run's data; the two directories are exchanged in one step, so a
   reader always finds one complete recording there, and the old one is removed under the temp
   name (which `r3 record` cleans up should this process die first). Never leaves `tmp` behind. */
/* Makes a rename in the directory holding `path` durable. */
static void sync_parent(const char *path) {
  char parent[4300];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (!slash) return;
  *slash = 0;
  int fd = open(parent, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

static void publish_recording(const char *tmp, const char *dir) {
  if (rename(tmp, dir) == 0) {
    sync_parent(dir);
    return;
  }
  int replaced = 0;
  if (errno == ENOTEMPTY || errno == EEXIST) {
#ifdef RENAME_EXCHANGE
    replaced = renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0;
#endif
    if (!replaced) { /* no exchange on this filesystem: a moment with no recording there */
      char old[4300];
      snprintf(old, sizeof old, "%s.old-%d", tmp, (int)getpid());
      if (rename(dir, old) == 0) {
        replaced = rename(tmp, dir) == 0;
        if (replaced) remove_tree(old);
        else rename(old, dir); /* keep the earlier recording */
      }
    }
  }
  if (replaced) sync_parent(dir);
  else warn("cannot move a recording into %s (%s)", dir, strerror(errno));
  remove_tree(tmp);
}

/* ---- finishing a recording while the program goes on ------------------------------------- */

/* A recording's files are compressed and written on a thread of its own: the prologue from
   the moment it is copied out (while the launch runs), then, once the launching thread has the
   launch's results copied out and returns to the program, the epilogue, launch.json, and the
   rename that makes the recording visible. Up to R3_RECORD_INFLIGHT recordings (default 4) are
   in flight at once, each in a slot with its own regions and host buffers: a program that
   records several launches in a row goes on while they are written, and waits only when every
   slot is busy, when the host memory the slots hold passes R3_RECORD_HOST_MB, or for a
   kernel's own recordings when a per-kernel byte cap needs their sizes (take_slot). The end of
   the run waits for them all (at_exit). The thread makes no CUDA call and reads only host
   memory that stays valid after cudart's teardown, so the order of the atexit handlers does
   not matter. */
struct finisher {
  pthread_t thread;
  int running;  /* a thread to join; claimed atomically (the exit handler may race a launch) */
  int done;     /* the thread has finished (its join will not wait) */
  unsigned long long seq; /* order of recording, to wait for the oldest first */
  pid_t pid;    /* of the process that started it: a forked child has no thread to join */
  pthread_mutex_t m;
  pthread_cond_t cv;
  int go;       /* the launching thread is done: after buffers filled, outcome final */
  int files;    /* snapshots to write (0: launch.json alone, for a launch not replayable) */
  int after_ok; /* the epilogue's bytes were copied out */
  struct kernel_fn *k;
  int seen;         /* k->seen[] index of the launch */
  int natural_due;  /* natural times came while it was unpublished: written once it is */
  struct region *rs;
  int n;
  struct launch l;
  unsigned char args[R3_MAX_ARGS];
  struct outcome o;
  struct gpu_info gpu;
  char tmp[4200], dir[4096];
  double busy_s;
};

/* A recording in flight: its finisher, host buffers and regions. */
struct slot {
  struct finisher fin;
  struct arena arenas[2];
  struct region rs[R3_MAX_ALLOCS + R3_MAX_VARS];
};
/* Zero-initialized: their mutexes and condition variables are PTHREAD_*_INITIALIZER on glibc,
   which is all zeros (this runtime is Linux-only). */
static struct slot slots[R3_INFLIGHT];
static unsigned long long recordings_started;

/* Writes one snapshot file; adds what it wrote to *written. */
static int write_snapshot_file(struct finisher *f, const char *name, int epilogue, size_t *written) {
  char path[4300];
  struct writer w;
  snprintf(path, sizeof path, "%s/%s", f->tmp, name);
  if (!w_open(&w, path)) return 0;
  if (epilogue) f->o.bytes_changed = write_epilogue(&w, f->rs, f->n);
  else write_prologue(&w, f->rs, f->n);
  int ok = w_close(&w);
  *written += w.written;
  struct outcome *o = &f->o;
  if (ok && o->nfiles < 2) {
    o->files[o->nfiles].name = name;
    o->files[o->nfiles].bytes = w.written;
    o->files[o->nfiles++].sum = sum_final(&w.sum);
  }
  return ok;
}

static void finish_recording(struct finisher *f) {
  double t0 = now_s();
  size_t written = 0;
  int ok = !f->files || write_snapshot_file(f, "prologue.r3snap", 0, &written);
  double w0 = now_s();
  pthread_mutex_lock(&f->m);
  while (!f->go) pthread_cond_wait(&f->cv, &f->m);
  pthread_mutex_unlock(&f->m);
  double waited = now_s() - w0;
  struct outcome *o = &f->o;
  if (f->files && !o->not_replayable) {
    ok = ok && f->after_ok && write_snapshot_file(f, "epilogue.r3snap", 1, &written);
    if (!ok) o->not_replayable = "snapshot failed (device copy or write error)";
  }
  o->bytes_written = written;
  if (write_launch_json(f->tmp, &f->l, o, &f->gpu)) {
    publish_recording(f->tmp, f->dir);
  } else {
    warn("cannot write %s/launch.json (%s); that recording is left out", f->tmp, strerror(errno));
    remove_tree(f->tmp);
  }
  f->busy_s = now_s() - t0 - waited;
}

static void *finisher_main(void *p) {
  struct finisher *f = p;
  /* Compression is background work: at a lower priority (inherited by its compression
     threads), it yields the cores to the program and to the next recording's copies, which the
     program waits for. many_buffers on an H100 host of 16 cores (2026-11-25): its copies took
     1.2-1.5 s beside finishers at the same priority, 0.75 s with the finishers lowered. */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), R3_FINISHER_NICE);
  finish_recording(f);
  __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* What a finished recording adds to the run's figures and the caps. */
static void account_finished(struct finisher *f) {
  st.bytes_written += f->o.bytes_written;
  st.not_replayable += f->o.not_replayable != NULL;
  f->k->bytes_written += f->o.bytes_written;
  if (f->natural_due) write_natural(f->k, f->seen);
  f->natural_due = 0;
  apply_caps(f->k);
}

/* Waits for slot s's recording, if one is in flight; the wait is recording time the program
   paid. */
static void reap(struct slot *s, int at_exit) {
  struct finisher *f = &s->fin;
  if (!__atomic_exchange_n(&f->running, 0, __ATOMIC_ACQ_REL)) return;
  if (f->pid != getpid()) return;
  double t0 = now_s();
  pthread_join(f->thread, NULL);
  double waited = now_s() - t0;
  st.wait_s += waited;
  st.record_s += waited;
  if (at_exit) st.exit_wait_s += waited;
  st.background_s += f->busy_s;
  account_finished(f);
}

static int busy(const struct slot *s) { return __atomic_load_n(&s->fin.running, __ATOMIC_ACQUIRE); }

static size_t host_held(void) {
  size_t n = 0;
  for (int i = 0; i < opt.inflight; i++) n += arena_bytes(&slots[i].arenas[0]) + arena_bytes(&slots[i].arenas[1]);
  return n;
}

/* The slot for the next recording of k: a free one, after reaping the finished ones (and, under
   a per-kernel byte cap, k's own, whose sizes the cap needs), else the oldest once it is done.
   Past the host-memory limit the other slots are drained and their buffers given back. */
static struct slot *take_slot(const struct kernel_fn *k) {
  struct slot *pick = NULL;
  for (int i = 0; i < opt.inflight; i++) {
    struct slot *s = &slots[i];
    if (busy(s) && (__atomic_load_n(&s->fin.done, __ATOMIC_ACQUIRE) || (opt.kernel_bytes && s->fin.k == k)))
      reap(s, 0);
    if (!busy(s) && (!pick || (!arena_bytes(&pick->arenas[0]) && arena_bytes(&s->arenas[0])))) pick = s;
  }
  if (!pick) {
    for (int i = 0; i < opt.inflight; i++)
      if (!pick || slots[i].fin.seq < pick->fin.seq) pick = &slots[i];
    reap(pick, 0);
  }
  if (host_held() > opt.host_bytes) {
    for (int i = 0; i < opt.inflight; i++) {
      struct slot *s = &slots[i];
      if (s == pick) continue;
      reap(s, 0);
      for (int a = 0; a < 2; a++) {
        for (int c = 0; c < s->arenas[a].n; c++) chunk_free(&s->arenas[a].c[c]);
        s->arenas[a].n = 0;
      }
    }
  }
  return pick;
}

/* When launch `seen` of k is a recording still being written, its natural times are written
   once it is published (its directory is not there yet): returns 1. */
static int defer_natural(const struct kernel_fn *k, int seen) {
  for (int i = 0; i < opt.inflight; i++) {
    struct finisher *f = &slots[i].fin;
    if (!busy(&slots[i]) || f->k != k || f->seen != seen) continue;
    f->natural_due = 1;
    return 1;
  }
  return 0;
}

/* Hands the recording to the finisher thread; returns 1 when it runs there. */
static int start_finisher(struct finisher *f) {
  f->go = 0;
  f->done = 0;
  f->seq = ++recordings_started;
  f->pid = getpid();
  if (!f->files || pthread_create(&f->thread, NULL, finisher_main, f) != 0) return 0;
  __atomic_store_n(&f->running, 1, __ATOMIC_RELEASE);
  return 1;
}

static void release_finisher(struct finisher *f, int threaded) {
  pthread_mutex_lock(&f->m);
  f->go = 1;
  pthread_cond_signal(&f->cv);
  pthread_mutex_unlock(&f->m);
  if (threaded) return;
  double t0 = now_s();
  finish_recording(f); /* no thread: here, and paid for */
  st.write_s += now_s() - t0;
  st.record_s += now_s() - t0;
  account_finished(f);
}

/* Records launch l (kernel k's seen[seen]) into a temp directory renamed into place when
   complete (struct finisher). On this thread: the prologue's bytes copied out, the launch, its
   epilogue's bytes, and the warm re-launches when cheap; the program sees the launch's result
   either way, and goes on while the files are written. Slot `slot` is free (take_slot). */
static cudaError_t record_launch(struct slot *slot, struct kernel_fn *k, int seen, const struct launch *l, void **args,
                                 cudaStream_t stream, const char *why_not) {
  const void *stub = k->stub;
  struct finisher *f = &slot->fin;
  struct region *rs = slot->rs;
  arenas = slot->arenas;
  recording_dir(f->dir, sizeof f->dir, k, l->id);
  /* Its own temp directory: up to R3_INFLIGHT recordings are written at once, and two kernels
     launched back to back with the same shape and argument bytes (the steps of a stencil or an
     ADI sweep) have the same launch id. A name of pid and launch id alone once gave them one
     directory, each finisher writing over the other's files. */
  static unsigned long long serial;
  snprintf(f->tmp, sizeof f->tmp, "%s/records/.tmp-%d-%016llx-%016llx-%llu", store_dir, (int)getpid(),
           (unsigned long long)kernel_dir_key(k), (unsigned long long)l->id, ++serial);
  char parent[4200];
  snprintf(parent, sizeof parent, "%s", f->dir);
  *strrchr(parent, '/') = 0;
  if (!mkdirs(parent) || !mkdirs(f->tmp)) {
    warn("cannot write recordings under %s%s; launches run unrecorded", store_dir, "");
    return __real_cudaLaunchKernel(stub, l->grid, l->block, args, l->shmem, stream);
  }
  double t0 = now_s();
  struct outcome *o = &f->o;
  *o = (struct outcome){.not_replayable = why_not, .in_app_from = "first launch"};
  char why[256];
  cudaDeviceSynchronize();
  arenas_reset();
  int n = 0;
  if (!o->not_replayable && (n = snapshot_before(rs, l, &o->bytes_in, &o->bytes_reached, &o->sparse_regions,
                                                 &o->regions_skipped, why, sizeof why)) < 0) {
    o->not_replayable = why; /* copied below: why is this frame's */
    n = 0;
  }
  static char why_kept[R3_INFLIGHT][256];
  if (o->not_replayable == why) o->not_replayable = strcpy(why_kept[slot - slots], why);
  f->k = k, f->seen = seen, f->natural_due = 0, f->rs = rs, f->n = n;
  f->l = *l;
  if (l->layout) memcpy(f->args, l->args, l->layout->size);
  f->l.args = f->args;
  f->gpu = gpu_info_now();
  f->files = !o->not_replayable;
  int threaded = start_finisher(f);
  float ms;
  double launched = now_s();
  cudaError_t result = time_one(stub, l->grid, l->block, args, l->shmem, stream, &ms);
  double launch_s = now_s() - launched;
  o->ms = o->first_ms = ms < 0 ? 0 : ms; /* 0: a launch that could not be timed, as before */
  f->after_ok = result == cudaSuccess && f->files && snapshot_after(rs, n);
  if (f->after_ok && warm_relaunches(o->first_ms, rs, n, o->bytes_in)) {
    double warm = warm_time(rs, n, stub, l->grid, l->block, args, l->shmem, stream);
    if (warm >= 0) o->ms = warm, o->in_app_from = "warm re-launches";
  }
  if (result != cudaSuccess) o->not_replayable = "the launch itself failed";
  o->regions = n;
  o->record_ms = (now_s() - t0 - launch_s) * 1e3;
  st.record_s += now_s() - t0 - launch_s;
  st.recorded++;
  st.bytes_in += o->bytes_in;
  st.regions += (uint64_t)n;
  st.regions_skipped += (uint64_t)o->regions_skipped;
  release_finisher(f, threaded);
  apply_caps(k);
  progress();
  return result;
}

/* Whether k has launches left to record (the caps only ever turn this off). */
static int may_record(const struct kernel_fn *k) {
  return !k->capped && !st.time_capped && k->recorded < opt.launches_per_kernel && k->nseen < R3_MAX_SEEN;
}

static void count_launch(void);

/* The threads of a launch of `grid` blocks of `block`. */
static double launch_threads(dim3 grid, dim3 block) {
  return (double)grid.x * grid.y * grid.z * (double)block.x * block.y * block.z;
}

/* One launch more than --launches: a kernel's first launches may be a warm-up or the first,
   smallest levels of a growing frontier (bfs_step's four recorded levels were 1.1% of its time,
   H200, 2026-12-03), while the launch its program repeats, a solver's steady state or a
   benchmark's timed loop, comes later. So the first launch past the kernel's recordings that
   repeats an earlier one and is larger than every recorded launch is recorded too; its repeats
   are then counted as identical to it. */
static int may_record_repeat(const struct kernel_fn *k) {
  return !k->capped && !st.time_capped && !k->repeat_recorded && k->nseen < R3_MAX_SEEN;
}

/* Whether the launch `id` of k, with `threads`, earns that recording; remembered if not. Under
   lock. */
static int repeat_earns_recording(struct kernel_fn *k, uint64_t id, double threads) {
  if (!may_record_repeat(k) || !k->nseen || threads <= k->recorded_threads_max) return 0;
  for (int i = 0; i < k->nunrecorded; i++)
    if (k->unrecorded[i] == id) return 1;
  k->unrecorded[k->unrecorded_next] = id;
  k->unrecorded_next = (k->unrecorded_next + 1) % R3_UNRECORDED;
  if (k->nunrecorded < R3_UNRECORDED) k->nunrecorded++;
  return 0;
}

/* The census's count of a launch of k that is neither recorded nor identical to a recorded one,
   with its threads (which scale a recorded launch's time to it). Under lock. */
static void census_other(struct kernel_fn *k, dim3 grid, dim3 block) {
  k->census_other++;
  k->census_other_threads += launch_threads(grid, block);
}

/* A launch r3 does not record (cudaLaunchKernelEx), counted while recording; its kernel (NULL:
   a stub with no registration). Under lock. */
static struct kernel_fn *census_unrecorded(const void *stub, dim3 grid, dim3 block) {
  count_launch();
  struct kernel_fn *k = find_kernel(stub);
  if (k) {
    if (!k->launched++) st.kernels_seen++;
    k->census_launches++;
    census_other(k, grid, block);
  } else {
    st.unknown_launches++;
  }
  return k;
}

/* A launch of k the census counts as other, run as issued and timed (census_timing_begin).
   Under lock. */
static cudaError_t other_launch(struct kernel_fn *k, const void *stub, dim3 grid, dim3 block, void **args,
                                size_t shmem, cudaStream_t stream) {
  census_other(k, grid, block);
  struct timing *t = census_timing_begin(k, stream);
  cudaError_t e = __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  census_timing_end(t, k, grid, block, stream, e);
  return e;
}

/* A recurrence count for a launch recorded now (parameters `buf` laid out by `lay`), counting
   itself; NULL where memory is short (the census then says nothing of it). */
static struct recur *new_recurrence(const struct layout *lay, const unsigned char *buf, dim3 grid, dim3 block) {
  struct recur *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->bytes = malloc(lay->size ? lay->size : 1);
  if (!r->bytes) return free(r), NULL;
  memcpy(r->bytes, buf, lay->size);
  r->grid = grid, r->block = block;
  r->compared = r->dims_same = 1;
  for (int p = 0; p < R3_RECUR_PARAMS; p++) r->arg_same[p] = 1;
  return r;
}

static int same_dim3(dim3 a, dim3 b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

/* Counts, for each launch of k recorded before this one, which of its values this launch has. */
static void count_recurrence(struct kernel_fn *k, const struct layout *lay, const unsigned char *buf, dim3 grid,
                             dim3 block) {
  for (int i = 0; i < k->nseen; i++) {
    struct recur *r = k->recur[i];
    if (!r) continue;
    r->compared++;
    r->dims_same += same_dim3(r->grid, grid) && same_dim3(r->block, block);
    for (int p = 0; p < lay->nparams && p < R3_RECUR_PARAMS; p++)
      r->arg_same[p] += !memcmp(r->bytes + lay->offsets[p], buf + lay->offsets[p], lay->sizes[p]);
  }
}

/* A launch of a registered kernel: recorded while the kernel has launches to record, timed
   when it repeats a recorded one, and otherwise passed straight on; counted either way (once
   the kernel has a recorded launch, its argument hash says whether the launch repeats one). */
static cudaError_t kernel_launch(struct kernel_fn *k, const void *stub, dim3 grid, dim3 block, void **args,
                                 size_t shmem, cudaStream_t stream) {
  if (!k->launched++) st.kernels_seen++;
  k->census_launches++;
  if (capturing(stream)) return other_launch(k, stub, grid, block, args, shmem, stream);
  int can_record = may_record(k);
  const struct layout *lay = can_record || k->nseen ? layout_of(k, stub) : NULL;
  if (!lay) return other_launch(k, stub, grid, block, args, shmem, stream);
  static unsigned char buf[R3_MAX_ARGS];
  memset(buf, 0, lay->size);
  for (int i = 0; i < lay->nparams; i++) memcpy(buf + lay->offsets[i], args[i], lay->sizes[i]);
  struct launch l = {k->name, grid, block, shmem, buf, lay, 0, NULL};
  uint64_t h = fnv(&grid, sizeof grid, FNV_OFFSET);
  h = fnv(&block, sizeof block, h);
  h = fnv(&shmem, sizeof shmem, h);
  l.id = fnv(buf, lay->size, h);
  count_recurrence(k, lay, buf, grid, block);
  for (int i = 0; i < k->nseen; i++)
    if (k->seen[i] == l.id) {
      k->census_same[i]++;
      return natural_launch(k, i, stub, grid, block, args, shmem, stream);
    }
  double threads = launch_threads(grid, block);
  int repeat = !can_record && repeat_earns_recording(k, l.id, threads);
  struct slot *slot = can_record || repeat ? take_slot(k) : NULL; /* finished recordings count for the caps */
  if (repeat ? !may_record_repeat(k) : !can_record || !may_record(k))
    return other_launch(k, stub, grid, block, args, shmem, stream);
  k->repeat_recorded |= repeat;
  if (threads > k->recorded_threads_max) k->recorded_threads_max = threads;
  k->seen[k->nseen] = l.id;
  k->census_same[k->nseen] = 1;
  k->recur[k->nseen] = new_recurrence(lay, buf, grid, block);
  k->recorded++;
  l.fatbin = fatbin_hash(k);
  const char *why_not = sticky_reason ? sticky_reason : pinned_argument(buf, lay->size);
  return record_launch(slot, k, k->nseen++, &l, args, stream, why_not);
}

/* ---- time-only runs (R3_TIME_ONLY=1), and the census's other launches ---------------------- */

/* Each launch between the two events of a pair from a pool, on the launch's stream; a pair is
   folded into its kernel's time oldest first: waited for when the pool is full, without waiting
   when already done (up to two at each launch), and all of them, waited for, before
   cudaDeviceReset (which takes the events with the context) and at exit. An event belongs to the
   device current where it was made: a pair is made again for another. A launch on a stream
   being captured into a graph runs untimed (it runs later, as part of the graph, and an event
   wait during a capture would break it). While recording, the census times its other launches
   the same way (census: the pair's time goes to the kernel's census, with its threads). */
#define R3_TIMING_PAIRS 1024
struct timing { cudaEvent_t start, end; int device, made, census; struct kernel_fn *k; double threads; };
static struct timing timings[R3_TIMING_PAIRS];
static int timing_pairs = R3_TIMING_PAIRS, timing_head, timing_count, timing_exit_registered;
static double timing_total_ms;
static uint64_t timing_timed;
/* Launches of stubs with no registration, as one kernel. */
static struct kernel_fn unknown_kernel = {.name = "(unknown)"};

/* Folds the oldest pair into its kernel's time (waited for, or only when done); 1 when the pair
   is free again. Under lock. */
static int timing_fold(int wait) {
  if (!timing_count) return 0;
  struct timing *t = &timings[timing_head];
  int done = (wait ? cudaEventSynchronize(t->end) : cudaEventQuery(t->end)) == cudaSuccess;
  if (!done && !wait) return 0;
  float ms;
  int timed = done && cudaEventElapsedTime(&ms, t->start, t->end) == cudaSuccess && ms >= 0;
  if (timed && t->census) {
    t->k->census_timed_ms += ms;
    t->k->census_timed++;
    t->k->census_timed_threads += t->threads;
  } else if (timed) {
    t->k->time_ms += ms;
    t->k->time_timed++;
    timing_total_ms += ms;
    timing_timed++;
  }
  timing_head = (timing_head + 1) % timing_pairs;
  timing_count--;
  return 1;
}

static void timing_drain(void) {
  while (timing_fold(1)) {
  }
}

static void timing_at_exit(void) {
  if (pthread_mutex_trylock(&lock) != 0) return; /* a thread mid-launch: at_exit tries again */
  timing_drain();
  pthread_mutex_unlock(&lock);
}

static void time_only_start(void) {
  const char *t = getenv("R3_TIME_ONLY");
  if (!t || !*t || !strcmp(t, "0")) return;
  long long pairs = env_ll("R3_TIME_ONLY_EVENTS", R3_TIMING_PAIRS);
  timing_pairs = pairs < 1 ? 1 : pairs > R3_TIMING_PAIRS ? R3_TIMING_PAIRS : (int)pairs;
  const char *sp = getenv("R3_RECORD_STATS");
  if (sp && *sp) snprintf(opt.stats_path, sizeof opt.stats_path, "%s", sp);
  st.start = now_s();
  st.start_unix = clock_s(CLOCK_REALTIME);
  time_only = 1;
  atexit(at_exit);
}

/* Before a kernel's first timed launch of its generic code on a device: that code loaded
   (load_before_timing; a variant's was loaded by dispatch's probe). Lazily loaded, the recorded
   build's first launches paid for loading and an applied build's variants did not: 4 to 8% of
   the measured speedup of a program of a few ms. Under lock. */
static void time_only_preload(const void *stub, const void *code) {
  struct kernel_fn *k = code == stub ? find_kernel(stub) : NULL;
  int dev = 0;
  if (!k || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= R3_MAX_DEVICES) return;
  if (!(k->time_loaded >> dev & 1) && load_before_timing(code)) k->time_loaded |= 1ull << dev;
}

/* Before a launch: the pair it is timed with, its start event recorded on stream s; NULL when it
   cannot be timed. Under lock. */
static struct timing *timing_begin(cudaStream_t s) {
  enum cudaStreamCaptureStatus capture;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) return NULL;
  if (timing_count == timing_pairs) timing_fold(1);
  for (int i = 0; i < 2 && timing_fold(0); i++) {
  }
  struct timing *t = &timings[(timing_head + timing_count) % timing_pairs];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return NULL;
  if (t->made && t->device != dev) {
    cudaEventDestroy(t->start);
    cudaEventDestroy(t->end);
    t->made = 0;
  }
  if (!t->made) {
    if (cudaEventCreate(&t->start) != cudaSuccess) return NULL;
    if (cudaEventCreate(&t->end) != cudaSuccess) {
      cudaEventDestroy(t->start);
      return NULL;
    }
    t->made = 1, t->device = dev;
  }
  return cudaEventRecord(t->start, s) == cudaSuccess ? t : NULL;
}

/* After the launch (status e) of stub: counted for its kernel, and, where it was timed, its end
   event recorded and the pair queued. Under lock. */
static void timing_end(struct timing *t, const void *stub, cudaStream_t s, cudaError_t e) {
  struct kernel_fn *k = find_kernel(stub);
  if (!k) k = &unknown_kernel, st.unknown_launches++;
  if (!k->launched++ && k != &unknown_kernel) st.kernels_seen++;
  k->time_launches++;
  st.launches++;
  /* After the program's first launch, so after cudart's own exit handler was registered: this
     one runs before it, while the events are still there. */
  if (!timing_exit_registered) timing_exit_registered = 1, atexit(timing_at_exit);
  if (!t || e != cudaSuccess || cudaEventRecord(t->end, s) != cudaSuccess) return;
  t->k = k;
  t->census = 0;
  timing_count++;
}

/* While recording, before a launch of k (NULL: no registration, untimed) that the census counts
   as other: its pair, as for a time-only run. Timed rather than scaled from a recorded launch by
   threads, where the work per thread changes with the launch (a loop bound among the arguments)
   the census still sees what the launch took. Under lock. */
static struct timing *census_timing_begin(struct kernel_fn *k, cudaStream_t s) {
  if (!k) return NULL;
  time_only_preload(k->stub, k->stub);
  return timing_begin(s);
}

/* After that launch (status e): where it was timed, its end event recorded and the pair queued.
   Under lock. */
static void census_timing_end(struct timing *t, struct kernel_fn *k, dim3 grid, dim3 block, cudaStream_t s,
                              cudaError_t e) {
  if (!timing_exit_registered) timing_exit_registered = 1, atexit(timing_at_exit);
  if (!t || e != cudaSuccess || cudaEventRecord(t->end, s) != cudaSuccess) return;
  t->k = k;
  t->census = 1;
  t->threads = launch_threads(grid, block);
  timing_count++;
}

/* The context goes, and with it every event: the pairs in flight are folded first. */
cudaError_t __wrap_cudaDeviceReset(void) {
  if (!recording() && !time_only) return __real_cudaDeviceReset();
  pthread_mutex_lock(&lock);
  timing_drain();
  for (int i = 0; i < R3_TIMING_PAIRS; i++) {
    if (!timings[i].made) continue;
    cudaEventDestroy(timings[i].start);
    cudaEventDestroy(timings[i].end);
    timings[i].made = 0;
  }
  /* The reset unloads every kernel of the device: each is loaded again before its next launch. */
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < R3_MAX_DEVICES)
    for (int i = 0; i < nkernels; i++) kernels[i].time_loaded &= ~(1ull << dev);
  pthread_mutex_unlock(&lock);
  return __real_cudaDeviceReset();
}

/* exit() reached: registered at the first launch, so it runs before the exit handlers registered
   earlier (the program's static constructors' and at_exit, registered when the runtime starts,
   which runs last); the span to at_exit is theirs. */
static void exit_called(void) { st.exit_unix = clock_s(CLOCK_REALTIME); }

static void count_launch(void) {
  if (!st.launches++) atexit(exit_called);
}

cudaError_t __wrap_cudaLaunchKernel(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                                    cudaStream_t stream) {
  if (!recording()) {
    const void *f = DISPATCHED(stub, grid, block, args, shmem, 1);
    if (time_only) TIMED_LAUNCH(stub, f, stream, __real_cudaLaunchKernel(f, grid, block, args, shmem, stream));
    return __real_cudaLaunchKernel(f, grid, block, args, shmem, stream);
  }
  pthread_mutex_lock(&lock);
  count_launch();
  struct kernel_fn *k = find_kernel(stub);
  if (!k) st.unknown_launches++;
  cudaError_t e = k ? kernel_launch(k, stub, grid, block, args, shmem, stream)
                    : __real_cudaLaunchKernel(stub, grid, block, args, shmem, stream);
  pthread_mutex_unlock(&lock);
  return e;
}

cudaError_t __wrap_cudaLaunchCooperativeKernel(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                                               cudaStream_t stream) {
  if (!recording()) {
    const void *f = DISPATCHED(stub, grid, block, args, shmem, 0);
    if (time_only) TIMED_LAUNCH(stub, f, stream, __real_cudaLaunchCooperativeKernel(f, grid, block, args, shmem, stream));
    return __real_cudaLaunchCooperativeKernel(f, grid, block, args, shmem, stream);
  }
  pthread_mutex_lock(&lock);
  count_launch();
  struct kernel_fn *k = find_kernel(stub);
  if (k && !k->launched++) st.kernels_seen++;
  if (k) k->census_launches++;
  else st.unknown_launches++;
  if (k && k->recorded < opt.launches_per_kernel) {
    /* Recorded as a launch that cannot be replayed; it runs as the program asked. */
    k->recorded++;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/records/%016llx/cooperative-%d", store_dir, (unsigned long long)kernel_dir_key(k),
             k->recorded);
    struct launch l = {k->name, grid, block, shmem, (const unsigned char *)"", NULL, 0, fatbin_hash(k)};
    struct outcome o = {.not_replayable = "cooperative launch", .in_app_from = "first launch"};
    struct gpu_info g = gpu_info_now();
    if (mkdirs(dir)) write_launch_json(dir, &l, &o, &g);
  }
  /* Never identical to a recorded launch (never replayable): counted and timed as other. */
  if (k) census_other(k, grid, block);
  struct timing *t = census_timing_begin(k, stream);
  cudaError_t e = __real_cudaLaunchCooperativeKernel(stub, grid, block, args, shmem, stream);
  census_timing_end(t, k, grid, block, stream, e);
  pthread_mutex_unlock(&lock);
  return e;
}

cudaError_t __wrap_cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
  mark("CUDA graphs in use");
  return __real_cudaGraphLaunch(g, s);
}

/* ---- code compiled for the per-thread default stream ---------------------------------------- */

/* clang's -fgpu-default-stream=per-thread (nvcc's --default-stream per-thread) has the program
   call these instead, where stream 0 is the calling thread's default stream. Named as such
   (cudaStreamPerThread) it means the same here, where 0 would be the legacy stream: a launch,
   and the events r3 records around it, go where the program meant them to. */
cudaError_t __real_cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaLaunchCooperativeKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t __real_cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t __real_cudaFreeAsync_ptsz(void *, cudaStream_t);
cudaError_t __real_cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
cudaError_t __real_cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t __real_cudaStreamBeginCapture_ptsz(cudaStream_t, enum cudaStreamCaptureMode);
cudaError_t __real_cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t *);

cudaError_t __wrap_cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  cudaError_t e = __real_cudaStreamBeginCapture_ptsz(s, mode);
  capture_began(e);
  return e;
}

cudaError_t __wrap_cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *graph) {
  cudaError_t e = __real_cudaStreamEndCapture_ptsz(s, graph);
  capture_ended(e);
  return e;
}

cudaError_t __wrap_cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) {
  return launch_ex(__real_cudaLaunchKernelExC_ptsz, 1, config, func, args);
}

static cudaStream_t per_thread(cudaStream_t s) { return s ? s : cudaStreamPerThread; }

cudaError_t __wrap_cudaLaunchKernel_ptsz(const void *stub, dim3 grid, dim3 block, void **args, size_t shmem,
                                         cudaStream_t stream) {
  if (!recording()) {
    const void *f = DISPATCHED(stub, grid, block, args, shmem, 1);
    if (time_only)
      TIMED_LAUNCH(stub, f, per_thread(stream), __real_cudaLaunchKernel_ptsz(f, grid, block, args, shmem, stream));
    return __real_cudaLaunchKernel_ptsz(f, grid, block, args, shmem, stream);
  }
  return __wrap_cudaLaunchKernel(stub, grid, block, args, shmem, per_thread(stream));
}

cudaError_t __wrap_cudaLaunchCooperativeKernel_ptsz(const void *stub, dim3 grid, dim3 block, void **args,
                                                    size_t shmem, cudaStream_t stream) {
  if (!recording()) {
    const void *f = DISPATCHED(stub, grid, block, args, shmem, 0);
    if (time_only)
      TIMED_LAUNCH(stub, f, per_thread(stream),
                   __real_cudaLaunchCooperativeKernel_ptsz(f, grid, block, args, shmem, stream));
    return __real_cudaLaunchCooperativeKernel_ptsz(f, grid, block, args, shmem, stream);
  }
  return __wrap_cudaLaunchCooperativeKernel(stub, grid, block, args, shmem, per_thread(stream));
}

cudaError_t __wrap_cudaMallocAsync_ptsz(void **ptr, size_t size, cudaStream_t s) {
  if (!recording() || capturing(per_thread(s)))
    return dispatch_after(__real_cudaMallocAsync_ptsz(ptr, size, s), "cudaMallocAsync");
  return recorded_malloc(ptr, size, __real_cudaMalloc);
}

cudaError_t __wrap_cudaFreeAsync_ptsz(void *p, cudaStream_t s) {
  if (recording() && p && recorded_free(p)) return cudaSuccess;
  return dispatch_after(__real_cudaFreeAsync_ptsz(p, s), "cudaFreeAsync");
}

cudaError_t __wrap_cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) {
  mark("CUDA graphs in use");
  return __real_cudaGraphLaunch_ptsz(g, s);
}

/* ---- the run's summary -------------------------------------------------------------------- */

/* A recorded launch's recurrence counts (struct recur), as census fields; nothing without them. */
static void write_recurrence(FILE *f, const struct recur *r, const struct layout *lay) {
  if (!r || !lay) return;
  fprintf(f, ", \"compared\": %llu, \"dims_same\": %llu, \"args_same\": [", (unsigned long long)r->compared,
          (unsigned long long)r->dims_same);
  for (int p = 0; p < lay->nparams && p < R3_RECUR_PARAMS; p++)
    fprintf(f, "%s%llu", p ? ", " : "", (unsigned long long)r->arg_same[p]);
  fputc(']', f);
}

/* The census (while recording): per kernel that ran, its registration (name, fatbinary, the
   key of its directory under records/), its launches, for each recorded launch (its directory's
   name) the launches identical to it, and the others with their threads in all; of those, the
   ones timed, their threads and their GPU time. */
static void write_census(FILE *f) {
  fprintf(f, ",\n  \"unknown_launches\": %llu,\n  \"census\": [", (unsigned long long)st.unknown_launches);
  int n = 0;
  for (int i = 0; i < nkernels; i++) {
    const struct kernel_fn *k = &kernels[i];
    if (!k->census_launches) continue;
    fprintf(f, "%s\n    {\"name\": ", n++ ? "," : "");
    json_str(f, k->name);
    fprintf(f, ", \"fatbin\": ");
    json_str(f, fatbin_hash(k));
    fprintf(f, ", \"key\": \"%016llx\", \"launches\": %llu, \"recorded\": [", (unsigned long long)kernel_dir_key(k),
            (unsigned long long)k->census_launches);
    for (int j = 0; j < k->nseen; j++) {
      fprintf(f, "%s{\"launch\": \"%016llx\", \"count\": %llu", j ? ", " : "", (unsigned long long)k->seen[j],
              (unsigned long long)k->census_same[j]);
      write_recurrence(f, k->recur[j], k->layout);
      fputc('}', f);
    }
    fprintf(f, "], \"other_launches\": %llu, \"other_threads\": %.17g", (unsigned long long)k->census_other,
            k->census_other_threads);
    fprintf(f, ", \"other_timed\": %llu, \"other_timed_threads\": %.17g, \"other_timed_ms\": %.17g}",
            (unsigned long long)k->census_timed, k->census_timed_threads, k->census_timed_ms);
  }
  fprintf(f, "%s]", n ? "\n  " : "");
}

/* A time-only run's times: in all, and per kernel (mangled name; "(unknown)" for stubs with no
   registration), its launches, those timed, and their summed GPU time; and the dispatch tables'
   "s" lines (what tuned code the build ships). */
static void write_timing(FILE *f) {
  fprintf(f, ",\n  \"timing\": {\"total_ms\": %.17g, \"launches\": %llu, \"timed_launches\": %llu, \"kernels\": [",
          timing_total_ms, (unsigned long long)st.launches, (unsigned long long)timing_timed);
  int n = 0;
  for (int i = 0; i <= nkernels; i++) {
    const struct kernel_fn *k = i < nkernels ? &kernels[i] : &unknown_kernel;
    if (!k->time_launches) continue;
    fprintf(f, "%s\n    {\"name\": ", n++ ? "," : "");
    json_str(f, k->name);
    fprintf(f, ", \"launches\": %llu, \"timed_launches\": %llu, \"ms\": %.17g}", (unsigned long long)k->time_launches,
            (unsigned long long)k->time_timed, k->time_ms);
  }
  fprintf(f, "%s], \"shipped\": [", n ? "\n  " : "");
  for (int i = 0; i < nshipped; i++) {
    fprintf(f, "%s\n    ", i ? "," : "");
    json_str(f, shipped[i]);
  }
  fprintf(f, "%s]}", nshipped ? "\n  " : "");
}

/* At exit: R3_RECORD_STATS gets what the run recorded and where its recording time went
   (written whole: temp file, rename), read by `r3 record` (crates/r3-record). */
static void write_stats(void) {
  if (!opt.stats_path[0]) return;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", opt.stats_path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (f) {
    fprintf(f, "{\n  \"format\": 1,\n  \"wall_s\": %.6f,\n  \"snapshot\": \"%s\",\n", now_s() - st.start,
            opt.full_snapshot ? "full" : "reachable");
    fprintf(f, "  \"kernels_seen\": %d,\n  \"launches\": %llu,\n  \"recorded\": %llu,\n  \"not_replayable\": %llu,\n",
            st.kernels_seen, (unsigned long long)st.launches, (unsigned long long)st.recorded,
            (unsigned long long)st.not_replayable);
    fprintf(f, "  \"bytes_in\": %llu,\n  \"bytes_written\": %llu,\n  \"regions\": %llu,\n  \"regions_skipped\": %llu,\n",
            (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_written, (unsigned long long)st.regions,
            (unsigned long long)st.regions_skipped);
    fprintf(f, "  \"record_s\": %.6f,\n  \"copy_s\": %.6f,\n  \"host_s\": %.6f,\n  \"scan_s\": %.6f,\n  \"write_s\": %.6f,\n",
            st.record_s, st.copy_s, st.host_s, st.scan_s, st.write_s);
    fprintf(f, "  \"wait_s\": %.6f,\n  \"exit_wait_s\": %.6f,\n  \"background_s\": %.6f,\n", st.wait_s,
            st.exit_wait_s, st.background_s);
    fprintf(f, "  \"relaunch_s\": %.6f,\n  \"relaunched\": %llu,\n  \"natural_s\": %.6f,\n", st.relaunch_s,
            (unsigned long long)st.relaunched, st.natural_s);
    fprintf(f, "  \"context_s\": %.6f,\n", st.context_s);
    fprintf(f, "  \"alloc_s\": %.6f,\n  \"allocs\": %llu,\n  \"allocs_reused\": %llu,\n  \"frees\": %llu,\n",
            st.alloc_s, (unsigned long long)st.allocs, (unsigned long long)st.allocs_reused,
            (unsigned long long)st.frees);
    fprintf(f, "  \"start_unix_s\": %.6f,\n  \"exit_unix_s\": %.6f,\n", st.start_unix, st.exit_unix);
    fprintf(f, "  \"handler_unix_s\": %.6f,\n  \"end_unix_s\": %.6f,\n", st.handler_unix, clock_s(CLOCK_REALTIME));
    fprintf(f, "  \"kernels_capped\": %d,\n  \"time_capped\": %s", st.kernels_capped, st.time_capped ? "true" : "false");
    if (mode == 1) write_census(f);
    if (time_only) write_timing(f);
    fprintf(f, "\n}\n");
    if (fclose(f) != 0 || rename(tmp, opt.stats_path) != 0) unlink(tmp);
  }
}

/* The end of the run: the recording in flight is finished, then the summary written. Not
   waiting for a thread that exits mid-launch: a summary that is slightly off beats a hang. */
static void at_exit(void) {
  st.handler_unix = clock_s(CLOCK_REALTIME);
  int locked = pthread_mutex_trylock(&lock) == 0;
  /* Oldest first. Without the lock a recording in flight may wait for that launch: left. */
  for (unsigned long long seq = 1; locked && seq <= recordings_started; seq++)
    for (int i = 0; i < opt.inflight; i++)
      if (slots[i].fin.seq == seq) reap(&slots[i], 1);
  if (locked) timing_drain(); /* none left unless the program never reached exit() */
  write_stats();
  if (locked) pthread_mutex_unlock(&lock);
}
