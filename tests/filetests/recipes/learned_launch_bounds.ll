; RUN: diff recipe learned-2 block=256
; RUN: diff recipe learned-4 block=256
;
; // Learned recipes with launch bounds (examples/learn_recipes.rs, from the recorded
; // landscapes): `max_threads = "block"` bounds the kernel by its recorded block size
; // (.maxntid 256 here, block=256), `min_blocks_per_sm` asks for room for that many blocks per
; // SM (.minnctapersm), which caps the registers a thread may use. learned-2 runs the
; // loop-versioning variant at llc -O3, learned-4 is O2 at llc -O2.
; // A row of a times x, with a per-row bias (each thread a row).
; __global__ void gemv_bias(int rows, int cols, const float *a, const float *x,
;                           const float *bias, float *y) {
;   int r = blockIdx.x * blockDim.x + threadIdx.x;
;   if (r >= rows) return;
;   float s = bias[r];
;   for (int c = 0; c < cols; ++c) s += a[r * cols + c] * x[c];
;   y[r] = s;
; }
; ModuleID = 'learned_launch_bounds.cu'
source_filename = "learned_launch_bounds.cu"
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%struct.__cuda_builtin_blockIdx_t = type { i8 }
%struct.__cuda_builtin_blockDim_t = type { i8 }
%struct.__cuda_builtin_threadIdx_t = type { i8 }

$_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv = comdat any

$_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv = comdat any

$_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv = comdat any

@blockIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_blockIdx_t, align 1
@blockDim = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_blockDim_t, align 1
@threadIdx = extern_weak dso_local addrspace(1) global %struct.__cuda_builtin_threadIdx_t, align 1

; Function Attrs: convergent mustprogress noinline norecurse nounwind
define dso_local ptx_kernel void @_Z9gemv_biasiiPKfS0_S0_Pf(i32 noundef %0, i32 noundef %1, ptr noundef %2, ptr noundef %3, ptr noundef %4, ptr noundef %5) #0 {
  %7 = alloca i32, align 4
  %8 = alloca i32, align 4
  %9 = alloca ptr, align 8
  %10 = alloca ptr, align 8
  %11 = alloca ptr, align 8
  %12 = alloca ptr, align 8
  %13 = alloca i32, align 4
  %14 = alloca i32, align 4
  %15 = alloca float, align 4
  %16 = alloca i32, align 4
  store i32 %0, ptr %7, align 4, !tbaa !6
  store i32 %1, ptr %8, align 4, !tbaa !6
  store ptr %2, ptr %9, align 8, !tbaa !11
  store ptr %3, ptr %10, align 8, !tbaa !11
  store ptr %4, ptr %11, align 8, !tbaa !11
  store ptr %5, ptr %12, align 8, !tbaa !11
  call void @llvm.lifetime.start.p0(ptr %13) #4
  %17 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #5
  %18 = call noundef i32 @_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv() #5
  %19 = mul i32 %17, %18
  %20 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #5
  %21 = add i32 %19, %20
  store i32 %21, ptr %13, align 4, !tbaa !6
  %22 = load i32, ptr %13, align 4, !tbaa !6
  %23 = load i32, ptr %7, align 4, !tbaa !6
  %24 = icmp sge i32 %22, %23
  br i1 %24, label %25, label %26

25:                                               ; preds = %6
  store i32 1, ptr %14, align 4
  br label %64

26:                                               ; preds = %6
  call void @llvm.lifetime.start.p0(ptr %15) #4
  %27 = load ptr, ptr %11, align 8, !tbaa !11
  %28 = load i32, ptr %13, align 4, !tbaa !6
  %29 = sext i32 %28 to i64
  %30 = getelementptr inbounds float, ptr %27, i64 %29
  %31 = load float, ptr %30, align 4, !tbaa !14
  store float %31, ptr %15, align 4, !tbaa !14
  call void @llvm.lifetime.start.p0(ptr %16) #4
  store i32 0, ptr %16, align 4, !tbaa !6
  br label %32

32:                                               ; preds = %55, %26
  %33 = load i32, ptr %16, align 4, !tbaa !6
  %34 = load i32, ptr %8, align 4, !tbaa !6
  %35 = icmp slt i32 %33, %34
  br i1 %35, label %37, label %36

