; RUN: r3 egraph --pipeline-before ''
;
; Rule family "reassociation of integer (index) arithmetic". The row below, (i + 1) * n, is
; distributed (mul-add-const, then mul-1: i*n + n) so that the multiply i*n of the row above
; is shared; where an index is an nsw add, its sign extension is split (sext-add-nsw: the
; right neighbour's sext(at + 1) is sext(at) + 1), and the constant goes out of the address
; into the access's offset (gep-const-out, gep-gep: 4 bytes past the left element's address).
; Hand-written IR (after mem2reg; the rows in unsigned arithmetic, so without flags):
;
;   __global__ void neighbours(unsigned n, unsigned i, int j, const float *a, float *out) {
;     unsigned row = i * n, below = (i + 1) * n;
;     int at = (int)row + j;
;     out[at] = a[at] + a[at + 1] + a[(int)below + j];
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @neighbours(i32 %n, i32 %i, i32 %j, ptr addrspace(1) %a, ptr addrspace(1) %out) {
entry:
  %row = mul i32 %i, %n
  %i1 = add i32 %i, 1
  %below = mul i32 %i1, %n
  %at = add nsw i32 %row, %j
  %at64 = sext i32 %at to i64
  %pa = getelementptr inbounds float, ptr addrspace(1) %a, i64 %at64
  %va = load float, ptr addrspace(1) %pa
  %right = add nsw i32 %at, 1
  %right64 = sext i32 %right to i64
  %pr = getelementptr inbounds float, ptr addrspace(1) %a, i64 %right64
  %vr = load float, ptr addrspace(1) %pr
  %bj = add nsw i32 %below, %j
  %bj64 = sext i32 %bj to i64
  %pb = getelementptr inbounds float, ptr addrspace(1) %a, i64 %bj64
  %vb = load float, ptr addrspace(1) %pb
  %s0 = fadd float %va, %vr
  %s = fadd float %s0, %vb
  %po = getelementptr inbounds float, ptr addrspace(1) %out, i64 %at64
  store float %s, ptr addrspace(1) %po
  ret void
}
