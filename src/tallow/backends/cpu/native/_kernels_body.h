/* The quantized kernels of _kernels.c, written once.  _kernels.c includes this file once
 * per instruction set, with SUFFIX (a name part), TARGET (the functions' target
 * attribute) and at most one of BUILD_AVX2 / BUILD_VNNI defined.  The kernels are GCC
 * vector-extension code, which each build compiles to its own instructions; only the
 * four primitives below (byte dot products, fifth-bit masks, f16 loads) name
 * instructions, and their generic forms are the reference the others must equal.
 *
 * Every build does the same float operations in the same order (no contraction: the
 * module is compiled with -ffp-contract=off) over the same exact integer sums, so all
 * builds give the same bits. */

#define K_JOIN2(a, b) a##_##b
#define K_JOIN(a, b) K_JOIN2(a, b)
#define K(name) K_JOIN(name, SUFFIX)
#define INLINE TARGET static inline __attribute__((always_inline))

/* ------------------------------------------------------------------ primitives */
INLINE u8x32 K(load32)(const uint8_t *p) {
    u8x32 v;
    memcpy(&v, p, 32);
    return v;
}

/* The four activation bytes at x in every 32-bit lane. */
INLINE i32x8 K(word4)(const int8_t *x) {
    int32_t w;
    memcpy(&w, x, 4);
    return (i32x8){w, w, w, w, w, w, w, w};
}

#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
/* Lane r: the sum over v < nv of the four products of a(v)'s bytes 4r..4r+3 (unsigned,
 * at most amax) with b(v)'s (signed, |b| <= 127); A and B_ are expressions in v, made
 * as they are consumed (arrays of them spilled registers in the AVX2 build). */
#if defined(BUILD_VNNI)
#define DOT_PAIRS(out, nv, amax, A, B_)                                                           \
    do {                                                                                          \
        __m256i s_ = _mm256_setzero_si256();                                                      \
        for (int v = 0; v < (nv); v++) s_ = _mm256_dpbusd_epi32(s_, (A), (B_));                   \
        out = (i32x8)s_;                                                                          \
    } while (0)
#else /* vpmaddubsw sums two products per 16-bit lane: `per16` of them stay below 2^15 */
#define DOT_PAIRS(out, nv, amax, A, B_)                                                           \
    do {                                                                                          \
        const int per16 = 32767 / (2 * 127 * (amax));                                            \
        __m256i s32_ = _mm256_setzero_si256();                                                    \
        for (int v0 = 0; v0 < (nv); v0 += per16) {                                                \
            __m256i s16_ = _mm256_setzero_si256();                                                \
            for (int v = v0; v < v0 + per16 && v < (nv); v++)                                     \
                s16_ = _mm256_add_epi16(s16_, _mm256_maddubs_epi16((A), (B_)));                   \
            s32_ = _mm256_add_epi32(s32_, _mm256_madd_epi16(s16_, _mm256_set1_epi16(1)));         \
        }                                                                                         \
        out = (i32x8)s32_;                                                                        \
    } while (0)
#endif
#endif

/* Lane r (a weight row): the sum over vectors v < nv of the four products of w[v]'s bytes
 * 4r..4r+3 (unsigned, at most wmax) with x[4v..4v+3] (signed, |x| <= 127). */
INLINE i32x8 K(dot_us)(const u8x32 *w, const int8_t *x, int nv, int wmax) {
    i32x8 s = {0};
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    DOT_PAIRS(s, nv, wmax, (__m256i)w[v], (__m256i)K(word4)(x + 4 * v));
#else
    (void)wmax;
    for (int v = 0; v < nv; v++)
        for (int r = 0; r < 8; r++)
            for (int j = 0; j < 4; j++) s[r] += (int32_t)w[v][4 * r + j] * x[4 * v + j];
#endif
    return s;
}

/* As dot_us for signed weights (|w| <= wmax, -128 allowed): the nv vectors at w, in
 * registers or memory (|w| times x with w's sign). */
