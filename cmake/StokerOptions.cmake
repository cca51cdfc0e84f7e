# Build options. STOKER_WITH_CUDA defaults to ON when a CUDA compiler is found, so the same tree
# configures on a laptop without CUDA (CPU backend only) and on a GPU build host.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(_stoker_cuda_default ON)
else()
  set(_stoker_cuda_default OFF)
endif()

option(STOKER_WITH_CUDA "Build the CUDA backend (needs the CUDA toolkit, cuBLASLt)" ${_stoker_cuda_default})
option(STOKER_BUILD_TESTS "Build the GoogleTest suites" ON)
option(STOKER_BUILD_BENCHMARKS "Build the Google Benchmark programs" ON)
option(STOKER_BUILD_EXAMPLES "Build the demo and example trainers" ON)
# libFuzzer targets (tests/fuzz/README.md): clang only, with the library built with
# -fsanitize=fuzzer-no-link (the `asan` preset does both). The replay programs that run the seed
# corpora and regressions as CTest tests are built with the tests, with any compiler.
option(STOKER_BUILD_FUZZERS "Build the libFuzzer targets of tests/fuzz (clang)" OFF)
set(STOKER_BLAS_VENDOR "OpenBLAS" CACHE STRING
    "BLAS for the CPU GEMM, passed to FindBLAS as BLA_VENDOR (OpenBLAS, Generic, Intel10_64lp, ...)")
set(STOKER_BLAS_LIBRARIES "" CACHE STRING
    "Explicit BLAS link line (overrides STOKER_BLAS_VENDOR), e.g. a static reference BLAS for GPU builds")

if(STOKER_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR
      "STOKER_WITH_CUDA=ON but no CUDA compiler was found. Install the CUDA toolkit "
      "(nvcc on PATH or CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc), or configure with "
      "-DSTOKER_WITH_CUDA=OFF for a CPU-only build.")
  endif()
  # One CUDA runtime for every binary: the shared libcudart that CUDA::cudart also names.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # CMake < 3.30 does not know nvcc 12+'s C++20 flag; nvcc has accepted -std=c++20 since 12.0.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()
