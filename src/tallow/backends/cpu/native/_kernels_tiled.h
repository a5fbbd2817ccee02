/* Tiled products for many activation rows (a prompt, a batch of six or more), AVX-512
 * VNNI only; included by _kernels_body.h in its VNNI build.
 *
 * The row kernels (rows_32, rows_k4, rows_q6k) unpack a group's weights again for every
 * four activation rows and multiply eight weight rows per instruction.  Here a strip of
 * sixteen weight rows (two x8 groups) is unpacked once into a tile of byte values and
 * scales (tile_block for the K-quants, tile32_block for the 32-element formats), and one
 * kernel per block size runs every activation row over it, eight at a time: one 64-byte
 * load of the tile feeds eight vpdpbusd of sixteen rows each, the activation words
 * broadcast from memory.
 *
 * The integer sums are the same exact integers as the row kernels', and the float steps
 * the same operations in the same order, so the results are bit-identical to theirs.
 * For the K-quants, per super-block:
 *   isum = sum over sub-blocks s of sc_s x dot_s  (dot_s: the sub-block's byte dot product)
 *   corr = sum over sub-block pairs of the correction weights x the activation's sums
 *          (vpdpwssd: Q4K/Q5K's minimums x the 32-element sums; Q6K's 32 sc x its
 *          16-element sums and IQ4_XS's 128 sc x its 32-element sums, the offsets of the
 *          stored values)
 *   Q4K/Q5K:    acc += (d_w d_x) isum - (dmin_w d_x) corr
 *   Q6K/IQ4_XS: acc += (d_w d_x) (isum - corr)
 * For the 32-element formats, per block, rows_32's steps (Q8_0's values stored + 128,
 * taken back as 128 x the activation's block sum). */

typedef struct {
    uint8_t q[64][64];  /* k-group j (elements 4j..4j+3): rows 0..15, four bytes each */
    int32_t sc[16][16]; /* sub-block s's scale, per row (8 sub-blocks of 32, Q6K's 16 of 16) */
    int32_t cw[8][16];  /* correction weight pairs (int16, int16), per row */
    float dw[16], dm[16];
} K(tile_block);

/* Eight int32 as the low (h = 0) or high half of a 16-lane row of the tile. */
INLINE void K(put8)(int32_t *row16, int h, i32x8 v) { memcpy(row16 + 8 * h, &v, sizeof v); }

/* Half h of tile block t from x8 group block blk. */
INLINE void K(tile_half)(int fmt, const uint8_t *blk, int h, K(tile_block) *t) {
    const int iq4 = fmt == FMT_IQ4XS, q6 = fmt == FMT_Q6K;
    f32x8 dw = K(halves8)(blk), dm = q6 || iq4 ? (f32x8){0} : K(halves8)(blk + 16);
    memcpy(t->dw + 8 * h, &dw, sizeof dw);
    memcpy(t->dm + 8 * h, &dm, sizeof dm);
    for (int c = 0; c < 4; c++) {
        u8x32 lo[8], hi[8];
        K(unpack_k)(fmt, blk, c, lo, hi);
        for (int v = 0; v < 8; v++) {
            memcpy(&t->q[16 * c + v][32 * h], &lo[v], 32);
            memcpy(&t->q[16 * c + 8 + v][32 * h], &hi[v], 32);
        }
    }
    const int subs = q6 ? 16 : 8;
    const int64_t scales_at = q6 ? 16 : iq4 ? 16 : 32;
    i32x8 sc[16];
    for (int s = 0; s < subs; s++) {
        sc[s] = K(bytes8)(blk + scales_at + 8 * s, q6 || iq4);
        K(put8)(t->sc[s], h, sc[s]);
    }
    for (int p = 0; p < subs / 2; p++) { /* pair p: sub-blocks 2p, 2p + 1 */
        i32x8 a, b;
        if (q6 || iq4) {
            a = sc[2 * p] * (q6 ? 32 : 128);
            b = sc[2 * p + 1] * (q6 ? 32 : 128);
        } else {
            a = K(bytes8)(blk + 96 + 8 * (2 * p), 0);
            b = K(bytes8)(blk + 96 + 8 * (2 * p + 1), 0);
        }
        K(put8)(t->cw[p], h, (i32x8)(((u32x8)a & 0xffff) | ((u32x8)b << 16)));
    }
}

/* acc + the byte dot products of w's sixteen 4-byte lanes (unsigned) with the activation
 * word at x (signed), broadcast from memory.  (Written as one instruction: the intrinsic
 * form made GCC copy the eight accumulators between registers on every step.) */
INLINE __m512i K(dot16)(__m512i acc, __m512i w, const int8_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
    return acc;
}

/* Activation row x's correction words for block b: pair p = (sum_{2p}, sum_{2p+1}) as two
 * int16 (Q6K: its 16-element sums; the others: 32-element sums, two of Q8K's). */
