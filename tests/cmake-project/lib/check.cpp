// Pure C++ (compiled by CMAKE_CXX_COMPILER): result checks.
#include <cmath>
#include <cstdio>
#include "r3demo/api.h"

bool check_equal(const float* got, const float* want, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (std::fabs(got[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i]))) {
      std::printf("%s: [%d] = %g, want %g\n", what, i, got[i], want[i]);
      return false;
    }
  return true;
}

bool check_equal(const int* got, const int* want, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (got[i] != want[i]) {
      std::printf("%s: [%d] = %d, want %d\n", what, i, got[i], want[i]);
      return false;
    }
  return true;
}
