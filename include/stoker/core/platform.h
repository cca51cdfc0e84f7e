// Macros shared by host and device code. STOKER_HD marks functions that must compute the same
// bits on the CPU and in CUDA kernels (conversions, RNG), so both backends include one source.
#pragma once

#if defined(__CUDACC__)
#define STOKER_HD __host__ __device__
#define STOKER_FORCEINLINE __forceinline__
#else
#define STOKER_HD
#define STOKER_FORCEINLINE inline __attribute__((always_inline))
#endif
