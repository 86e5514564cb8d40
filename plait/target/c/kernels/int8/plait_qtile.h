/* plait_qtile.h: what the int8 products and convolutions share (plait_qgemm.c,
 * plait_qconv.c): the register tile of each copy, the dot products and the output
 * stage.  Included after plait_isa.h, so each ISA copy gets its own. */
#ifndef PLAIT_QTILE_H
#define PLAIT_QTILE_H
#include <math.h>
#include <stdlib.h>
#include "plait_int8.h"
#include "plait_threads.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVXVNNI) || \
    defined(PLAIT_ISA_AVX2)
#include <immintrin.h>
#endif

#if defined(PLAIT_ISA_AVX512VNNI)
#define Q_MR 6
#define Q_NP 4
#elif defined(PLAIT_ISA_AVX512)
#define Q_MR 4
#define Q_NP 2
#elif defined(PLAIT_ISA_AVXVNNI)
#define Q_MR 4
#define Q_NP 1
#elif defined(PLAIT_ISA_AVX2)
#define Q_MR 3
#define Q_NP 1
#else
#define Q_MR 4
#define Q_NP 1
#endif
#define Q_TN (Q_NP * PLAIT_Q_NR)      /* the columns of a tile */
#define Q_MC (8 * Q_MR)               /* rows of A packed at a time */
#define Q_MIN_PARALLEL (1 << 20)      /* multiply-adds below which one thread runs */

static inline int32_t load4(const uint8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ----------------------------------------------------------------- dot products */

/* out[r][j] (r < Q_MR, j < np * 16) = dot(A'[r], B'[:, j]) over k4 groups of 4: a holds
 * Q_MR rows, row r's 4 bytes of group k at a + r * lda + k * ldk (a row-major matrix:
 * lda its row, ldk 4; interleaved rows: lda 4, ldk 4 * rows); b np panels bps bytes
 * apart, group k of a panel the 64 bytes [16 columns][4] at b + 64 * k, or with koff
 * at b + koff[k] (columns read in place: an image in 4-byte groups of channels).  A is uint8 and B int8; swapped: A int8 and B uint8 (a convolution's weights
 * times its image); swapped 2: swapped, and no pair of A's bytes (bytes 2i, 2i+1 of a
 * group of 4) sums past 128 in its positive or negative values (plait_qconv2d's mode 1:
 * the AVX2 copy then multiplies bytes with vpmaddubsw, exact; the others as 1); 3: not
 * swapped, and no pair of B's (bytes 2i, 2i+1 of a column's group of 4) sums past 128
 * (plait_qgemm's panels in mode 1; the AVX2 copy as 2, the others as 0).
 * acc_in: the sums are added to out (a later block of K) instead of replacing it. */
static inline __attribute__((always_inline)) void
q_tile(const int np, const int swapped, int64_t k4, const uint8_t* restrict a, int64_t lda,
       int64_t ldk, const int8_t* restrict b, int64_t bps, const int64_t* restrict koff,
       int32_t* restrict out, const int acc_in) {
#if defined(PLAIT_ISA_AVX512VNNI)
    /* named accumulators (an array of 24 zmm is kept in memory by GCC) */
    const __m512i z = _mm512_setzero_si512();
#define Q_INIT(r, j) \
    (acc_in && np > j ? _mm512_loadu_si512((const void*)(out + r * Q_TN + 16 * j)) : z)
    __m512i c00 = Q_INIT(0, 0), c01 = Q_INIT(0, 1), c02 = Q_INIT(0, 2),
            c03 = Q_INIT(0, 3);
    __m512i c10 = Q_INIT(1, 0), c11 = Q_INIT(1, 1), c12 = Q_INIT(1, 2),
            c13 = Q_INIT(1, 3);
    __m512i c20 = Q_INIT(2, 0), c21 = Q_INIT(2, 1), c22 = Q_INIT(2, 2),
            c23 = Q_INIT(2, 3);
    __m512i c30 = Q_INIT(3, 0), c31 = Q_INIT(3, 1), c32 = Q_INIT(3, 2),
            c33 = Q_INIT(3, 3);
    __m512i c40 = Q_INIT(4, 0), c41 = Q_INIT(4, 1), c42 = Q_INIT(4, 2),
            c43 = Q_INIT(4, 3);
    __m512i c50 = Q_INIT(5, 0), c51 = Q_INIT(5, 1), c52 = Q_INIT(5, 2),
            c53 = Q_INIT(5, 3);
#undef Q_INIT
    for (int64_t k = 0; k < k4; ++k) {
        const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
        const __m512i b0 = _mm512_loadu_si512((const void*)bk);
        const __m512i b1 = np > 1 ? _mm512_loadu_si512((const void*)(bk + bps)) : z;
        const __m512i b2 = np > 2 ? _mm512_loadu_si512((const void*)(bk + 2 * bps)) : z;
        const __m512i b3 = np > 3 ? _mm512_loadu_si512((const void*)(bk + 3 * bps)) : z;
        const uint8_t* ak = a + ldk * k;
#define Q_DP(c, bv, av) c = swapped ? _mm512_dpbusd_epi32(c, bv, av) : _mm512_dpbusd_epi32(c, av, bv)
#define Q_ROW(r)                                                     \
        {                                                            \
            const __m512i ar = _mm512_set1_epi32(load4(ak + r * lda)); \
            Q_DP(c##r##0, b0, ar);                                   \
            if (np > 1) Q_DP(c##r##1, b1, ar);                       \
            if (np > 2) Q_DP(c##r##2, b2, ar);                       \
            if (np > 3) Q_DP(c##r##3, b3, ar);                       \
        }
        Q_ROW(0) Q_ROW(1) Q_ROW(2) Q_ROW(3) Q_ROW(4) Q_ROW(5)
#undef Q_ROW
#undef Q_DP
    }
#define Q_PUT(r, j) \
    if (np > j) _mm512_storeu_si512((void*)(out + r * Q_TN + 16 * j), c##r##j);
#define Q_PUTROW(r) Q_PUT(r, 0) Q_PUT(r, 1) Q_PUT(r, 2) Q_PUT(r, 3)
    Q_PUTROW(0) Q_PUTROW(1) Q_PUTROW(2) Q_PUTROW(3) Q_PUTROW(4) Q_PUTROW(5)
#undef Q_PUTROW
#undef Q_PUT
#elif defined(PLAIT_ISA_AVXVNNI)
    (void)np;
    (void)bps;
    __m256i acc[Q_MR][2];
    for (int r = 0; r < Q_MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int64_t k = 0; k < k4; ++k) {
        const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
        __m256i b0 = _mm256_loadu_si256((const __m256i*)bk);
        __m256i b1 = _mm256_loadu_si256((const __m256i*)(bk + 32));
        for (int r = 0; r < Q_MR; ++r) {
            __m256i ar = _mm256_set1_epi32(load4(a + r * lda + ldk * k));
            if (swapped) {
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], b0, ar);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], b1, ar);
            } else {
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], ar, b0);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], ar, b1);
            }
        }
    }
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 2; ++q) {
            __m256i* o = (__m256i*)(out + r * Q_TN + 8 * q);
            __m256i v = acc[r][q];
            if (acc_in) v = _mm256_add_epi32(v, _mm256_loadu_si256(o));
            _mm256_storeu_si256(o, v);
        }
