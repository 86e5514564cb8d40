/* plait_qgemm.c: the c target's int8 products (8-bit x 8-bit -> int32 with a fused
 * output stage), a kernel family of plait_isa.h compiled for AVX512-VNNI, AVX-VNNI,
 * AVX2 and the baseline; the running CPU picks one copy when the library is loaded.
 *
 * Every combination of uint8/int8 operands is computed as uint8 x int8, the form of the
 * dot-product instructions (vpdpbusd): an int8 A is shifted by 128 (a ^ 0x80, its zero
 * point + 128) and a uint8 B by -128 (its zero point - 128), which leaves every
 * (a - za)(b - zb) unchanged.  With A' and B' the shifted operands,
 *
 *     sum_k (a - za)(b - zb) = dot(A'[m], B'[:, n]) - zb'[n] * rowsum(A'[m])
 *                              - za'[m] * (colsum(B'[:, n]) - K * zb'[n])
 *
 * in int32 arithmetic modulo 2^32, the reference's int64 sum cast to int32 (every copy
 * wraps: vpdpbusd and vpmaddwd do not saturate).  The column terms of a constant B are
 * computed at compile time with its packing; the row sums while A is packed.
 *
 * The dot products per copy:
 *  - avx512vnni: vpdpbusd on zmm, a tile of 6 rows x 32 columns (12 accumulators);
 *  - avx512: no dot products: both operands widened to int16, vpmaddwd (zmm) sums
 *    pairs in int32, a tile of 4 rows x 32 columns;
 *  - avxvnni: vpdpbusd (VEX) on ymm, 4 rows x 16 columns;
 *  - avx2: no vpmaddubsw (its int16 pair sums saturate for uint8 x int8: 2 * 255 *
 *    -128 < -32768); both operands are widened to int16 and vpmaddwd sums pairs in
 *    int32, exact; 3 rows x 16 columns;
 *  - baseline: portable C, 4 rows x 16 columns.
 *
 * The output stage (plait_q_out) runs on each finished tile.  Its float arithmetic is
 * one rounding per operation, as the reference's (no contraction into FMA). */
#include "plait_isa.h"
#include <math.h>
#include <stdlib.h>
#include "plait_qgemm.h"
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
#define Q_NP 2
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
 * Q_MR packed rows lda bytes apart, b np panels bps bytes apart.  A is uint8 and B int8;
 * swapped: A int8 and B uint8 (a convolution's weights times its image). */
static inline __attribute__((always_inline)) void
q_tile(const int np, const int swapped, int64_t k4, const uint8_t* restrict a, int64_t lda,
       const int8_t* restrict b, int64_t bps, int32_t* restrict out) {
#if defined(PLAIT_ISA_AVX512VNNI)
    __m512i acc[Q_MR][Q_NP];
    for (int r = 0; r < Q_MR; ++r)
        for (int j = 0; j < Q_NP; ++j) acc[r][j] = _mm512_setzero_si512();
    for (int64_t k = 0; k < k4; ++k) {
        __m512i b0 = _mm512_loadu_si512((const void*)(b + 64 * k));
        __m512i b1 = np > 1 ? _mm512_loadu_si512((const void*)(b + bps + 64 * k))
                            : _mm512_setzero_si512();
        for (int r = 0; r < Q_MR; ++r) {
            __m512i ar = _mm512_set1_epi32(load4(a + r * lda + 4 * k));
            if (swapped) {
                acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], b0, ar);
                if (np > 1) acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], b1, ar);
            } else {
                acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], ar, b0);
                if (np > 1) acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], ar, b1);
            }
        }
    }
    for (int r = 0; r < Q_MR; ++r)
        for (int j = 0; j < np; ++j)
            _mm512_storeu_si512((void*)(out + r * Q_TN + 16 * j), acc[r][j]);
#elif defined(PLAIT_ISA_AVXVNNI)
    (void)np;
    (void)bps;
    __m256i acc[Q_MR][2];
    for (int r = 0; r < Q_MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int64_t k = 0; k < k4; ++k) {
        __m256i b0 = _mm256_loadu_si256((const __m256i*)(b + 64 * k));
        __m256i b1 = _mm256_loadu_si256((const __m256i*)(b + 64 * k + 32));
        for (int r = 0; r < Q_MR; ++r) {
            __m256i ar = _mm256_set1_epi32(load4(a + r * lda + 4 * k));
            if (swapped) {
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], b0, ar);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], b1, ar);
            } else {
                acc[r][0] = _mm256_dpbusd_avx_epi32(acc[r][0], ar, b0);
                acc[r][1] = _mm256_dpbusd_avx_epi32(acc[r][1], ar, b1);
            }
        }
    }
    for (int r = 0; r < Q_MR; ++r) {
        _mm256_storeu_si256((__m256i*)(out + r * Q_TN), acc[r][0]);
        _mm256_storeu_si256((__m256i*)(out + r * Q_TN + 8), acc[r][1]);
    }
#elif defined(PLAIT_ISA_AVX512)
    /* no dot products: both operands widened to int16, vpmaddwd sums pairs in int32;
     * acc[r][q]: columns 8q..8q+7 (q < 2 * np), two partial sums each (k 0-1, 2-3) */
    __m512i acc[Q_MR][4];
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm512_setzero_si512();
    for (int64_t k = 0; k < k4; ++k) {
        __m512i bw[4];
        for (int q = 0; q < 2 * np; ++q) {
            __m256i b8 = _mm256_loadu_si256(
                (const __m256i*)(b + (q >> 1) * bps + 64 * k + 32 * (q & 1)));
            bw[q] = swapped ? _mm512_cvtepu8_epi16(b8) : _mm512_cvtepi8_epi16(b8);
        }
        for (int r = 0; r < Q_MR; ++r) {
            __m128i a8 = _mm_cvtsi32_si128(load4(a + r * lda + 4 * k));
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
            _mm256_storeu_si256((__m256i*)(out + r * Q_TN + 8 * q), _mm512_cvtepi64_epi32(t));
        }
#elif defined(PLAIT_ISA_AVX2)
    (void)np;
    (void)bps;
    /* acc[r][q]: columns 4q..4q+3, two partial sums each (k 0-1 and 2-3) */
    __m256i acc[Q_MR][4];
    for (int r = 0; r < Q_MR; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_si256();
    for (int64_t k = 0; k < k4; ++k) {
        __m256i bw[4];
        for (int q = 0; q < 4; ++q) {
            __m128i b8 = _mm_loadu_si128((const __m128i*)(b + 64 * k + 16 * q));
            bw[q] = swapped ? _mm256_cvtepu8_epi16(b8) : _mm256_cvtepi8_epi16(b8);
        }
        for (int r = 0; r < Q_MR; ++r) {
            __m128i a8 = _mm_cvtsi32_si128(load4(a + r * lda + 4 * k));
            __m256i aw = _mm256_broadcastq_epi64(swapped ? _mm_cvtepi8_epi16(a8)
                                                         : _mm_cvtepu8_epi16(a8));
            for (int q = 0; q < 4; ++q)
                acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(aw, bw[q]));
        }
    }
    for (int r = 0; r < Q_MR; ++r) {
        __m256i lo = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][0], acc[r][1]), 0xD8);
        __m256i hi = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[r][2], acc[r][3]), 0xD8);
        _mm256_storeu_si256((__m256i*)(out + r * Q_TN), lo);
        _mm256_storeu_si256((__m256i*)(out + r * Q_TN + 8), hi);
    }
