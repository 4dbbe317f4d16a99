; RUN: r3 egraph --pipeline-before ''
;
; Rule family "division and remainder by constants", powers of two: unsigned x / 16 is
; x >> 4 (udiv-pow2) and x % 16 is x & 15 (urem-pow2); signed division rounds toward zero,
; so x / 4 adds 3 to a negative x before the arithmetic shift (sdiv-pow2), and x % 8 is x
; minus x rounded toward zero to a multiple of 8 (srem-pow2). Division by 1 is x (udiv-1),
; the remainder 0 (srem-1). An i32 division costs about 40 of the model's units, a shift 2.
; Hand-written IR:
;
;   __global__ void pow2(int *out, unsigned u, int s) {
;     out[0] = u / 16;  out[1] = u % 16;  out[2] = s / 4;  out[3] = s % 8;
;     out[4] = u / 1 + s % 1;
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @pow2(ptr addrspace(1) %out, i32 %u, i32 %s) {
entry:
  %a = udiv i32 %u, 16
  store i32 %a, ptr addrspace(1) %out
  %b = urem i32 %u, 16
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %b, ptr addrspace(1) %p1
  %c = sdiv i32 %s, 4
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 2
  store i32 %c, ptr addrspace(1) %p2
  %d = srem i32 %s, 8
  %p3 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 3
  store i32 %d, ptr addrspace(1) %p3
  %e0 = udiv i32 %u, 1
  %e1 = srem i32 %s, 1
  %e = add i32 %e0, %e1
  %p4 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 4
  store i32 %e, ptr addrspace(1) %p4
  ret void
}
