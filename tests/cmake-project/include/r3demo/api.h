// Host entry points of the demo; plain C++ so .cpp and .cu files can both include it.
#pragma once

// Each runs its kernel(s) on the GPU and checks the results; true on success.
bool run_templates();
bool run_device_fns();
bool run_plain();

// lib/check.cpp (pure C++).
bool check_equal(const float* got, const float* want, int n, const char* what);
bool check_equal(const int* got, const int* want, int n, const char* what);