#elif defined(PLAIT_ISA_AVX512)
    /* no dot products: both operands widened to int16, vpmaddwd sums pairs in int32;
     * acc[r][q]: columns 8q..8q+7 (q < 2 * np), two partial sums each (k 0-1, 2-3) */
    __m512i acc[Q_MR][4];
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_si512();
    for (int64_t k = 0; k < k4; ++k) {
        __m512i bw[4];
        const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
        for (int q = 0; q < 2 * np; ++q) {
            const int8_t* bq = bk + (q >> 1) * bps + 32 * (q & 1);
            __m256i b8 = _mm256_loadu_si256((const __m256i*)bq);
            bw[q] = swapped ? _mm512_cvtepu8_epi16(b8) : _mm512_cvtepi8_epi16(b8);
        }
        for (int r = 0; r < Q_MR; ++r) {
            __m128i a8 = _mm_cvtsi32_si128(load4(a + r * lda + ldk * k));
            __m128i a16 = swapped ? _mm_cvtepi8_epi16(a8) : _mm_cvtepu8_epi16(a8);
            __m512i aw = _mm512_broadcastq_epi64(a16);
            for (int q = 0; q < 2 * np; ++q)
                acc[r][q] = _mm512_add_epi32(acc[r][q], _mm512_madd_epi16(aw, bw[q]));
        }
    }
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 2 * np; ++q) {
            /* the pair sums of column c in lanes 2c, 2c+1: add, keep the even lanes */
            __m512i t = _mm512_add_epi32(acc[r][q], _mm512_srli_epi64(acc[r][q], 32));
            __m256i* o = (__m256i*)(out + r * Q_TN + 8 * q);
            __m256i v = _mm512_cvtepi64_epi32(t);
            if (acc_in) v = _mm256_add_epi32(v, _mm256_loadu_si256(o));
            _mm256_storeu_si256(o, v);
        }