INLINE i32x8 K(dot_ss)(const i8x32u *w, const int8_t *x, int nv, int wmax) {
    i32x8 s = {0};
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    DOT_PAIRS(s, nv, wmax, _mm256_abs_epi8((__m256i)w[v]), _mm256_sign_epi8((__m256i)K(word4)(x + 4 * v), (__m256i)w[v]));
#else
    (void)wmax;
    for (int v = 0; v < nv; v++)
        for (int r = 0; r < 8; r++)
            for (int j = 0; j < 4; j++) s[r] += (int32_t)w[v][4 * r + j] * x[4 * v + j];
#endif
    return s;
}

/* 32 indices 0..15 -> IQ4's levels (ggml's kvalues_iq4nl), or with `offset` the levels
 * + 128 as unsigned bytes (1..241, for vpdpbusd, which has no 16-bit step to saturate). */
INLINE u8x32 K(iq4_levels)(u8x32 idx, int offset) {
    static const int8_t levels[2][16] = {
        {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113},
        {1, 24, 45, 63, 79, 93, 106, 118, -127, -115, -103, -90, -75, -59, -39, -15}};
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)levels[offset != 0]));
    return (u8x32)_mm256_shuffle_epi8(table, (__m256i)idx);
#else
    u8x32 v;
    for (int i = 0; i < 32; i++) v[i] = (uint8_t)levels[offset != 0][idx[i]];
    return v;
#endif
}

/* A fifth-bit mask word -> 32 bytes, 16 where its bit is set (ggml's bytes_from_bits_32). */
INLINE u8x32 K(fifth_bits)(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
#if defined(BUILD_VNNI) /* the word as a byte mask: one masked move */
    return (u8x32)_mm256_maskz_mov_epi8((__mmask32)x32, _mm256_set1_epi8(16));
#elif defined(BUILD_AVX2)
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    return (u8x32)_mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(16));
#else
    u8x32 v;
    for (int i = 0; i < 32; i++) v[i] = (uint8_t)(((x32 >> i) & 1u) << 4);
    return v;
#endif
}

/* Eight f16 at p as floats (exact either way). */
INLINE f32x8 K(halves8)(const uint8_t *p) {
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    return (f32x8)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    f32x8 v;
    for (int i = 0; i < 8; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        v[i] = half_to_float(h);
    }
    return v;
#endif
}

/* Eight floats at p (whole 32-byte loads: a memcpy into a vector was split in two
 * 16-byte halves through the stack in the AVX2 build, 15x slower). */
INLINE f32x8 K(floats8)(const float *p) {
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    return (f32x8)_mm256_loadu_ps(p);
#else
    f32x8 v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}

/* Eight bytes at p widened to 32 bits (signed or not). */
INLINE i32x8 K(bytes8)(const uint8_t *p, int is_signed) {
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    const __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return (i32x8)(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
#else
    i32x8 v;
    for (int i = 0; i < 8; i++) v[i] = is_signed ? (int32_t)(int8_t)p[i] : (int32_t)p[i];
    return v;
#endif
}

/* Four vectors of integers in [-128, 127] as 32 bytes at dst, in order. */
INLINE void K(pack32)(const i32x8 *q, int8_t *dst) {
#if defined(BUILD_VNNI) || defined(BUILD_AVX2)
    __m256i q16a = _mm256_packs_epi32((__m256i)q[0], (__m256i)q[1]), q16b = _mm256_packs_epi32((__m256i)q[2], (__m256i)q[3]);
    __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, q8);
#else
    for (int i = 0; i < 32; i++) dst[i] = (int8_t)q[i / 8][i % 8];
#endif
}

/* ------------------------------------------------------------------ shared steps */
INLINE f32x8 K(to_float)(i32x8 v) { return __builtin_convertvector(v, f32x8); }

/* The eight rows of group g of one output row. */
INLINE void K(store8)(float *out_row, int64_t g, int64_t n, f32x8 acc) {
    if (g * ROWS + ROWS <= n) {
        memcpy(out_row + g * ROWS, &acc, sizeof acc);
    } else {
        for (int j = 0; j < ROWS && g * ROWS + j < n; j++) out_row[g * ROWS + j] = acc[j];
    }
}

/* x rounded half to even (|x| < 2^22): 1.5 * 2^23 + x has a unit ulp. */
INLINE f32x8 K(round_even)(f32x8 x) {
    const float magic = 12582912.0f;
    return (x + magic) - magic;
}

