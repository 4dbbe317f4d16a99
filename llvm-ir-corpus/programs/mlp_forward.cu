// mlp_forward: inference of a 1024-1024-512-128 perceptron (ReLU, softmax) over
// 16384 input rows in 64 batches of 256. Per batch:
//   mlp_dense_kernel      Y = X W^T, one thread per output, W row-major
//                         [out][in] (one weight row per thread, uncoalesced),
//                         accumulating straight into Y[...] (+= through the
//                         output pointer; no __restrict__, so the compiler
//                         must assume Y may alias X and W)
//   mlp_bias_relu_kernel  Y = max(Y + b, 0), in place
// for the two hidden layers, then mlp_dense_kernel for the output layer and
//   mlp_softmax_kernel    probabilities = softmax(Y + b), one block per row
// Check: every 64th row through the same network in double on the CPU.
// Timed: each kernel on its own (the first hidden layer's shapes, batch 0),
// and the whole 64 batches.
#include "r3corpus.h"

static const char* kProgram = "mlp_forward";
constexpr int kSoftmaxThreads = 128;  // power of two

__global__ void mlp_dense_kernel(int rows, int in, int out, const float* X, const float* W, float* Y) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= rows * out) return;
  int b = t / out, o = t % out;
  Y[t] = 0.0f;
  for (int k = 0; k < in; ++k) Y[t] += X[static_cast<size_t>(b) * in + k] * W[static_cast<size_t>(o) * in + k];
}

__global__ void mlp_bias_relu_kernel(int n, int width, const float* __restrict__ bias,
                                     float* __restrict__ Y) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n) Y[t] = fmaxf(Y[t] + bias[t % width], 0.0f);
}