#else
    (void)np;
    (void)bps;
    uint32_t acc[Q_MR][PLAIT_Q_NR];
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < k4; ++k) {
        const int8_t* bk = b + 64 * k;
        const uint8_t* bu = (const uint8_t*)bk;
        for (int r = 0; r < Q_MR; ++r) {
            const uint8_t* ar = a + r * lda + 4 * k;
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
        for (int j = 0; j < PLAIT_Q_NR; ++j) out[r * Q_TN + j] = (int32_t)acc[r][j];
#endif
}

/* ---------------------------------------------------------------- output stage */

/* round half to even of a float of magnitude below 2^22 (the current rounding mode,
 * nearest-even by default, as cvtps2dq) */
static inline float q_round(float f) {
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    return f >= 0.0f ? (f + magic) - magic : (f - magic) + magic;
}

/* The output stage of count accumulators v (int32 sums, modulo 2^32) into c from
 * element idx0 on, contiguous.  by_col: v[j] is column n0 + j (a row of a product);
 * else every v[j] is column n0 (a column of a convolution's output, a depthwise row).
 * The loops are simple enough for the compiler to vectorize. */
static inline __attribute__((always_inline)) void
q_store(const plait_q_out* o, const uint32_t* restrict v, int64_t count, int64_t n0,
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
        if (u) {
            uint8_t* restrict dst = (uint8_t*)c + idx0 + j0;
            for (int64_t j = 0; j < cnt; ++j) dst[j] = (uint8_t)q[j];
        } else {
            int8_t* restrict dst = (int8_t*)c + idx0 + j0;
            for (int64_t j = 0; j < cnt; ++j) dst[j] = (int8_t)q[j];
        }
    }
}

/* --------------------------------------------------------------------- packing */

static inline int32_t q_zero_point(const void* z, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)z)[i] : (int32_t)((const uint8_t*)z)[i];
}

/* Rows m0..m0+mc-1 of A' (shifted to uint8) as rows of kp bytes (zero-padded; rows up
 * to a multiple of Q_MR are zero), their sums over K into rs, their zero points into
 * zap. */
static void q_pack_a(const plait_qgemm_problem* p, int64_t bi,
                     int64_t m0, int64_t mc, int64_t kp, uint8_t* restrict dst,
                     int32_t* restrict rs, int32_t* restrict zap) {
    const uint8_t flip = p->a_signed ? 0x80 : 0;
    const int64_t K = p->K;
    const int64_t rows = (mc + Q_MR - 1) / Q_MR * Q_MR;
    for (int64_t r = 0; r < mc; ++r) {
        const int64_t m = m0 + r;
        uint8_t* row = dst + r * kp;
        int32_t za = q_zero_point(p->za, p->a_signed, p->za_rows ? m : 0) +
                     (p->a_signed ? 128 : 0);
        zap[r] = za;
        const uint8_t* src = (const uint8_t*)p->a + bi * p->a_bs + m * p->lda_r;
        if (p->lda_c == 1 && !flip) memcpy(row, src, (size_t)K);
        else
            for (int64_t k = 0; k < K; ++k) row[k] = (uint8_t)(src[k * p->lda_c] ^ flip);
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += row[k];
        rs[r] = (int32_t)s;
        for (int64_t k = K; k < kp; ++k) row[k] = 0;
    }
    for (int64_t r = mc; r < rows; ++r) {
        memset(dst + r * kp, 0, (size_t)kp);
        rs[r] = 0;
        zap[r] = 0;
    }
}

/* B' of batch bi (strided) packed into panels, with zb'[n] and corr[n] */
static void q_pack_b(const plait_qgemm_problem* p, int64_t bi, int64_t kp, int8_t* dst,
                     int32_t* zbp, int32_t* corr) {
    const int64_t N = p->N, K = p->K;
    const int64_t panels = (N + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    const uint8_t* b = (const uint8_t*)p->b + bi * p->b_bs;
    const int shift = p->b_signed ? 0 : 128;
    memset(dst, 0, (size_t)(panels * kp * PLAIT_Q_NR));
    for (int64_t n = 0; n < N; ++n) {
        int8_t* col = dst + (n / PLAIT_Q_NR) * kp * PLAIT_Q_NR + (n % PLAIT_Q_NR) * 4;
        int32_t z = q_zero_point(p->zb, p->b_signed, p->zb_cols ? n : 0) - shift;
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
            int32_t v = (p->b_signed ? (int32_t)(int8_t)b[k * p->ldb_r + n * p->ldb_c]
                                     : (int32_t)b[k * p->ldb_r + n * p->ldb_c]) - shift;
            col[(k / 4) * 4 * PLAIT_Q_NR + (k % 4)] = (int8_t)v;
            s += (uint32_t)v;
        }
        zbp[n] = z;
        corr[n] = (int32_t)(s - (uint32_t)K * (uint32_t)z);
    }
}

/* ---------------------------------------------------------------------- driver */

typedef struct {
    const plait_qgemm_problem* p;
    const int8_t* bp;        /* the panels of batch 0 (the next batches bp_bs further) */
    const int32_t* zbp;
    const int32_t* corr;
    int64_t bp_bs, vec_bs;   /* per batch (0: one B for every batch) */
    int64_t kp, mblocks, nblocks, ncb;
    int64_t next;
    int status;
} q_task;

