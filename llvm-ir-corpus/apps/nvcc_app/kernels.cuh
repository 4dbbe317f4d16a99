// nvcc_app: a small program written for nvcc, the way many CUDA projects are (issue 60): its
// CMakeLists.txt and Makefile use nvcc's flags, and r3-nvcc builds it unchanged.
#pragma once

#include <cstddef>

// y = a * x + b * y over n elements, for float and double (one template, two kernels).
template <typename T>
void launch_axpby(T a, const T *x, T b, T *y, int n);

// out[i] = (in[i-1] + 2 in[i] + in[i+1]) / 4 with the ends clamped, then a fast-math sine.
void launch_smooth(const float *in, float *out, int n);

// The same computations on the host, in reference.cpp (plain C++, which nvcc compiles with the
// host compiler).
void reference_axpby(float a, const float *x, float b, float *y, int n);
void reference_axpby(double a, const double *x, double b, double *y, int n);
void reference_smooth(const float *in, float *out, int n);

// The inputs every build makes: an integer hash, no random state.
float input_value(int i, int salt);
