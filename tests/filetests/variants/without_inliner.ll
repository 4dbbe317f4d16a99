; RUN: diff variant O3 without the inliner
;
; // "O3 without the inliner" deletes inline: a `__device__` function stays a function of its
; // own (a .func with a call sequence passing .param space) instead of being inlined. Only
; // `__forceinline__` functions (always-inline) are still inlined.
; __device__ float smoothstep(float e0, float e1, float x) {
;   float t = fminf(fmaxf((x - e0) / (e1 - e0), 0.0f), 1.0f);
;   return t * t * (3.0f - 2.0f * t);
; }
;
; __global__ void smooth(int n, const float *x, float *y) {
;   int i = blockIdx.x * blockDim.x + threadIdx.x;
;   if (i < n) y[i] = smoothstep(0.25f, 0.75f, x[i]);
; }
; ModuleID = 'without_inliner.cu'
source_filename = "without_inliner.cu"
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

; Function Attrs: convergent mustprogress nounwind
define dso_local noundef float @_Z10smoothstepfff(float noundef %0, float noundef %1, float noundef %2) #0 {
  %4 = alloca float, align 4
  %5 = alloca float, align 4
  %6 = alloca float, align 4
  %7 = alloca float, align 4
  store float %0, ptr %4, align 4, !tbaa !11
  store float %1, ptr %5, align 4, !tbaa !11
  store float %2, ptr %6, align 4, !tbaa !11
  call void @llvm.lifetime.start.p0(ptr %7) #7
  %8 = load float, ptr %6, align 4, !tbaa !11
  %9 = load float, ptr %4, align 4, !tbaa !11
  %10 = fsub contract float %8, %9
  %11 = load float, ptr %5, align 4, !tbaa !11
  %12 = load float, ptr %4, align 4, !tbaa !11
  %13 = fsub contract float %11, %12
  %14 = fdiv contract float %10, %13
  %15 = call contract noundef float @_ZL5fmaxfff(float noundef %14, float noundef 0.000000e+00) #8
  %16 = call contract noundef float @_ZL5fminfff(float noundef %15, float noundef 1.000000e+00) #8
  store float %16, ptr %7, align 4, !tbaa !11
  %17 = load float, ptr %7, align 4, !tbaa !11
  %18 = load float, ptr %7, align 4, !tbaa !11
  %19 = fmul contract float %17, %18
  %20 = load float, ptr %7, align 4, !tbaa !11
  %21 = fmul contract float 2.000000e+00, %20
  %22 = fsub contract float 3.000000e+00, %21
  %23 = fmul contract float %19, %22
  call void @llvm.lifetime.end.p0(ptr %7) #7
  ret float %23
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.start.p0(ptr captures(none)) #1

; Function Attrs: alwaysinline convergent mustprogress nounwind
define internal noundef float @_ZL5fminfff(float noundef %0, float noundef %1) #2 {
  %3 = alloca float, align 4
  %4 = alloca float, align 4
  store float %0, ptr %3, align 4, !tbaa !11
  store float %1, ptr %4, align 4, !tbaa !11
  %5 = load float, ptr %3, align 4, !tbaa !11
  %6 = load float, ptr %4, align 4, !tbaa !11
  %7 = call contract float @__nv_fminf(float noundef %5, float noundef %6) #8
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
  %7 = call contract float @__nv_fmaxf(float noundef %5, float noundef %6) #8
  ret float %7
}

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: readwrite)
declare void @llvm.lifetime.end.p0(ptr captures(none)) #1

