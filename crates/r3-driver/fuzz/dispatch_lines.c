/*
 * r3rt.c's readers of a table line and of a kernel's mangled name, one input at a time, for
 * tests/it/dispatch_grammar.rs: it feeds the same lines to this and to apply's
 * dispatch::parse_line and compares what each takes, and the names to clang's mangling.
 *
 * stdin, one input a line: "l <hex>" (a table line's bytes, without a newline) or "n <hex>" (a
 * kernel's name). stdout, one answer a line:
 *   l: "v KERNEL ARCH SM ENTRY MAX_THREADS BLOCK GRID RELAUNCH_X N INDEX:HEX..." (BLOCK and GRID
 *      x,y,z or -), "s TEXT", or "bad";
 *   n: "-1" (not read), else the parameters' sizes, comma-separated (0: not given), or "none".
 */
#define _GNU_SOURCE
#include "r3rt.c"
#include "fake_cudart.h"

/* The bytes of hex text, in an allocation of exactly their size (AddressSanitizer sees a
   reader that goes past them). */
static char *unhex(const char *h, size_t *n) {
  *n = strlen(h) / 2;
  char *out = malloc(*n ? *n : 1);
  for (size_t i = 0; i < *n; i++) {
    unsigned b = 0;
    sscanf(h + 2 * i, "%2x", &b);
    out[i] = (char)b;
  }
  return out;
}

static void dims(const char *sep, int has, const unsigned d[3]) {
  if (has) printf("%s%u,%u,%u", sep, d[0], d[1], d[2]);
  else printf("%s-", sep);
}

static void line(const char *bytes, size_t n) {
  struct variant_def d;
  const char *why = NULL;
  switch (parse_line(bytes, n, &d, &why)) {
  case LINE_VARIANT:
    printf("v %s %s %u %s %u", d.kernel, d.arch, d.sm, d.entry, d.max_threads);
    dims(" ", d.has_block, d.block);
    dims(" ", d.has_grid, d.grid);
    printf(" %u %d", d.relaunch_x, d.nargs);
    for (int i = 0; i < d.nargs; i++) {
      printf(" %u:", d.args[i].index);
      for (int k = 0; k < d.args[i].size; k++) printf("%02x", d.args[i].bytes[k]);
    }
    printf("\n");
    free(d.kernel), free(d.arch), free(d.entry);
    break;
  case LINE_SHIPPED:
    printf("s %.*s\n", (int)(n - 2), bytes + 2);
    break;
  default:
    printf("bad\n");
  }
}

static void name(const char *bytes, size_t n) {
  char *s = strndup(bytes, n);
  size_t size;
  int r = 1;
  unsigned i = 0;
  for (; (r = mangled_param(s, i, &size)) == 1; i++) printf("%s%zu", i ? "," : "", size);
  printf("%s\n", r < 0 ? "-1" : i ? "" : "none");
  free(s);
}

int main(void) {
  static char in[1 << 20];
  while (fgets(in, sizeof in, stdin)) {
    in[strcspn(in, "\n")] = 0;
    if (strlen(in) < 2 || in[1] != ' ') return 2;
    size_t n;
    char *bytes = unhex(in + 2, &n);
    if (in[0] == 'l') line(bytes, n);
    else name(bytes, n);
    free(bytes);
    fflush(stdout);
  }
  return 0;
}
