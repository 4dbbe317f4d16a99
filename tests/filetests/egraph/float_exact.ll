; RUN: r3 egraph --pipeline-before ''
;
; Rule family "floating point (exact identities)": only rewrites that give the same bits for
; every input, NaNs, infinities and signed zeros included: x * 1.0 and x / 1.0 are x,
; x + -0.0 is x (but x + 0.0 is not: -0.0 + 0.0 is +0.0), x * -1.0 is fneg x, fneg fneg x is
; x, and x / 4.0 is x * 0.25 because 1/4 is exact (fdiv-recip). x / 3.0 stays a division (1/3
; is not exact) unless the division allows a reciprocal (arcp), as the second one does.
; Hand-written IR:
;
;   __global__ void fexact(float x, float *out) {
;     out[0] = x * 1.0f / 1.0f;  out[1] = x + -0.0f;  out[2] = x + 0.0f;
;     out[3] = -(-(x * -1.0f));  out[4] = x / 4.0f;   out[5] = x / 3.0f;
;     out[6] = x / 3.0f;         // compiled with -freciprocal-math: arcp
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @fexact(float %x, ptr addrspace(1) %out) {
entry:
  %a0 = fmul float %x, 1.0
  %a = fdiv float %a0, 1.0
  store float %a, ptr addrspace(1) %out
  %b = fadd float %x, -0.0
  %p1 = getelementptr inbounds float, ptr addrspace(1) %out, i64 1
  store float %b, ptr addrspace(1) %p1
  %c = fadd float %x, 0.0
  %p2 = getelementptr inbounds float, ptr addrspace(1) %out, i64 2
  store float %c, ptr addrspace(1) %p2
  %d0 = fmul float %x, -1.0
  %d1 = fneg float %d0
  %d = fneg float %d1
  %p3 = getelementptr inbounds float, ptr addrspace(1) %out, i64 3
  store float %d, ptr addrspace(1) %p3
  %e = fdiv float %x, 4.0
  %p4 = getelementptr inbounds float, ptr addrspace(1) %out, i64 4
  store float %e, ptr addrspace(1) %p4
  %f = fdiv float %x, 3.0
  %p5 = getelementptr inbounds float, ptr addrspace(1) %out, i64 5
  store float %f, ptr addrspace(1) %p5
  %g = fdiv arcp float %x, 3.0
  %p6 = getelementptr inbounds float, ptr addrspace(1) %out, i64 6
  store float %g, ptr addrspace(1) %p6
  ret void
}
