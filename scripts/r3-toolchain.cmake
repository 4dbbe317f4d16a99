# CMake toolchain file: build a CUDA project with r3's drivers (r3-clang++ / r3-clang, i.e. clang 22
# as the CUDA compiler) so that r3 records each kernel's device IR into its store.
#
#   cmake -S . -B build -G Ninja -DCMAKE_TOOLCHAIN_FILE=/path/to/r3/scripts/r3-toolchain.cmake \
#         [-DR3_BIN_DIR=DIR] [-DR3_CUDA_PATH=DIR] [-DR3_STORE=DIR] [-DCMAKE_CUDA_ARCHITECTURES=90]
#
# Inputs (each a CMake cache variable, or the environment variable of the same name):
#   R3_BIN_DIR    directory holding r3-clang++ and r3-clang, or just the r3 binary (links named
#                 r3-clang++ / r3-clang are then made in <build>/r3-bin; r3 dispatches on argv[0]).
#                 Default: r3-clang++ on PATH or in ~/.local/bin, else an r3 binary on PATH,
#                 in ~/.local/bin, ~/.cargo/bin or this repository's target/release.
#   R3_CUDA_PATH  CUDA root. Default: CUDAToolkit_ROOT if you set it, else scripts/setup's SDK
#                 ($R3_CACHE_DIR, $XDG_CACHE_HOME/r3 or ~/.cache/r3, then /cuda-13.0), else
#                 $CUDA_HOME, else /usr/local/cuda.
#   R3_STORE      (cache variable only) r3 store, written to <build>/.r3/config, where every
#                 compile of the build and every r3 command run in the build tree finds it (no
#                 flag in the compile commands, so compile_commands.json stays clang's own).
#                 Relative paths are taken from the build directory. Without it r3 uses its own
#                 default (the R3_STORE environment variable at build time, then .r3/ above the
#                 working directory, then ~/.local/share/r3).
#   R3_APPLY      (cache variable, ON/OFF) compiles ship the store's tuned kernels; also written
#                 to <build>/.r3/config, which every CUDA object depends on: switching it
#                 rebuilds them. (R3_APPLY=1 in the environment of one build does the same for
#                 that build only.)
#   R3_APPLY_REWRITES (cache variable, ON/OFF) apply ships validated source rewrites of
#                 `r3 evolve` too, though they are not in your source (implies R3_APPLY); also
#                 written to <build>/.r3/config. (R3_APPLY_REWRITES=1 in the environment of one
#                 build does the same for that build only.)
#
# Also:
#   CMAKE_BUILD_TYPE  Release when none is given (single-configuration generators): r3 tunes
#                 optimized device code, and CMake's empty default compiles at -O0.
#   CMAKE_CUDA_COMPILER_LAUNCHER  a compiler cache given there (ccache, sccache) gets r3 in
#                 front of it (r3;ccache): r3-clang++ behind a cache would not run on a hit, and
#                 that compile's kernels would not reach the store.
#
# What CMake (3.24/3.25) needs to use clang as the CUDA compiler with a toolkit at a
# non-standard path, and what this file therefore sets:
#   CUDAToolkit_ROOT           CMake finds the toolkit through <root>/bin/nvcc (it runs
#                              `nvcc -v` for TOP= and `nvcc --version` for the toolkit version,
#                              even for clang), and so does find_package(CUDAToolkit).
#   CMAKE_CUDA_FLAGS           -Wno-unknown-cuda-version (clang 22 knows CUDA up to 12.9). CMake
#                              passes --cuda-path=<CUDAToolkit_ROOT> to clang by itself.
#   CMAKE_CUDA_COMPILER_ID_TEST_FLAGS_FIRST  compiler identification compiles for sm_52, sm_30 and
#                              sm_20 only, none of which CUDA 13's ptxas accepts; we put a first
#                              try with --cuda-gpu-arch=sm_<first of CMAKE_CUDA_ARCHITECTURES>.
#   CMAKE_CUDA_ARCHITECTURES   90 unless set (cache variable or CUDAARCHS).
#   CMAKE_CUDA_RUNTIME_LIBRARY Static unless set: CMake then links -lcudadevrt -lcudart_static
#                              -lrt -lpthread -ldl and -L<root>/lib64 by itself. (Shared needs an
#                              unversioned libcudart.so, which the wheel-built SDK does not have.)

