// Private: STOKER_OPTIM_CLONES marks a CPU optimizer loop to be compiled twice on x86-64 gcc —
// for x86-64-v3 (AVX2, FMA: 8 floats per instruction, fmaf as one vfmadd) and for the baseline
// (fmaf as a libm call) — with the clone picked at load time by the CPU (an ifunc). Both clones
// round identically: fmaf is correctly rounded in hardware and in libm, and the math of
// ops/optim_math.h has no a*b+c that the compiler could contract differently.
//
// Not under clang (no arch= clones of this form) nor under gcc's ThreadSanitizer, whose
// instrumented ifunc resolver runs before the TSan runtime is up (see data/resize.cpp).
#pragma once

// STOKER_OPTIM_NO_CLONES (a -D flag) builds the baseline loop alone: to measure the speedup.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(STOKER_OPTIM_NO_CLONES)
#define STOKER_OPTIM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define STOKER_OPTIM_CLONES
#endif
