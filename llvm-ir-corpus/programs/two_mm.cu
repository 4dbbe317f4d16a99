// two_mm: the matrix chain D = alpha A B C + beta D (A 4096 x 512, B 512 x
// 6144, C 6144 x 4096, D 4096 x 4096, row-major floats) as two naive matrix
// products, written the way a first CUDA port often looks: one thread per
// output element on a 16x16 grid with threadIdx.x running along the ROW
// index i (so a warp covers 16 rows x 2 columns and its loads of A / tmp and
// its stores walk 16 different rows: uncoalesced), plain pointers, and the sum
// accumulated in place through the output pointer on every iteration:
//   two_mm_tmp_kernel  tmp[i*nj+j] += alpha A[i*nk+k] B[k*nj+j] over k < 512
//                      (1.3e10 multiply-adds)
//   two_mm_d_kernel    D[i*nl+j] *= beta; D[i*nl+j] += tmp[i*nj+k] C[k*nl+j]
//                      over k < 6144 (1.0e11 multiply-adds)
// two_mm_d_kernel is the corpus's long kernel: 0.65 s per launch on an H100
// (one run; the tmp kernel 74 ms). The program runs for ~18 s there (24
// launches of the long kernel). tmp_kernel zeroes its output first; D is
// restored before every timed launch of the D kernel (outside the timing).
// Inputs in [0, 1), alpha = 1.5, beta = 1.2: positive terms.
// Check: 256 sampled entries of tmp and of D (64 sampled rows, 4 columns
// each) against double-precision CPU products from the same float inputs.
// Tolerance rel 1e-3: a float sum of 6145 positive terms in any order is
// within 6145 u = 3.7e-4 of the exact one (u = 2^-24), two orders within
// 7.3e-4; tmp's own error (at most 513 u = 3.1e-5) adds little.
#include "r3corpus.h"

static const char* kProgram = "two_mm";

__global__ void two_mm_tmp_kernel(int ni, int nj, int nk, float alpha, float* A, float* B, float* tmp) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < ni && j < nj) {
    tmp[i * nj + j] = 0.0f;
    for (int k = 0; k < nk; k++) tmp[i * nj + j] += alpha * A[i * nk + k] * B[k * nj + j];
  }
}

__global__ void two_mm_d_kernel(int ni, int nl, int nj, float beta, float* tmp, float* C, float* D) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < ni && j < nl) {
    D[i * nl + j] *= beta;
    for (int k = 0; k < nj; k++) D[i * nl + j] += tmp[i * nj + k] * C[k * nl + j];
  }
}

int main() {
  if (!r3::gpu_available(kProgram)) return 0;
  const int ni = 4096, nk = 512, nj = 6144, nl = 4096;
  const float alpha = 1.5f, beta = 1.2f;

  std::vector<float> A(static_cast<size_t>(ni) * nk), B(static_cast<size_t>(nk) * nj),
      C(static_cast<size_t>(nj) * nl), D(static_cast<size_t>(ni) * nl);
  r3::fill_uniform(A, 731, 0.0, 1.0);
  r3::fill_uniform(B, 732, 0.0, 1.0);
  r3::fill_uniform(C, 733, 0.0, 1.0);
  r3::fill_uniform(D, 734, 0.0, 1.0);
  r3::DeviceArray<float> dA(A.size()), dB(B.size()), dC(C.size()), dD(D.size()), dD_init(D.size()),
      dtmp(static_cast<size_t>(ni) * nj);
  dA.upload(A);
  dB.upload(B);
  dC.upload(C);
  dD_init.upload(D);

  dim3 block(16, 16);
  dim3 tgrid(r3::blocks_for(ni, block.x), r3::blocks_for(nj, block.y));
  dim3 dgrid(r3::blocks_for(ni, block.x), r3::blocks_for(nl, block.y));
  auto tmpk = [&] { two_mm_tmp_kernel<<<tgrid, block>>>(ni, nj, nk, alpha, dA.get(), dB.get(), dtmp.get()); };
  auto dk = [&] { two_mm_d_kernel<<<dgrid, block>>>(ni, nl, nj, beta, dtmp.get(), dC.get(), dD.get()); };
  auto reset = [&] { CUDA_CHECK(cudaMemcpy(dD.get(), dD_init.get(), dD.bytes(), cudaMemcpyDeviceToDevice)); };
  reset();
  tmpk();
  dk();
  CUDA_CHECK_LAUNCH();
  std::vector<float> gtmp = dtmp.download();
  std::vector<float> gD = dD.download();

  std::vector<float> got_tmp, got_D;
  std::vector<double> ref_tmp, ref_D, trow(nj);
  r3::Lcg rng(735);
  for (int s = 0; s < 64; s++) {
    int i = rng.below(ni);
    std::fill(trow.begin(), trow.end(), 0.0);
    for (int k = 0; k < nk; k++) {
      double a = static_cast<double>(alpha) * A[static_cast<size_t>(i) * nk + k];
      for (int j = 0; j < nj; j++) trow[j] += a * B[static_cast<size_t>(k) * nj + j];
    }
    for (int c = 0; c < 4; c++) {
      int jt = rng.below(nj), jd = rng.below(nl);
      got_tmp.push_back(gtmp[static_cast<size_t>(i) * nj + jt]);
      ref_tmp.push_back(trow[jt]);
      double acc = static_cast<double>(beta) * D[static_cast<size_t>(i) * nl + jd];
      for (int k = 0; k < nj; k++) acc += trow[k] * C[static_cast<size_t>(k) * nl + jd];
      got_D.push_back(gD[static_cast<size_t>(i) * nl + jd]);
      ref_D.push_back(acc);
    }
  }
  bool ok = r3::check_close("tmp (sampled)", got_tmp, ref_tmp, 1e-3, 0.0);
  ok = r3::check_close("D (sampled)", got_D, ref_D, 1e-3, 0.0) && ok;

  r3::report(kProgram, "two_mm_tmp_kernel", r3::time_median_ms(tmpk), ok);
  r3::report(kProgram, "two_mm_d_kernel", r3::time_median_ms(dk, reset), ok);
  return ok ? 0 : 1;
}
