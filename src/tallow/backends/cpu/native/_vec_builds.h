/* Includes VEC_BODY (a file written once with _vec_body.h's vectors) once per instruction
 * set: the baseline build (4-lane vectors), and on x86 AVX2+FMA (8) and AVX-512 (16),
 * each with SUFFIX, TARGET and VW defined, and FUSED / CONTRACT_ON: the attribute and the
 * Clang pragma that let a function of an FMA build contract a * b + c into one rounding
 * (empty in the baseline build, which has no FMA; the modules are compiled with
 * -ffp-contract=off, so nothing else is contracted). */
#pragma GCC diagnostic ignored "-Wpsabi" /* (vectors pass only between one build's functions) */
#define SUFFIX generic
#define TARGET
#define VW 4
#define FUSED
#define CONTRACT_ON
#include VEC_BODY
#undef SUFFIX
#undef TARGET
#undef VW
#ifdef TALLOW_X86
#undef FUSED
#define FUSED __attribute__((optimize("fp-contract=fast")))
#ifdef __clang__
#undef CONTRACT_ON
#define CONTRACT_ON _Pragma("clang fp contract(fast)")
#endif
#define SUFFIX avx2
#define TARGET AVX2
#define VW 8
#include VEC_BODY
#undef SUFFIX
#undef TARGET
#undef VW
#define SUFFIX avx512
#define TARGET AVX512F
#define VW 16
#include VEC_BODY
#endif
