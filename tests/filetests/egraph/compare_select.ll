; RUN: r3 egraph --pipeline-before ''
;
; Rule family "comparisons and selects": a value compared with itself has a known answer
; (icmp-slt-self: false, icmp-uge-self: true, ...), a select of one value on both sides is
; that value (select-same), a select on a constant condition its chosen side (select-true,
; select-false), and min and max of x and x are x. Here the bounds test that compares i with
; itself (a copy-paste slip) folds away with the select it feeds. Hand-written IR:
;
;   __global__ void cmpsel(int *out, int i, int v) {
;     out[0] = (i < i) ? v : 0;       // false: 0
;     out[1] = (i >= i) ? v : -v;     // true: v
;     out[2] = (v > 0) ? i : i;       // i
;     out[3] = max(min(v, v), v);     // v
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @cmpsel(ptr addrspace(1) %out, i32 %i, i32 %v) {
entry:
  %c0 = icmp slt i32 %i, %i
  %a = select i1 %c0, i32 %v, i32 0
  store i32 %a, ptr addrspace(1) %out
  %c1 = icmp sge i32 %i, %i
  %nv = sub i32 0, %v
  %b = select i1 %c1, i32 %v, i32 %nv
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %b, ptr addrspace(1) %p1
  %c2 = icmp sgt i32 %v, 0
  %c = select i1 %c2, i32 %i, i32 %i
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 2
  store i32 %c, ptr addrspace(1) %p2
  %m0 = call i32 @llvm.smin.i32(i32 %v, i32 %v)
  %m = call i32 @llvm.smax.i32(i32 %m0, i32 %v)
  %p3 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 3
  store i32 %m, ptr addrspace(1) %p3
  ret void
}

declare i32 @llvm.smin.i32(i32, i32)
declare i32 @llvm.smax.i32(i32, i32)
