; RUN: diff {"pipeline":"default<O3>","max_threads":128,"min_blocks_per_sm":4}
;
; // Launch bounds, a candidate's knobs `max_threads` and `min_blocks_per_sm`: the kernel gets
; // the attributes clang sets for __launch_bounds__(128, 4), which the PTX states as .maxntid
; // and .minnctapersm (ptxas then limits registers so that 4 blocks of 128 threads fit on an
; // SM). Such code is right only for launches of at most 128 threads a block, so apply ships it
; // as a guarded variant (see splice/).
; // One thread per element: x scaled, clamped to [lo, hi].
; __global__ void scale_clamp(int n, float s, float lo, float hi, const float *x, float *y) {
;   int i = blockIdx.x * blockDim.x + threadIdx.x;
;   if (i < n) y[i] = fminf(fmaxf(s * x[i], lo), hi);
; }
; ModuleID = 'launch_bounds.cu'
source_filename = "launch_bounds.cu"
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
@.str = private unnamed_addr constant [11 x i8] c"__CUDA_FTZ\00", align 1

; Function Attrs: convergent mustprogress noinline norecurse nounwind
define dso_local ptx_kernel void @_Z11scale_clampifffPKfPf(i32 noundef %0, float noundef %1, float noundef %2, float noundef %3, ptr noundef %4, ptr noundef %5) #0 {
  %7 = alloca i32, align 4
  %8 = alloca float, align 4
  %9 = alloca float, align 4
  %10 = alloca float, align 4
  %11 = alloca ptr, align 8
  %12 = alloca ptr, align 8
  %13 = alloca i32, align 4
  store i32 %0, ptr %7, align 4, !tbaa !6
  store float %1, ptr %8, align 4, !tbaa !11
  store float %2, ptr %9, align 4, !tbaa !11
  store float %3, ptr %10, align 4, !tbaa !11
  store ptr %4, ptr %11, align 8, !tbaa !13
  store ptr %5, ptr %12, align 8, !tbaa !13
  call void @llvm.lifetime.start.p0(ptr %13) #6
  %14 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #7
  %15 = call noundef i32 @_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv() #7
  %16 = mul i32 %14, %15
  %17 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #7
  %18 = add i32 %16, %17
  store i32 %18, ptr %13, align 4, !tbaa !6
  %19 = load i32, ptr %13, align 4, !tbaa !6
  %20 = load i32, ptr %7, align 4, !tbaa !6
  %21 = icmp slt i32 %19, %20
  br i1 %21, label %22, label %38

22:                                               ; preds = %6
  %23 = load float, ptr %8, align 4, !tbaa !11
  %24 = load ptr, ptr %11, align 8, !tbaa !13
  %25 = load i32, ptr %13, align 4, !tbaa !6
  %26 = sext i32 %25 to i64
  %27 = getelementptr inbounds float, ptr %24, i64 %26
  %28 = load float, ptr %27, align 4, !tbaa !11
  %29 = fmul contract float %23, %28
  %30 = load float, ptr %9, align 4, !tbaa !11
  %31 = call contract noundef float @_ZL5fmaxfff(float noundef %29, float noundef %30) #7
  %32 = load float, ptr %10, align 4, !tbaa !11
  %33 = call contract noundef float @_ZL5fminfff(float noundef %31, float noundef %32) #7
  %34 = load ptr, ptr %12, align 8, !tbaa !13
  %35 = load i32, ptr %13, align 4, !tbaa !6
  %36 = sext i32 %35 to i64
  %37 = getelementptr inbounds float, ptr %34, i64 %36
  store float %33, ptr %37, align 4, !tbaa !11
  br label %38

38:                                               ; preds = %22, %6
  call void @llvm.lifetime.end.p0(ptr %13) #6
  ret void
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

