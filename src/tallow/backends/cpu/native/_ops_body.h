/* The float kernels of _ops.c, written once.  _ops.c includes this file once per
 * instruction set, with SUFFIX (a name part), TARGET (the functions' target attribute)
 * and, for the AVX2+FMA build, BUILD_AVX2 defined.  The kernels are GCC vector-extension
 * code; only three primitives name instructions (a fused multiply-add, floor, f16
 * loads), and their generic forms compute the same values: fmaf rounds once as the
 * FMA instruction does, so both builds give the same bits. */

#define O_JOIN2(a, b) a##_##b
#define O_JOIN(a, b) O_JOIN2(a, b)
#define O(name) O_JOIN(name, SUFFIX)
#define INLINE TARGET static inline __attribute__((always_inline))

/* ------------------------------------------------------------------ primitives */
INLINE f32x8 O(fma8)(f32x8 a, f32x8 b, f32x8 c) {
#if defined(BUILD_AVX2)
    return (f32x8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    for (int i = 0; i < 8; i++) c[i] = fmaf(a[i], b[i], c[i]);
    return c;
#endif
}

INLINE f32x8 O(floor8)(f32x8 x) {
#if defined(BUILD_AVX2)
    return (f32x8)_mm256_floor_ps((__m256)x);
#else
    for (int i = 0; i < 8; i++) x[i] = floorf(x[i]);
    return x;
#endif
}

INLINE f32x8 O(halves8)(const uint16_t *p) {
#if defined(BUILD_AVX2)
    return (f32x8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    f32x8 v;
    for (int i = 0; i < 8; i++) v[i] = half_to_float(p[i]);
    return v;
#endif
}

/* ------------------------------------------------------------------ shared steps */
INLINE f32x8 O(load8)(const float *p) {
    f32x8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)): the order of a 256-bit reduction
 * through 128-bit halves. */
INLINE float O(hsum8)(f32x8 v) {
    const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
    return (a0 + a2) + (a1 + a3);
}

/* The lanes of a where mask is set, of b elsewhere. */
INLINE f32x8 O(select8)(i32x8 mask, f32x8 a, f32x8 b) { return (f32x8)(((i32x8)a & mask) | ((i32x8)b & ~mask)); }

/* exp of eight floats: Cephes' expf (range reduction by ln 2 in two parts, degree-5
 * polynomial), within 2 ulp of expf over the range where the result is normal.  The
 * clamps are vminps/vmaxps's: a NaN takes the bound. */
INLINE f32x8 O(exp8)(f32x8 x) {
    const f32x8 hi = (f32x8){0} + 88.3762626647949f, lo = (f32x8){0} + -87.3365478515625f;
    x = O(select8)(x < hi, x, hi);
    x = O(select8)(x > lo, x, lo);
    const f32x8 fx = O(floor8)(O(fma8)(x, (f32x8){0} + 1.44269504088896341f, (f32x8){0} + 0.5f));
    x = O(fma8)(-fx, (f32x8){0} + 0.693359375f, x);
    x = O(fma8)(-fx, (f32x8){0} + -2.12194440e-4f, x);
    f32x8 y = (f32x8){0} + 1.9875691500e-4f;
    y = O(fma8)(y, x, (f32x8){0} + 1.3981999507e-3f);
    y = O(fma8)(y, x, (f32x8){0} + 8.3334519073e-3f);
    y = O(fma8)(y, x, (f32x8){0} + 4.1665795894e-2f);
    y = O(fma8)(y, x, (f32x8){0} + 1.6666665459e-1f);
    y = O(fma8)(y, x, (f32x8){0} + 5.0000001201e-1f);
    y = O(fma8)(y, x * x, x + 1.0f);
    const i32x8 e = (__builtin_convertvector(fx, i32x8) + 127) << 23;
    return y * (f32x8)e;
}

/* ------------------------------------------------------------------ kernels */
TARGET static float O(dot)(const float *a, const float *b, int64_t n) {
    f32x8 s0 = {0}, s1 = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = O(fma8)(O(load8)(a + i), O(load8)(b + i), s0);
        s1 = O(fma8)(O(load8)(a + i + 8), O(load8)(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = O(fma8)(O(load8)(a + i), O(load8)(b + i), s0);
    float t = O(hsum8)(s0 + s1);
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

TARGET static void O(axpy)(float *y, float a, const float *x, int64_t n) {
    const f32x8 va = (f32x8){0} + a;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const f32x8 v = O(fma8)(va, O(load8)(x + i), O(load8)(y + i));
        memcpy(y + i, &v, sizeof v);
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* One weight row (f32, or f16 when half) against one activation row, four accumulators:
 * a single sequential stream per row is what the hardware prefetcher follows best
 * (measured faster than four or eight rows interleaved for k = 576..1536). */
TARGET static float O(row)(const void *w, int half, int64_t k, const float *x) {
    f32x8 s[4] = {{0}, {0}, {0}, {0}};
    int64_t i = 0;
#define W8(at) (half ? O(halves8)((const uint16_t *)w + (at)) : O(load8)((const float *)w + (at)))
    for (; i + 32 <= k; i += 32)
        for (int u = 0; u < 4; u++) s[u] = O(fma8)(W8(i + 8 * u), O(load8)(x + i + 8 * u), s[u]);
    for (; i + 8 <= k; i += 8) s[0] = O(fma8)(W8(i), O(load8)(x + i), s[0]);
#undef W8
    float t = O(hsum8)((s[0] + s[1]) + (s[2] + s[3]));
    for (; i < k; i++) t += (half ? half_to_float(((const uint16_t *)w)[i]) : ((const float *)w)[i]) * x[i];
    return t;
}

TARGET static void O(f16_to_f32)(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const f32x8 v = O(halves8)(src + i);
        memcpy(dst + i, &v, sizeof v);
    }
    for (; i < n; i++) dst[i] = half_to_float(src[i]);
}

/* p[t] = exp(p[t] - mx) for t < n; returns the sum. */
TARGET static float O(exp_shift_sum)(float *p, int64_t n, float mx) {
    f32x8 acc = {0};
    int64_t t = 0;
    for (; t + 8 <= n; t += 8) {
        const f32x8 e = O(exp8)(O(load8)(p + t) - mx);
        memcpy(p + t, &e, sizeof e);
        acc += e;
    }
    float sum = O(hsum8)(acc);
    for (; t < n; t++) {
        p[t] = expf(p[t] - mx);
        sum += p[t];
    }
    return sum;
}

/* out = silu(g) * u = (g / (1 + exp(-g))) * u. */
TARGET static void O(silu_mul)(const float *g, const float *u, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const f32x8 gv = O(load8)(g + i), den = 1.0f + O(exp8)(0.0f - gv);
        const f32x8 o = (gv / den) * O(load8)(u + i);
        memcpy(out + i, &o, sizeof o);
    }
    for (; i < n; i++) out[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}

static const ops_set O(ops) = {O(dot), O(axpy), O(row), O(f16_to_f32), O(exp_shift_sum), O(silu_mul)};

#undef INLINE
#undef O
#undef O_JOIN
#undef O_JOIN2