static void q_job(const q_task* t, int64_t job, uint8_t* apack, int32_t* rs, int32_t* zap) {
    const plait_qgemm_problem* p = t->p;
    const int64_t kp = t->kp, k4 = kp / 4, N = p->N, K = p->K;
    const int64_t bi = job / (t->mblocks * t->nblocks);
    const int64_t mb = job / t->nblocks % t->mblocks, nb = job % t->nblocks;
    const int64_t m0 = mb * Q_MC, mc = p->M - m0 < Q_MC ? p->M - m0 : Q_MC;
    const int64_t n0 = nb * t->ncb, nc = N - n0 < t->ncb ? N - n0 : t->ncb;
    const int8_t* bp = t->bp + bi * t->bp_bs;
    const int32_t* zbp = t->zbp + bi * t->vec_bs;
    const int32_t* corr = t->corr + bi * t->vec_bs;
    const int64_t panel = kp * PLAIT_Q_NR;
    (void)K;
    q_pack_a(p, bi, m0, mc, kp, apack, rs, zap);
    int32_t tile[Q_MR * Q_TN];
    uint32_t blk[Q_MC * Q_TN];   /* the row block's sums of one column tile, [row][col] */
    for (int64_t j = 0; j < nc; j += Q_TN) {
        const int64_t nj = nc - j < Q_TN ? nc - j : Q_TN;
        const int64_t n = n0 + j;
        const int8_t* bj = bp + (n / PLAIT_Q_NR) * panel;
        for (int64_t r0 = 0; r0 < mc; r0 += Q_MR) {
            const uint8_t* ar = apack + r0 * kp;
#if Q_NP > 1
            if (nj > PLAIT_Q_NR) q_tile(2, 0, k4, ar, kp, bj, panel, tile);
            else q_tile(1, 0, k4, ar, kp, bj, panel, tile);
#else
            q_tile(1, 0, k4, ar, kp, bj, panel, tile);
#endif
            const int64_t mr = mc - r0 < Q_MR ? mc - r0 : Q_MR;
            for (int64_t r = 0; r < mr; ++r) {
                const uint32_t rsum = (uint32_t)rs[r0 + r], za = (uint32_t)zap[r0 + r];
                uint32_t* restrict dst = blk + (r0 + r) * Q_TN;
                for (int64_t q = 0; q < nj; ++q)
                    dst[q] = (uint32_t)tile[r * Q_TN + q] - (uint32_t)zbp[n + q] * rsum -
                             za * (uint32_t)corr[n + q];
            }
        }
        const int64_t base = bi * p->c_bs + m0 * p->ldc_r + n * p->ldc_c;
        for (int64_t r = 0; r < mc; ++r)
            q_store(&p->out, blk + r * Q_TN, nj, n, 1, p->c, base + r * p->ldc_r);
    }
}

static void q_task_run(void* arg) {
    q_task* t = (q_task*)arg;
    const int64_t rows = Q_MC;
    size_t bytes = (size_t)(rows * t->kp) + 2 * sizeof(int32_t) * (size_t)rows + 64;
    uint8_t* apack = (uint8_t*)plait_scratch(0, (bytes + 3) / 4);
    if (!apack) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    int32_t* rs = (int32_t*)(apack + ((rows * t->kp + 63) / 64) * 64);
    int32_t* zap = rs + rows;
    const int64_t jobs = t->p->batch * t->mblocks * t->nblocks;
    for (int64_t job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED); job < jobs;
         job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED))
        q_job(t, job, apack, rs, zap);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qgemm)(const plait_qgemm_problem* p) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return 0;
    const int64_t kp = (p->K + 3) / 4 * 4;
    const int64_t panels = (p->N + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    q_task t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.kp = kp;
    void* owned = NULL;
    if (p->bp) {
        t.bp = p->bp;
        t.zbp = p->b_zp;
        t.corr = p->b_corr;
    } else {
        const int64_t nb = p->b_bs ? p->batch : 1;
        const int64_t pbytes = panels * kp * PLAIT_Q_NR;
        const int64_t vec = panels * PLAIT_Q_NR;
        owned = malloc((size_t)(nb * pbytes + 2 * nb * vec * 4 + 64));
        if (!owned) return 1;
        int8_t* bp = (int8_t*)owned;
        int32_t* zbp = (int32_t*)(bp + (nb * pbytes + 63) / 64 * 64);
        int32_t* corr = zbp + nb * vec;
        for (int64_t bi = 0; bi < nb; ++bi)
            q_pack_b(p, bi, kp, bp + bi * pbytes, zbp + bi * vec, corr + bi * vec);
        t.bp = bp;
        t.zbp = zbp;
        t.corr = corr;
        if (p->b_bs) {
            t.bp_bs = pbytes;
            t.vec_bs = vec;
        }
    }
    int nthreads = plait_max_threads();
    const int64_t work = p->M * p->N * (p->K > 0 ? p->K : 1) * p->batch;
    if (work < Q_MIN_PARALLEL) nthreads = 1;
    t.mblocks = (p->M + Q_MC - 1) / Q_MC;
    /* columns in blocks of whole tiles, enough jobs for the threads (about 4 each) */
    int64_t tiles = (p->N + Q_TN - 1) / Q_TN;
    int64_t nblocks = 1;
    if (nthreads > 1) {
        int64_t want = (4 * nthreads + p->batch * t.mblocks - 1) / (p->batch * t.mblocks);
        nblocks = want < tiles ? want : tiles;
        if (nblocks < 1) nblocks = 1;
    }
    t.ncb = (tiles + nblocks - 1) / nblocks * Q_TN;
    t.nblocks = (p->N + t.ncb - 1) / t.ncb;
    const int64_t jobs = p->batch * t.mblocks * t.nblocks;
    if (jobs < nthreads) nthreads = (int)jobs;
    plait_parallel(q_task_run, &t, nthreads);
    free(owned);
    return t.status;
}

/* ------------------------------------------------------ convolutions, transposed */

/* out[n][o][p] = out(sum_k (w[o][k] - zw[o]) * (x[n][k][p] - zx)) computed as W' @ X'
 * with the weights broadcast (int8 W': rows of Kp bytes) and the image packed in
 * panels of 16 output pixels x 4 taps (uint8 X'): an output row of a channel is
 * contiguous in NCHW.
 *
 * The image is first copied into a padded image (x ^ 0x80 for int8 x; the padding holds
 * zx'), so no tap is ever out of bounds.  With the taps grouped (G > 0: K runs over
 * (c, kh, kw4) with KW rounded up to 4 per group, dilation 1 along W), the 4 taps of a
 * group are 4 consecutive bytes of one image row: a pixel's group is one 4-byte load
 * (AVX-512: one dword gather for 16 pixels); the extra taps of the rounding have the
 * weight zw' (they add (zw' - zw') * x = 0, and the weights' correction counts them).
 * When the 16 pixels of a panel are contiguous in the padded image (stride 1, within
 * one row), a group is 4 overlapping 16-byte loads interleaved. */

typedef uint8_t q_v16 __attribute__((vector_size(16)));
#if defined(__clang__)
#define Q_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define Q_SHUF(a, b, ...) __builtin_shuffle(a, b, (q_v16){__VA_ARGS__})
#endif

/* 16 pixels x 4 taps (rows t0..t3: the taps' 16 values) as the panel's 64 bytes
 * [pixel][tap] */
