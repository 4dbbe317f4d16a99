; RUN: r3 egraph --pipeline-before ''
; RUN: r3 egraph --pipeline-before '' --options iters=1
;
; Rule family "division and remainder by constants", other divisors: x / d becomes a multiply
; by a "magic" constant in twice the width and a shift (udiv-magic, sdiv-magic; Granlund and
; Montgomery's round-up method, its conditions checked), and x % d becomes x - (x / d) * d
; so that the division rules apply (urem-magic, srem-magic). Only for widths up to 32 bits:
; the 64-bit division by 3 stays a division (the product would need 128 bits). The second
; run stops after one iteration of saturation (--options iters=1): the divisions become
; multiplies, but the remainders' rewrites into divisions have had no round for the division
; rules yet, so they stay remainders. Hand-written IR:
;
;   __global__ void magic(int *out, unsigned u, int s, unsigned long long w,
;                         unsigned long long *out64) {
;     out[0] = u / 7;  out[1] = s / 3;  out[2] = u % 10;  out[3] = s % -6;
;     *out64 = w / 3;
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @magic(ptr addrspace(1) %out, i32 %u, i32 %s, i64 %w, ptr addrspace(1) %out64) {
entry:
  %a = udiv i32 %u, 7
  store i32 %a, ptr addrspace(1) %out
  %b = sdiv i32 %s, 3
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %b, ptr addrspace(1) %p1
  %c = urem i32 %u, 10
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 2
  store i32 %c, ptr addrspace(1) %p2
  %d = srem i32 %s, -6
  %p3 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 3
  store i32 %d, ptr addrspace(1) %p3
  %e = udiv i64 %w, 3
  store i64 %e, ptr addrspace(1) %out64
  ret void
}