INLINE int32_t K(pair_word)(int q6, const int32_t *bs, int p) {
    int32_t a, b;
    if (q6) {
        a = bs[2 * p];
        b = bs[2 * p + 1];
    } else {
        a = bs[4 * p] + bs[4 * p + 1];
        b = bs[4 * p + 2] + bs[4 * p + 3];
    }
    return (int32_t)(((uint32_t)a & 0xffffu) | ((uint32_t)b << 16));
}

/* acc[c], sixteen rows of activation row i0 + c, into out's rows of groups g (and g + 1). */
INLINE void K(tile_store)(const f32x16 *acc, int C, float *out, int64_t i0, int64_t n, int64_t g, int two) {
    for (int c = 0; c < C; c++) {
        f32x8 lo, hi;
        memcpy(&lo, &acc[c], 32);
        memcpy(&hi, (const char *)&acc[c] + 32, 32);
        K(store8)(out + (i0 + c) * n, g, n, lo);
        if (two) K(store8)(out + (i0 + c) * n, g + 1, n, hi);
    }
}

/* Activation rows i0 .. i0 + C - 1 over the tile: out rows of groups g (and g + 1). */
INLINE void K(tile_rows)(int fmt, const K(tile_block) *t, int64_t nb, const int8_t *xq, const float *xd,
                         const int32_t *xbs, int64_t i0, int C, float *out, int64_t n, int64_t g, int two) {
    const int q6 = fmt == FMT_Q6K, mins = fmt == FMT_Q4K || fmt == FMT_Q5K;
    const int subs = q6 ? 16 : 8, per = 64 / subs;
    const int64_t k = nb * QKK;
    f32x16 acc[8];
    for (int c = 0; c < C; c++) acc[c] = (f32x16){0};
    for (int64_t b = 0; b < nb; b++) {
        const K(tile_block) *tb = t + b;
        i32x16 isum[8];
        for (int c = 0; c < C; c++) isum[c] = (i32x16){0};
        for (int s = 0; s < subs; s++) {
            __m512i a[8];
            for (int c = 0; c < C; c++) a[c] = _mm512_setzero_si512();
            for (int j = s * per; j < s * per + per; j++) {
                const __m512i wv = _mm512_load_si512((const void *)tb->q[j]);
                for (int c = 0; c < C; c++) a[c] = K(dot16)(a[c], wv, xq + (i0 + c) * k + b * QKK + 4 * j);
            }
            i32x16 sc;
            memcpy(&sc, tb->sc[s], sizeof sc);
            for (int c = 0; c < C; c++) isum[c] += (i32x16)a[c] * sc;
        }
        f32x16 dw, dm;
        memcpy(&dw, tb->dw, sizeof dw);
        memcpy(&dm, tb->dm, sizeof dm);
        for (int c = 0; c < C; c++) {
            const int32_t *bs = xbs + ((i0 + c) * nb + b) * 16;
            __m512i corr = _mm512_setzero_si512();
            for (int p = 0; p < subs / 2; p++)
                corr = _mm512_dpwssd_epi32(corr, _mm512_load_si512((const void *)tb->cw[p]),
                                           _mm512_set1_epi32(K(pair_word)(q6, bs, p)));
            const float dx = xd[(i0 + c) * nb + b];
            if (mins)
                acc[c] += (dw * dx) * __builtin_convertvector(isum[c], f32x16) -
                          (dm * dx) * __builtin_convertvector((i32x16)corr, f32x16);
            else
                acc[c] += (dw * dx) * __builtin_convertvector(isum[c] - (i32x16)corr, f32x16);
        }
    }
    K(tile_store)(acc, C, out, i0, n, g, two);
}

/* ------------------------------------------------------------------ 32-element formats */
/* A block of 32 of sixteen rows: the values (Q8_0's + 128, as unsigned bytes), d and Q4_1/Q5_1's m. */
typedef struct {
    uint8_t q[8][64];
    float dw[16], mw[16];
} K(tile32_block);

/* Half h of tile block t from x8 group block blk. */
INLINE void K(tile32_half)(int fmt, const uint8_t *blk, int h, K(tile32_block) *t) {
    const f32x8 dw = K(halves8)(blk), mw = has_min(fmt) ? K(halves8)(blk + 16) : (f32x8){0};
    memcpy(t->dw + 8 * h, &dw, sizeof dw);
    memcpy(t->mw + 8 * h, &mw, sizeof mw);
    u8x32 q[8];
    K(unpack_32)(fmt, blk, q);
    for (int v = 0; v < 8; v++) {
        if (fmt == FMT_Q8_0) q[v] ^= 0x80;
        memcpy(&t->q[v][32 * h], &q[v], 32);
    }
}