/* ------------------------------------------------------------------ activation rows */
/* Q8_0 (and Q8_1's sums, xsf not NULL): see quantize_q8_0 in _kernels.c.  0 on a
 * non-finite input. */
TARGET static int K(quantize_q8_0)(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xs, float *xsf) {
    for (int64_t b = 0; b < k / QK; b++) {
        f32x8 v[4];
        i32x8 top = {0};
        for (int u = 0; u < 4; u++) {
            v[u] = K(floats8)(x + b * QK + 8 * u);
            i32x8 mag = (i32x8)v[u] & 0x7fffffff; /* magnitudes' bits order as the magnitudes */
            top = top + ((mag - top) & (mag > top));
        }
        int32_t bits = 0;
        for (int i = 0; i < 8; i++) bits = top[i] > bits ? top[i] : bits;
        if (bits >= 0x7f800000) return 0;
        float amax;
        memcpy(&amax, &bits, 4);
        const float d = amax / 127.0f, inv = d == 0.0f ? 0.0f : 1.0f / d;
        i32x8 q[4], total = {0};
        for (int u = 0; u < 4; u++) {
            q[u] = __builtin_convertvector(K(round_even)(v[u] * inv), i32x8);
            total += q[u];
        }
        K(pack32)(q, xq + b * QK);
        int32_t sum = 0;
        for (int i = 0; i < 8; i++) sum += total[i];
        xd[b] = f16_round(d);
        xs[b] = sum;
        if (xsf) xsf[b] = f16_round((float)sum * d); /* Q8_1's s: f16(sum q * d), d unrounded */
    }
    return 1;
}

/* Q8K: iscale = -127 / (the first element of largest magnitude), q = iscale x rounded
 * half to even and clamped to [-128, 127], d = 1 / iscale, sixteen 16-element sums. */
TARGET static int K(quantize_q8k)(const float *x, int64_t k, int8_t *xq, float *xd, int32_t *xbs) {
    for (int64_t b = 0; b < k / QKK; b++) {
        const float *xb = x + b * QKK;
        i32x8 top = {0}; /* the largest magnitude's bits, as quantize_q8_0 finds them */
        for (int t = 0; t < QKK; t += 8) {
            const i32x8 mag = (i32x8)K(floats8)(xb + t) & 0x7fffffff;
            top = top + ((mag - top) & (mag > top));
        }
        int32_t bits = 0;
        for (int i = 0; i < 8; i++) bits = top[i] > bits ? top[i] : bits;
        if (bits >= 0x7f800000) return 0;
        float mx = 0.0f; /* the first element of that magnitude */
        for (int t = 0; t < QKK && bits; t += 8) {
            const i32x8 hit = ((i32x8)K(floats8)(xb + t) & 0x7fffffff) == bits;
            int j = 0;
            while (j < 8 && !hit[j]) j++;
            if (j < 8) {
                mx = xb[t + j];
                break;
            }
        }
        int8_t *q = xq + b * QKK;
        float iscale = mx == 0.0f ? 0.0f : -127.0f / mx;
        xd[b] = mx == 0.0f ? 0.0f : 1.0f / iscale;
        if (!(fabsf(iscale) <= 3.4028235e38f)) iscale = 0.0f; /* a subnormal maximum: ggml's q are 0 */
        for (int t = 0; t < QKK; t += 32) {
            i32x8 qi[4];
            for (int u = 0; u < 4; u++) {
                qi[u] = __builtin_convertvector(K(round_even)(K(floats8)(xb + t + 8 * u) * iscale), i32x8);
                qi[u] += (127 - qi[u]) & (qi[u] > 127);
                qi[u] += (-128 - qi[u]) & (qi[u] < -128);
            }
            K(pack32)(qi, q + t);
            for (int h = 0; h < 2; h++) { /* the sums of elements t + 16h .. t + 16h + 15 */
                const i32x8 pair = qi[2 * h] + qi[2 * h + 1];
                int32_t acc = 0;
                for (int i = 0; i < 8; i++) acc += pair[i];
                xbs[b * 16 + t / 16 + h] = acc;
            }
        }
    }
    return 1;
}

