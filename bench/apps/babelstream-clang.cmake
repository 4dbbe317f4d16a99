# CMAKE_PROJECT_INCLUDE hook for BabelStream's CUDA model built by clang (or r3-clang++); see
# bench/apps/babelstream.toml. src/cuda/model.cmake appends nvcc-only flags to CMAKE_CUDA_FLAGS
# after enable_language(CUDA); at the end of the top directory, before generation, this turns
# them into clang's: -arch=sm_XX becomes --cuda-gpu-arch=sm_XX, -forward-unknown-to-host-compiler
# and --extended-lambda go (clang compiles __device__ lambdas without a flag).
macro(_bench_apps_nvcc_flags_to_clang)
  string(REPLACE "-forward-unknown-to-host-compiler" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  string(REPLACE "--extended-lambda" "" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  string(REGEX REPLACE "(^| )-arch=(sm_[0-9]+a?)" "\\1--cuda-gpu-arch=\\2" CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  string(REGEX REPLACE "  +" " " CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS}")
  message(STATUS "bench/apps: CUDA flags for clang: ${CMAKE_CUDA_FLAGS}")
endmacro()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _bench_apps_nvcc_flags_to_clang)
