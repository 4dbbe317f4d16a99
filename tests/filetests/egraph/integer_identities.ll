; RUN: r3 egraph --pipeline-before ''
;
; Rule family "integer identities": x+0, x*1, x&-1, x|0, x^0 are x; x-x and x^x are 0;
; shifts of shifts by constants add up (shl-shl: (x << 2) << 3 is x << 5, the sum below the
; width), and (x << 8) >> 8 clears the top byte (shl-lshr-mask: x & 0x00ffffff). A multiply
; by -1 is 0 - x (mul-neg1), which costs what the multiply costs, so x * -1 stays. Each result
; is stored so that it stays. Hand-written IR:
;
;   __global__ void ident(int *out, int x, unsigned u) {
;     out[0] = (x + 0) * 1;     out[1] = (x - x) + (x ^ x);
;     out[2] = x * -1;          out[3] = (x << 2) << 3;
;     out[4] = (u << 8) >> 8;   out[5] = (x & -1) | 0;
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @ident(ptr addrspace(1) %out, i32 %x, i32 %u) {
entry:
  %a0 = add i32 %x, 0
  %a = mul i32 %a0, 1
  store i32 %a, ptr addrspace(1) %out
  %b0 = sub i32 %x, %x
  %b1 = xor i32 %x, %x
  %b = add i32 %b0, %b1
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %b, ptr addrspace(1) %p1
  %c = mul i32 %x, -1
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 2
  store i32 %c, ptr addrspace(1) %p2
  %d0 = shl i32 %x, 2
  %d = shl i32 %d0, 3
  %p3 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 3
  store i32 %d, ptr addrspace(1) %p3
  %e0 = shl i32 %u, 8
  %e = lshr i32 %e0, 8
  %p4 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 4
  store i32 %e, ptr addrspace(1) %p4
  %f0 = and i32 %x, -1
  %f = or i32 %f0, 0
  %p5 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 5
  store i32 %f, ptr addrspace(1) %p5
  ret void
}