// Row blockIdx.x: max, then sum of exp(z - max) by shared-memory trees.
__global__ void mlp_softmax_kernel(int classes, const float* __restrict__ logits,
                                   const float* __restrict__ bias, float* __restrict__ probs) {
  __shared__ float red[kSoftmaxThreads];
  const float* z = logits + static_cast<size_t>(blockIdx.x) * classes;
  float* p = probs + static_cast<size_t>(blockIdx.x) * classes;
  int t = threadIdx.x;
  float m = -INFINITY;
  for (int c = t; c < classes; c += kSoftmaxThreads) m = fmaxf(m, z[c] + bias[c]);
  red[t] = m;
  __syncthreads();
  for (int s = kSoftmaxThreads / 2; s > 0; s >>= 1) {
    if (t < s) red[t] = fmaxf(red[t], red[t + s]);
    __syncthreads();
  }
  float row_max = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int c = t; c < classes; c += kSoftmaxThreads) {
    float e = expf(z[c] + bias[c] - row_max);
    p[c] = e;
    sum += e;
  }
  red[t] = sum;
  __syncthreads();
  for (int s = kSoftmaxThreads / 2; s > 0; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  float inv = 1.0f / red[0];
  for (int c = t; c < classes; c += kSoftmaxThreads) p[c] *= inv;
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int kLayers = 3;
  const int width[kLayers + 1] = {1024, 1024, 512, 128};
  const int batch = 256, batches = 64, rows = batch * batches;
  const int classes = width[kLayers];
  const unsigned block = R3_BLOCK_SIZE;

  // Inputs in [0, 1); weights uniform with variance 1 / fan-in; biases in [-0.1, 0.1).
  std::vector<float> X(static_cast<size_t>(rows) * width[0]);
  r3::fill_uniform(X, 501, 0.0, 1.0);
  std::vector<std::vector<float>> W(kLayers), B(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    double a = std::sqrt(3.0 / width[l]);
    W[l].resize(static_cast<size_t>(width[l + 1]) * width[l]);
    B[l].resize(width[l + 1]);
    r3::fill_uniform(W[l], 510 + l, -a, a);
    r3::fill_uniform(B[l], 520 + l, -0.1, 0.1);
  }

  r3::DeviceArray<float> dX(X.size()), dW0(W[0].size()), dW1(W[1].size()), dW2(W[2].size()),
      dB0(B[0].size()), dB1(B[1].size()), dB2(B[2].size()),
      dH0(static_cast<size_t>(batch) * width[1]), dH1(static_cast<size_t>(batch) * width[2]),
      dZ(static_cast<size_t>(batch) * classes), dP(static_cast<size_t>(rows) * classes);
  dX.upload(X);
  dW0.upload(W[0]);
  dW1.upload(W[1]);
  dW2.upload(W[2]);
  dB0.upload(B[0]);
  dB1.upload(B[1]);
  dB2.upload(B[2]);

  auto dense = [&](const float* in_act, int in, int out, const float* w, float* y) {
    mlp_dense_kernel<<<r3::blocks_for(static_cast<size_t>(batch) * out, block), block>>>(batch, in, out,
                                                                                        in_act, w, y);
  };
  auto bias_relu = [&](int out, const float* b, float* y) {
    mlp_bias_relu_kernel<<<r3::blocks_for(static_cast<size_t>(batch) * out, block), block>>>(batch * out,
                                                                                            out, b, y);
  };
  auto softmax = [&](int bt) {
    mlp_softmax_kernel<<<batch, kSoftmaxThreads>>>(classes, dZ.get(), dB2.get(),
                                                   dP.get() + static_cast<size_t>(bt) * batch * classes);
  };
  auto run = [&] {
    for (int bt = 0; bt < batches; ++bt) {
      dense(dX.get() + static_cast<size_t>(bt) * batch * width[0], width[0], width[1], dW0.get(), dH0.get());
      bias_relu(width[1], dB0.get(), dH0.get());
      dense(dH0.get(), width[1], width[2], dW1.get(), dH1.get());
      bias_relu(width[2], dB1.get(), dH1.get());
      dense(dH1.get(), width[2], width[3], dW2.get(), dZ.get());
      softmax(bt);
    }
  };

  run();
  CUDA_CHECK_LAUNCH();
  std::vector<float> P = dP.download();

  const int stride = 64;
  std::vector<float> got;
  std::vector<double> ref;
  for (int r = 0; r < rows; r += stride) {
    std::vector<double> act(X.begin() + static_cast<size_t>(r) * width[0],
                            X.begin() + static_cast<size_t>(r + 1) * width[0]);
    for (int l = 0; l < kLayers; ++l) {
      std::vector<double> next(width[l + 1]);
      for (int o = 0; o < width[l + 1]; ++o) {
        double acc = B[l][o];
        for (int k = 0; k < width[l]; ++k) acc += act[k] * W[l][static_cast<size_t>(o) * width[l] + k];
        next[o] = l + 1 < kLayers ? std::max(acc, 0.0) : acc;
      }
      act.swap(next);
    }
    double mx = *std::max_element(act.begin(), act.end()), sum = 0.0;
    for (double& v : act) sum += v = std::exp(v - mx);
    for (int c = 0; c < classes; ++c) {
      got.push_back(P[static_cast<size_t>(r) * classes + c]);
      ref.push_back(act[c] / sum);
    }
  }
  // Probabilities are 0.0026..0.021; a float emulation of the kernels (with
  // and without FMA) is off by at most 1.1e-6 relative: 2e-5 leaves ~20x.
  bool ok = r3::check_close("probabilities", got, ref, 2e-5, 1e-9);

  const float* x0 = dX.get();
  r3::report(kProgram, "mlp_dense_kernel",
             r3::time_median_ms([&] { dense(x0, width[0], width[1], dW0.get(), dH0.get()); }), ok);
  r3::report(kProgram, "mlp_bias_relu_kernel",
             r3::time_median_ms([&] { bias_relu(width[1], dB0.get(), dH0.get()); }), ok);
  r3::report(kProgram, "mlp_softmax_kernel", r3::time_median_ms([&] { softmax(0); }), ok);
  r3::report_loop(kProgram, r3::loop_median_ms(r3::NoReset(), run), ok);
  return ok ? 0 : 1;
}