#elif defined(PLAIT_ISA_AVX2)
    (void)np;
    (void)bps;
    if (swapped >= 2) {
        /* weights whose pairs are safe (mode 1 of plait_qconv2d's rows, swapped 2, or
         * of plait_qgemm's panels, 3): vpmaddubsw sums each pair of uint8 x int8 bytes
         * in int16 without saturating, vpmaddwd by 1 the two pairs of a column into
         * int32; c<r>0: columns 0-7, c<r>1: 8-15 */
        const __m256i ones = _mm256_set1_epi16(1);
        const __m256i z = _mm256_setzero_si256();
#define Q_INIT(r, q) (acc_in ? _mm256_loadu_si256((const __m256i*)(out + r * Q_TN + 8 * q)) : z)
        __m256i c00 = Q_INIT(0, 0), c01 = Q_INIT(0, 1);
        __m256i c10 = Q_INIT(1, 0), c11 = Q_INIT(1, 1);
        __m256i c20 = Q_INIT(2, 0), c21 = Q_INIT(2, 1);
#undef Q_INIT
        for (int64_t k = 0; k < k4; ++k) {
            const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
            const __m256i b0 = _mm256_loadu_si256((const __m256i*)(const void*)bk);
            const __m256i b1 = _mm256_loadu_si256((const __m256i*)(const void*)(bk + 32));
            const uint8_t* ak = a + ldk * k;
#define Q_ROW(r)                                                                       \
            {                                                                          \
                const __m256i ar = _mm256_set1_epi32(load4(ak + r * lda));             \
                const __m256i p0 = swapped == 2 ? _mm256_maddubs_epi16(b0, ar)         \
                                                : _mm256_maddubs_epi16(ar, b0);        \
                const __m256i p1 = swapped == 2 ? _mm256_maddubs_epi16(b1, ar)         \
                                                : _mm256_maddubs_epi16(ar, b1);        \
                c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(p0, ones));      \
                c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(p1, ones));      \
            }
            Q_ROW(0) Q_ROW(1) Q_ROW(2)
#undef Q_ROW
        }
#define Q_PUT(r)                                                                  \
        _mm256_storeu_si256((__m256i*)(void*)(out + r * Q_TN), c##r##0);          \
        _mm256_storeu_si256((__m256i*)(void*)(out + r * Q_TN + 8), c##r##1);
        Q_PUT(0) Q_PUT(1) Q_PUT(2)
#undef Q_PUT
        return;
    }
    /* acc[r][q]: columns 4q..4q+3, two partial sums each (k 0-1 and 2-3) */
    __m256i acc[Q_MR][4];
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_si256();
    for (int64_t k = 0; k < k4; ++k) {
        __m256i bw[4];
        const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
        for (int q = 0; q < 4; ++q) {
            __m128i b8 = _mm_loadu_si128((const __m128i*)(bk + 16 * q));
            bw[q] = swapped ? _mm256_cvtepu8_epi16(b8) : _mm256_cvtepi8_epi16(b8);
        }
        for (int r = 0; r < Q_MR; ++r) {
            __m128i a8 = _mm_cvtsi32_si128(load4(a + r * lda + ldk * k));
            __m256i aw = _mm256_broadcastq_epi64(swapped ? _mm_cvtepi8_epi16(a8)
                                                         : _mm_cvtepu8_epi16(a8));
            for (int q = 0; q < 4; ++q)
                acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(aw, bw[q]));
        }
    }
    for (int r = 0; r < Q_MR; ++r) {
        __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xD8);
        __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][2], acc[r][3]), 0xD8);
        __m256i* o = (__m256i*)(out + r * Q_TN);
        if (acc_in) {
            lo = _mm256_add_epi32(lo, _mm256_loadu_si256(o));
            hi = _mm256_add_epi32(hi, _mm256_loadu_si256(o + 1));
        }
        _mm256_storeu_si256(o, lo);
        _mm256_storeu_si256(o + 1, hi);
    }
#else
    (void)np;
    (void)bps;
    uint32_t acc[Q_MR][PLAIT_Q_NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < k4; ++k) {
        const int8_t* bk = koff ? b + koff[k] : b + 64 * k;
        const uint8_t* bu = (const uint8_t*)bk;
        for (int r = 0; r < Q_MR; ++r) {
            const uint8_t* ar = a + r * lda + ldk * k;
            if (swapped) {
                int32_t a0 = (int8_t)ar[0], a1 = (int8_t)ar[1], a2 = (int8_t)ar[2],
                        a3 = (int8_t)ar[3];
                for (int j = 0; j < PLAIT_Q_NR; ++j)
                    acc[r][j] += (uint32_t)(a0 * bu[4 * j] + a1 * bu[4 * j + 1] +
                                            a2 * bu[4 * j + 2] + a3 * bu[4 * j + 3]);
            } else {
                int32_t a0 = ar[0], a1 = ar[1], a2 = ar[2], a3 = ar[3];
                for (int j = 0; j < PLAIT_Q_NR; ++j)
                    acc[r][j] += (uint32_t)(a0 * bk[4 * j] + a1 * bk[4 * j + 1] +
                                            a2 * bk[4 * j + 2] + a3 * bk[4 * j + 3]);
            }
        }
    }
    for (int r = 0; r < Q_MR; ++r)
        for (int j = 0; j < PLAIT_Q_NR; ++j)
            out[r * Q_TN + j] =
                (int32_t)(acc[r][j] + (acc_in ? (uint32_t)out[r * Q_TN + j] : 0u));