/* ------------------------------------------------------------------ products */
/* One group of eight weight rows (its blocks at wg) against activation rows i0 .. i0+R-1
 * (R = 1..4, a constant after inlining: the accumulators stay in registers), into out. */

/* A group block of a 32-element format as eight vectors, v holding elements 4v..4v+3 of
 * each row: the values (Q5's with their fifth bits), Q8_0's as stored (signed). */
INLINE void K(unpack_32)(int fmt, const uint8_t *blk, u8x32 *q) {
    const int64_t qa = quants_at(fmt), ha = high_at(fmt);
    for (int v = 0; v < 8 && fmt == FMT_Q8_0; v++) q[v] = K(load32)(blk + qa + 32 * v);
    for (int v = 0; v < 4 && fmt != FMT_Q8_0; v++) { /* low nibbles: elements 4v.., high: 16 + 4v.. */
        const u8x32 W = K(load32)(blk + qa + 32 * v);
        q[v] = W & 15;
        q[4 + v] = W >> 4;
        if (has_high(fmt)) {
            q[v] |= K(fifth_bits)(blk + ha + 4 * v);
            q[4 + v] |= K(fifth_bits)(blk + ha + 16 + 4 * v);
        }
    }
}

/* The 32-element formats: per block, the exact integer sum of the weight's values times
 * the activation, less zero * the activation's sum, then ((isum * d_w) * d_x), plus
 * m_w * s_x for the formats with minimums. */
INLINE void K(rows_32)(int fmt, const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xs,
                       const float *xsf, int64_t i0, int R, float *out, int64_t n, int64_t g) {
    const int64_t k = nb * QK, bb = block_bytes(fmt);
    const int zero = zero_of(fmt);
    f32x8 acc[4] = {{0}, {0}, {0}, {0}};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        const f32x8 dw = K(halves8)(blk), mw = has_min(fmt) ? K(halves8)(blk + 16) : (f32x8){0};
        u8x32 w[8];
        K(unpack_32)(fmt, blk, w);
        for (int r = 0; r < R; r++) {
            const int64_t i = i0 + r;
            const int8_t *x = xq + i * k + b * QK;
            i32x8 s = fmt == FMT_Q8_0 ? K(dot_ss)((const i8x32u *)w, x, 8, 128) : K(dot_us)(w, x, 8, has_high(fmt) ? 31 : 15);
            if (zero) s -= zero * xs[i * nb + b];
            f32x8 f = K(to_float)(s) * dw;
            f = f * xd[i * nb + b];
            if (has_min(fmt)) f = f + mw * xsf[i * nb + b];
            acc[r] += f;
        }
    }
    for (int r = 0; r < R; r++) K(store8)(out + (i0 + r) * n, g, n, acc[r]);
}

/* Bits 4-5 of a Q6K value from field s of its top-bits byte (fields at bits 4, 6, 0, 2:
 * one shift at most, of 16-bit lanes: the mask drops what crosses bytes, and GCC makes
 * a left shift of bytes a chain of additions). */
INLINE u8x32 K(q6_top)(u8x32 H, int s) {
    typedef uint16_t u16x16 __attribute__((vector_size(32)));
    switch (s) {
    case 0: return H & 0x30;
    case 1: return (u8x32)((u16x16)H >> 2) & 0x30;
    case 2: return (u8x32)((u16x16)H << 4) & 0x30;
    default: return (u8x32)((u16x16)H << 2) & 0x30;
    }
}

/* IQ4_XS's values: AVX2's vpmaddubsw takes the signed levels (its 16-bit sums of two
 * products of 241 and 127 would saturate), the other builds the levels + 128. */
#if defined(BUILD_AVX2)
#define IQ4_SIGNED 1
#else
#define IQ4_SIGNED 0
#endif

/* Chunk c (elements 64c..64c+63) of a K-quant group block as two sets of eight vectors,
 * lo[v] holding elements 64c + 4v.. of each row and hi[v] 64c + 32 + 4v..: Q6K's values
 * + 32 (0..63), Q4K's nibbles, Q5K's with their fifth bits, IQ4_XS's levels. */
