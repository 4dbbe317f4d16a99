/*
 * libFuzzer harness over r3rt.c's dispatch: each input is a whole table, handed to
 * r3_dispatch_add as a translation unit's constructor hands it; then the program registers its
 * kernels and launches each of them in several shapes (fake_cudart.h), so that what a table can
 * make a launch read is fuzzed with the parsing. Built with -fsanitize=fuzzer,address,undefined
 * by scripts/fuzz-dispatch, seeded with corpus/.
 *
 * Each input starts from a runtime with no table and no registration (reset). An r3rt.c from
 * before issue 56 (scripts/fuzz-dispatch --runtime FILE, to show what this finds there) keeps its
 * variants in a fixed array and knows no architecture strings: the reset frees what that one holds.
 */
#define _GNU_SOURCE
#include "r3rt.c"
#include "fake_cudart.h"

static void reset(void) {
  for (int i = 0; i < R3_KERNEL_TABLE; i++) {
    struct dispatch *d = dispatch_index[i];
    if (!d) continue;
    for (int j = 0; j < d->n; j++) free(d->v[j]);
#ifdef R3_MAX_VARIANTS_PER_KERNEL
    free(d->v);
#endif
    free(d);
    dispatch_index[i] = NULL;
  }
  for (int i = 0; i < nvdefs; i++) {
    free(vdefs[i].kernel), free(vdefs[i].entry);
#ifdef R3_MAX_VARIANTS_PER_KERNEL
    free(vdefs[i].arch);
#endif
  }
  for (int i = 0; i < nshipped; i++) free(shipped[i]);
  ndispatch = nvdefs = nshipped = 0;
  memset(kernel_index, 0, sizeof kernel_index);
  nkernels = nfatbins = 0;
  fake_nreg = 0;
  fake_last_error = cudaSuccess;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  /* Its messages quote the table's lines: that code is fuzzed too (libFuzzer's -close_fd_mask
     keeps them off the terminal). */
  setenv("R3_DISPATCH_VERBOSE", "1", 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *table = malloc(size + 1);
  if (!table) return 0;
  memcpy(table, data, size);
  table[size] = 0;
  r3_dispatch_add(table);
  fake_register();
  /* Half the inputs allocate before they launch, so that their variants are probed outside the
     launches (r3rt.c's dispatch_prepare) and the others' inside them. */
  if (size & 1) {
    void *p;
    (void)__wrap_cudaMalloc(&p, 256);
  }
  static const struct { int n; unsigned threads; } shapes[] = {{1024, 256}, {512, 128}, {1000, 1024}, {1, 1}, {4096, 96}};
  for (int k = 0; k < FAKE_KERNELS; k++)
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) fake_launch(k, shapes[s].n, shapes[s].threads, (int)(s & 1));
#ifdef R3_MAX_VARIANTS_PER_KERNEL
  /* The mangled-name reader on each line's second field, as a kernel's name. */
  for (char *l = table; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    char name[512];
    if (sscanf(l, "%*s %511s", name) == 1) {
      size_t bytes;
      for (unsigned i = 0; i < 4; i++) (void)mangled_param(name, i, &bytes);
    }
  }
#endif
  reset();
  free(table);
  return 0;
}