#endif
}

/* q_tile with acc_in a constant in each of its two copies */
#define Q_TILE_CONST_ACC(np, swapped, k4, a, lda, ldk, b, bps, koff, out, acc_in)        \
    do {                                                                                 \
        if (acc_in) q_tile(np, swapped, k4, a, lda, ldk, b, bps, koff, out, 1);         \
        else q_tile(np, swapped, k4, a, lda, ldk, b, bps, koff, out, 0);                \
    } while (0)

/* q_tile of np panels, swapped or not: a function of its own per shape, so neither
 * the caller's live values nor another shape's code crowd the accumulators out of the
 * registers */
#define Q_TILE_FN(name, np, swapped)                                                     \
    static __attribute__((noinline)) void name(                                          \
        int64_t k4, const uint8_t* restrict a, int64_t lda, int64_t ldk,                 \
        const int8_t* restrict b, int64_t bps, const int64_t* restrict koff,             \
        int32_t* restrict out, int acc_in) {                                             \
        Q_TILE_CONST_ACC(np, swapped, k4, a, lda, ldk, b, bps, koff, out, acc_in);      \
    }
Q_TILE_FN(q_tile_1s, 1, 1)
Q_TILE_FN(q_tile_1u, 1, 0)
#if defined(PLAIT_ISA_AVX2)
Q_TILE_FN(q_tile_1p, 1, 2)
Q_TILE_FN(q_tile_1q, 1, 3)
#endif
#if Q_NP > 1
Q_TILE_FN(q_tile_2s, 2, 1)
Q_TILE_FN(q_tile_2u, 2, 0)
#endif
#if Q_NP > 2
Q_TILE_FN(q_tile_3s, 3, 1)
Q_TILE_FN(q_tile_3u, 3, 0)
Q_TILE_FN(q_tile_4s, 4, 1)
Q_TILE_FN(q_tile_4u, 4, 0)
#endif
#undef Q_TILE_FN

/* q_tile on the first n (1 <= n <= Q_NP) of a tile's panels */
static inline __attribute__((always_inline)) void
q_tile_n(int64_t n, const int swapped, int64_t k4, const uint8_t* restrict a, int64_t lda,
         int64_t ldk, const int8_t* restrict b, int64_t bps, const int64_t* restrict koff,
         int32_t* restrict out, const int acc_in) {
#define Q_CALL(fn) fn(k4, a, lda, ldk, b, bps, koff, out, acc_in)
#if defined(PLAIT_ISA_AVX2)
    if (swapped >= 2) {
        if (swapped == 2) Q_CALL(q_tile_1p);
        else Q_CALL(q_tile_1q);
        return;
    }
#endif
    /* the other copies: 2 is swapped, 3 not */
    const int sw = swapped == 3 ? 0 : swapped != 0;
#if Q_NP > 2
    if (n >= 4) sw ? Q_CALL(q_tile_4s) : Q_CALL(q_tile_4u);
    else if (n == 3) sw ? Q_CALL(q_tile_3s) : Q_CALL(q_tile_3u);
    else
#endif
#if Q_NP > 1
    if (n == 2) sw ? Q_CALL(q_tile_2s) : Q_CALL(q_tile_2u);
    else
#endif
        sw ? Q_CALL(q_tile_1s) : Q_CALL(q_tile_1u);
#undef Q_CALL
}

/* ---------------------------------------------------------------- output stage */

/* round half to even of a float of magnitude below 2^22 (the current rounding mode,
 * nearest-even by default, as cvtps2dq) */
static inline float q_round(float f) {
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    return f >= 0.0f ? (f + magic) - magic : (f - magic) + magic;
}

/* v[j] rounded as cvtps2dq (NaN and |v| >= 2^31: INT_MIN) and saturated to [lo, hi]:
 * the codes of an output stage's QLinearAdd (simple loops the compiler vectorizes) */
static inline void q_add_codes(const float* restrict f, int32_t* restrict q, int64_t cnt,
                               int32_t lo, int32_t hi) {
    const float flo = (float)lo, fhi = (float)hi, big = 2147483648.0f;
    for (int64_t j = 0; j < cnt; ++j) {
        const float v = f[j];
        float t = v > flo ? v : flo;
        t = t < fhi ? t : fhi;
        t = fabsf(v) < big ? t : flo;
        q[j] = (int32_t)q_round(t);
    }
}

/* The QLinearAdd of an output stage (plait_q_out's add_kind): q[j] (cnt <= 64 codes of
 * column n0 + j, or all of column n0) becomes the code of v = fma(q, r, c[n]) (kind 1)
 * or fma(c[n], r2, fma(q, r, fixed)) (kind 2). */