; Function Attrs: convergent mustprogress noinline norecurse nounwind
define dso_local ptx_kernel void @_Z6smoothiPKfPf(i32 noundef %0, ptr noundef %1, ptr noundef %2) #3 {
  %4 = alloca i32, align 4
  %5 = alloca ptr, align 8
  %6 = alloca ptr, align 8
  %7 = alloca i32, align 4
  store i32 %0, ptr %4, align 4, !tbaa !6
  store ptr %1, ptr %5, align 8, !tbaa !13
  store ptr %2, ptr %6, align 8, !tbaa !13
  call void @llvm.lifetime.start.p0(ptr %7) #7
  %8 = call noundef i32 @_ZN25__cuda_builtin_blockIdx_t17__fetch_builtin_xEv() #8
  %9 = call noundef i32 @_ZN25__cuda_builtin_blockDim_t17__fetch_builtin_xEv() #8
  %10 = mul i32 %8, %9
  %11 = call noundef i32 @_ZN26__cuda_builtin_threadIdx_t17__fetch_builtin_xEv() #8
  %12 = add i32 %10, %11
  store i32 %12, ptr %7, align 4, !tbaa !6
  %13 = load i32, ptr %7, align 4, !tbaa !6
  %14 = load i32, ptr %4, align 4, !tbaa !6
  %15 = icmp slt i32 %13, %14
  br i1 %15, label %16, label %27

16:                                               ; preds = %3
  %17 = load ptr, ptr %5, align 8, !tbaa !13
  %18 = load i32, ptr %7, align 4, !tbaa !6
  %19 = sext i32 %18 to i64
  %20 = getelementptr inbounds float, ptr %17, i64 %19
  %21 = load float, ptr %20, align 4, !tbaa !11
  %22 = call contract noundef float @_Z10smoothstepfff(float noundef 2.500000e-01, float noundef 7.500000e-01, float noundef %21) #8
  %23 = load ptr, ptr %6, align 8, !tbaa !13
  %24 = load i32, ptr %7, align 4, !tbaa !6
  %25 = sext i32 %24 to i64
  %26 = getelementptr inbounds float, ptr %23, i64 %25
  store float %22, ptr %26, align 4, !tbaa !11
  br label %27

27:                                               ; preds = %16, %3
  call void @llvm.lifetime.end.p0(ptr %7) #7
  ret void
}

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

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 2147483647) i32 @llvm.nvvm.read.ptx.sreg.ctaid.x() #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 1, 1025) i32 @llvm.nvvm.read.ptx.sreg.ntid.x() #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare noundef range(i32 0, 1024) i32 @llvm.nvvm.read.ptx.sreg.tid.x() #4

; Function Attrs: alwaysinline convergent nounwind
define internal float @__nv_fminf(float %0, float %1) #5 {
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
declare i32 @__nvvm_reflect(ptr) #6

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmin.ftz.f(float, float) #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmin.f(float, float) #4

; Function Attrs: alwaysinline convergent nounwind
define internal float @__nv_fmaxf(float %0, float %1) #5 {
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
declare float @llvm.nvvm.fmax.ftz.f(float, float) #4

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.nvvm.fmax.f(float, float) #4

attributes #0 = { convergent mustprogress nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #1 = { nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }
attributes #2 = { alwaysinline convergent mustprogress nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" }
attributes #3 = { convergent mustprogress noinline norecurse nounwind "frame-pointer"="all" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "uniform-work-group-size"="true" }
attributes #4 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
attributes #5 = { alwaysinline convergent nounwind "disable-tail-calls"="false" "frame-pointer"="all" "less-precise-fpmad"="false" "no-infs-fp-math"="false" "no-nans-fp-math"="false" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "unsafe-fp-math"="false" "use-soft-float"="false" }
attributes #6 = { convergent nounwind "disable-tail-calls"="false" "frame-pointer"="all" "less-precise-fpmad"="false" "no-infs-fp-math"="false" "no-nans-fp-math"="false" "no-trapping-math"="true" "stack-protector-buffer-size"="8" "target-cpu"="sm_90" "target-features"="+ptx88,+sm_90" "unsafe-fp-math"="false" "use-soft-float"="false" }
attributes #7 = { nounwind }
attributes #8 = { convergent nounwind }

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