static inline void q_interleave4(q_v16 t0, q_v16 t1, q_v16 t2, q_v16 t3, uint8_t* dst) {
    q_v16 a = Q_SHUF(t0, t1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    q_v16 b = Q_SHUF(t0, t1, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    q_v16 c = Q_SHUF(t2, t3, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    q_v16 d = Q_SHUF(t2, t3, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    q_v16 o0 = Q_SHUF(a, c, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    q_v16 o1 = Q_SHUF(a, c, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
    q_v16 o2 = Q_SHUF(b, d, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    q_v16 o3 = Q_SHUF(b, d, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
    memcpy(dst, &o0, 16);
    memcpy(dst + 16, &o1, 16);
    memcpy(dst + 32, &o2, 16);
    memcpy(dst + 48, &o3, 16);
}

static inline q_v16 q_load16(const uint8_t* p) {
    q_v16 v;
    memcpy(&v, p, 16);
    return v;
}

typedef struct {
    const plait_qconv_problem* p;
    const uint8_t* xpad;     /* the padded images, uint8 */
    int64_t img_bytes, wp;   /* bytes of one padded image, its row */
    const int64_t* toff;     /* per group (G > 0) or tap: offset from a window's corner */
    int64_t kp, panels, pblock, jobs;
    int need_cs;             /* some zw' != 0: the pixels' column sums are needed */
    int64_t next;
    int status;
} q_ct_task;

/* The panels [j0, j0 + np) of image bi: X' packed; with need_cs the pixels' column sums
 * into cs */
static void q_ct_pack(const q_ct_task* t, int64_t bi, int64_t j0, int64_t np,
                      uint8_t* restrict dst, uint32_t* restrict cs) {
    const plait_qconv_problem* p = t->p;
    const int64_t M = p->OH * p->OW, K = p->K, kp = t->kp, k4 = kp / 4;
    const uint8_t* img = t->xpad + bi * t->img_bytes;
    for (int64_t jp = 0; jp < np; ++jp) {
        const int64_t m0 = (j0 + jp) * PLAIT_Q_NR;
        uint8_t* pd = dst + jp * kp * PLAIT_Q_NR;
        int32_t off[PLAIT_Q_NR];
        int contiguous = 1;
        for (int j = 0; j < PLAIT_Q_NR; ++j) {
            const int64_t m = m0 + j < M ? m0 + j : M - 1;
            off[j] = (int32_t)((m / p->OW) * p->SH * t->wp + (m % p->OW) * p->SW);
            if (off[j] != off[0] + j) contiguous = 0;
        }
        if (p->G) {
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
            const __m512i voff = _mm512_loadu_si512((const void*)off);
#endif
            for (int64_t g = 0; g < k4; ++g) {
                const uint8_t* s = img + t->toff[g];
                if (contiguous) {
                    const uint8_t* r = s + off[0];
                    q_interleave4(q_load16(r), q_load16(r + 1), q_load16(r + 2),
                                  q_load16(r + 3), pd + 64 * g);
                } else {
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
                    _mm512_storeu_si512((void*)(pd + 64 * g),
                                        _mm512_i32gather_epi32(voff, (const void*)s, 1));
#else
                    for (int j = 0; j < PLAIT_Q_NR; ++j) memcpy(pd + 64 * g + 4 * j, s + off[j], 4);
#endif
                }
            }
        } else {
            for (int64_t g = 0; g < k4; ++g) {
                if (contiguous) {
                    q_v16 tv[4];
                    for (int kk = 0; kk < 4; ++kk)
                        tv[kk] = 4 * g + kk < K ? q_load16(img + t->toff[4 * g + kk] + off[0])
                                                : (q_v16){0};
                    q_interleave4(tv[0], tv[1], tv[2], tv[3], pd + 64 * g);
                } else {
                    uint8_t* b = pd + 64 * g;
                    for (int kk = 0; kk < 4; ++kk) {
                        if (4 * g + kk < K) {
                            const uint8_t* s = img + t->toff[4 * g + kk];
                            for (int j = 0; j < PLAIT_Q_NR; ++j) b[4 * j + kk] = s[off[j]];
                        } else {
                            for (int j = 0; j < PLAIT_Q_NR; ++j) b[4 * j + kk] = 0;
                        }
                    }
                }
            }
        }
        if (t->need_cs) {
            uint32_t s[PLAIT_Q_NR] = {0};
            for (int64_t g = 0; g < k4; ++g) {
                const uint8_t* b = pd + 64 * g;
                for (int j = 0; j < PLAIT_Q_NR; ++j)
                    s[j] += (uint32_t)b[4 * j] + b[4 * j + 1] + b[4 * j + 2] + b[4 * j + 3];
            }
            memcpy(cs + jp * PLAIT_Q_NR, s, sizeof s);
        }
    }
}

static void q_ct_run(void* arg) {
    q_ct_task* t = (q_ct_task*)arg;
    const plait_qconv_problem* p = t->p;
    const int64_t kp = t->kp, k4 = kp / 4, M = p->OH * p->OW;
    const int64_t panel = kp * PLAIT_Q_NR;
    size_t bytes = (size_t)(t->pblock * panel) + sizeof(uint32_t) * (size_t)(t->pblock * 16) + 64;
    uint8_t* xp = (uint8_t*)plait_scratch(0, (bytes + 3) / 4);
    if (!xp) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t* cs = (uint32_t*)(xp + (t->pblock * panel + 63) / 64 * 64);
    const int64_t nblocks = (t->panels + t->pblock - 1) / t->pblock;
    const uint32_t zx = (uint32_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                               : ((const uint8_t*)p->zx)[0]);
    int32_t tile[Q_MR * Q_TN];
    uint32_t v[Q_TN];
    for (int64_t job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED); job < t->jobs;
         job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) {
        const int64_t bi = job / nblocks, j0 = job % nblocks * t->pblock;
        const int64_t np = t->panels - j0 < t->pblock ? t->panels - j0 : t->pblock;
        q_ct_pack(t, bi, j0, np, xp, cs);
        for (int64_t jp = 0; jp < np; jp += Q_NP) {
            const int64_t nn = np - jp < Q_NP ? np - jp : Q_NP;
            const int64_t p0 = (j0 + jp) * PLAIT_Q_NR;
            const int64_t cnt = M - p0 < nn * PLAIT_Q_NR ? M - p0 : nn * PLAIT_Q_NR;
            const int8_t* bj = (const int8_t*)(xp + jp * panel);
            const uint32_t* csj = cs + jp * PLAIT_Q_NR;
            for (int64_t o0 = 0; o0 < p->O; o0 += Q_MR) {
                const uint8_t* ar = (const uint8_t*)(p->w + o0 * kp);
#if Q_NP > 1
                if (nn > 1) q_tile(2, 1, k4, ar, kp, bj, panel, tile);
                else q_tile(1, 1, k4, ar, kp, bj, panel, tile);
#else
                q_tile(1, 1, k4, ar, kp, bj, panel, tile);
#endif
                const int64_t mr = p->O - o0 < Q_MR ? p->O - o0 : Q_MR;
                for (int64_t r = 0; r < mr; ++r) {
                    const int64_t o = o0 + r;
                    const uint32_t zw = (uint32_t)p->w_zp[o];
                    const uint32_t corr = zx * (uint32_t)p->w_corr[o];
                    const int32_t* tr = tile + r * Q_TN;
                    if (t->need_cs)
                        for (int64_t q = 0; q < cnt; ++q)
                            v[q] = (uint32_t)tr[q] - zw * csj[q] - corr;
                    else
                        for (int64_t q = 0; q < cnt; ++q) v[q] = (uint32_t)tr[q] - corr;
                    q_store(&p->out, v, cnt, o, 0, p->c, (bi * p->O + o) * M + p0);
                }
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qconv2d)(const plait_qconv_problem* p) {
    const int64_t M = p->OH * p->OW;
    if (M <= 0 || p->O <= 0 || p->N <= 0) return 0;
    q_ct_task t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.kp = p->G ? p->C * p->KH * p->G * 4 : (p->K + 3) / 4 * 4;
    t.panels = (M + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    for (int64_t o = 0; o < p->O; ++o)
        if (p->w_zp[o]) t.need_cs = 1;
    /* the padded images: every tap a window reads (and the rounding of its groups) */
    const int64_t hp0 = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int64_t wp0 = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    const int64_t hp = hp0 > p->PT + p->H ? hp0 : p->PT + p->H;
    const int64_t wp = wp0 > p->PL + p->W ? wp0 : p->PL + p->W;
    const int64_t plane = hp * wp;
    t.wp = wp;
    t.img_bytes = p->C * plane;
    const int64_t ngroups = t.kp / 4;
    const int64_t noff = p->G ? ngroups : (p->K > 0 ? p->K : 1);
    /* 64 bytes past the end: the 16-byte runs and 4-byte groups of the last pixels */
    size_t words = (size_t)((p->N * t.img_bytes + 64 + 3) / 4) + 2 * (size_t)noff + 16;
    uint8_t* xpad = (uint8_t*)plait_scratch(1, words);
    if (!xpad) return 1;
    int64_t* toff = (int64_t*)(xpad + (p->N * t.img_bytes + 64 + 63) / 64 * 64);
    const uint8_t flip = p->x_signed ? 0x80 : 0;
    const uint8_t zx = (uint8_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                             : ((const uint8_t*)p->zx)[0]);
    memset(xpad, zx, (size_t)(p->N * t.img_bytes + 64));
    {
        const int64_t H = p->H, W = p->W, images = p->N * p->C;
        const int64_t wn = W < wp - p->PL ? W : wp - p->PL;
        const int64_t hn = H < hp - p->PT ? H : hp - p->PT;
        const uint8_t* x = (const uint8_t*)p->x;
        uint8_t* base = xpad + p->PT * wp + p->PL;
        for (int64_t ci = 0; ci < images; ++ci)
            for (int64_t h = 0; h < hn; ++h) {
                const uint8_t* restrict src = x + (ci * H + h) * W;
                uint8_t* restrict dst = base + ci * plane + h * wp;
                if (!flip) memcpy(dst, src, (size_t)wn);
                else
                    for (int64_t w = 0; w < wn; ++w) dst[w] = src[w] ^ 0x80;
            }
    }
    if (p->G) {
        int64_t g = 0;
        for (int64_t ch = 0; ch < p->C; ++ch)
            for (int64_t kh = 0; kh < p->KH; ++kh)
                for (int64_t kw4 = 0; kw4 < p->G; ++kw4, ++g)
                    toff[g] = ch * plane + kh * p->DH * wp + 4 * kw4;
    } else {
        const int64_t khw = p->KH * p->KW;
        for (int64_t k = 0; k < p->K; ++k) {
            const int64_t ch = k / khw, r = k % khw;
            toff[k] = ch * plane + (r / p->KW) * p->DH * wp + (r % p->KW) * p->DW;
        }
    }
    t.xpad = xpad;
    t.toff = toff;
    int nthreads = plait_max_threads();
    const int64_t work = p->N * M * p->O * (t.kp > 0 ? t.kp : 1);
    if (work < Q_MIN_PARALLEL) nthreads = 1;
    /* blocks of panels: about 4 jobs per thread, at most 8 panels (128 pixels) */
    int64_t want = nthreads > 1 ? (t.panels * p->N + 4 * nthreads - 1) / (4 * nthreads) : 8;
    t.pblock = want < 1 ? 1 : (want > 8 ? 8 : want);
    t.jobs = p->N * ((t.panels + t.pblock - 1) / t.pblock);
    if (t.jobs < nthreads) nthreads = (int)t.jobs;
    plait_parallel(q_ct_run, &t, nthreads);
    return t.status;
}

/* --------------------------------------------------------------------- depthwise */

typedef struct {
    const plait_qdw_desc* d;
    const uint8_t* x;
    int x_signed;
    int32_t zx;
    const int32_t* w;
    const plait_q_out* out;
    void* c;
    int64_t hp, wp;     /* the padded plane */
    int status;
} q_dw_task;

#define Q_DW_ACC 1024

/* planes [lo, hi) of N * C: each plane copied centered (x - zx, int16) into a padded
 * plane (the padding 0), every output summed over the window in int32, then the output
 * stage.  Stride 1: rows of the padded width at once (one contiguous run per tap, the
 * columns past OW dropped); else row by row. */
static void q_dw_range(void* ctx, int64_t lo, int64_t hi) {
    q_dw_task* t = (q_dw_task*)ctx;
    const plait_qdw_desc* d = t->d;
    const int64_t hp = t->hp, wp = t->wp;
    int16_t* xc = (int16_t*)plait_scratch(0, (size_t)(hp * wp + 64) / 2 + 1);
    if (!xc) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t acc[Q_DW_ACC];
    const int wide = d->SH == 1 && d->SW == 1 && wp <= Q_DW_ACC;
    for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t ch = plane % d->C;
        const int32_t* w = t->w + ch * d->KH * d->KW;
        memset(xc, 0, sizeof(int16_t) * (size_t)(hp * wp));
        const int64_t H = d->H, W = d->W;
        const int64_t hn = H < hp - d->PT ? H : hp - d->PT;
        const int64_t wn = W < wp - d->PL ? W : wp - d->PL;
        const int16_t zx = (int16_t)t->zx;
        for (int64_t h = 0; h < hn; ++h) {
            int16_t* restrict dst = xc + (h + d->PT) * wp + d->PL;
            if (t->x_signed) {
                const int8_t* restrict src = (const int8_t*)t->x + (plane * H + h) * W;
                for (int64_t x = 0; x < wn; ++x) dst[x] = (int16_t)(src[x] - zx);
            } else {
                const uint8_t* restrict src = t->x + (plane * H + h) * W;
                for (int64_t x = 0; x < wn; ++x) dst[x] = (int16_t)(src[x] - zx);
            }
        }
        if (wide) {
            const int64_t rows = Q_DW_ACC / wp;
            for (int64_t oh0 = 0; oh0 < d->OH; oh0 += rows) {
                const int64_t nr = d->OH - oh0 < rows ? d->OH - oh0 : rows;
                /* the last row needs only OW columns: no read past the plane */
                const int64_t cnt = (nr - 1) * wp + d->OW;
                memset(acc, 0, sizeof(uint32_t) * (size_t)cnt);
                for (int64_t kh = 0; kh < d->KH; ++kh)
                    for (int64_t kw = 0; kw < d->KW; ++kw) {
                        const int32_t wv = w[kh * d->KW + kw];
                        const int16_t* src = xc + (oh0 + kh * d->DH) * wp + kw * d->DW;
                        for (int64_t i = 0; i < cnt; ++i)
                            acc[i] += (uint32_t)((int32_t)src[i] * wv);
                    }
                for (int64_t r = 0; r < nr; ++r)
                    q_store(t->out, acc + r * wp, d->OW, ch, 0, t->c,
                            (plane * d->OH + oh0 + r) * d->OW);
            }
            continue;
        }
        for (int64_t oh = 0; oh < d->OH; ++oh) {
            for (int64_t ow0 = 0; ow0 < d->OW; ow0 += Q_DW_ACC) {
                const int64_t cnt = d->OW - ow0 < Q_DW_ACC ? d->OW - ow0 : Q_DW_ACC;
                memset(acc, 0, sizeof(uint32_t) * (size_t)cnt);
                for (int64_t kh = 0; kh < d->KH; ++kh)
                    for (int64_t kw = 0; kw < d->KW; ++kw) {
                        const int32_t wv = w[kh * d->KW + kw];
                        const int16_t* src = xc + (oh * d->SH + kh * d->DH) * wp +
                                             ow0 * d->SW + kw * d->DW;
                        const int64_t sw = d->SW;
                        for (int64_t j = 0; j < cnt; ++j)
                            acc[j] += (uint32_t)((int32_t)src[j * sw] * wv);
                    }
                q_store(t->out, acc, cnt, ch, 0, t->c, (plane * d->OH + oh) * d->OW + ow0);
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qconv2d_depthwise)(const plait_qdw_desc* d, const void* x, int x_signed,
                                      const void* zx, const int32_t* w,
                                      const plait_q_out* out, void* c) {
    if (d->N <= 0 || d->C <= 0 || d->OH <= 0 || d->OW <= 0) return 0;
    q_dw_task t;
    memset(&t, 0, sizeof t);
    t.d = d;
    t.x = (const uint8_t*)x;
    t.x_signed = x_signed;
    t.zx = q_zero_point(zx, x_signed, 0);
    t.w = w;
    t.out = out;
    t.c = c;
    const int64_t hp0 = (d->OH - 1) * d->SH + (d->KH - 1) * d->DH + 1;
    const int64_t wp0 = (d->OW - 1) * d->SW + (d->KW - 1) * d->DW + 1;
    t.hp = hp0 > d->PT + d->H ? hp0 : d->PT + d->H;
    t.wp = wp0 > d->PL + d->W ? wp0 : d->PL + d->W;
    const int64_t planes = d->N * d->C;
    const int64_t work = planes * d->OH * d->OW * d->KH * d->KW;
    int nthreads = work < Q_MIN_PARALLEL / 4 ? 1 : plait_max_threads();
    plait_parallel_range(q_dw_range, &t, planes, nthreads);
    return t.status;
}

/* ------------------------------------------------------------------ elementwise */

/* r[i] = f[i] rounded as cvtps2dq (half to even; NaN and |f| >= 2^31 give INT_MIN)
 * and saturated to [qlo, qhi], in float arithmetic the compiler vectorizes: INT_MIN
 * saturates to qlo, and clamping to integer bounds before rounding equals after */
static inline void q_round_sat(const float* restrict f, int32_t* restrict r, int64_t n,
                               float qlo, float qhi) {
    const float big = 2147483648.0f, magic = 12582912.0f;   /* 1.5 * 2^23 */
    for (int64_t i = 0; i < n; ++i) {
        const float v = f[i];
        float c = v > qlo ? v : qlo;
        c = c < qhi ? c : qhi;
        c = fabsf(v) < big ? c : qlo;
        r[i] = (int32_t)((c + magic) - magic);
    }
}

/* QLinearAdd of cnt elements: x runs along the output, y is one value (ylen 1: ys[0])
 * or runs too; xr, yr their ratios; y_first: y is folded into the fixed part first
 * (fma(x, xr, fma(y, yr, fixed))), else x.  Three simple loops (the fused
 * multiply-adds, q_round_sat, the narrowing) over chunks of 64, which the compiler
 * vectorizes. */
#define Q_ADD_LOOP(T)                                                                   \
    static void q_add_##T(const T* restrict xs, const T* restrict ys, int y_one,        \
                          float xr, float yr, float fixed, int y_first, float qlo,     \
                          float qhi, T* restrict cs, int64_t cnt) {                     \
        float f[64];                                                                    \
        int32_t r[64];                                                                  \
        const float fy = fmaf((float)ys[0], yr, fixed);                                 \
        for (int64_t j0 = 0; j0 < cnt; j0 += 64) {                                      \
            const int64_t n = cnt - j0 < 64 ? cnt - j0 : 64;                            \
            const T* restrict x = xs + j0;                                              \
            const T* restrict y = ys + j0;                                              \
            if (y_one && y_first)                                                       \
                for (int64_t i = 0; i < n; ++i) f[i] = fmaf((float)x[i], xr, fy);       \
            else if (y_one)                                                             \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)ys[0], yr, fmaf((float)x[i], xr, fixed));        \
            else if (y_first)                                                           \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)x[i], xr, fmaf((float)y[i], yr, fixed));         \
            else                                                                        \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)y[i], yr, fmaf((float)x[i], xr, fixed));         \
            q_round_sat(f, r, n, qlo, qhi);                                             \
            for (int64_t i = 0; i < n; ++i) cs[j0 + i] = (T)r[i];                       \
        }                                                                               \
    }
Q_ADD_LOOP(uint8_t)
Q_ADD_LOOP(int8_t)

typedef struct {
    const plait_qadd_desc* d;
    const void *a, *b;
    void* c;
} q_add_task;

static void q_add_range(void* ctx, int64_t lo, int64_t hi) {
    const q_add_task* t = (const q_add_task*)ctx;
    const plait_qadd_desc* d = t->d;
    /* x: an operand of the output's size (A when both are); the reference's order:
     * a_first: fma(b, rb, fma(a, ra, fixed)), else fma(a, ra, fma(b, rb, fixed)) */
    const int a_runs = d->a_len == d->n;
    const void* x = a_runs ? t->a : t->b;
    const void* y = a_runs ? t->b : t->a;
    const int64_t ylen = a_runs ? d->b_len : d->a_len;
    const float xr = a_runs ? d->ra : d->rb, yr = a_runs ? d->rb : d->ra;
    const int y_first = a_runs ? !d->a_first : d->a_first;
    for (int64_t i0 = lo; i0 < hi;) {
        /* a run of y: to the end of its period (one value: to hi) */
        const int64_t j0 = ylen == 1 ? 0 : i0 % ylen;
        const int64_t cnt = ylen == 1 || hi - i0 < ylen - j0 ? hi - i0 : ylen - j0;
        if (d->is_signed)
            q_add_int8_t((const int8_t*)x + i0, (const int8_t*)y + j0, ylen == 1, xr, yr,
                         d->fixed, y_first, -128.0f, 127.0f, (int8_t*)t->c + i0, cnt);
        else
            q_add_uint8_t((const uint8_t*)x + i0, (const uint8_t*)y + j0, ylen == 1, xr, yr,
                          d->fixed, y_first, 0.0f, 255.0f, (uint8_t*)t->c + i0, cnt);
        i0 += cnt;
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qadd)(const plait_qadd_desc* d, const void* a, const void* b, void* c) {
    q_add_task t = {d, a, b, c};
    int nthreads = d->n < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_add_range, &t, d->n, nthreads);
    return 0;
}

/* QLinearMul of cnt elements: x runs along the output, y is one value (y_one) or runs
 * too; float32((x - zx) * (y - zy)) * ratio + zc, two roundings (the file has no FMA
 * contraction), then as QLinearAdd */
#define Q_MUL_LOOP(T)                                                                   \
    static void q_mul_##T(const T* restrict xs, const T* restrict ys, int y_one,        \
                          int32_t zx, int32_t zy, float ratio, float zc, float qlo,     \
                          float qhi, T* restrict cs, int64_t cnt) {                     \
        float f[64];                                                                    \
        int32_t r[64];                                                                  \
        const int32_t y0 = (int32_t)ys[0] - zy;                                         \
        for (int64_t j0 = 0; j0 < cnt; j0 += 64) {                                      \
            const int64_t n = cnt - j0 < 64 ? cnt - j0 : 64;                            \
            const T* restrict x = xs + j0;                                              \
            const T* restrict y = ys + j0;                                              \
            if (y_one)                                                                  \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = (float)(((int32_t)x[i] - zx) * y0) * ratio + zc;             \
            else                                                                        \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = (float)(((int32_t)x[i] - zx) * ((int32_t)y[i] - zy)) * ratio \
                           + zc;                                                        \
            q_round_sat(f, r, n, qlo, qhi);                                             \
            for (int64_t i = 0; i < n; ++i) cs[j0 + i] = (T)r[i];                       \
        }                                                                               \
    }
Q_MUL_LOOP(uint8_t)
Q_MUL_LOOP(int8_t)

typedef struct {
    const plait_qmul_desc* d;
    const void *a, *b;
    void* c;
} q_mul_task;

static void q_mul_range(void* ctx, int64_t lo, int64_t hi) {
    const q_mul_task* t = (const q_mul_task*)ctx;
    const plait_qmul_desc* d = t->d;
    const int a_runs = d->a_len == d->n;   /* the product commutes: x runs, y repeats */
    const void* x = a_runs ? t->a : t->b;
    const void* y = a_runs ? t->b : t->a;
    const int64_t ylen = a_runs ? d->b_len : d->a_len;
    const int32_t zx = a_runs ? d->za : d->zb, zy = a_runs ? d->zb : d->za;
    for (int64_t i0 = lo; i0 < hi;) {
        const int64_t j0 = ylen == 1 ? 0 : i0 % ylen;
        const int64_t cnt = ylen == 1 || hi - i0 < ylen - j0 ? hi - i0 : ylen - j0;
        if (d->is_signed)
            q_mul_int8_t((const int8_t*)x + i0, (const int8_t*)y + j0, ylen == 1, zx, zy,
                         d->ratio, (float)d->zc, -128.0f, 127.0f, (int8_t*)t->c + i0, cnt);
        else
            q_mul_uint8_t((const uint8_t*)x + i0, (const uint8_t*)y + j0, ylen == 1, zx, zy,
                          d->ratio, (float)d->zc, 0.0f, 255.0f, (uint8_t*)t->c + i0, cnt);
        i0 += cnt;
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qmul)(const plait_qmul_desc* d, const void* a, const void* b, void* c) {
    q_mul_task t = {d, a, b, c};
    int nthreads = d->n < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_mul_range, &t, d->n, nthreads);
    return 0;
}

typedef struct {
    const plait_qparam_desc* d;
    const void* x;
    const float* scale;
    const void* zp;
    void* y;
} q_param_task;

static inline int32_t q_load8(const void* p, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)p)[i] : (int32_t)((const uint8_t*)p)[i];
}

/* QuantizeLinear of n elements: x / s, clamped with maxps/minps to [qmin - z, qmax - z]
 * (NaN: qmin - z), rounded half to even, + z */
#define Q_QUANT_LOOP(T, QLO, QHI)                                                       \
    static void q_quant_##T(const float* restrict x, float s, int32_t z,                \
                            T* restrict y, int64_t n) {                                 \
        const float flo = (float)(QLO - z), fhi = (float)(QHI - z);                     \
        const float magic = 12582912.0f;                                                \
        for (int64_t i = 0; i < n; ++i) {                                               \
            float v = x[i] / s;                                                         \
            v = v > flo ? v : flo;                                                      \
            v = v < fhi ? v : fhi;                                                      \
            y[i] = (T)((int32_t)((v + magic) - magic) + z);                             \
        }                                                                               \
    }
Q_QUANT_LOOP(uint8_t, 0, 255)
Q_QUANT_LOOP(int8_t, -128, 127)

#define Q_DEQUANT_LOOP(T)                                                               \
    static void q_dequant_##T(const T* restrict x, float s, int32_t z,                  \
                              float* restrict y, int64_t n) {                           \
        for (int64_t i = 0; i < n; ++i) y[i] = (float)((int32_t)x[i] - z) * s;         \
    }
Q_DEQUANT_LOOP(uint8_t)
Q_DEQUANT_LOOP(int8_t)

/* blocks [lo, hi) of outer * ch blocks of inner elements */
static void q_quantize_range(void* ctx, int64_t lo, int64_t hi) {
    const q_param_task* t = (const q_param_task*)ctx;
    const plait_qparam_desc* d = t->d;
    for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t ch = d->per_channel ? blk % d->ch : 0;
        const float* x = (const float*)t->x + blk * d->inner;
        const int32_t z = q_load8(t->zp, d->q_signed, ch);
        if (d->q_signed)
            q_quant_int8_t(x, t->scale[ch], z, (int8_t*)t->y + blk * d->inner, d->inner);
        else
            q_quant_uint8_t(x, t->scale[ch], z, (uint8_t*)t->y + blk * d->inner, d->inner);
    }
}