static inline void q_store_add(const plait_q_out* o, int32_t* restrict q, int64_t cnt,
                               int64_t n0, int by_col, int32_t lo, int32_t hi) {
    const float* restrict ac = o->add_c + (o->add_cols ? n0 : 0);
    const float r = o->add_r, r2 = o->add_r2, fixed = o->add_fixed, c0 = ac[0];
    float f[64];
    if (o->add_kind == 3) {   /* DequantizeLinear, a float bias, QuantizeLinear */
        const float s1 = o->fs1, s2 = o->fs2;
        const int32_t z1 = o->fz1, z2 = o->fz2;
        if (by_col && o->add_cols)
            for (int64_t j = 0; j < cnt; ++j) f[j] = ((float)(q[j] - z1) * s1 + ac[j]) / s2;
        else
            for (int64_t j = 0; j < cnt; ++j) f[j] = ((float)(q[j] - z1) * s1 + c0) / s2;
        const float flo = (float)(lo - z2), fhi = (float)(hi - z2);
        for (int64_t j = 0; j < cnt; ++j) {
            float t = f[j] > flo ? f[j] : flo;   /* maxps: NaN -> the low end */
            t = t < fhi ? t : fhi;
            q[j] = (int32_t)q_round(t) + z2;
        }
        return;
    }
    if (by_col && o->add_cols) {
        if (o->add_kind == 1)
            for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf((float)q[j], r, ac[j]);
        else
            for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf(ac[j], r2, fmaf((float)q[j], r, fixed));
    } else if (o->add_kind == 1) {
        for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf((float)q[j], r, c0);
    } else {
        for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf(c0, r2, fmaf((float)q[j], r, fixed));
    }
    q_add_codes(f, q, cnt, lo, hi);
}

/* The second QLinearAdd of an output stage (plait_q_out's add2_kind): q[j] (the codes
 * of output elements idx0 + j, cnt <= 64) with the tensor add2_t at the same elements. */
static inline void q_store_add_tensor(const plait_q_out* o, int32_t* restrict q,
                                      int64_t cnt, int64_t idx0, int u, int32_t lo,
                                      int32_t hi) {
    const float r = o->add2_r, rt = o->add2_rt, fixed = o->add2_fixed;
    float t[64], f[64];
    if (u) {
        const uint8_t* restrict tu = (const uint8_t*)o->add2_t + idx0;
        for (int64_t j = 0; j < cnt; ++j) t[j] = (float)tu[j];
    } else {
        const int8_t* restrict ts = (const int8_t*)o->add2_t + idx0;
        for (int64_t j = 0; j < cnt; ++j) t[j] = (float)ts[j];
    }
    if (o->add2_kind == 1)
        for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf((float)q[j], r, fmaf(t[j], rt, fixed));
    else
        for (int64_t j = 0; j < cnt; ++j) f[j] = fmaf(t[j], rt, fmaf((float)q[j], r, fixed));
    q_add_codes(f, q, cnt, lo, hi);
}

/* The output stage of count accumulators v (int32 sums, modulo 2^32) into c from
 * element idx0 on, contiguous.  by_col: v[j] is column n0 + j (a row of a product);
 * else every v[j] is column n0 (a column of a convolution's output, a depthwise row).
 * The loops are simple enough for the compiler to vectorize; q_store runs the 8-bit
 * outputs in registers on the x86 copies and comes here for the rest. */