36:                                               ; preds = %32
  store i32 2, ptr %14, align 4
  call void @llvm.lifetime.end.p0(ptr %16) #4
  br label %58

37:                                               ; preds = %32
  %38 = load ptr, ptr %9, align 8, !tbaa !11
  %39 = load i32, ptr %13, align 4, !tbaa !6
  %40 = load i32, ptr %8, align 4, !tbaa !6
  %41 = mul nsw i32 %39, %40
  %42 = load i32, ptr %16, align 4, !tbaa !6
  %43 = add nsw i32 %41, %42
  %44 = sext i32 %43 to i64
  %45 = getelementptr inbounds float, ptr %38, i64 %44
  %46 = load float, ptr %45, align 4, !tbaa !14
  %47 = load ptr, ptr %10, align 8, !tbaa !11
  %48 = load i32, ptr %16, align 4, !tbaa !6
  %49 = sext i32 %48 to i64
  %50 = getelementptr inbounds float, ptr %47, i64 %49
  %51 = load float, ptr %50, align 4, !tbaa !14
  %52 = fmul contract float %46, %51
  %53 = load float, ptr %15, align 4, !tbaa !14
  %54 = fadd contract float %53, %52
  store float %54, ptr %15, align 4, !tbaa !14
  br label %55

55:                                               ; preds = %37
  %56 = load i32, ptr %16, align 4, !tbaa !6
  %57 = add nsw i32 %56, 1
  store i32 %57, ptr %16, align 4, !tbaa !6
  br label %32, !llvm.loop !16

58:                                               ; preds = %36
  %59 = load float, ptr %15, align 4, !tbaa !14
  %60 = load ptr, ptr %12, align 8, !tbaa !11
  %61 = load i32, ptr %13, align 4, !tbaa !6
  %62 = sext i32 %61 to i64
  %63 = getelementptr inbounds float, ptr %60, i64 %62
  store float %59, ptr %63, align 4, !tbaa !14
  call void @llvm.lifetime.end.p0(ptr %15) #4
  store i32 0, ptr %14, align 4
  br label %64

64:                                               ; preds = %58, %25
  call void @llvm.lifetime.end.p0(ptr %13) #4
  %65 = load i32, ptr %14, align 4
  switch i32 %65, label %67 [
    i32 0, label %66
    i32 1, label %66
  ]

66:                                               ; preds = %64, %64
  ret void

67:                                               ; preds = %64
  unreachable
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.start.p0(ptr captures(none)) #1

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  ret i32 %1
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define linkonce_odr dso_local noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #2 comdat align 2 {
  %1 = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  ret i32 %1
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.end.p0(ptr captures(none)) #1

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 2147483647) i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 1, 1025) i32 @llvm.nvvm.read.ptx.sreg.ntid.x() #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 1024) i32 @llvm.nvvm.read.ptx.sreg.tid.x() #3

attributes #0 = { convergent mustprogress noinline norecurse nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "uniform-work-group-size"="true" }
attributes #1 = { nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }
attributes #2 = { alwaysinline convergent mustprogress nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #3 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
attributes #4 = { nounwind }
attributes #5 = { convergent nounwind }

!llvm.module.flags = !{!0, !1, !2, !3}
!llvm.ident = !{!4, !5}
!llvm.errno.tbaa = !{!6}
!nvvmir.version = !{!10}

!0 = !{i32 2, !"SDK Version", [2 x i32] [i32 12, i32 9]}
!1 = !{i32 1, !"wchar_size", i32 4}
!2 = !{i32 4, !"nvvm-reflect-ftz", i32 0}
!3 = !{i32 7, !"frame-pointer", i32 2}
!4 = !{!"Debian clang version 22.1.8 (1~deb12u1)"}
!5 = !{!"clang version 3.8.0 (tags/RELEASE_380/final)"}
!6 = !{!7, !7, i64 0}
!7 = !{!"int", !8, i64 0}
!8 = !{!"omnipotent char", !9, i64 0}
!9 = !{!"Simple C++ TBAA"}
!10 = !{i32 2, i32 0}
!11 = !{!12, !12, i64 0}
!12 = !{!"p1 float", !13, i64 0}
!13 = !{!"any pointer", !8, i64 0}
!14 = !{!15, !15, i64 0}
!15 = !{!"float", !8, i64 0}
!16 = distinct !{!16, !17}
!17 = !{!"llvm.loop.mustprogress"}