/* DequantizeLinear: float32(x - z) * s */
static void q_dequantize_range(void* ctx, int64_t lo, int64_t hi) {
    const q_param_task* t = (const q_param_task*)ctx;
    const plait_qparam_desc* d = t->d;
    for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t ch = d->per_channel ? blk % d->ch : 0;
        float* y = (float*)t->y + blk * d->inner;
        const int32_t z = q_load8(t->zp, d->q_signed, ch);
        if (d->q_signed)
            q_dequant_int8_t((const int8_t*)t->x + blk * d->inner, t->scale[ch], z, y,
                             d->inner);
        else
            q_dequant_uint8_t((const uint8_t*)t->x + blk * d->inner, t->scale[ch], z, y,
                              d->inner);
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_quantize)(const plait_qparam_desc* d, const float* x, const float* scale,
                             const void* zp, void* y) {
    q_param_task t = {d, x, scale, zp, y};
    const int64_t blocks = d->outer * d->ch;
    int nthreads = blocks * d->inner < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_quantize_range, &t, blocks, nthreads);
    return 0;
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_dequantize)(const plait_qparam_desc* d, const void* x, const float* scale,
                               const void* zp, float* y) {
    q_param_task t = {d, x, scale, zp, y};
    const int64_t blocks = d->outer * d->ch;
    int nthreads = blocks * d->inner < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_dequantize_range, &t, blocks, nthreads);
    return 0;
}