static inline __attribute__((always_inline)) void
q_store_generic(const plait_q_out* o, const uint32_t* restrict v, int64_t count, int64_t n0,
        const int by_col, void* c, int64_t idx0) {
    const int32_t* bias = o->bias ? o->bias + n0 : NULL;
    const uint32_t b0 = bias ? (uint32_t)bias[0] : 0u;
    if (o->kind == PLAIT_Q_OUT_I32) {
        int32_t* restrict dst = (int32_t*)c + idx0;
        if (bias && by_col)
            for (int64_t j = 0; j < count; ++j) dst[j] = (int32_t)(v[j] + (uint32_t)bias[j]);
        else
            for (int64_t j = 0; j < count; ++j) dst[j] = (int32_t)(v[j] + b0);
        return;
    }
    const float* sc = o->scale + (o->scale_cols ? n0 : 0);
    const int sstep = by_col && o->scale_cols;
    const float s0 = sc[0];
    float f[64];
    for (int64_t j0 = 0; j0 < count; j0 += 64) {
        const int64_t cnt = count - j0 < 64 ? count - j0 : 64;
        const uint32_t* restrict vj = v + j0;
        if (bias && by_col)
            for (int64_t j = 0; j < cnt; ++j)
                f[j] = (float)(int32_t)(vj[j] + (uint32_t)bias[j0 + j]);
        else
            for (int64_t j = 0; j < cnt; ++j) f[j] = (float)(int32_t)(vj[j] + b0);
        if (sstep)
            for (int64_t j = 0; j < cnt; ++j) f[j] = f[j] * sc[j0 + j];
        else
            for (int64_t j = 0; j < cnt; ++j) f[j] = f[j] * s0;
        if (o->kind == PLAIT_Q_OUT_F32) {
            float* restrict dst = (float*)c + idx0 + j0;
            if (o->fbias && by_col)
                for (int64_t j = 0; j < cnt; ++j) f[j] = f[j] + o->fbias[n0 + j0 + j];
            else if (o->fbias)
                for (int64_t j = 0; j < cnt; ++j) f[j] = f[j] + o->fbias[n0];
            if (o->relu)
                for (int64_t j = 0; j < cnt; ++j) f[j] = f[j] < 0.0f ? 0.0f : f[j];
            for (int64_t j = 0; j < cnt; ++j) dst[j] = f[j];
            continue;
        }
        const int u = o->kind == PLAIT_Q_OUT_U8;
        const int32_t lo = u ? 0 : -128, hi = u ? 255 : 127, zo = o->zo;
        const float flo = (float)(lo - zo), fhi = (float)(hi - zo);
        int32_t q[64];
        for (int64_t j = 0; j < cnt; ++j) {
            float x = f[j] > flo ? f[j] : flo;   /* maxps: NaN -> lo */
            x = x < fhi ? x : fhi;
            int32_t r = (int32_t)q_round(x) + zo;
            q[j] = r < lo ? lo : (r > hi ? hi : r);
        }
        if (o->add_kind) q_store_add(o, q, cnt, n0 + j0, by_col, lo, hi);
        if (o->add2_kind) q_store_add_tensor(o, q, cnt, idx0 + j0, u, lo, hi);
        if (u) {
            uint8_t* restrict dst = (uint8_t*)c + idx0 + j0;
            for (int64_t j = 0; j < cnt; ++j) dst[j] = (uint8_t)q[j];
        } else {
            int8_t* restrict dst = (int8_t*)c + idx0 + j0;
            for (int64_t j = 0; j < cnt; ++j) dst[j] = (int8_t)q[j];
        }
    }
}


/* ------------------------------------------------ the 8-bit output stage in registers
 *
 * The same operations as q_store_generic, lane by lane (cvtdq2ps, mulps, maxps/minps
 * with NaN to the low end, cvtps2dq rounding half to even, the QLinearAdds' FMAs, the
 * division of add_kind 3): equal bit for bit.  Q_VF/Q_VI are 16 lanes (AVX-512, masked
 * tails) or 8 (AVX2, AVX-VNNI: whole vectors; a tail goes to q_store_generic). */
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
#define Q_VL 16
typedef __m512 q_vf;
typedef __m512i q_vi;
typedef __mmask16 q_vm;
#define q_fset(x) _mm512_set1_ps(x)
#define q_iset(x) _mm512_set1_epi32(x)
#define q_iload(m, p) _mm512_maskz_loadu_epi32(m, (const void*)(p))
#define q_fload(m, p) _mm512_maskz_loadu_ps(m, (const void*)(p))
#define q_iadd(a, b) _mm512_add_epi32(a, b)
#define q_isub(a, b) _mm512_sub_epi32(a, b)
#define q_i2f(a) _mm512_cvtepi32_ps(a)
#define q_fmul(a, b) _mm512_mul_ps(a, b)
#define q_fadd(a, b) _mm512_add_ps(a, b)
#define q_fdiv(a, b) _mm512_div_ps(a, b)
#define q_fmax(a, b) _mm512_max_ps(a, b)
#define q_fmin(a, b) _mm512_min_ps(a, b)
#define q_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define q_round_i(a) _mm512_cvt_roundps_epi32(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
/* |a| < big lanes keep a, the others (and NaN) take lo */
static inline q_vf q_keep_small(q_vf a, q_vf t, q_vf lo) {
    const __mmask16 ok = _mm512_cmp_ps_mask(_mm512_abs_ps(a), _mm512_set1_ps(2147483648.0f),
                                            _CMP_LT_OQ);
    return _mm512_mask_blend_ps(ok, lo, t);
}
/* 8-bit codes of a tensor (u: uint8) as int32 lanes */
static inline q_vi q_load_codes(q_vm m, const void* p, int u) {
    const __m128i b = _mm_maskz_loadu_epi8(m, p);
    return u ? _mm512_cvtepu8_epi32(b) : _mm512_cvtepi8_epi32(b);
}
/* the codes q (already in the output type's range) stored as bytes */
static inline void q_store_codes(q_vm m, void* dst, q_vi q) {
    _mm_mask_storeu_epi8(dst, m, _mm512_cvtepi32_epi8(q));
}
#define Q_VSTORE 1
#elif defined(PLAIT_ISA_AVXVNNI) || defined(PLAIT_ISA_AVX2)
#define Q_VL 8
typedef __m256 q_vf;
typedef __m256i q_vi;
typedef int q_vm;   /* whole vectors only */
#define q_fset(x) _mm256_set1_ps(x)
#define q_iset(x) _mm256_set1_epi32(x)
#define q_iload(m, p) ((void)(m), _mm256_loadu_si256((const __m256i*)(const void*)(p)))
#define q_fload(m, p) ((void)(m), _mm256_loadu_ps((const float*)(p)))
#define q_iadd(a, b) _mm256_add_epi32(a, b)
#define q_isub(a, b) _mm256_sub_epi32(a, b)
#define q_i2f(a) _mm256_cvtepi32_ps(a)
#define q_fmul(a, b) _mm256_mul_ps(a, b)
#define q_fadd(a, b) _mm256_add_ps(a, b)
#define q_fdiv(a, b) _mm256_div_ps(a, b)
#define q_fmax(a, b) _mm256_max_ps(a, b)
#define q_fmin(a, b) _mm256_min_ps(a, b)
#define q_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define q_round_i(a) _mm256_cvtps_epi32(a)
static inline q_vf q_keep_small(q_vf a, q_vf t, q_vf lo) {
    const __m256 ab = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    const __m256 ok = _mm256_cmp_ps(ab, _mm256_set1_ps(2147483648.0f), _CMP_LT_OQ);
    return _mm256_blendv_ps(lo, t, ok);
}
static inline q_vi q_load_codes(q_vm m, const void* p, int u) {
    (void)m;
    const __m128i b = _mm_loadl_epi64((const __m128i*)p);
    return u ? _mm256_cvtepu8_epi32(b) : _mm256_cvtepi8_epi32(b);
}
static inline void q_store_codes(q_vm m, void* dst, q_vi q) {
    (void)m;
    /* byte 0 of every lane (the codes are in range), the two halves joined */
    const __m256i sh = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, -1, -1, -1);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, sh),
                                                  _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64((__m128i*)dst, _mm256_castsi256_si128(b));
}
#define Q_VSTORE 1
#endif