# ---- helpers -------------------------------------------------------------------------------

# _r3_input(<var> <out>): <out> = the cache/normal variable <var> if set, else $ENV{<var>}, else "".
macro(_r3_input var out)
  if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
    set(${out} "${${var}}")
  elseif(DEFINED ENV{${var}} AND NOT "$ENV{${var}}" STREQUAL "")
    set(${out} "$ENV{${var}}")
  else()
    set(${out} "")
  endif()
endmacro()

# Make <dir>/r3-clang++ and <dir>/r3-clang symbolic links to the r3 binary <r3>.
function(_r3_make_links r3 dir)
  file(MAKE_DIRECTORY "${dir}")
  foreach(name r3-clang++ r3-clang)
    file(CREATE_LINK "${r3}" "${dir}/${name}" RESULT _res SYMBOLIC)
    if(NOT _res STREQUAL "0")
      message(FATAL_ERROR "r3-toolchain: cannot create ${dir}/${name} -> ${r3}: ${_res}")
    endif()
  endforeach()
endfunction()

# ---- r3's drivers ---------------------------------------------------------------------------

# try_compile projects get the top level's resolved values (see CMAKE_TRY_COMPILE_PLATFORM_VARIABLES
# at the end), so that they neither search again nor make links in their own build trees.
if(DEFINED _R3_DRIVER_DIR AND NOT _R3_DRIVER_DIR STREQUAL "")
  set(_r3_dir "${_R3_DRIVER_DIR}")
else()
  set(_r3_dir "")
  set(_r3_bin "")          # an r3 binary to link to, when no r3-clang++ link exists
  _r3_input(R3_BIN_DIR _r3_given)
  if(_r3_given)
    get_filename_component(_r3_given "${_r3_given}" ABSOLUTE)
    if(EXISTS "${_r3_given}/r3-clang++" AND EXISTS "${_r3_given}/r3-clang")
      set(_r3_dir "${_r3_given}")
    elseif(EXISTS "${_r3_given}/r3")
      set(_r3_bin "${_r3_given}/r3")
    elseif(EXISTS "${_r3_given}/r3-clang++")
      set(_r3_bin "${_r3_given}/r3-clang++")
    else()
      message(FATAL_ERROR "r3-toolchain: R3_BIN_DIR=${_r3_given} has neither r3-clang++ nor r3")
    endif()
    # Remember it, so that a re-configure without the environment variable finds the same drivers.
    set(R3_BIN_DIR "${_r3_given}" CACHE PATH "Directory with r3-clang++/r3-clang or the r3 binary")
  else()
    find_program(_r3_found NAMES r3-clang++ PATHS "$ENV{HOME}/.local/bin" NO_CACHE)
    if(_r3_found)
      get_filename_component(_r3_found_dir "${_r3_found}" DIRECTORY)
      if(EXISTS "${_r3_found_dir}/r3-clang")
        set(_r3_dir "${_r3_found_dir}")
      else()
        set(_r3_bin "${_r3_found}")
      endif()
    else()
      find_program(_r3_found NAMES r3
        PATHS "$ENV{HOME}/.local/bin" "$ENV{HOME}/.cargo/bin"
              "${CMAKE_CURRENT_LIST_DIR}/../target/release"
        NO_CACHE)
      if(_r3_found)
        set(_r3_bin "${_r3_found}")
      endif()
    endif()
    if(NOT _r3_dir AND NOT _r3_bin)
      message(FATAL_ERROR "r3-toolchain: r3-clang++ not found on PATH or in ~/.local/bin, and no r3 "
        "binary found; set R3_BIN_DIR to the directory holding r3-clang++ (or r3).")
    endif()
    if(_r3_dir)
      set(R3_BIN_DIR "${_r3_dir}" CACHE PATH "Directory with r3-clang++/r3-clang or the r3 binary")
    else()
      get_filename_component(_r3_bin_dir "${_r3_bin}" DIRECTORY)
      set(R3_BIN_DIR "${_r3_bin_dir}" CACHE PATH "Directory with r3-clang++/r3-clang or the r3 binary")
    endif()
  endif()
  if(NOT _r3_dir)
    get_filename_component(_r3_bin "${_r3_bin}" REALPATH)
    set(_r3_dir "${CMAKE_BINARY_DIR}/r3-bin")
    _r3_make_links("${_r3_bin}" "${_r3_dir}")
  endif()
  set(_R3_DRIVER_DIR "${_r3_dir}")
  set(_r3_top TRUE)   # the project itself, not one of its try_compile projects