INLINE void K(unpack_k)(int fmt, const uint8_t *blk, int c, u8x32 *lo, u8x32 *hi) {
    if (fmt == FMT_Q6K) { /* one stream: a chunk's nibbles, then its top bits */
        const uint8_t *qc = blk + 144 + 384 * c;
        u8x32 H[4];
        for (int h = 0; h < 4; h++) H[h] = K(load32)(qc + 256 + 32 * h);
        for (int v = 0; v < 8; v++) {
            const u8x32 W = K(load32)(qc + 32 * v);
            lo[v] = (W & 15) | K(q6_top)(H[v / 4], v % 4);
            hi[v] = (W >> 4) | K(q6_top)(H[2 + v / 4], v % 4);
        }
        return;
    }
    const int64_t quants_at = fmt == FMT_IQ4XS ? 80 : fmt == FMT_Q5K ? 416 : 160;
    for (int v = 0; v < 8; v++) { /* low nibbles: sub-block 2c, high: 2c + 1 */
        const u8x32 W = K(load32)(blk + quants_at + 32 * (8 * c + v));
        lo[v] = W & 15;
        hi[v] = W >> 4;
        if (fmt == FMT_Q5K) {
            lo[v] |= K(fifth_bits)(blk + 160 + 4 * (16 * c + v));
            hi[v] |= K(fifth_bits)(blk + 160 + 4 * (16 * c + 8 + v));
        }
        if (fmt == FMT_IQ4XS) {
            lo[v] = K(iq4_levels)(lo[v], !IQ4_SIGNED);
            hi[v] = K(iq4_levels)(hi[v], !IQ4_SIGNED);
        }
    }
}

/* Q6K: values 0..63 (the stored q + 32): isum = sum over 16 sub-blocks of scale x (the
 * exact sub-block sum - 32 x the activation's sub-block sum, Q8K's); out += (d_w d_x) isum. */
INLINE void K(rows_q6k)(const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xbs,
                        int64_t i0, int R, float *out, int64_t n, int64_t g) {
    const int64_t k = nb * QKK, bb = kblock_bytes(FMT_Q6K);
    f32x8 acc[4] = {{0}, {0}, {0}, {0}};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        i32x8 isum[4] = {{0}, {0}, {0}, {0}};
        for (int64_t line = 0; line < bb; line += 64) __builtin_prefetch(blk + 2 * bb + line);
        for (int c = 0; c < 4; c++) {
            u8x32 q[16]; /* vector v: elements 64c + 4v.. */
            K(unpack_k)(FMT_Q6K, blk, c, q, q + 8);
            for (int t = 0; t < 4; t++) { /* sub-block 4c + t: vectors 4t..4t+3 */
                const i32x8 sc = K(bytes8)(blk + 16 + 8 * (4 * c + t), 1);
                for (int r = 0; r < R; r++) {
                    const int64_t i = i0 + r;
                    const int32_t xsum = xbs[(i * nb + b) * 16 + 4 * c + t];
                    isum[r] += (K(dot_us)(q + 4 * t, xq + i * k + b * QKK + 64 * c + 16 * t, 4, 63) - 32 * xsum) * sc;
                }
            }
        }
        const f32x8 dw = K(halves8)(blk);
        for (int r = 0; r < R; r++) acc[r] += (dw * xd[(i0 + r) * nb + b]) * K(to_float)(isum[r]);
    }
    for (int r = 0; r < R; r++) K(store8)(out + (i0 + r) * n, g, n, acc[r]);
}

/* Q4K, Q5K and IQ4_XS (fmt): isum as Q6K's over eight 32-element sub-blocks of nibbles
 * (Q5K's with their fifth bits, IQ4_XS's as indices of signed levels); for Q4K/Q5K msum =
 * the eight minimums x their activation sums and out += (d_w d_x) isum - (dmin_w d_x) msum,
 * for IQ4_XS (signed scales, no minimums) out += (d_w d_x) isum. */
