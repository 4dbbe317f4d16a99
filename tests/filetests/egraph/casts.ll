; RUN: r3 egraph --pipeline-before ''
;
; Rule family "casts": a value widened and narrowed back is itself (trunc-zext, trunc-sext),
; two widenings of one kind are one (zext-zext, sext-sext), a sign extension of a zero
; extension is the zero extension (sext-zext: its sign bit is 0), two truncations are one
; (trunc-trunc). Hand-written IR of conversions as index code makes them:
;
;   __global__ void casts(short h, unsigned char b, long long w, int *out, long long *out64) {
;     out[0] = (short)(int)h;                     // h
;     out64[0] = (long long)(int)h;               // one sext
;     out64[1] = (long long)(unsigned)(unsigned short)b;  // one zext
;     out[1] = (char)(short)w;                    // one trunc
;   }
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @casts(i16 %h, i8 %b, i64 %w, ptr addrspace(1) %out, ptr addrspace(1) %out64) {
entry:
  %h32 = sext i16 %h to i32
  %h16 = trunc i32 %h32 to i16
  %a = sext i16 %h16 to i32
  store i32 %a, ptr addrspace(1) %out
  %hs = sext i16 %h to i32
  %hs64 = sext i32 %hs to i64
  store i64 %hs64, ptr addrspace(1) %out64
  %b16 = zext i8 %b to i16
  %b32 = zext i16 %b16 to i32
  %b64 = sext i32 %b32 to i64
  %q1 = getelementptr inbounds i64, ptr addrspace(1) %out64, i64 1
  store i64 %b64, ptr addrspace(1) %q1
  %w16 = trunc i64 %w to i16
  %w8 = trunc i16 %w16 to i8
  %c = sext i8 %w8 to i32
  %p1 = getelementptr inbounds i32, ptr addrspace(1) %out, i64 1
  store i32 %c, ptr addrspace(1) %p1
  ret void
}
