/*
 * r3rt.c's dispatch with a table from a file, on the fake CUDA runtime of fake_cudart.h:
 * tests/it/dispatch_grammar.rs builds it under AddressSanitizer and UndefinedBehaviorSanitizer
 * and runs the tables that broke the runtime (issue 56). It calls only what a program calls
 * (r3_dispatch_add, the registration, launches), so it builds against any r3rt.c, an older one
 * included.
 *
 *   dispatch_launch TABLE CALL...
 * TABLE: a file holding the table as r3_dispatch_add gets it. CALL: K:N:THREADS[:ex], a launch
 * of kernel K (0 scale, 1 axpy, 2 k3; fake_cudart.h) with N as its int argument and blocks of
 * THREADS, through cudaLaunchKernelEx with ":ex"; or a call of the program's other than a launch:
 * "malloc" (cudaMalloc), "free" (cudaFree(0)), "attr:K" (kernel K's dynamic shared memory raised
 * to 64 KiB), "fail" (a failed call of the program's leaves its error pending), "clear"
 * (cudaGetLastError, printing "cleared CODE"). Prints "ran ENTRY GRID BLOCK PROBES" per launch,
 * PROBES the probe calls made inside it (fake_cudart.h), and "pending after CALL" where a call
 * that succeeded left an error for the program to find (r3's own calls must not). FAKE_LACKS and
 * FAKE_FATBIN (fake_cudart.h) shape the module.
 */
#define _GNU_SOURCE
#include "r3rt.c"
#include "fake_cudart.h"

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f) return 2;
  static char table[1 << 24];
  size_t n = fread(table, 1, sizeof table - 1, f);
  fclose(f);
  table[n] = 0;
  r3_dispatch_add(table);
  fake_register();
  fake_print = 1;
  for (int i = 2; i < argc; i++) {
    const char *call = argv[i];
    int k = 0, count = 0;
    if (!strcmp(call, "fail")) {
      fake_last_error = cudaErrorInvalidValue;
      continue;
    }
    if (!strcmp(call, "clear")) {
      printf("cleared %d\n", (int)cudaGetLastError());
      continue;
    }
    if (!strcmp(call, "malloc") || !strcmp(call, "free") || sscanf(call, "attr:%d", &k) == 1) {
      int pending = cudaPeekAtLastError() != cudaSuccess;
      void *p;
      cudaError_t e = !strcmp(call, "malloc") ? __wrap_cudaMalloc(&p, 256)
                      : !strcmp(call, "free") ? __wrap_cudaFree(NULL)
                      : k >= 0 && k < FAKE_KERNELS
                          ? __wrap_cudaFuncSetAttribute(&fake_stubs[k], cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10)
                          : cudaErrorInvalidValue;
      if (e != cudaSuccess) printf("failed %s\n", call);
      else if (!pending && cudaPeekAtLastError() != cudaSuccess) printf("pending after %s\n", call);
      continue;
    }
    unsigned threads = 0;
    char ex[4] = "";
    if (sscanf(argv[i], "%d:%d:%u:%3s", &k, &count, &threads, ex) < 3 || k < 0 || k >= FAKE_KERNELS) return 2;
    if (!fake_launch(k, count, threads, !strcmp(ex, "ex"))) printf("failed %s\n", argv[i]);
    else if (cudaPeekAtLastError() != cudaSuccess) printf("pending after %s\n", argv[i]);
  }
  return 0;
}