endif()

set(CMAKE_C_COMPILER    "${_r3_dir}/r3-clang")
set(CMAKE_CXX_COMPILER  "${_r3_dir}/r3-clang++")
set(CMAKE_CUDA_COMPILER "${_r3_dir}/r3-clang++")

# ---- the CUDA root --------------------------------------------------------------------------

if(DEFINED _R3_CUDA_ROOT AND NOT _R3_CUDA_ROOT STREQUAL "")
  set(_r3_cuda "${_R3_CUDA_ROOT}")
else()
  _r3_input(R3_CUDA_PATH _r3_cuda)
  if(_r3_cuda)
    set(_r3_cuda_why "R3_CUDA_PATH")
  elseif(DEFINED CUDAToolkit_ROOT AND NOT CUDAToolkit_ROOT STREQUAL "")
    set(_r3_cuda "${CUDAToolkit_ROOT}")
    set(_r3_cuda_why "CUDAToolkit_ROOT")
  else()
    # The order of r3's own search (crates/r3-ir/src/toolchain.rs) after --cuda-path and R3_CUDA_PATH.
    if(DEFINED ENV{R3_CACHE_DIR} AND NOT "$ENV{R3_CACHE_DIR}" STREQUAL "")
      set(_r3_cache "$ENV{R3_CACHE_DIR}")
    elseif(DEFINED ENV{XDG_CACHE_HOME} AND NOT "$ENV{XDG_CACHE_HOME}" STREQUAL "")
      set(_r3_cache "$ENV{XDG_CACHE_HOME}/r3")
    else()
      set(_r3_cache "$ENV{HOME}/.cache/r3")
    endif()
    set(_r3_candidates "${_r3_cache}/cuda-13.0" "$ENV{HOME}/.cache/r3/cuda-13.0")
    if(DEFINED ENV{CUDA_HOME} AND NOT "$ENV{CUDA_HOME}" STREQUAL "")
      list(APPEND _r3_candidates "$ENV{CUDA_HOME}")
    endif()
    list(APPEND _r3_candidates "/usr/local/cuda")
    list(REMOVE_DUPLICATES _r3_candidates)
    foreach(_c IN LISTS _r3_candidates)
      if(EXISTS "${_c}/include/cuda_runtime.h")
        set(_r3_cuda "${_c}")
        break()
      endif()
    endforeach()
    set(_r3_cuda_why "default search")
    if(NOT _r3_cuda)
      string(REPLACE ";" ", " _r3_candidates "${_r3_candidates}")
      message(FATAL_ERROR "r3-toolchain: no CUDA SDK found (looked at R3_CUDA_PATH, "
        "${_r3_candidates}); run scripts/setup or set R3_CUDA_PATH.")
    endif()
  endif()
  get_filename_component(_r3_cuda "${_r3_cuda}" ABSOLUTE)
  if(NOT EXISTS "${_r3_cuda}/include/cuda_runtime.h")
    message(FATAL_ERROR "r3-toolchain: ${_r3_cuda} (from ${_r3_cuda_why}) is not a CUDA root: "
      "no include/cuda_runtime.h")
  endif()
  if(NOT EXISTS "${_r3_cuda}/bin/nvcc")
    message(FATAL_ERROR "r3-toolchain: ${_r3_cuda} (from ${_r3_cuda_why}) has no bin/nvcc; "
      "CMake needs it to identify the CUDA toolkit even when clang compiles CUDA.")
  endif()
  if(_r3_cuda MATCHES " ")
    message(FATAL_ERROR "r3-toolchain: the CUDA root '${_r3_cuda}' contains a space, which "
      "CMake's compiler-identification flags cannot carry; use a path (or link) without one.")
  endif()
  set(R3_CUDA_PATH "${_r3_cuda}" CACHE PATH "CUDA root used by r3-clang++ (--cuda-path)")
  set(_R3_CUDA_ROOT "${_r3_cuda}")