/* The range of DynamicQuantizeLinear: blocks of Q_RANGE_BLOCK elements, each reduced on
 * Q_RANGE_LANES independent lanes (one comparison per lane, so the compiler keeps them in
 * vector registers: min/max/NaN of a whole vector per instruction instead of one element
 * per 4-cycle dependency chain); the result is the same set minimum/maximum as one
 * sequential pass (min and max of a set do not depend on the order; a NaN is flagged
 * apart and overrides everything). */
#define Q_RANGE_LANES 64
#define Q_RANGE_BLOCKS_MAX 64

typedef struct {
    const float* x;
    int64_t n, block;
    float mn[Q_RANGE_BLOCKS_MAX], mx[Q_RANGE_BLOCKS_MAX];
    int nan[Q_RANGE_BLOCKS_MAX];
} q_range_task;

static void q_range_blocks(void* ctx, int64_t lo, int64_t hi) {
    q_range_task* t = (q_range_task*)ctx;
    for (int64_t b = lo; b < hi; ++b) {
        const int64_t start = b * t->block;
        const int64_t end = start + t->block < t->n ? start + t->block : t->n;
        const float* restrict x = t->x;
        float mn[Q_RANGE_LANES], mx[Q_RANGE_LANES];
        int32_t nan[Q_RANGE_LANES];
        for (int j = 0; j < Q_RANGE_LANES; ++j) {
            mn[j] = 0.0f;
            mx[j] = 0.0f;
            nan[j] = 0;
        }
        int64_t i = start;
        for (; i + Q_RANGE_LANES <= end; i += Q_RANGE_LANES)
            for (int j = 0; j < Q_RANGE_LANES; ++j) {
                const float v = x[i + j];
                mn[j] = v < mn[j] ? v : mn[j];
                mx[j] = v > mx[j] ? v : mx[j];
                nan[j] |= v != v;
            }
        for (int j = 0; i + j < end; ++j) {
            const float v = x[i + j];
            mn[j] = v < mn[j] ? v : mn[j];
            mx[j] = v > mx[j] ? v : mx[j];
            nan[j] |= v != v;
        }
        float bmn = 0.0f, bmx = 0.0f;
        int bnan = 0;
        for (int j = 0; j < Q_RANGE_LANES; ++j) {
            bmn = mn[j] < bmn ? mn[j] : bmn;
            bmx = mx[j] > bmx ? mx[j] : bmx;
            bnan |= nan[j];
        }
        t->mn[b] = bmn;
        t->mx[b] = bmx;
        t->nan[b] = bnan;
    }
}

