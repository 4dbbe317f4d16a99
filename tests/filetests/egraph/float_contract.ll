; RUN: r3 egraph --pipeline-before ''
;
; Rule family "floating point", contraction and reassociation: a*b + c becomes fma(a, b, c)
; only where both the multiply and the add carry `contract` (clang's default for CUDA,
; -ffp-contract=fast), in each of its forms (fma-add, fma-add-r, fma-sub, fma-rsub); a*b + c
; and c + a*b are then one fma, computed once. llvm.fmuladd may always fuse (fmuladd-fma
; fires) but stays as it is: the same cost, and the backend fuses it. Without contract the
; rounding of the product is part of the result, so the last sum stays a multiply and an add.
; (x * 2) * 3 becomes x * 6 only under reassoc on both multiplies (fmul-const-const).
; Hand-written IR:
;
;   __global__ void fcontract(float a, float b, float c, float *out) {
;     out[0] = a * b + c;  out[1] = c + a * b;  out[2] = a * b - c;  out[3] = c - a * b;
;     out[4] = fmaf(a, b, c) written as llvm.fmuladd;
;     out[5] = (a * 2.0f) * 3.0f;   // -ffast-math: reassoc
;     out[6] = a * b + c;           // -ffp-contract=off: no contract
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @fcontract(float %a, float %b, float %c, ptr addrspace(1) %out) {
entry:
  %m0 = fmul contract float %a, %b
  %r0 = fadd contract float %m0, %c
  store float %r0, ptr addrspace(1) %out
  %m1 = fmul contract float %a, %b
  %r1 = fadd contract float %c, %m1
  %p1 = getelementptr inbounds float, ptr addrspace(1) %out, i64 1
  store float %r1, ptr addrspace(1) %p1
  %m2 = fmul contract float %a, %b
  %r2 = fsub contract float %m2, %c
  %p2 = getelementptr inbounds float, ptr addrspace(1) %out, i64 2
  store float %r2, ptr addrspace(1) %p2
  %m3 = fmul contract float %a, %b
  %r3 = fsub contract float %c, %m3
  %p3 = getelementptr inbounds float, ptr addrspace(1) %out, i64 3
  store float %r3, ptr addrspace(1) %p3
  %r4 = call float @llvm.fmuladd.f32(float %a, float %b, float %c)
  %p4 = getelementptr inbounds float, ptr addrspace(1) %out, i64 4
  store float %r4, ptr addrspace(1) %p4
  %m5 = fmul reassoc float %a, 2.0
  %r5 = fmul reassoc float %m5, 3.0
  %p5 = getelementptr inbounds float, ptr addrspace(1) %out, i64 5
  store float %r5, ptr addrspace(1) %p5
  %m6 = fmul float %a, %b
  %r6 = fadd float %m6, %c
  %p6 = getelementptr inbounds float, ptr addrspace(1) %out, i64 6
  store float %r6, ptr addrspace(1) %p6
  ret void
}

declare float @llvm.fmuladd.f32(float, float, float)
