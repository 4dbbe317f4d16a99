; RUN: diff {"pipeline":"default<O3>","specialize":{"args":[{"index":1,"hex":"04000000"}]}}
;
; // Specialization folds a recorded launch's values into the code before the pipeline runs:
; // here argument 1, taps = 4 (the int's bytes, little-endian: 04000000). The loop's trip
; // count becomes known, so O3 unrolls it completely and the loop, its remainder and the test
; // for taps < 1 are gone. The code is right only for launches with taps == 4, which its guard
; // checks (splice/specialized_variants.ll).
; // A filter with a run-time number of taps.
; __global__ void fir(int n, int taps, const float *x, const float *h, float *y) {
;   int i = blockIdx.x * blockDim.x + threadIdx.x;
;   if (i + taps > n) return;
;   float s = 0.0f;
;   for (int k = 0; k < taps; ++k) s += h[k] * x[i + k];
;   y[i] = s;
; }
; ModuleID = 'trip_count.cu'
source_filename = "trip_count.cu"
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
define dso_local ptx_kernel void @_Z3firiiPKfS0_Pf(i32 noundef %0, i32 noundef %1, ptr noundef %2, ptr noundef %3, ptr noundef %4) #0 {
  %6 = alloca i32, align 4
  %7 = alloca i32, align 4
  %8 = alloca ptr, align 8
  %9 = alloca ptr, align 8
  %10 = alloca ptr, align 8
  %11 = alloca i32, align 4
  %12 = alloca i32, align 4
  %13 = alloca float, align 4
  %14 = alloca i32, align 4
  store i32 %0, ptr %6, align 4, !tbaa !6
  store i32 %1, ptr %7, align 4, !tbaa !6
  store ptr %2, ptr %8, align 8, !tbaa !11
  store ptr %3, ptr %9, align 8, !tbaa !11
  store ptr %4, ptr %10, align 8, !tbaa !11
  call void @llvm.lifetime.start.p0(ptr %11) #4
  %15 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #5
  %16 = call noundef i32 @_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv() #5
  %17 = mul i32 %15, %16
  %18 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #5
  %19 = add i32 %17, %18
  store i32 %19, ptr %11, align 4, !tbaa !6
  %20 = load i32, ptr %11, align 4, !tbaa !6
  %21 = load i32, ptr %7, align 4, !tbaa !6
  %22 = add nsw i32 %20, %21
  %23 = load i32, ptr %6, align 4, !tbaa !6
  %24 = icmp sgt i32 %22, %23
  br i1 %24, label %25, label %26

25:                                               ; preds = %5
  store i32 1, ptr %12, align 4
  br label %57

26:                                               ; preds = %5
  call void @llvm.lifetime.start.p0(ptr %13) #4
  store float 0.000000e+00, ptr %13, align 4, !tbaa !14
  call void @llvm.lifetime.start.p0(ptr %14) #4
  store i32 0, ptr %14, align 4, !tbaa !6
  br label %27

27:                                               ; preds = %48, %26
  %28 = load i32, ptr %14, align 4, !tbaa !6
  %29 = load i32, ptr %7, align 4, !tbaa !6
  %30 = icmp slt i32 %28, %29
  br i1 %30, label %32, label %31

31:                                               ; preds = %27
  store i32 2, ptr %12, align 4
  call void @llvm.lifetime.end.p0(ptr %14) #4
  br label %51

32:                                               ; preds = %27
  %33 = load ptr, ptr %9, align 8, !tbaa !11
  %34 = load i32, ptr %14, align 4, !tbaa !6
  %35 = sext i32 %34 to i64
  %36 = getelementptr inbounds float, ptr %33, i64 %35
  %37 = load float, ptr %36, align 4, !tbaa !14
  %38 = load ptr, ptr %8, align 8, !tbaa !11
  %39 = load i32, ptr %11, align 4, !tbaa !6
  %40 = load i32, ptr %14, align 4, !tbaa !6
  %41 = add nsw i32 %39, %40
  %42 = sext i32 %41 to i64
  %43 = getelementptr inbounds float, ptr %38, i64 %42
  %44 = load float, ptr %43, align 4, !tbaa !14
  %45 = fmul contract float %37, %44
  %46 = load float, ptr %13, align 4, !tbaa !14
  %47 = fadd contract float %46, %45
  store float %47, ptr %13, align 4, !tbaa !14
  br label %48

48:                                               ; preds = %32
  %49 = load i32, ptr %14, align 4, !tbaa !6
  %50 = add nsw i32 %49, 1
  store i32 %50, ptr %14, align 4, !tbaa !6
  br label %27, !llvm.loop !16

51:                                               ; preds = %31
  %52 = load float, ptr %13, align 4, !tbaa !14
  %53 = load ptr, ptr %10, align 8, !tbaa !11
  %54 = load i32, ptr %11, align 4, !tbaa !6
  %55 = sext i32 %54 to i64
  %56 = getelementptr inbounds float, ptr %53, i64 %55
  store float %52, ptr %56, align 4, !tbaa !14
  call void @llvm.lifetime.end.p0(ptr %13) #4
  store i32 0, ptr %12, align 4
  br label %57

57:                                               ; preds = %51, %25
  call void @llvm.lifetime.end.p0(ptr %11) #4
  %58 = load i32, ptr %12, align 4
  switch i32 %58, label %60 [
    i32 0, label %59
    i32 1, label %59
  ]

59:                                               ; preds = %57, %57
  ret void

60:                                               ; preds = %57
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