INLINE void K(rows_k4)(int fmt, const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd,
                       const int32_t *xbs, int64_t i0, int R, float *out, int64_t n, int64_t g) {
    const int64_t k = nb * QKK, bb = kblock_bytes(fmt);
    const int iq4 = fmt == FMT_IQ4XS, five = fmt == FMT_Q5K;
    const int64_t scales_at = iq4 ? 16 : 32;
    f32x8 acc[4] = {{0}, {0}, {0}, {0}};
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = wg + b * bb;
        i32x8 isum[4] = {{0}, {0}, {0}, {0}}, msum[4] = {{0}, {0}, {0}, {0}};
        for (int64_t line = 0; line < bb; line += 64) __builtin_prefetch(blk + 2 * bb + line);
        for (int c = 0; c < 4; c++) {
            u8x32 lo[8], hi[8];
            K(unpack_k)(fmt, blk, c, lo, hi);
            const i32x8 scl = K(bytes8)(blk + scales_at + 8 * (2 * c), iq4),
                        sch = K(bytes8)(blk + scales_at + 8 * (2 * c + 1), iq4);
            for (int r = 0; r < R; r++) {
                const int8_t *x = xq + (i0 + r) * k + b * QKK + 64 * c;
                if (iq4 && IQ4_SIGNED) {
                    isum[r] += K(dot_ss)((const i8x32u *)lo, x, 8, 127) * scl +
                               K(dot_ss)((const i8x32u *)hi, x + 32, 8, 127) * sch;
                } else if (iq4) { /* less 128 x the sub-block's activation sum (two of Q8K's sums) */
                    const int32_t *bs = xbs + ((i0 + r) * nb + b) * 16 + 4 * c;
                    isum[r] += (K(dot_us)(lo, x, 8, 241) - 128 * (bs[0] + bs[1])) * scl +
                               (K(dot_us)(hi, x + 32, 8, 241) - 128 * (bs[2] + bs[3])) * sch;
                } else {
                    isum[r] += K(dot_us)(lo, x, 8, five ? 31 : 15) * scl + K(dot_us)(hi, x + 32, 8, five ? 31 : 15) * sch;
                }
            }
        }
        const f32x8 dw = K(halves8)(blk);
        if (iq4) {
            for (int r = 0; r < R; r++) acc[r] += (dw * xd[(i0 + r) * nb + b]) * K(to_float)(isum[r]);
            continue;
        }
        for (int u = 0; u < 8; u++) {
            const i32x8 mn = K(bytes8)(blk + 96 + 8 * u, 0);
            for (int r = 0; r < R; r++) {
                const int32_t *bs = xbs + ((i0 + r) * nb + b) * 16;
                msum[r] += mn * (bs[2 * u] + bs[2 * u + 1]);
            }
        }
        const f32x8 dm = K(halves8)(blk + 16);
        for (int r = 0; r < R; r++) {
            const float dx = xd[(i0 + r) * nb + b];
            acc[r] += (dw * dx) * K(to_float)(isum[r]) - (dm * dx) * K(to_float)(msum[r]);
        }
    }
    for (int r = 0; r < R; r++) K(store8)(out + (i0 + r) * n, g, n, acc[r]);
}

INLINE void K(rows)(int fmt, const uint8_t *wg, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xs,
                    const float *xsf, int64_t i0, int R, float *out, int64_t n, int64_t g) {
    switch (fmt) {
    case FMT_Q4_0: K(rows_32)(FMT_Q4_0, wg, nb, xq, xd, xs, xsf, i0, R, out, n, g); break;
    case FMT_Q8_0: K(rows_32)(FMT_Q8_0, wg, nb, xq, xd, xs, xsf, i0, R, out, n, g); break;
    case FMT_Q5_0: K(rows_32)(FMT_Q5_0, wg, nb, xq, xd, xs, xsf, i0, R, out, n, g); break;
    case FMT_Q4_1: K(rows_32)(FMT_Q4_1, wg, nb, xq, xd, xs, xsf, i0, R, out, n, g); break;
    case FMT_Q5_1: K(rows_32)(FMT_Q5_1, wg, nb, xq, xd, xs, xsf, i0, R, out, n, g); break;
    case FMT_Q6K: K(rows_q6k)(wg, nb, xq, xd, xs, i0, R, out, n, g); break;
    case FMT_Q5K: K(rows_k4)(FMT_Q5K, wg, nb, xq, xd, xs, i0, R, out, n, g); break;
    case FMT_IQ4XS: K(rows_k4)(FMT_IQ4XS, wg, nb, xq, xd, xs, i0, R, out, n, g); break;
    default: K(rows_k4)(FMT_Q4K, wg, nb, xq, xd, xs, i0, R, out, n, g); break;
    }
}