; Function Attrs: alwaysinline convergent mustprogress nounwind
define internal noundef float @_ZL5fminfff(float noundef %0, float noundef %1) #2 {
  %3 = alloca float, align 4
  %4 = alloca float, align 4
  store float %0, ptr %3, align 4, !tbaa !11
  store float %1, ptr %4, align 4, !tbaa !11
  %5 = load float, ptr %3, align 4, !tbaa !11
  %6 = load float, ptr %4, align 4, !tbaa !11
  %7 = call contract float @__nv_fminf(float noundef %5, float noundef %6) #7
  ret float %7
}

; Function Attrs: alwaysinline convergent mustprogress nounwind
define internal noundef float @_ZL5fmaxfff(float noundef %0, float noundef %1) #2 {
  %3 = alloca float, align 4
  %4 = alloca float, align 4
  store float %0, ptr %3, align 4, !tbaa !11
  store float %1, ptr %4, align 4, !tbaa !11
  %5 = load float, ptr %3, align 4, !tbaa !11
  %6 = load float, ptr %4, align 4, !tbaa !11
  %7 = call contract float @__nv_fmaxf(float noundef %5, float noundef %6) #7
  ret float %7
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.end.p0(ptr captures(none)) #1

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 2147483647) i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 1, 1025) i32 @llvm.nvvm.read.ptx.sreg.ntid.x() #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 1024) i32 @llvm.nvvm.read.ptx.sreg.tid.x() #3

; Function Attrs: alwaysinline convergent nounwind
define internal float @__nv_fminf(float %0, float %1) #4 {
  %3 = call i32 @__nvvm_reflect(ptr @.str)
  %4 = icmp ne i32 %3, 0
  br i1 %4, label %5, label %7

5:                                                ; preds = %2
  %6 = call float @llvm.nvvm.fmin.ftz.f(float %0, float %1)
  br label %9

7:                                                ; preds = %2
  %8 = call float @llvm.nvvm.fmin.f(float %0, float %1)
  br label %9

9:                                                ; preds = %7, %5
  %10 = phi float [ %6, %5 ], [ %8, %7 ]
  ret float %10
}

; Function Attrs: convergent nounwind
declare i32 @__nvvm_reflect(ptr) #5

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmin.ftz.f(float, float) #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmin.f(float, float) #3

; Function Attrs: alwaysinline convergent nounwind
define internal float @__nv_fmaxf(float %0, float %1) #4 {
  %3 = call i32 @__nvvm_reflect(ptr @.str)
  %4 = icmp ne i32 %3, 0
  br i1 %4, label %5, label %7

5:                                                ; preds = %2
  %6 = call float @llvm.nvvm.fmax.ftz.f(float %0, float %1)
  br label %9

7:                                                ; preds = %2
  %8 = call float @llvm.nvvm.fmax.f(float %0, float %1)
  br label %9

9:                                                ; preds = %7, %5
  %10 = phi float [ %6, %5 ], [ %8, %7 ]
  ret float %10
}

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmax.ftz.f(float, float) #3

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmax.f(float, float) #3

attributes #0 = { convergent mustprogress noinline norecurse nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "uniform-work-group-size"="true" }
attributes #1 = { nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }
attributes #2 = { alwaysinline convergent mustprogress nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #3 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
attributes #4 = { alwaysinline convergent nounwind "disable-tail-calls"="false" "frame-pointer"="all" "less-precise-fpmad"="false" "no-infs-fp-math"="false" "no-nans-fp-math"="false" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "unsafe-fp-math"="false" "use-soft-float"="false" }
attributes #5 = { convergent nounwind "disable-tail-calls"="false" "frame-pointer"="all" "less-precise-fpmad"="false" "no-infs-fp-math"="false" "no-nans-fp-math"="false" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "unsafe-fp-math"="false" "use-soft-float"="false" }
attributes #6 = { nounwind }
attributes #7 = { convergent nounwind }

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
!12 = !{!"float", !8, i64 0}
!13 = !{!14, !14, i64 0}
!14 = !{!"p1 float", !15, i64 0}
!15 = !{!"any pointer", !8, i64 0}
