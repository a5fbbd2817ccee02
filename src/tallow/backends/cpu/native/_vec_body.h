/* The f32 vector steps of _gemm.c and _transpose.c, written once.  A module includes this
 * file once per instruction set (_vec_builds.h), with SUFFIX (a name part), TARGET (the
 * functions' target attribute) and VW (floats per vector: 4 for the baseline build, 8
 * for AVX2, 16 for AVX-512) defined.  It is GCC vector-extension code, which each build compiles to its
 * own instructions; only the AVX-512 build's masked loads and stores name instructions,
 * and the loops beside them are their reference.  These steps move values and never
 * round: every build gives the same bits. */

#define V_JOIN2(a, b) a##_##b
#define V_JOIN(a, b) V_JOIN2(a, b)
#define K(name) V_JOIN(name, SUFFIX)
#define INLINE TARGET static inline __attribute__((always_inline))

typedef float K(vf) __attribute__((vector_size(VW * 4)));
typedef float K(vfu) __attribute__((vector_size(VW * 4), aligned(4))); /* an unaligned access */
#define VF K(vf)

typedef int32_t K(vi) __attribute__((vector_size(VW * 4)));
#if defined(__clang__) || __GNUC__ >= 12
#define V_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else /* (GCC 11 and older: the same selection, its indices as a vector) */
#define V_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (K(vi)){__VA_ARGS__})
#endif

INLINE VF K(load)(const float *p) { return *(const K(vfu) *)p; }
INLINE void K(store)(float *p, VF v) { *(K(vfu) *)p = v; }

/* Lanes [lo, lo + n) as a bit mask (none for n <= 0). */
INLINE unsigned K(lanes)(int lo, int n) { return n <= 0 ? 0u : n >= VW ? ((1u << VW) - 1) << lo : ((1u << n) - 1) << lo; }

/* v with the lanes in mask read from p (the other lanes' floats are not read). */
INLINE VF K(load_masked)(VF v, const float *p, unsigned mask) {
#if VW == 16
    return (VF)_mm512_mask_loadu_ps((__m512)v, (__mmask16)mask, p);
#else
    for (int l = 0; l < VW; l++)
        if (mask >> l & 1) v[l] = p[l];
    return v;
#endif
}

/* v's lanes in mask to p. */
INLINE void K(store_masked)(float *p, VF v, unsigned mask) {
#if VW == 16
    _mm512_mask_storeu_ps(p, (__mmask16)mask, (__m512)v);
#else
    for (int l = 0; l < VW; l++)
        if (mask >> l & 1) p[l] = v[l];
#endif
}

/* r[i][l] <- r[l][i], by the shuffles each build has in one instruction: 4 x 4 transposes
 * within each 128-bit lane (rows zipped by floats, then by pairs of floats), then the
 * lanes' blocks exchanged (zipping whole rows instead took twice the instructions). */
#if VW == 4
#define V_Z32(lo) lo, lo + 4, lo + 1, lo + 5
#define V_Z64(lo) lo, lo + 1, lo + 4, lo + 5
#elif VW == 8
#define V_Z32(lo) lo, lo + 8, lo + 1, lo + 9, lo + 4, lo + 12, lo + 5, lo + 13
#define V_Z64(lo) lo, lo + 1, lo + 8, lo + 9, lo + 4, lo + 5, lo + 12, lo + 13
#else
#define V_Z32(lo) lo, lo + 16, lo + 1, lo + 17, lo + 4, lo + 20, lo + 5, lo + 21, lo + 8, lo + 24, lo + 9, lo + 25, \
                  lo + 12, lo + 28, lo + 13, lo + 29
#define V_Z64(lo) lo, lo + 1, lo + 16, lo + 17, lo + 4, lo + 5, lo + 20, lo + 21, lo + 8, lo + 9, lo + 24, lo + 25, \
                  lo + 12, lo + 13, lo + 28, lo + 29
#define V_B128(lo) lo, lo + 1, lo + 2, lo + 3, lo + 8, lo + 9, lo + 10, lo + 11, lo + 16, lo + 17, lo + 18, lo + 19, \
                   lo + 24, lo + 25, lo + 26, lo + 27
#endif
INLINE void K(transpose)(VF r[VW]) {
    VF t[VW];
    for (int q = 0; q < VW / 4; q++) { /* rows 4q..4q+3, in each lane */
        for (int h = 0; h < 2; h++) {
            t[4 * q + 2 * h] = V_SHUFFLE(r[4 * q + 2 * h], r[4 * q + 2 * h + 1], V_Z32(0));
            t[4 * q + 2 * h + 1] = V_SHUFFLE(r[4 * q + 2 * h], r[4 * q + 2 * h + 1], V_Z32(2));
        }
        for (int h = 0; h < 2; h++) {
            r[4 * q + 2 * h] = V_SHUFFLE(t[4 * q + h], t[4 * q + h + 2], V_Z64(0));
            r[4 * q + 2 * h + 1] = V_SHUFFLE(t[4 * q + h], t[4 * q + h + 2], V_Z64(2));
        }
    }
#if VW == 8 /* the two lanes' blocks */
    for (int i = 0; i < 4; i++) {
        t[i] = V_SHUFFLE(r[i], r[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        t[i + 4] = V_SHUFFLE(r[i], r[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
    memcpy(r, t, sizeof t);
#elif VW == 16 /* the four lanes' blocks, two rounds of taking even and odd ones */
    for (int s = 0; s < 2; s++) {
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                const int x = s ? i + 4 * h : 8 * h + i, y = s ? x + 8 : x + 4;
                t[s ? x : 8 * h + i] = V_SHUFFLE(r[x], r[y], V_B128(0));
                t[s ? x + 8 : 8 * h + 4 + i] = V_SHUFFLE(r[x], r[y], V_B128(4));
            }
        memcpy(r, t, sizeof t);
    }
#endif
}
#undef V_SHUFFLE
#undef V_Z32
#undef V_Z64
#undef V_B128

/* d[r * ds + c] = s[c * ss + r] for r < nr, c < nc (strides in floats): VW x VW blocks
 * through registers, the edges one 32-bit word at a time. */
TARGET __attribute__((unused)) static void K(transpose_floats)(const float *s, int64_t ss, float *d, int64_t ds, int64_t nr, int64_t nc) {
    const int64_t rb = nr - nr % VW, cb = nc - nc % VW;
    for (int64_t r = 0; r < rb; r += VW)
        for (int64_t c = 0; c < cb; c += VW) {
            VF v[VW];
            const float *sp = s + c * ss + r;
            for (int i = 0; i < VW; i++, sp += ss) v[i] = K(load)(sp);
            K(transpose)(v);
            float *dp = d + r * ds + c;
            for (int i = 0; i < VW; i++, dp += ds) K(store)(dp, v[i]);
        }
    uint32_t *dw = (uint32_t *)d;
    const uint32_t *sw = (const uint32_t *)s;
    if (cb < nc)
        for (int64_t r = 0; r < rb; r++)
            for (int64_t c = cb; c < nc; c++) dw[r * ds + c] = sw[c * ss + r];
    for (int64_t r = rb; r < nr; r++)
        for (int64_t c = 0; c < nc; c++) dw[r * ds + c] = sw[c * ss + r];
}