/* Activation rows a pass takes, the weights' unpacked block shared by them: four, or in
 * the AVX2 build two for Q8_0 and IQ4_XS, whose four rows spill its sixteen registers
 * (their 64-row products ran 10% and 18% faster so; the other formats' no faster). */
#if defined(BUILD_AVX2)
#define RMAX(fmt) ((fmt) == FMT_Q8_0 || (fmt) == FMT_IQ4XS ? 2 : 4)
#else
#define RMAX(fmt) 4
#endif

/* Rows [8 g0, 8 g1) of out (m, n) for one format (a function each: one format's body
 * per function keeps the register allocation of each as tight as a hand-written one). */
#define K_PRODUCT_OF(FMT)                                                                         \
    TARGET static void K(product_##FMT)(const uint8_t *w, int64_t nb, int64_t g0, int64_t g1,    \
                                        const int8_t *xq, const float *xd, const int32_t *xs,      \
                                        const float *xsf, int64_t m, float *out, int64_t n) {      \
        const int64_t gb = nb * fmt_bytes(FMT);                                                   \
        for (int64_t g = g0; g < g1; g++)                                                         \
            for (int64_t i = 0; i < m; i += RMAX(FMT)) {                                          \
                const uint8_t *wg = w + g * gb;                                                   \
                switch (m - i < RMAX(FMT) ? m - i : RMAX(FMT)) {                                  \
                case 4: K(rows)(FMT, wg, nb, xq, xd, xs, xsf, i, 4, out, n, g); break;            \
                case 3: K(rows)(FMT, wg, nb, xq, xd, xs, xsf, i, 3, out, n, g); break;            \
                case 2: K(rows)(FMT, wg, nb, xq, xd, xs, xsf, i, 2, out, n, g); break;            \
                default: K(rows)(FMT, wg, nb, xq, xd, xs, xsf, i, 1, out, n, g); break;           \
                }                                                                                 \
            }                                                                                     \
    }
K_PRODUCT_OF(FMT_Q4_0)
K_PRODUCT_OF(FMT_Q8_0)
K_PRODUCT_OF(FMT_Q5_0)
K_PRODUCT_OF(FMT_Q4_1)
K_PRODUCT_OF(FMT_Q5_1)
K_PRODUCT_OF(FMT_Q4K)
K_PRODUCT_OF(FMT_Q6K)
K_PRODUCT_OF(FMT_Q5K)
K_PRODUCT_OF(FMT_IQ4XS)
#undef K_PRODUCT_OF

/* Rows [8 g0, 8 g1) of out (m, n); xs: Q8_0's block sums or Q8K's sixteen sums a block. */
TARGET static void K(product)(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                              const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n) {
    switch (fmt) {
    case FMT_Q4_0: K(product_FMT_Q4_0)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q8_0: K(product_FMT_Q8_0)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q5_0: K(product_FMT_Q5_0)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q4_1: K(product_FMT_Q4_1)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q5_1: K(product_FMT_Q5_1)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q6K: K(product_FMT_Q6K)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_Q5K: K(product_FMT_Q5K)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    case FMT_IQ4XS: K(product_FMT_IQ4XS)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    default: K(product_FMT_Q4K)(w, nb, g0, g1, xq, xd, xs, xsf, m, out, n); break;
    }
}

#if defined(BUILD_VNNI)
#include "_kernels_tiled.h"
static const kernel_set K(kernels) = {K(quantize_q8_0), K(quantize_q8k), K(product), K(tiled)};
#else
static const kernel_set K(kernels) = {K(quantize_q8_0), K(quantize_q8k), K(product), NULL};
#endif

#undef RMAX
#undef IQ4_SIGNED
#undef DOT_PAIRS
#undef INLINE
#undef K
#undef K_JOIN
#undef K_JOIN2
