; RUN: r3 egraph --pipeline-before ''
;
; Rule family "canonical operand order" (crates/r3-ir/src/egraph/rules.rs): a constant of a
; commutative operation moves to the right (add-const-right, mul-const-right, ...), so that
; each other rule needs one form only. Here the move lets add-add-const fold (7 + x) + 3 into
; x + 10. A move alone gains nothing, and neither does mul-pow2's shift for 4 * y (a multiply
; and a shift cost the same in the sm_90 model): where the cost is equal, extraction keeps the
; code as it was, so 4 * y and the or/and stay as written; the rules still fire (the list at
; the end). Addresses come out as byte offsets (gep i8). The IR is written by hand, as it
; reaches the rewriter with no pipeline before it (--pipeline-before ''), so that the rules,
; not LLVM's instcombine, do the work:
;
;   __global__ void canon(int *out, int x, int y, unsigned z) {
;     out[0] = (7 + x) + 3;
;     out[1] = 4 * y;
;     out[2] = (int)(0xff & (0x0f | z));
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @canon(ptr addrspace(1) %out, i32 %x, i32 %y, i32 %z) {
entry:
  %a = add i32 7, %x
  %b = add i32 %a, 3
  store i32 %b, ptr addrspace(1) %out
  %c = mul i32 4, %y
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %c, ptr addrspace(1) %p1
  %d = or i32 15, %z
  %e = and i32 255, %d
  %p2 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 2
  store i32 %e, ptr addrspace(1) %p2
  ret void
}