#if defined(Q_VSTORE)
/* the codes of v rounded as cvtps2dq (NaN and |v| >= 2^31: lo) and clamped to
 * [lo, hi] (q_add_codes) */
static inline q_vi q_vcodes(q_vf v, q_vf flo, q_vf fhi) {
    const q_vf t = q_fmin(q_fmax(v, flo), fhi);   /* maxps: NaN -> lo */
    return q_round_i(q_keep_small(v, t, flo));
}

/* What every vector of one q_store call uses, read once (the 8-bit stores could
 * alias the parameters, so the compiler would read them again per vector). */
typedef struct {
    const int32_t* bias;     /* per column (by_col), or NULL */
    const float* scale;      /* per column, or NULL */
    const float* add_c;      /* per column, or NULL */
    const uint8_t* add2_t;   /* the residual at the call's first element, or NULL */
    q_vi vb, vzo, vz1, vz2;
    q_vf vs, flo, fhi, rlo, rhi, c0, r, r2, fixed, s1, s2, zlo, zhi, r2a, rt, fixed2;
    int add_kind, add2_kind, u;
} q_vparams;

static inline __attribute__((always_inline)) void
q_vparams_init(q_vparams* k, const plait_q_out* o, int64_t n0, const int by_col, int64_t idx0) {
    const int u = o->kind == PLAIT_Q_OUT_U8;
    const int32_t lo = u ? 0 : -128, hi = u ? 255 : 127, zo = o->zo;
    const int32_t* bias = o->bias ? o->bias + n0 : NULL;
    const float* sc = o->scale + (o->scale_cols ? n0 : 0);
    k->u = u;
    k->bias = bias && by_col ? bias : NULL;
    k->vb = q_iset(bias && !by_col ? bias[0] : 0);
    k->scale = by_col && o->scale_cols ? sc : NULL;
    k->vs = q_fset(sc[0]);
    k->vzo = q_iset(zo);
    k->flo = q_fset((float)(lo - zo));
    k->fhi = q_fset((float)(hi - zo));
    k->rlo = q_fset((float)lo);
    k->rhi = q_fset((float)hi);
    k->add_kind = o->add_kind;
    k->add_c = NULL;
    if (o->add_kind) {
        const float* ac = o->add_c + (o->add_cols ? n0 : 0);
        k->add_c = by_col && o->add_cols ? ac : NULL;
        k->c0 = q_fset(ac[0]);
        k->r = q_fset(o->add_r);
        k->r2 = q_fset(o->add_r2);
        k->fixed = q_fset(o->add_fixed);
        k->vz1 = q_iset(o->fz1);
        k->vz2 = q_iset(o->fz2);
        k->s1 = q_fset(o->fs1);
        k->s2 = q_fset(o->fs2);
        k->zlo = q_fset((float)(lo - o->fz2));
        k->zhi = q_fset((float)(hi - o->fz2));
    }
    k->add2_kind = o->add2_kind;
    k->add2_t = o->add2_kind ? (const uint8_t*)o->add2_t + idx0 : NULL;
    if (o->add2_kind) {
        k->r2a = q_fset(o->add2_r);
        k->rt = q_fset(o->add2_rt);
        k->fixed2 = q_fset(o->add2_fixed);
    }
}

