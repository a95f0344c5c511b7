// How one kernel source becomes several instruction-set variants. CMake compiles each variant
// source (ops.cpp, attention.cpp, optim_kernels.cpp, convert.cpp, kernel_table.cpp) once per level
// with CLM_ISA set to CLM_ISA_GENERIC, CLM_ISA_AVX2 (AVX2 + FMA) or CLM_ISA_AVX512 (F, BW, VL,
// DQ); cpu_features.cpp picks one level at run time. A variant source includes every header it
// needs first, then puts its code between CLM_ISA_BEGIN and CLM_ISA_END, which open namespace
// clm::CLM_ISA_NS (isa_generic, isa_avx2, isa_avx512) and switch code generation to that level.
//
// Why `#pragma GCC target` and not per-file -m flags: inline functions and template instances from
// headers (std::vector, std::sort, ...) are emitted as weak symbols in every object that uses them,
// and the linker keeps one of the copies. Built with -mavx512f, that copy could be AVX-512 code
// that the generic variant then calls on a CPU without AVX-512. Under the pragma only the functions
// written inside the region, all in the variant's own namespace, get the wider instruction set;
// everything declared in headers before it keeps the baseline target (checked with GCC 12). GCC
// also gives the OpenMP regions outlined from such a function the same target; clang does not, so
// the avx2 and avx512 variants need GCC (CMakeLists.txt says so). Code inside the region must not
// define namespace-scope objects with dynamic initialisation: those run at startup on any CPU.
#pragma once

#define CLM_ISA_GENERIC 0
#define CLM_ISA_AVX2 1
#define CLM_ISA_AVX512 2

#ifndef CLM_ISA
#error "kernel_isa.h: compile this source through CMake's kernel variants (CLM_ISA is not set)"
#endif

#if CLM_ISA != CLM_ISA_GENERIC && !defined(__x86_64__)
#error "the AVX2 and AVX-512 kernel variants exist only for x86-64"
#endif
#if CLM_ISA != CLM_ISA_GENERIC && (defined(__clang__) || !defined(__GNUC__))
#error "the AVX2 and AVX-512 kernel variants need GCC (build with CLOCKLM_CPU_VARIANTS=generic)"
#endif

// CLM_ISA_VLEN: floats per SIMD register; CLM_ISA_NREGS: SIMD registers the code may plan for.
#if CLM_ISA == CLM_ISA_AVX512
#define CLM_ISA_NS isa_avx512
#define CLM_ISA_TARGET "avx2,fma,avx512f,avx512bw,avx512vl,avx512dq"
#define CLM_ISA_VLEN 16
#define CLM_ISA_NREGS 32
#elif CLM_ISA == CLM_ISA_AVX2
#define CLM_ISA_NS isa_avx2
#define CLM_ISA_TARGET "avx2,fma"
#define CLM_ISA_VLEN 8
#define CLM_ISA_NREGS 16
#elif CLM_ISA == CLM_ISA_GENERIC
#define CLM_ISA_NS isa_generic
#define CLM_ISA_VLEN 4  // SSE2 (x86-64 baseline) or NEON
#if defined(__aarch64__)
#define CLM_ISA_NREGS 32
#else
#define CLM_ISA_NREGS 16
#endif
#else
#error "CLM_ISA must be CLM_ISA_GENERIC, CLM_ISA_AVX2 or CLM_ISA_AVX512"
#endif

#define CLM_ISA_PRAGMA_(x) _Pragma(#x)
#define CLM_ISA_PRAGMA(x) CLM_ISA_PRAGMA_(x)

#if !defined(CLM_ISA_TARGET)
#define CLM_ISA_BEGIN namespace clm { namespace CLM_ISA_NS {
#define CLM_ISA_END } }
#else
#define CLM_ISA_BEGIN                                                                            \
  CLM_ISA_PRAGMA(GCC push_options) CLM_ISA_PRAGMA(GCC target(CLM_ISA_TARGET))                    \
  namespace clm { namespace CLM_ISA_NS {
#define CLM_ISA_END } } CLM_ISA_PRAGMA(GCC pop_options)
#endif