/* As tile_rows for a 32-element format: rows_32's steps, block by block. */
INLINE void K(tile32_rows)(int fmt, const K(tile32_block) *t, int64_t nb, const int8_t *xq, const float *xd,
                           const int32_t *xs, const float *xsf, int64_t i0, int C, float *out, int64_t n, int64_t g,
                           int two) {
    const int zero = fmt == FMT_Q8_0 ? 128 : zero_of(fmt);
    const int64_t k = nb * QK;
    f32x16 acc[8];
    for (int c = 0; c < C; c++) acc[c] = (f32x16){0};
    for (int64_t b = 0; b < nb; b++) {
        const K(tile32_block) *tb = t + b;
        __m512i a[8];
        for (int c = 0; c < C; c++) a[c] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const __m512i wv = _mm512_load_si512((const void *)tb->q[j]);
            for (int c = 0; c < C; c++) a[c] = K(dot16)(a[c], wv, xq + (i0 + c) * k + b * QK + 4 * j);
        }
        f32x16 dw, mw;
        memcpy(&dw, tb->dw, sizeof dw);
        memcpy(&mw, tb->mw, sizeof mw);
        for (int c = 0; c < C; c++) {
            const int64_t at = (i0 + c) * nb + b;
            i32x16 s = (i32x16)a[c];
            if (zero) s -= zero * xs[at];
            f32x16 f = __builtin_convertvector(s, f32x16) * dw;
            f = f * xd[at];
            if (has_min(fmt)) f = f + mw * xsf[at];
            acc[c] += f;
        }
    }
    K(tile_store)(acc, C, out, i0, n, g, two);
}

/* ------------------------------------------------------------------ the products */
/* Activation rows i0 .. i0 + C - 1 over the tile t of fmt's blocks. */
INLINE void K(tile_cols)(int fmt, const void *t, int64_t nb, const int8_t *xq, const float *xd, const int32_t *xs,
                         const float *xsf, int64_t i0, int C, float *out, int64_t n, int64_t g, int two) {
    if (is_kquant(fmt)) K(tile_rows)(fmt, (const K(tile_block) *)t, nb, xq, xd, xs, i0, C, out, n, g, two);
    else K(tile32_rows)(fmt, (const K(tile32_block) *)t, nb, xq, xd, xs, xsf, i0, C, out, n, g, two);
}

/* Rows [8 g0, 8 g1) of out (m, n), sixteen weight rows at a time; 0 when no scratch could
 * be had (the caller then takes the row kernels). */
INLINE int K(tiled_of)(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                       const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n) {
    const size_t block = is_kquant(fmt) ? sizeof(K(tile_block)) : sizeof(K(tile32_block));
    const size_t floats = (nb * block + 64) / sizeof(float);
    float *scratch = scratch_get(floats);
    if (!scratch) return 0;
    uint8_t *t = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    const int64_t bb = fmt_bytes(fmt), gb = nb * bb;
    for (int64_t g = g0; g < g1; g += 2) {
        const int two = g + 1 < g1;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *tb = t + b * block;
            if (!two) memset(tb, 0, block); /* (the empty half's rows are never stored) */
            for (int h = 0; h <= two; h++) {
                if (is_kquant(fmt)) K(tile_half)(fmt, w + (g + h) * gb + b * bb, h, (K(tile_block) *)tb);
                else K(tile32_half)(fmt, w + (g + h) * gb + b * bb, h, (K(tile32_block) *)tb);
            }
        }
        int64_t i = 0;
        for (; i + 8 <= m; i += 8) K(tile_cols)(fmt, t, nb, xq, xd, xs, xsf, i, 8, out, n, g, two);
        for (; i + 4 <= m; i += 4) K(tile_cols)(fmt, t, nb, xq, xd, xs, xsf, i, 4, out, n, g, two);
        for (; i + 2 <= m; i += 2) K(tile_cols)(fmt, t, nb, xq, xd, xs, xsf, i, 2, out, n, g, two);
        for (; i < m; i++) K(tile_cols)(fmt, t, nb, xq, xd, xs, xsf, i, 1, out, n, g, two);
    }
    scratch_done(scratch, floats);
    return 1;
}

/* product's result by the tiled kernels, one body per format (its constants folded); 0
 * when they could not run. */
TARGET static int K(tiled)(int fmt, const uint8_t *w, int64_t nb, int64_t g0, int64_t g1, const int8_t *xq,
                           const float *xd, const int32_t *xs, const float *xsf, int64_t m, float *out, int64_t n) {
#define K_CASE(F) case F: return K(tiled_of)(F, w, nb, g0, g1, xq, xd, xs, xsf, m, out, n)
    switch (fmt) {
        K_CASE(FMT_Q4K); K_CASE(FMT_Q5K); K_CASE(FMT_Q6K); K_CASE(FMT_IQ4XS);
        K_CASE(FMT_Q4_0); K_CASE(FMT_Q8_0); K_CASE(FMT_Q5_0); K_CASE(FMT_Q4_1); K_CASE(FMT_Q5_1);
    default: return 0;
    }
#undef K_CASE
}