/* DynamicQuantizeLinear (uint8): the range [min(x, 0), max(x, 0)] (NaN propagates),
 * scale = (max - min) / 255 (1 for an empty range), zero point = round_half_even(
 * clamp(0 - min / scale, 0, 255)) (0 for NaN), then QuantizeLinear */
PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_dynamic_quantize)(int64_t n, const float* x, uint8_t* y, float* scale,
                                     uint8_t* zp) {
    q_range_task r;
    r.x = x;
    r.n = n;
    /* blocks of >= 16K elements (a thread's share is worth its wake-up), at most
     * Q_RANGE_BLOCKS_MAX of them, a multiple of the lanes */
    int64_t blocks = n / 16384;
    blocks = blocks < 1 ? 1 : blocks > Q_RANGE_BLOCKS_MAX ? Q_RANGE_BLOCKS_MAX : blocks;
    r.block = (n + blocks - 1) / blocks;
    r.block = (r.block + Q_RANGE_LANES - 1) / Q_RANGE_LANES * Q_RANGE_LANES;
    if (r.block < Q_RANGE_LANES) r.block = Q_RANGE_LANES;
    blocks = (n + r.block - 1) / r.block;
    if (blocks < 1) blocks = 1;
    plait_parallel_range(q_range_blocks, &r, blocks, blocks > 1 ? plait_max_threads() : 1);
    float mn = 0.0f, mx = 0.0f;
    int nan = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        mn = r.mn[b] < mn ? r.mn[b] : mn;
        mx = r.mx[b] > mx ? r.mx[b] : mx;
        nan |= r.nan[b];
    }
    float s, z;
    if (nan) {
        s = mn = __builtin_nanf("");
        z = 0.0f;
    } else {
        s = mx == mn ? 1.0f : (mx - mn) / 255.0f;
        float init = 0.0f - mn / s;
        init = init > 0.0f ? init : 0.0f;
        init = init < 255.0f ? init : 255.0f;
        z = (init + 12582912.0f) - 12582912.0f;
    }
    *scale = s;
    *zp = (uint8_t)(int32_t)z;
    /* QuantizeLinear in as many pieces as the range had blocks when they divide n
     * (q_quantize_range's blocks are of d.inner elements) */
    plait_qparam_desc d = {1, 1, n, 0, 0};
    if (blocks > 1 && n % blocks == 0) {
        d.outer = blocks;
        d.inner = n / blocks;
    }
    const float sv[1] = {s};
    q_param_task t = {&d, x, sv, zp, y};
    plait_parallel_range(q_quantize_range, &t, d.outer, d.outer > 1 ? plait_max_threads() : 1);
    return 0;
}