endif()

set(CUDAToolkit_ROOT "${_r3_cuda}")

# find_package(CUDAToolkit) requires the shared cudart (find_library(CUDA_CUDART cudart)); the SDK
# that scripts/setup assembles from NVIDIA's wheels has only libcudart.so.<major>, no libcudart.so.
if(NOT DEFINED CUDA_CUDART AND NOT EXISTS "${_r3_cuda}/lib64/libcudart.so"
   AND NOT EXISTS "${_r3_cuda}/lib/libcudart.so")
  file(GLOB _r3_cudart "${_r3_cuda}/lib64/libcudart.so.[0-9]*" "${_r3_cuda}/lib/libcudart.so.[0-9]*")
  if(_r3_cudart)
    list(GET _r3_cudart 0 _r3_cudart)
    set(CUDA_CUDART "${_r3_cudart}" CACHE FILEPATH "Path to a library.")
  endif()
endif()

# ---- CUDA architectures, runtime library ----------------------------------------------------

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND "$ENV{CUDAARCHS}" STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures")
endif()
if(NOT DEFINED CMAKE_CUDA_RUNTIME_LIBRARY)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static CACHE STRING "CUDA runtime library: None, Shared or Static")
endif()

# ---- flags ----------------------------------------------------------------------------------

set(_r3_want "-Wno-unknown-cuda-version")

# <build>/.r3/config: the store and apply switch for every compile and every r3 command in the
# build tree. file(CONFIGURE) leaves an unchanged file alone: every CUDA object depends on it.
if(_r3_top)
  set(_r3_config "")
  if(DEFINED R3_STORE AND NOT R3_STORE STREQUAL "")
    get_filename_component(_r3_store "${R3_STORE}" ABSOLUTE BASE_DIR "${CMAKE_BINARY_DIR}")
    if(NOT _r3_store STREQUAL R3_STORE)
      set(R3_STORE "${_r3_store}" CACHE PATH "r3 store for this build (<build>/.r3/config)" FORCE)
    endif()
    string(REPLACE "\\" "\\\\" _r3_store_toml "${_r3_store}")
    string(REPLACE "\"" "\\\"" _r3_store_toml "${_r3_store_toml}")
    string(APPEND _r3_config "store = \"${_r3_store_toml}\"\n")
  endif()
  if(R3_APPLY)
    string(APPEND _r3_config "apply = true\n")
  endif()
  if(R3_APPLY_REWRITES)
    string(APPEND _r3_config "apply_rewrites = true\n")
  endif()
  file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/.r3/config"
    CONTENT "# r3's settings for this build tree, written by r3-toolchain.cmake on configure\n${_r3_config}"
    @ONLY)
endif()