/* One vector of q_store's 8-bit outputs: the Q_VL sums at src (mask m) as the codes of
 * elements j .. j + Q_VL - 1 of the call (their bias, scale, residual) into dst + j. */
static inline __attribute__((always_inline)) void
q_vstore_src(const q_vparams* k, const uint32_t* restrict src, int64_t j, q_vm m,
             uint8_t* dst) {
    q_vi x = q_iadd(q_iload(m, src), k->bias ? q_iload(m, k->bias + j) : k->vb);
    q_vf f = q_fmul(q_i2f(x), k->scale ? q_fload(m, k->scale + j) : k->vs);
    f = q_fmin(q_fmax(f, k->flo), k->fhi);
    q_vi q = q_iadd(q_round_i(f), k->vzo);
    if (k->add_kind) {
        const q_vf cj = k->add_c ? q_fload(m, k->add_c + j) : k->c0;
        if (k->add_kind == 3) {   /* DequantizeLinear, a float bias, QuantizeLinear */
            q_vf g = q_fmul(q_i2f(q_isub(q, k->vz1)), k->s1);
            g = q_fdiv(q_fadd(g, cj), k->s2);
            g = q_fmin(q_fmax(g, k->zlo), k->zhi);
            q = q_iadd(q_round_i(g), k->vz2);
        } else {
            const q_vf qf = q_i2f(q);
            const q_vf g = k->add_kind == 1 ? q_fma(qf, k->r, cj)
                                            : q_fma(cj, k->r2, q_fma(qf, k->r, k->fixed));
            q = q_vcodes(g, k->rlo, k->rhi);
        }
    }
    if (k->add2_kind) {   /* a residual QLinearAdd with a tensor of the output's shape */
        const q_vf t = q_i2f(q_load_codes(m, k->add2_t + j, k->u));
        const q_vf qf = q_i2f(q);
        const q_vf g = k->add2_kind == 1 ? q_fma(qf, k->r2a, q_fma(t, k->rt, k->fixed2))
                                         : q_fma(t, k->rt, q_fma(qf, k->r2a, k->fixed2));
        q = q_vcodes(g, k->rlo, k->rhi);
    }
    q_store_codes(m, dst + j, q);
}

/* lanes j .. j + Q_VL - 1 (mask m) of v into dst + j */
static inline __attribute__((always_inline)) void
q_vstore_step(const q_vparams* k, const uint32_t* restrict v, int64_t j, q_vm m,
              uint8_t* dst) {
    q_vstore_src(k, v + j, j, m, dst);
}
#endif

/* The output stage of count accumulators v into c from element idx0 on (see
 * q_store_generic): the 8-bit outputs a vector at a time. */
static inline __attribute__((always_inline)) void
q_store(const plait_q_out* o, const uint32_t* restrict v, int64_t count, int64_t n0,
        const int by_col, void* c, int64_t idx0) {
#if defined(Q_VSTORE)
    if (o->kind == PLAIT_Q_OUT_U8 || o->kind == PLAIT_Q_OUT_S8) {
        int64_t j = 0;
        q_vparams k;
        q_vparams_init(&k, o, n0, by_col, idx0);
        uint8_t* dst = (uint8_t*)c + idx0;
#if Q_VL == 16
        for (; j < count; j += 16) {
            const __mmask16 m = count - j >= 16 ? (__mmask16)0xFFFF
                                                : (__mmask16)((1u << (count - j)) - 1);
            q_vstore_step(&k, v, j, m, dst);
        }
#else
        for (; j + Q_VL <= count; j += Q_VL) q_vstore_step(&k, v, j, 0, dst);
        if (j < count)
            q_store_generic(o, v + j, count - j, n0 + (by_col ? j : 0), by_col, c, idx0 + j);
#endif
        return;
    }
#endif
    q_store_generic(o, v, count, n0, by_col, c, idx0);
}

/* --------------------------------------------------------------------- packing */

static inline int32_t q_zero_point(const void* z, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)z)[i] : (int32_t)((const uint8_t*)z)[i];
}

/* Rows m0..m0+mc-1 of A' (shifted to uint8) as rows of kp bytes (zero-padded; rows up
 * to a multiple of Q_MR are zero), their sums over K into rs, their zero points into
 * zap. */

#endif