PLAIT_ISA_FAMILY("qgemm")
PLAIT_ISA_DISPATCH(int, plait_qgemm, (const plait_qgemm_problem* p), (p))
PLAIT_ISA_DISPATCH(int, plait_qconv2d, (const plait_qconv_problem* p), (p))
PLAIT_ISA_DISPATCH(int, plait_qconv2d_depthwise,
                   (const plait_qdw_desc* d, const void* x, int x_signed, const void* zx,
                    const int32_t* w, const plait_q_out* out, void* c),
                   (d, x, x_signed, zx, w, out, c))
PLAIT_ISA_DISPATCH(int, plait_qadd,
                   (const plait_qadd_desc* d, const void* a, const void* b, void* c),
                   (d, a, b, c))
PLAIT_ISA_DISPATCH(int, plait_quantize,
                   (const plait_qparam_desc* d, const float* x, const float* scale,
                    const void* zp, void* y),
                   (d, x, scale, zp, y))
PLAIT_ISA_DISPATCH(int, plait_dequantize,
                   (const plait_qparam_desc* d, const void* x, const float* scale,
                    const void* zp, float* y),
                   (d, x, scale, zp, y))
PLAIT_ISA_DISPATCH(int, plait_dynamic_quantize,
                   (int64_t n, const float* x, uint8_t* y, float* scale, uint8_t* zp),
                   (n, x, y, scale, zp))
PLAIT_ISA_DISPATCH(int, plait_qmul,
                   (const plait_qmul_desc* d, const void* a, const void* b, void* c),
                   (d, a, b, c))