# Release unless a build type is given: CMake's empty default compiles device code at -O0,
# which r3 stores but cannot tune (every pass skips optnone code).
get_property(_r3_multi GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
if(_r3_top AND NOT _r3_multi AND NOT CMAKE_BUILD_TYPE AND "$ENV{CMAKE_BUILD_TYPE}" STREQUAL "")
  set(CMAKE_BUILD_TYPE Release CACHE STRING "Choose the type of build" FORCE)
  message(STATUS "r3-toolchain: no CMAKE_BUILD_TYPE given, so Release (-O3): r3 tunes optimized "
    "device code. Give -DCMAKE_BUILD_TYPE=Debug for an unoptimized build, which r3 cannot tune.")
endif()

# A compiler cache in front of r3-clang++ would skip r3 on every hit; r3 goes in front of it.
if(_r3_top)
  _r3_input(CMAKE_CUDA_COMPILER_LAUNCHER _r3_launch)
  if(_r3_launch MATCHES "(^|;|/)(ccache|sccache|buildcache)(;|$)"
     AND NOT _r3_launch MATCHES "(^|;|/)r3(;|$)")
    if(EXISTS "${_r3_dir}/r3")
      set(_r3_launcher "${_r3_dir}/r3")
    else()
      get_filename_component(_r3_real "${_r3_dir}/r3-clang++" REALPATH)
      file(MAKE_DIRECTORY "${CMAKE_BINARY_DIR}/r3-bin")
      file(CREATE_LINK "${_r3_real}" "${CMAKE_BINARY_DIR}/r3-bin/r3" SYMBOLIC)
      set(_r3_launcher "${CMAKE_BINARY_DIR}/r3-bin/r3")
    endif()
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${_r3_launcher};${_r3_launch}" CACHE STRING
      "Launcher of the CUDA compiler (r3 in front of the compiler cache)" FORCE)
    message(STATUS "r3-toolchain: CUDA compiler launcher ${_r3_launch}: r3 goes in front of it, "
      "so that a cache hit still stores the kernels")
  endif()
endif()

# First configure: the flags go in through CMAKE_CUDA_FLAGS_INIT. When the cache already has
# CMAKE_CUDA_FLAGS (-DCMAKE_CUDA_FLAGS=... or a re-configure), make sure it holds our flags,
# and none of what earlier versions of this file put there (--r3-store=, which clang rejects,
# and --cuda-path=, which CMake passes itself), leaving everything else as it is and rewriting
# it only when something differs (a rewrite rebuilds every CUDA object).
if(DEFINED CACHE{CMAKE_CUDA_FLAGS})
  set(_r3_flags "$CACHE{CMAKE_CUDA_FLAGS}")
  separate_arguments(_r3_have UNIX_COMMAND "${_r3_flags}")
  set(_r3_changed FALSE)
  foreach(_a IN LISTS _r3_have)
    if(_a MATCHES "^--r3-store=" OR _a STREQUAL "--cuda-path=${_r3_cuda}")
      string(REPLACE "${_a}" "" _r3_flags "${_r3_flags}")
      set(_r3_changed TRUE)
    endif()
  endforeach()
  foreach(_a IN LISTS _r3_want)
    if(NOT _a IN_LIST _r3_have)
      string(APPEND _r3_flags " ${_a}")
      set(_r3_changed TRUE)
    endif()
  endforeach()
  if(_r3_changed)
    string(REGEX REPLACE "  +" " " _r3_flags "${_r3_flags}")
    string(STRIP "${_r3_flags}" _r3_flags)
    set(CMAKE_CUDA_FLAGS "${_r3_flags}" CACHE STRING
      "Flags used by the CUDA compiler during all build types." FORCE)
  endif()
else()
  list(JOIN _r3_want " " _r3_flags)
  set(CMAKE_CUDA_FLAGS_INIT "${_r3_flags}")
endif()

# Compiler identification (CMakeDetermineCUDACompiler.cmake) tries --cuda-gpu-arch=sm_52, sm_30,
# sm_20 and clang's default (sm_52): CUDA 13 supports none. Try the first configured arch first.
set(_r3_arch "$ENV{CUDAARCHS}")
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(_r3_arch "${CMAKE_CUDA_ARCHITECTURES}")
endif()
if(_r3_arch)
  list(GET _r3_arch 0 _r3_arch)
  string(REGEX MATCH "^[0-9]+a?" _r3_arch "${_r3_arch}")
endif()
if(NOT _r3_arch)
  set(_r3_arch 90)
endif()
set(CMAKE_CUDA_COMPILER_ID_TEST_FLAGS_FIRST
  "--cuda-path=${_r3_cuda} -Wno-unknown-cuda-version --cuda-gpu-arch=sm_${_r3_arch}")

# try_compile projects re-read this file in a fresh scope; hand them what we resolved.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES _R3_DRIVER_DIR _R3_CUDA_ROOT)
list(REMOVE_DUPLICATES CMAKE_TRY_COMPILE_PLATFORM_VARIABLES)
