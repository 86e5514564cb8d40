/* plait_wquant.c: products with weight-only quantized weights, a kernel family of
 * plait_isa.h (copies for AVX-512, AVX2 + FMA, NEON and the baseline).
 *
 * out[m][n] = sum_k a[m][k] * W[n][k] (+ bias[n]), the weights in onnxruntime's
 * MatMulNBits layout (plait_wquant.h): 4- or 8-bit values in blocks of block_size along
 * K, one float scale and one zero point per block.  Every weight is dequantized in
 * registers exactly as the reference does it, W = (float)(q - z) * scale (an integer
 * subtraction, one float multiplication), and only the order of the float sums differs
 * from the reference.  The packed weights are read once per call, never unpacked to
 * memory:
 *
 * - decode (M <= 4 rows, the batch-1 token): the matrix-vector product streams each
 *   weight row's bytes, WQ_V bytes a step.  The activations are prepared once per call
 *   so that a step needs no shuffle: for 4 bits split into the values of even and odd k
 *   (the low and high nibbles of a byte), zero-padded to whole blocks; the low nibbles
 *   (x & 15) and the high ones (x >> 4) of WQ_V bytes are two vectors of weights that
 *   multiply the even and odd activations.  The output rows are split over the threads.
 * - prefill (M > 4): per tile of WQ_NT output columns, the tile's weights are
 *   dequantized once into a K x WQ_NT float panel (per thread), then a register tile of
 *   4 rows x WQ_NT columns runs over K for every 4 rows of A: the dequantization is paid
 *   once per weight and call, not per row.  The tiles are split over the threads.
 */
#include "plait_isa.h"
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plait_threads.h"
#include "plait_wquant.h"
#if defined(__x86_64__) && (defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI) || \
                            defined(PLAIT_ISA_AVX2) || defined(PLAIT_ISA_AVXVNNI))
#include <immintrin.h>
#endif

/* WQ_V: float lanes per vector (16 in the AVX-512 copies, 8 with AVX2 or NEON, 4 in the
 * baseline's SSE2) */
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#define WQ_V 16
#elif defined(PLAIT_ISA_AVX2) || defined(PLAIT_ISA_AVXVNNI) || defined(PLAIT_ISA_NEON)
#define WQ_V 8
#else
#define WQ_V 4
#endif
#define WQ_NT (2 * WQ_V)
#define WQ_MR 4

typedef float wq_f __attribute__((vector_size(WQ_V * 4)));
typedef float wq_fu __attribute__((vector_size(WQ_V * 4), aligned(4)));
typedef int32_t wq_i __attribute__((vector_size(WQ_V * 4)));
typedef uint8_t wq_b __attribute__((vector_size(WQ_V)));
#define WQ_LOAD(p) ((wq_f)(*(const wq_fu*)(p)))
#if WQ_V == 16
/* 0 .. 15: the 4-bit values, a block's table is (WQ_IOTA - z) * scale (exact: small
 * integers) */
#define WQ_IOTA ((wq_f){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
#endif
#define WQ_STORE(p, v) (*(wq_fu*)(p) = (v))

/* WQ_V bytes widened to int32 lanes: one vpmovzxbd on x86 (the compilers build the
 * generic conversion of an unaligned byte vector byte by byte) */
static inline __attribute__((always_inline)) wq_i wq_bytes(const uint8_t* p) {
#if WQ_V == 16 && defined(__x86_64__)
    return (wq_i)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p));
#elif WQ_V == 8 && defined(__x86_64__)
    return (wq_i)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p));
#else
    wq_b v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, wq_i);
#endif
}

static inline __attribute__((always_inline)) wq_f wq_float(wq_i x) {
    return __builtin_convertvector(x, wq_f);
}

static inline float wq_hsum(wq_f v) {
    float s = 0.0f;
    for (int l = 0; l < WQ_V; l++) s += v[l];
    return s;
}

/* the zero point of block blk of a row's packed zero points */
static inline int32_t wq_zero(const uint8_t* zrow, int64_t blk, int bits) {
    return bits == 4 ? (zrow[blk >> 1] >> ((blk & 1) * 4)) & 15 : zrow[blk];
}

typedef struct {
    const plait_wq_desc* d;
    const float* ap;        /* the prepared activations, astride floats per row */
    const float* a;         /* the activations as given (prefill) */
    const uint8_t* b;
    const float* s;
    const uint8_t* zp;
    const float* bias;
    float* out;
    const plait_wq_outs* outs;  /* several outputs (decode rows only), or NULL: out */
    int64_t kb, blob, zcols, astride, half;
    int32_t zero;           /* every block's zero point, or -1: each block's from zp */
    int failed;
    const struct wq8_act_* q8;  /* int8 activations (d->act == 8) */
} wq_task;

/* the zero point of block blk of row zrow (t->zero when every block has the same) */
static inline int32_t wq_zero_at(const wq_task* t, const uint8_t* zrow, int64_t blk) {
    return t->zero >= 0 ? t->zero : wq_zero(zrow, blk, (int)t->d->bits);
}

/* Where out[m][n] goes: out, or with several outputs (plait_wq_outs: weights of
 * products of one activation concatenated along N) the output whose columns hold n,
 * each output M rows of its own width.  Only decode rows (M <= WQ_MR) take several
 * outputs here: the entry runs each output's prefill as a product of its own. */
static inline __attribute__((always_inline)) float* wq_dst(const wq_task* t, int64_t m,
                                                           int64_t n) {
    const plait_wq_outs* o = t->outs;
    if (!o) return t->out + m * t->d->N + n;
    int j = 0;
    while (j + 1 < o->count && n >= o->end[j]) j++;
    const int64_t lo = j ? o->end[j - 1] : 0;
    return o->out[j] + m * (o->end[j] - lo) + (n - lo);
}

/* Two 64-byte aligned buffers of na and nb bytes for a job of the task's threads: 0
 * with both, or 1 with neither (t->failed set, the call's result: out of memory). */
static int wq_buffers2(wq_task* t, void** a, size_t na, void** b, size_t nb) {
    if (posix_memalign(a, 64, na) != 0) *a = NULL;
    if (posix_memalign(b, 64, nb) != 0) *b = NULL;
    if (*a && *b) return 0;
    __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
    free(*a);
    free(*b);
    *a = *b = NULL;
    return 1;
}

/* ------------------------------------------------------------------- decode */

/* One block of a 4-bit row against MR rows of prepared activations (ae: the even-k
 * values, ao: the odd-k ones, row m at + m * as): the even products into ce, the odd
 * ones into co (two dependency chains), the bytes past whole vectors into tail. */
static inline __attribute__((always_inline)) void wq_block4(
        const uint8_t* p, int64_t blob, float sc, int32_t z, const float* ae,
        const float* ao, int64_t as, const int MR, wq_f* ce, wq_f* co, float* tail) {
    const wq_f sv = (wq_f){0} + sc;
#if WQ_V == 16
    /* the block's 16 weights (q - z) * scale, one permute per 16 nibbles */
    const wq_f table = (WQ_IOTA - (float)z) * sv;
#else
    const wq_i zv = (wq_i){0} + z;
#endif
    int64_t j = 0;
    for (; j + WQ_V <= blob; j += WQ_V) {
        const wq_i x = wq_bytes(p + j);
#if WQ_V == 16
        const wq_f we = __builtin_shuffle(table, x);     /* indices modulo 16 */
        const wq_f wo = __builtin_shuffle(table, x >> 4);
#else
        const wq_f we = wq_float((x & 15) - zv) * sv;
        const wq_f wo = wq_float((x >> 4) - zv) * sv;
#endif
        for (int m = 0; m < MR; m++) {
            ce[m] += WQ_LOAD(ae + m * as + j) * we;
            co[m] += WQ_LOAD(ao + m * as + j) * wo;
        }
    }
    for (; j < blob; j++) {
        const float we = (float)((p[j] & 15) - z) * sc;
        const float wo = (float)((p[j] >> 4) - z) * sc;
        for (int m = 0; m < MR; m++) tail[m] += ae[m * as + j] * we + ao[m * as + j] * wo;
    }
}

/* One block of an 8-bit row: vector pairs into c0 and c1 (two chains). */
static inline __attribute__((always_inline)) void wq_block8(
        const uint8_t* p, int64_t blob, float sc, int32_t z, const float* a8, int64_t as,
        const int MR, wq_f* c0, wq_f* c1, float* tail) {
    const wq_f sv = (wq_f){0} + sc;
    const wq_i zv = (wq_i){0} + z;
    int64_t j = 0;
    for (; j + 2 * WQ_V <= blob; j += 2 * WQ_V) {
        const wq_f w0 = wq_float(wq_bytes(p + j) - zv) * sv;
        const wq_f w1 = wq_float(wq_bytes(p + j + WQ_V) - zv) * sv;
        for (int m = 0; m < MR; m++) {
            c0[m] += WQ_LOAD(a8 + m * as + j) * w0;
            c1[m] += WQ_LOAD(a8 + m * as + j + WQ_V) * w1;
        }
    }
    for (; j + WQ_V <= blob; j += WQ_V) {
        const wq_f w0 = wq_float(wq_bytes(p + j) - zv) * sv;
        for (int m = 0; m < MR; m++) c0[m] += WQ_LOAD(a8 + m * as + j) * w0;
    }
    for (; j < blob; j++) {
        const float w = (float)((int32_t)p[j] - z) * sc;
        for (int m = 0; m < MR; m++) tail[m] += a8[m * as + j] * w;
    }
}

/* rows lo .. hi - 1 of W against MR rows of prepared activations; blocks in pairs, each
 * of a pair with accumulators of its own (4 dependency chains per row of A) */
static inline __attribute__((always_inline)) void wq_gemv(const wq_task* t, int64_t lo,
                                                          int64_t hi, const int MR) {
    const plait_wq_desc* d = t->d;
    const int bits = (int)d->bits;
    const int64_t N = d->N, blob = t->blob, kb = t->kb, as = t->astride, half = t->half;
    const float* ap = t->ap;
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t* row = t->b + n * kb * blob;
        const float* srow = t->s + n * kb;
        const uint8_t* zrow = t->zp + n * t->zcols;
        wq_f a0[WQ_MR], a1[WQ_MR], b0[WQ_MR], b1[WQ_MR];
        float tail[WQ_MR];
        for (int m = 0; m < MR; m++) {
            a0[m] = a1[m] = b0[m] = b1[m] = (wq_f){0};
            tail[m] = 0.0f;
        }
        int64_t blk = 0;
        if (bits == 4) {
            for (; blk + 1 < kb; blk += 2) {
                wq_block4(row + blk * blob, blob, srow[blk], wq_zero_at(t, zrow, blk),
                          ap + blk * blob, ap + half + blk * blob, as, MR, a0, a1, tail);
                wq_block4(row + (blk + 1) * blob, blob, srow[blk + 1],
                          wq_zero_at(t, zrow, blk + 1), ap + (blk + 1) * blob,
                          ap + half + (blk + 1) * blob, as, MR, b0, b1, tail);
            }
            if (blk < kb)
                wq_block4(row + blk * blob, blob, srow[blk], wq_zero_at(t, zrow, blk),
                          ap + blk * blob, ap + half + blk * blob, as, MR, a0, a1, tail);
        } else {
            for (; blk + 1 < kb; blk += 2) {
                wq_block8(row + blk * blob, blob, srow[blk], wq_zero_at(t, zrow, blk),
                          ap + blk * blob, as, MR, a0, a1, tail);
                wq_block8(row + (blk + 1) * blob, blob, srow[blk + 1],
                          wq_zero_at(t, zrow, blk + 1),
                          ap + (blk + 1) * blob, as, MR, b0, b1, tail);
            }
            if (blk < kb)
                wq_block8(row + blk * blob, blob, srow[blk], wq_zero_at(t, zrow, blk),
                          ap + blk * blob, as, MR, a0, a1, tail);
        }
        const float bn = t->bias ? t->bias[n] : 0.0f;
        for (int m = 0; m < MR; m++)
            *wq_dst(t, m, n) = wq_hsum((a0[m] + a1[m]) + (b0[m] + b1[m])) + tail[m] + bn;
    }
}

#if WQ_V == 16
/* One row of A (the batch-1 token), 4 bits in blocks of 32 values (16 bytes: one vector of
 * indices per block) that share one zero point (symmetric int4-g32, llama.cpp's Q4_0
 * block), AVX-512: one weight row at a time (a single sequential stream per thread, as
 * the float and int8-activation decode loops read it), a block's 16 weights one permute
 * of its table (WQ_IOTA - zero) * scale, two blocks a step, four chains. */
static void wq_row4_g32(const wq_task* t, int64_t lo, int64_t hi) {
    const int64_t kb = t->kb, half = t->half;
    const float* ap = t->ap;
    const wq_f cz = WQ_IOTA - (float)t->zero;
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t* r0 = t->b + n * kb * 16;
        const float* s0 = t->s + n * kb;
        wq_f c0 = (wq_f){0}, c1 = (wq_f){0}, e0 = (wq_f){0}, e1 = (wq_f){0};
        int64_t blk = 0;
        for (; blk + 1 < kb; blk += 2) {
            const float* ae = ap + blk * 16;
            const wq_f ta = cz * s0[blk], ta2 = cz * s0[blk + 1];
            const wq_i xa = wq_bytes(r0 + blk * 16), xa2 = wq_bytes(r0 + blk * 16 + 16);
            c0 += WQ_LOAD(ae) * __builtin_shuffle(ta, xa);
            c1 += WQ_LOAD(ae + half) * __builtin_shuffle(ta, xa >> 4);
            e0 += WQ_LOAD(ae + 16) * __builtin_shuffle(ta2, xa2);
            e1 += WQ_LOAD(ae + half + 16) * __builtin_shuffle(ta2, xa2 >> 4);
        }
        if (blk < kb) {
            const float* ae = ap + blk * 16;
            const wq_f ta = cz * s0[blk];
            const wq_i xa = wq_bytes(r0 + blk * 16);
            c0 += WQ_LOAD(ae) * __builtin_shuffle(ta, xa);
            c1 += WQ_LOAD(ae + half) * __builtin_shuffle(ta, xa >> 4);
        }
        *wq_dst(t, 0, n) = wq_hsum((c0 + c1) + (e0 + e1)) + (t->bias ? t->bias[n] : 0.0f);
    }
}
#endif

static void wq_gemv_rows(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    switch (t->d->M) {
#if WQ_V == 16
    case 1:
        if (t->d->bits == 4 && t->zero >= 0 && t->blob == 16) wq_row4_g32(t, lo, hi);
        else wq_gemv(t, lo, hi, 1);
        break;
#else
    case 1: wq_gemv(t, lo, hi, 1); break;
#endif
    case 2: wq_gemv(t, lo, hi, 2); break;
    case 3: wq_gemv(t, lo, hi, 3); break;
    default: wq_gemv(t, lo, hi, 4); break;
    }
}

/* Weight rows per job of the decode products (plait_parallel_each: each job taken
 * alone, so the threads end within one job of each other) */
#define WQ_JOB_ROWS 32

/* jobs lo .. hi - 1 of WQ_JOB_ROWS weight rows of fn (a function of rows) */
static inline __attribute__((always_inline)) void wq_rows_of_jobs(
        void (*fn)(void*, int64_t, int64_t), void* ctx, int64_t N, int64_t lo, int64_t hi) {
    fn(ctx, lo * WQ_JOB_ROWS, hi * WQ_JOB_ROWS < N ? hi * WQ_JOB_ROWS : N);
}

static void wq_gemv_jobs(void* ctx, int64_t lo, int64_t hi) {
    wq_rows_of_jobs(wq_gemv_rows, ctx, ((const wq_task*)ctx)->d->N, lo, hi);
}

/* The activations laid out for wq_gemv: row m at ap + m * astride; 8 bits: a padded with
 * zeros to k_blocks * block_size; 4 bits: the even-k values, then (at half) the odd-k
 * ones, each padded to k_blocks * block_size / 2 (padding weights multiply zeros). */
static void wq_prepare(const wq_task* t, const float* a, float* ap) {
    const plait_wq_desc* d = t->d;
    const int64_t K = d->K;
    memset(ap, 0, (size_t)(d->M * t->astride) * sizeof(float));
    for (int64_t m = 0; m < d->M; m++) {
        const float* x = a + m * K;
        float* r = ap + m * t->astride;
        if (d->bits == 4) {
            for (int64_t k = 0; k < K; k++) r[(k & 1) * t->half + (k >> 1)] = x[k];
        } else {
            memcpy(r, x, (size_t)K * sizeof(float));
        }
    }
}

/* ------------------------------------------------------------------ prefill */

/* columns n0 .. n0 + WQ_NT - 1 of W^T, dequantized: panel[k][j] (zeros past N) */
static void wq_dequant_panel(const wq_task* t, int64_t n0, float* panel, int unit) {
    const plait_wq_desc* d = t->d;
    const int bits = (int)d->bits;
    const int64_t K = d->K, bs = d->block_size, blob = t->blob, kb = t->kb;
    for (int64_t jj = 0; jj < WQ_NT; jj++) {
        const int64_t n = n0 + jj;
        if (n >= d->N) {
            for (int64_t k = 0; k < K; k++) panel[k * WQ_NT + jj] = 0.0f;
            continue;
        }
        const uint8_t* row = t->b + n * kb * blob;
        for (int64_t blk = 0; blk < kb; blk++) {
            const float sc = unit ? 1.0f : t->s[n * kb + blk];
            const int32_t z = wq_zero_at(t, t->zp + n * t->zcols, blk);
            const uint8_t* p = row + blk * blob;
            const int64_t k0 = blk * bs, k1 = k0 + bs < K ? k0 + bs : K;
            for (int64_t k = k0; k < k1; k++) {
                const int64_t i = k - k0;
                const int32_t q = bits == 4 ? (p[i >> 1] >> ((i & 1) * 4)) & 15 : p[i];
                panel[k * WQ_NT + jj] = (float)(q - z) * sc;
            }
        }
    }
}

static void wq_gemm_tiles(void* ctx, int64_t lo, int64_t hi) {
    wq_task* t = (wq_task*)ctx;
    const plait_wq_desc* d = t->d;
    const int64_t M = d->M, N = d->N, K = d->K;
    float* panel = NULL;
    if (posix_memalign((void**)&panel, 64, (size_t)(K * WQ_NT) * sizeof(float)) != 0) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t tile = lo; tile < hi; tile++) {
        const int64_t n0 = tile * WQ_NT;
        const int64_t nc = N - n0 < WQ_NT ? N - n0 : WQ_NT;
        wq_dequant_panel(t, n0, panel, 0);
        float bias[WQ_NT];
        for (int64_t j = 0; j < WQ_NT; j++) bias[j] = t->bias && j < nc ? t->bias[n0 + j] : 0.0f;
        for (int64_t m0 = 0; m0 < M; m0 += WQ_MR) {
            const int64_t mr = M - m0 < WQ_MR ? M - m0 : WQ_MR;
            const float* ar[WQ_MR];
            for (int r = 0; r < WQ_MR; r++) ar[r] = t->a + (m0 + (r < mr ? r : mr - 1)) * K;
            wq_f c0[WQ_MR], c1[WQ_MR];
            for (int r = 0; r < WQ_MR; r++) {
                c0[r] = WQ_LOAD(bias);
                c1[r] = WQ_LOAD(bias + WQ_V);
            }
            for (int64_t k = 0; k < K; k++) {
                const wq_f w0 = *(const wq_f*)(panel + k * WQ_NT);
                const wq_f w1 = *(const wq_f*)(panel + k * WQ_NT + WQ_V);
                for (int r = 0; r < WQ_MR; r++) {
                    const float x = ar[r][k];
                    c0[r] += x * w0;
                    c1[r] += x * w1;
                }
            }
            for (int64_t r = 0; r < mr; r++) {
                float* o = t->out + (m0 + r) * N + n0;
                if (nc == WQ_NT) {
                    WQ_STORE(o, c0[r]);
                    WQ_STORE(o + WQ_V, c1[r]);
                } else {
                    float tmp[WQ_NT];
                    WQ_STORE(tmp, c0[r]);
                    WQ_STORE(tmp + WQ_V, c1[r]);
                    memcpy(o, tmp, (size_t)nc * sizeof(float));
                }
            }
        }
    }
    free(panel);
}

/* ------------------------------------------ int8 activations (accuracy_level 4) */

/* The activations quantized per row and block (plait_wquant.h; wq8_quantize_rows):
 *   qa: int8, arow bytes per row.  8 bits: the values in K order; 4 bits: each block's
 *       values at even positions, then (at ahalf) those at odd positions, so that byte j
 *       of a block's packed weights multiplies qa[b * blob + j] by its low nibble and
 *       qa[ahalf + b * blob + j] by its high one.  Zero-padded to whole 64-byte vectors.
 *   sa: float per block (amax / 127); qs: int32 per block (the block's sum of qa, the
 *       zero point's correction: sum qa (q - z) = sum qa q - z * qs);
 *   the vector path's lanes (one per 4 bytes of a half: what one int32 lane of an
 *   integer dot product sums): sl, the lane's block's sa; zl, -z times the sum of the
 *   lane's 4 (8 bits) or 8 (4 bits) values of qa. */
typedef struct wq8_act_ {
    int8_t* qa;
    float* sa;
    int32_t* qs;
    float* sl;
    int32_t* zl;
    int64_t rbytes;   /* packed bytes of a weight row, kb * blob */
    int64_t nv;       /* 64-byte vectors per half, ceil(rbytes / 64) */
    int64_t ahalf;    /* nv * 64 */
    int64_t arow;     /* int8 values per row: ahalf (8 bits) or 2 * ahalf (4 bits) */
    int64_t lanes;    /* nv * 16 */
    int32_t zc;       /* the zero point the lanes' zl subtract (the weights' zero; in the
                       * AVX2 8-bit path that zero minus 128: it reads q - 128 signed) */
    int vec;          /* the lane arrays are filled (the decode vector path runs) */
    int plain;        /* qa in K order for both widths (the prefill panels: wq8_gemm) */
    int16_t* a16;     /* the AVX2 prefill's activations as int16 (wq8w_gemm), arow a row */
} wq8_act;

/* rows lo .. hi - 1 of a quantized to int8 per block: rintf (half to even) of
 * a * (127 / amax), exactly the reference's (docs/dialects.md, accuracy_level 4) */
#if defined(PLAIT_ISA_AVX512VNNI)
static void wq8_quantize_row_vec(const wq_task* t, int64_t m);
#endif
#if defined(PLAIT_ISA_AVX2)
static void wq8a_quantize_row(const wq_task* t, int64_t m);
#endif

static void wq8_quantize_rows(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    const plait_wq_desc* d = t->d;
    const wq8_act* A = t->q8;
    const int64_t K = d->K, bs = d->block_size, kb = t->kb, blob = t->blob;
    const int four = d->bits == 4;
    for (int64_t m = lo; m < hi; m++) {
#if defined(PLAIT_ISA_AVX512VNNI)
        if (A->vec && bs % 16 == 0) {
            wq8_quantize_row_vec(t, m);
            continue;
        }
#endif
#if defined(PLAIT_ISA_AVX2)
        if (A->vec && bs % 16 == 0 && K % bs == 0) {
            wq8a_quantize_row(t, m);
            continue;
        }
#endif
        const float* x = t->a + m * K;
        int8_t* q = A->qa + m * A->arow;
        memset(q, 0, (size_t)A->arow);
        for (int64_t blk = 0; blk < kb; blk++) {
            const int64_t k0 = blk * bs, n = K - k0 < bs ? K - k0 : bs;
            float amax = 0.0f;
            for (int64_t i = 0; i < n; i++) {   /* not fmaxf: a libm call per value */
                const float ax = fabsf(x[k0 + i]);
                amax = ax > amax ? ax : amax;
            }
            const float r = amax != 0.0f ? 127.0f / amax : 0.0f;
            int32_t s = 0;
            int8_t* qb = q + blk * blob;
            for (int64_t i = 0; i < n; i++) {
                float v = rintf(x[k0 + i] * r);
                v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
                const int8_t qi = (int8_t)v;
                s += qi;
                if (A->plain) q[k0 + i] = qi;
                else if (four) qb[(i & 1) * A->ahalf + (i >> 1)] = qi;
                else qb[i] = qi;
            }
            A->sa[m * kb + blk] = amax / 127.0f;
            A->qs[m * kb + blk] = s;
        }
        if (!A->vec) continue;
        const float* sa = A->sa + m * kb;
        const int lg = __builtin_ctzll((unsigned long long)blob);   /* blob: a power of 2 */
        for (int64_t l = 0; l < A->lanes; l++) {
            const int64_t o = 4 * l, blk = o >> lg;
            int32_t s = 0;
            for (int j = 0; j < 4; j++) s += q[o + j] + (four ? q[A->ahalf + o + j] : 0);
            A->sl[m * A->lanes + l] = blk < kb ? sa[blk] : 0.0f;
            A->zl[m * A->lanes + l] = -A->zc * s;
        }
    }
}

/* out[m][n] for one row m of quantized activations and one weight row n: each block's
 * integer sum, then sum_b (sa * scale) * isum in float (the plain path: every copy) */
static inline float wq8_dot(const wq_task* t, const int8_t* q, const float* sa,
                            const int32_t* qs, int64_t n) {
    const int64_t kb = t->kb, blob = t->blob, ahalf = t->q8->ahalf;
    const uint8_t* row = t->b + n * kb * blob;
    const float* srow = t->s + n * kb;
    const uint8_t* zrow = t->zp + n * t->zcols;
    float acc = 0.0f;
    for (int64_t blk = 0; blk < kb; blk++) {
        const uint8_t* p = row + blk * blob;
        const int8_t* qe = q + blk * blob;
        int32_t s = 0;
        if (t->d->bits == 4) {
            const int8_t* qo = qe + ahalf;
            for (int64_t j = 0; j < blob; j++)
                s += (int32_t)qe[j] * (p[j] & 15) + (int32_t)qo[j] * (p[j] >> 4);
        } else {
            for (int64_t j = 0; j < blob; j++) s += (int32_t)qe[j] * p[j];
        }
        s -= wq_zero_at(t, zrow, blk) * qs[blk];
        acc += (sa[blk] * srow[blk]) * (float)s;
    }
    return acc + (t->bias ? t->bias[n] : 0.0f);
}

static void wq8_rows(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    const wq8_act* A = t->q8;
    const int64_t M = t->d->M, N = t->d->N, kb = t->kb;
    for (int64_t n = lo; n < hi; n++)
        for (int64_t m = 0; m < M; m++)
            *wq_dst(t, m, n) = wq8_dot(t, A->qa + m * A->arow, A->sa + m * kb,
                                       A->qs + m * kb, n);
}

#if defined(PLAIT_ISA_AVX512VNNI)
#define WQ8_VEC 1
#define WQ8_PANEL 32   /* weight rows per job of the vector path */
#ifndef WQ8_ROW1
#define WQ8_ROW1 1     /* batch 1: one weight row at a time (wq8_row1) */
#endif
#ifndef WQ8_AHEAD
#define WQ8_AHEAD 2048 /* bytes a weight row is prefetched ahead */
#endif

/* the scales of weight row srow for the lanes of vector v: lane l belongs to block
 * (64 v + 4 l) >> lg (blob = 2^lg >= 4 bytes; shifts, not divisions: an idiv per vector
 * was the decode loop's longest instruction) */
static inline __attribute__((always_inline)) __m512 wq8_wscale(
        const float* srow, int64_t v, int lg, int64_t kb, __m512i idx) {
    if (lg >= 6) return _mm512_set1_ps(srow[(v << 6) >> lg]);
    const int64_t per = (int64_t)1 << (6 - lg), b0 = v * per;
    const int64_t cnt = kb - b0 < per ? kb - b0 : per;
    return _mm512_permutexvar_ps(
        idx, _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1u), srow + b0));
}

/* wq8_wscale of a vector whose blocks are all inside the row (every vector but a row's
 * last): an unmasked load of just its 64 >> lg scales */
static inline __attribute__((always_inline)) __m512 wq8_wscale_full(
        const float* srow, int64_t v, const int LG, __m512i idx) {
    if (LG >= 6) return _mm512_set1_ps(srow[(v << 6) >> LG]);
    const float* p = srow + (v << (6 - LG));
    if (LG == 5) return _mm512_permutexvar_ps(idx, _mm512_castpd_ps(_mm512_castpd128_pd512(
                                                     _mm_load_sd((const double*)p))));
    if (LG == 4) return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_loadu_ps(p)));
    if (LG == 3) return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(p)));
    return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(p));
}

/* lane l of the vector path -> its block within a vector, (4 l) >> lg */
static inline __attribute__((always_inline)) __m512i wq8_lane_blocks(int lg) {
    return _mm512_srli_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44,
                                               48, 52, 56, 60), (unsigned)lg);
}

/* wq8_quantize_rows of row m for the vector path (A->vec; blocks of a multiple of 16
 * values), 16 values at a time: the same operations (|x| maxima, rint(x * (127 /
 * amax)) rounded half to even), so the same bytes; the lanes' sums of 4 (8 bits) or 4
 * + 4 (4 bits, both halves) values of qa by vpdpbusd with unit weights, their scales
 * spread as the weights' are (wq8_wscale). */
static void wq8_quantize_row_vec(const wq_task* t, int64_t m) {
    const plait_wq_desc* d = t->d;
    const wq8_act* A = t->q8;
    const int64_t K = d->K, bs = d->block_size, kb = t->kb, blob = t->blob;
    const int four = d->bits == 4;
    const float* x = t->a + m * K;
    int8_t* q = A->qa + m * A->arow;
    float* sa = A->sa + m * kb;
    memset(q, 0, (size_t)A->arow);
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m512i lim = _mm512_set1_epi32(127);
    for (int64_t blk = 0; blk < kb; blk++) {
        const int64_t k0 = blk * bs, n = K - k0 < bs ? K - k0 : bs;
        __m512 vmax = _mm512_setzero_ps();
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 mk = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
            vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mk, x + k0 + i)), vmax);
        }
        const float amax = _mm512_reduce_max_ps(vmax);
        const __m512 r = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m512i sum = _mm512_setzero_si512();
        int8_t* qb = q + blk * blob;
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 mk = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
            const __m512 v = _mm512_roundscale_ps(
                _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + k0 + i), r),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m512i qi = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(v), lim),
                                                _mm512_sub_epi32(_mm512_setzero_si512(), lim));
            sum = _mm512_add_epi32(sum, qi);
            const __m128i b = _mm512_cvtepi32_epi8(qi);   /* zeros past n */
            if (four) {
                const __m128i eo = _mm_shuffle_epi8(b, split);   /* even k, then odd k */
                _mm_storel_epi64((__m128i*)(qb + i / 2), eo);
                _mm_storel_epi64((__m128i*)(qb + A->ahalf + i / 2), _mm_unpackhi_epi64(eo, eo));
            } else {
                _mm_storeu_si128((__m128i*)(qb + i), b);
            }
        }
        sa[blk] = amax / 127.0f;
        A->qs[m * kb + blk] = _mm512_reduce_add_epi32(sum);
    }
    const int lg = __builtin_ctzll((unsigned long long)blob);
    const __m512i idx = wq8_lane_blocks(lg), ones = _mm512_set1_epi8(1);
    const __m512i nz = _mm512_set1_epi32(-t->zero);
    for (int64_t v = 0; v < A->nv; v++) {
        __m512i ls = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
                                         _mm512_loadu_si512(q + v * 64));
        if (four)
            ls = _mm512_dpbusd_epi32(ls, ones, _mm512_loadu_si512(q + A->ahalf + v * 64));
        _mm512_storeu_si512(A->zl + m * A->lanes + v * 16, _mm512_mullo_epi32(ls, nz));
        _mm512_storeu_ps(A->sl + m * A->lanes + v * 16, wq8_wscale(sa, v, lg, kb, idx));
    }
}

/* MR rows of activations from m0 against NR weight rows from n0 with vpdpbusd
 * (unsigned weights times signed activations, 4 products a lane, exact), every block's
 * zero point t->zero: a lane starts at -z * (its activations' sum), so its sum is
 * sum qa (q - z); then times its block's sa * scale, into MR x NR float vectors. */
static inline __attribute__((always_inline)) void wq8_tile(const wq_task* t, int64_t m0,
                                                           const int MR, int64_t n0,
                                                           const int NR) {
    const wq8_act* A = t->q8;
    const int64_t kb = t->kb, blob = t->blob, nv = A->nv, rb = A->rbytes, N = t->d->N;
    const int four = t->d->bits == 4;
    const __m512i nib = _mm512_set1_epi8(15);
    const int lg = __builtin_ctzll((unsigned long long)blob);
    const __m512i idx = wq8_lane_blocks(lg);
    const uint8_t* w[4];
    const float* sw[4];
    for (int r = 0; r < NR; r++) {
        w[r] = t->b + (n0 + r) * rb;
        sw[r] = t->s + (n0 + r) * kb;
    }
    __m512 f[4][4];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) f[m][r] = _mm512_setzero_ps();
    for (int64_t v = 0; v < nv; v++) {
        const int64_t o = v * 64;
        const __mmask64 mk = rb - o >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (rb - o)) - 1);
        __m512i lo[4], hi[4];
        __m512 ws[4];
        for (int r = 0; r < NR; r++) {
            __builtin_prefetch(w[r] + o + WQ8_AHEAD, 0, 3);
            const __m512i x = _mm512_maskz_loadu_epi8(mk, w[r] + o);
            lo[r] = four ? _mm512_and_si512(x, nib) : x;
            hi[r] = four ? _mm512_and_si512(_mm512_srli_epi16(x, 4), nib) : x;
            ws[r] = wq8_wscale(sw[r], v, lg, kb, idx);
        }
        for (int m = 0; m < MR; m++) {
            const int8_t* q = A->qa + (m0 + m) * A->arow + o;
            const __m512i alo = _mm512_loadu_si512(q);
            const __m512i ahi = four ? _mm512_loadu_si512(q + A->ahalf) : alo;
            const __m512 sl = _mm512_loadu_ps(A->sl + (m0 + m) * A->lanes + v * 16);
            const __m512i zl = _mm512_loadu_si512(A->zl + (m0 + m) * A->lanes + v * 16);
            for (int r = 0; r < NR; r++) {
                __m512i acc = _mm512_dpbusd_epi32(zl, lo[r], alo);
                if (four) acc = _mm512_dpbusd_epi32(acc, hi[r], ahi);
                f[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(sl, ws[r]),
                                          f[m][r]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++)
            *wq_dst(t, m0 + m, n0 + r) = _mm512_reduce_add_ps(f[m][r])
                                         + (t->bias ? t->bias[n0 + r] : 0.0f);
}

/* One step of wq8_row1: the 64 packed bytes of vector v of weight row w (mk: the bytes
 * inside the row) against the activations' vector v, times the lanes' scales sc, into f */
static inline __attribute__((always_inline)) __m512 wq8_step(
        const wq8_act* A, const uint8_t* w, const int8_t* q, const int32_t* zl,
        const float* sl, int64_t v, __mmask64 mk, __m512 sc, const int FOUR, __m512 f) {
    const int64_t o = v * 64;
    const __m512i nib = _mm512_set1_epi8(15);
    __builtin_prefetch(w + o + WQ8_AHEAD, 0, 3);
    const __m512i x = _mm512_maskz_loadu_epi8(mk, w + o);
    __m512i acc = _mm512_dpbusd_epi32(_mm512_loadu_si512(zl + v * 16),
                                      FOUR ? _mm512_and_si512(x, nib) : x,
                                      _mm512_loadu_si512(q + o));
    if (FOUR)
        acc = _mm512_dpbusd_epi32(acc, _mm512_and_si512(_mm512_srli_epi16(x, 4), nib),
                                  _mm512_loadu_si512(q + A->ahalf + o));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc),
                           _mm512_mul_ps(_mm512_loadu_ps(sl + v * 16), sc), f);
}

/* One row of activations against weight rows lo .. hi - 1, one weight row at a time: the
 * batch-1 token reads each weight row as one sequential stream (tiles of several rows
 * interleave as many streams, which streamed worse from memory).  FOUR (4 bits) and LG
 * (blob = 2^LG bytes) are constants of each copy of the loop, so that a vector's scales
 * are one narrow load and a permute (no division, no mask but the row's last vector);
 * LG < 0: read from t (the generic copy).  Two accumulators, even and odd vectors. */
static inline __attribute__((always_inline)) void wq8_row1s(const wq_task* t, int64_t m0,
                                                            int64_t lo, int64_t hi,
                                                            const int FOUR, const int LG) {
    const wq8_act* A = t->q8;
    const int64_t kb = t->kb, nv = A->nv, rb = A->rbytes, N = t->d->N;
    const int lg = LG >= 0 ? LG : __builtin_ctzll((unsigned long long)t->blob);
    const __m512i idx = wq8_lane_blocks(lg);
    const int8_t* q = A->qa + m0 * A->arow;
    const float* sl = A->sl + m0 * A->lanes;
    const int32_t* zl = A->zl + m0 * A->lanes;
    const int64_t last = nv - 1;
    const __mmask64 mlast = rb - last * 64 >= 64 ? ~(__mmask64)0
                                                  : (((__mmask64)1 << (rb - last * 64)) - 1);
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t* w = t->b + n * rb;
        const float* sw = t->s + n * kb;
        __m512 f0 = _mm512_setzero_ps(), f1 = _mm512_setzero_ps();
        int64_t v = 0;
        for (; v + 1 < last; v += 2) {
            const __m512 s0 = LG >= 0 ? wq8_wscale_full(sw, v, LG, idx)
                                      : wq8_wscale(sw, v, lg, kb, idx);
            const __m512 s1 = LG >= 0 ? wq8_wscale_full(sw, v + 1, LG, idx)
                                      : wq8_wscale(sw, v + 1, lg, kb, idx);
            f0 = wq8_step(A, w, q, zl, sl, v, ~(__mmask64)0, s0, FOUR, f0);
            f1 = wq8_step(A, w, q, zl, sl, v + 1, ~(__mmask64)0, s1, FOUR, f1);
        }
        for (; v < last; v++)
            f0 = wq8_step(A, w, q, zl, sl, v,  ~(__mmask64)0,
                          LG >= 0 ? wq8_wscale_full(sw, v, LG, idx)
                                  : wq8_wscale(sw, v, lg, kb, idx), FOUR, f0);
        f1 = wq8_step(A, w, q, zl, sl, last, mlast, wq8_wscale(sw, last, lg, kb, idx), FOUR,
                      f1);
        *wq_dst(t, m0, n) = _mm512_reduce_add_ps(_mm512_add_ps(f0, f1))
                            + (t->bias ? t->bias[n] : 0.0f);
    }
}

/* wq8_row1s with the formats of the common blocks as constants: 4 bits in blocks of 32
 * (LG 4) or 128 (LG 6), 8 bits in blocks of 32 (LG 5) or 128 (LG 7) */
static void wq8_row1(const wq_task* t, int64_t m0, int64_t lo, int64_t hi) {
    const int four = t->d->bits == 4;
    switch (four * 16 + __builtin_ctzll((unsigned long long)t->blob)) {
    case 16 + 4: wq8_row1s(t, m0, lo, hi, 1, 4); break;
    case 16 + 6: wq8_row1s(t, m0, lo, hi, 1, 6); break;
    case 5: wq8_row1s(t, m0, lo, hi, 0, 5); break;
    case 7: wq8_row1s(t, m0, lo, hi, 0, 7); break;
    default:
        if (four) wq8_row1s(t, m0, lo, hi, 1, -1);
        else wq8_row1s(t, m0, lo, hi, 0, -1);
        break;
    }
}

/* rows m0 .. m0 + MR - 1 against weight rows lo .. hi - 1 (one row of activations: a
 * weight row at a time, WQ8_ROW1) */
static inline __attribute__((always_inline)) void wq8_span(const wq_task* t, int64_t m0,
                                                           const int MR, int64_t lo,
                                                           int64_t hi) {
    int64_t n = lo;
    if (MR == 1 && WQ8_ROW1) {
        wq8_row1(t, m0, lo, hi);
        return;
    }
    if (MR <= 2)
        for (; n + 3 < hi; n += 4) wq8_tile(t, m0, MR, n, 4);
    for (; n + 1 < hi; n += 2) wq8_tile(t, m0, MR, n, 2);
    if (n < hi) wq8_tile(t, m0, MR, n, 1);
}

/* jobs of WQ8_PANEL weight rows: every row of activations, 4 at a time, against them
 * (the panel stays in the cache while the activations stream) */
static void wq8_panels(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    const int64_t M = t->d->M, N = t->d->N;
    for (int64_t job = lo; job < hi; job++) {
        const int64_t n0 = job * WQ8_PANEL;
        const int64_t n1 = n0 + WQ8_PANEL < N ? n0 + WQ8_PANEL : N;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) wq8_span(t, m, 4, n0, n1);
        switch (M - m) {
        case 3: wq8_span(t, m, 3, n0, n1); break;
        case 2: wq8_span(t, m, 2, n0, n1); break;
        case 1: wq8_span(t, m, 1, n0, n1); break;
        default: break;
        }
    }
}

/* ------------------------------------------------------ int8 activations: prefill */

#define WQ8_NC 32      /* weight rows (output columns) per job and register tile */
#define WQ8_MR 4       /* activation rows per register tile */

/* weight rows n0 .. n0 + WQ8_NC - 1 unpacked to bytes q in the layout of vpdpbusd:
 * panel[kq][j][i] = q[n0 + j][4 kq + i] (4 consecutive k of a row in one int32 lane, a
 * row per lane; zeros past N), and their scales transposed, ps[blk][j] */
static void wq8_pack_panel(const wq_task* t, int64_t n0, uint8_t* panel, float* ps) {
    const plait_wq_desc* d = t->d;
    const int64_t kb = t->kb, blob = t->blob, kq = kb * d->block_size / 4;
    for (int64_t j = 0; j < WQ8_NC; j++) {
        const int64_t n = n0 + j;
        if (n >= d->N) {
            for (int64_t q = 0; q < kq; q++) memset(panel + (q * WQ8_NC + j) * 4, 0, 4);
            for (int64_t b = 0; b < kb; b++) ps[b * WQ8_NC + j] = 0.0f;
            continue;
        }
        const uint8_t* row = t->b + n * kb * blob;
        for (int64_t b = 0; b < kb; b++) ps[b * WQ8_NC + j] = t->s[n * kb + b];
        if (d->bits == 8) {
            for (int64_t q = 0; q < kq; q++) memcpy(panel + (q * WQ8_NC + j) * 4, row + 4 * q, 4);
        } else {   /* whole bytes per block: 2 bytes hold 4 consecutive values */
            for (int64_t q = 0; q < kq; q++) {
                const uint8_t x0 = row[2 * q], x1 = row[2 * q + 1];
                uint8_t* o = panel + (q * WQ8_NC + j) * 4;
                o[0] = x0 & 15;
                o[1] = x0 >> 4;
                o[2] = x1 & 15;
                o[3] = x1 >> 4;
            }
        }
    }
}

/* MR rows of activations from m0 against the panel's WQ8_NC columns: per block, integer
 * sums on 2 x 16 lanes (a lane per column) starting at -z * (the block's sum of qa),
 * then times sa * the columns' scales into float accumulators */
static inline __attribute__((always_inline)) void wq8_gemm_tile(
        const wq_task* t, const uint8_t* panel, const float* ps, int64_t n0, int64_t m0,
        const int MR) {
    const wq8_act* A = t->q8;
    const int64_t kb = t->kb, N = t->d->N, qb = t->d->block_size / 4;
    __m512 f0[WQ8_MR], f1[WQ8_MR];
    const int32_t* qa[WQ8_MR];
    for (int m = 0; m < MR; m++) {
        f0[m] = f1[m] = _mm512_setzero_ps();
        qa[m] = (const int32_t*)(const void*)(A->qa + (m0 + m) * A->arow);
    }
    for (int64_t b = 0; b < kb; b++) {
        __m512i i0[WQ8_MR], i1[WQ8_MR];
        for (int m = 0; m < MR; m++)
            i0[m] = i1[m] = _mm512_set1_epi32(-t->zero * A->qs[(m0 + m) * kb + b]);
        const uint8_t* pw = panel + b * qb * WQ8_NC * 4;
        for (int64_t q = 0; q < qb; q++) {
            const __m512i w0 = _mm512_loadu_si512(pw + q * WQ8_NC * 4);
            const __m512i w1 = _mm512_loadu_si512(pw + q * WQ8_NC * 4 + 64);
            for (int m = 0; m < MR; m++) {
                const __m512i a = _mm512_set1_epi32(qa[m][b * qb + q]);
                i0[m] = _mm512_dpbusd_epi32(i0[m], w0, a);
                i1[m] = _mm512_dpbusd_epi32(i1[m], w1, a);
            }
        }
        const __m512 s0 = _mm512_loadu_ps(ps + b * WQ8_NC);
        const __m512 s1 = _mm512_loadu_ps(ps + b * WQ8_NC + 16);
        for (int m = 0; m < MR; m++) {
            const __m512 sa = _mm512_set1_ps(A->sa[(m0 + m) * kb + b]);
            f0[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[m]), _mm512_mul_ps(s0, sa), f0[m]);
            f1[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[m]), _mm512_mul_ps(s1, sa), f1[m]);
        }
    }
    const int64_t nc = N - n0 < WQ8_NC ? N - n0 : WQ8_NC;
    const __mmask16 k0 = nc >= 16 ? 0xFFFF : (__mmask16)((1u << nc) - 1u);
    const __mmask16 k1 = nc >= 32 ? 0xFFFF
                                  : (nc <= 16 ? 0 : (__mmask16)((1u << (nc - 16)) - 1u));
    __m512 b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    if (t->bias) {
        b0 = _mm512_maskz_loadu_ps(k0, t->bias + n0);
        b1 = _mm512_maskz_loadu_ps(k1, t->bias + n0 + 16);
    }
    for (int m = 0; m < MR; m++) {
        float* o = t->out + (m0 + m) * N + n0;
        _mm512_mask_storeu_ps(o, k0, _mm512_add_ps(f0[m], b0));
        _mm512_mask_storeu_ps(o + 16, k1, _mm512_add_ps(f1[m], b1));
    }
}

/* jobs of WQ8_NC weight rows: the panel packed once, then every row of activations */
static void wq8_gemm(void* ctx, int64_t lo, int64_t hi) {
    wq_task* t = (wq_task*)ctx;
    const int64_t M = t->d->M, kb = t->kb, kq = kb * t->d->block_size / 4;
    uint8_t* panel;
    float* ps;
    if (wq_buffers2(t, (void**)&panel, (size_t)(kq * WQ8_NC * 4), (void**)&ps,
                    (size_t)(kb * WQ8_NC) * sizeof(float)))
        return;
    for (int64_t job = lo; job < hi; job++) {
        const int64_t n0 = job * WQ8_NC;
        wq8_pack_panel(t, n0, panel, ps);
        int64_t m = 0;
        for (; m + WQ8_MR <= M; m += WQ8_MR) wq8_gemm_tile(t, panel, ps, n0, m, WQ8_MR);
        switch (M - m) {
        case 3: wq8_gemm_tile(t, panel, ps, n0, m, 3); break;
        case 2: wq8_gemm_tile(t, panel, ps, n0, m, 2); break;
        case 1: wq8_gemm_tile(t, panel, ps, n0, m, 1); break;
        default: break;
        }
    }
    free(panel);
    free(ps);
}
#endif

#if defined(PLAIT_ISA_AVX2)
/* The batch-1 product with int8 activations in AVX2 integers (no VNNI): each 32 bytes
 * of a weight row against the activations' 32 bytes by vpmaddubsw (unsigned bytes times
 * signed bytes, pairs summed to int16) and vpmaddwd by ones (int16 pairs to the int32
 * lane of 4 bytes), what llama.cpp's Q4_0/Q8_0 products do on AVX2.  Exact: 4 bits, q in
 * 0..15, a pair at most 2 * 15 * 127 and the low and high nibbles' pairs added in int16
 * at most 7620; 8 bits read as w = q - 128 (signed) and multiplied as |w| times qa with
 * w's sign (vpsignb), a pair at most 2 * 128 * 127 = 32512.  Each lane starts at -zc
 * times its activations' sum (zc: the zero point, or it minus 128 for 8 bits), and is
 * converted and multiplied by its block's sa * scale as in the VNNI path.  The same
 * lane arrays (sl, zl: 4 bytes a lane) as wq8_row1s, so the same sums. */
#define WQ8_VEC2 1
#ifndef WQ8A_AHEAD
#define WQ8A_AHEAD 1024  /* bytes a weight row is prefetched ahead */
#endif

/* the scales of weight row sw for the 8 lanes of 32-byte vector v (blob = 2^lg >= 16
 * bytes; lg 4: blocks 2v and 2v + 1, or 2v alone when it is the row's last) */
static inline __attribute__((always_inline)) __m256 wq8a_wscale(const float* sw, int64_t v,
                                                                int lg, int64_t kb) {
    if (lg >= 5) return _mm256_set1_ps(sw[(v << 5) >> lg]);
    if (2 * v + 1 >= kb) return _mm256_set1_ps(sw[2 * v]);
    const __m256i idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    return _mm256_permutevar8x32_ps(
        _mm256_castps128_ps256(_mm_castpd_ps(_mm_load_sd((const double*)(sw + 2 * v)))), idx);
}

/* the largest |x[i]| of x[0 .. n), n a multiple of 8 (0 for none) */
static inline __attribute__((always_inline)) float wq8a_absmax(const float* x, int64_t n) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8)
        vmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absm), vmax);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* wq8_quantize_rows of row m for the AVX2 path (A->vec; blocks of a multiple of 16
 * values, K whole blocks), 8 values at a time: the same operations (|x| maxima,
 * rint(x * (127 / amax)) rounded half to even, clamped), so the same bytes; the lanes'
 * sums of 4 (8 bits) or 4 + 4 (4 bits) values of qa by vpmaddubsw and vpmaddwd with unit weights, their scales
 * spread as the weights' are (wq8a_wscale), for the vectors wq8a_row1s reads. */
static void wq8a_quantize_row(const wq_task* t, int64_t m) {
    const plait_wq_desc* d = t->d;
    const wq8_act* A = t->q8;
    const int64_t K = d->K, bs = d->block_size, kb = t->kb, blob = t->blob;
    const int four = d->bits == 4;
    const float* x = t->a + m * K;
    int8_t* q = A->qa + m * A->arow;
    float* sa = A->sa + m * kb;
    memset(q, 0, (size_t)A->arow);
    const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (int64_t blk = 0; blk < kb; blk++) {
        const int64_t k0 = blk * bs;
        const float amax = wq8a_absmax(x + k0, bs);
        const __m256 r = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i sum = _mm256_setzero_si256();
        int8_t* qb = q + blk * blob;
        for (int64_t i = 0; i < bs; i += 16) {
            __m256i qi[2];
            for (int h2 = 0; h2 < 2; h2++) {
                __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k0 + i + 8 * h2), r),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                v = _mm256_max_ps(_mm256_min_ps(v, hi), lo);
                qi[h2] = _mm256_cvtps_epi32(v);
                sum = _mm256_add_epi32(sum, qi[h2]);
            }
            const __m256i p16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(qi[0], qi[1]), 0xD8);
            const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(p16),
                                              _mm256_extracti128_si256(p16, 1));
            if (four) {
                const __m128i eo = _mm_shuffle_epi8(b, split);   /* even k, then odd k */
                _mm_storel_epi64((__m128i*)(qb + i / 2), eo);
                _mm_storel_epi64((__m128i*)(qb + A->ahalf + i / 2), _mm_unpackhi_epi64(eo, eo));
            } else {
                _mm_storeu_si128((__m128i*)(qb + i), b);
            }
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        sa[blk] = amax / 127.0f;
        A->qs[m * kb + blk] = _mm_cvtsi128_si32(s4);
    }
    const int lg = __builtin_ctzll((unsigned long long)blob);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256i nz = _mm256_set1_epi32(-A->zc);
    for (int64_t v = 0; v * 32 < A->rbytes; v++) {
        __m256i p = _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i*)(q + v * 32)));
        if (four)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(
                                        ones8, _mm256_loadu_si256((const __m256i*)(
                                                   q + A->ahalf + v * 32))));
        _mm256_storeu_si256((__m256i*)(A->zl + m * A->lanes + v * 8),
                            _mm256_mullo_epi32(_mm256_madd_epi16(p, ones16), nz));
        _mm256_storeu_ps(A->sl + m * A->lanes + v * 8, wq8a_wscale(sa, v, lg, kb));
    }
}

/* one 32-byte step: x (the weight bytes) against the activations at q + o (and the odd
 * values at q + ahalf + o for 4 bits), lanes v*8 .. v*8 + 7 */
static inline __attribute__((always_inline)) __m256 wq8a_step(
        const wq8_act* A, __m256i x, int64_t v, __m256 ws, const int FOUR, __m256 f) {
    const int64_t o = v * 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p;
    if (FOUR) {
        const __m256i nib = _mm256_set1_epi8(15);
        p = _mm256_add_epi16(
            _mm256_maddubs_epi16(_mm256_and_si256(x, nib),
                                 _mm256_loadu_si256((const __m256i*)(A->qa + o))),
            _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(x, 4), nib),
                                 _mm256_loadu_si256((const __m256i*)(A->qa + A->ahalf + o))));
    } else {
        const __m256i w = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
        p = _mm256_maddubs_epi16(
            _mm256_abs_epi8(w),
            _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)(A->qa + o)), w));
    }
    const __m256i acc = _mm256_add_epi32(_mm256_madd_epi16(p, ones),
                                         _mm256_loadu_si256((const __m256i*)(A->zl + v * 8)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc),
                           _mm256_mul_ps(_mm256_loadu_ps(A->sl + v * 8), ws), f);
}

/* weight rows lo .. hi - 1 against the one row of activations, a row at a time (one
 * sequential stream per thread); FOUR and LG (blob = 2^LG) constants of each copy, LG < 0
 * read from t.  Two accumulators, even and odd vectors.  A row of 16 bytes past whole
 * vectors (4 bits in blocks of 32, an odd block count) is read as 16 bytes. */
static inline __attribute__((always_inline)) void wq8a_row1s(const wq_task* t, int64_t lo,
                                                             int64_t hi, const int FOUR,
                                                             const int LG) {
    const wq8_act* A = t->q8;
    const int64_t kb = t->kb, rb = A->rbytes, nfull = rb / 32;
    const int lg = LG >= 0 ? LG : __builtin_ctzll((unsigned long long)t->blob);
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t* w = t->b + n * rb;
        const float* sw = t->s + n * kb;
        __m256 f0 = _mm256_setzero_ps(), f1 = _mm256_setzero_ps();
        int64_t v = 0;
        for (; v + 1 < nfull; v += 2) {
            __builtin_prefetch(w + v * 32 + WQ8A_AHEAD, 0, 0);
            f0 = wq8a_step(A, _mm256_loadu_si256((const __m256i*)(w + v * 32)), v,
                           wq8a_wscale(sw, v, lg, kb), FOUR, f0);
            f1 = wq8a_step(A, _mm256_loadu_si256((const __m256i*)(w + v * 32 + 32)), v + 1,
                           wq8a_wscale(sw, v + 1, lg, kb), FOUR, f1);
        }
        if (v < nfull)
            f0 = wq8a_step(A, _mm256_loadu_si256((const __m256i*)(w + v * 32)), v,
                           wq8a_wscale(sw, v, lg, kb), FOUR, f0);
        if (rb > nfull * 32)   /* 16 bytes: the activations' other 16 are zero padding */
            f1 = wq8a_step(A, _mm256_inserti128_si256(_mm256_setzero_si256(),
                                                      _mm_loadu_si128((const __m128i*)(
                                                          w + nfull * 32)), 0),
                           nfull, wq8a_wscale(sw, nfull, lg, kb), FOUR, f1);
        const __m256 f = _mm256_add_ps(f0, f1);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        *wq_dst(t, 0, n) = _mm_cvtss_f32(h) + (t->bias ? t->bias[n] : 0.0f);
    }
}

/* jobs lo .. hi - 1 of WQ_JOB_ROWS weight rows, the common formats as constants: 4 bits in
 * blocks of 32 (LG 4) or 128 (LG 6), 8 bits in blocks of 32 (LG 5) or 128 (LG 7) */
static void wq8a_jobs(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    const int64_t N = t->d->N;
    const int64_t n0 = lo * WQ_JOB_ROWS, n1 = hi * WQ_JOB_ROWS < N ? hi * WQ_JOB_ROWS : N;
    const int four = t->d->bits == 4;
    switch (four * 16 + __builtin_ctzll((unsigned long long)t->blob)) {
    case 16 + 4: wq8a_row1s(t, n0, n1, 1, 4); break;
    case 16 + 6: wq8a_row1s(t, n0, n1, 1, 6); break;
    case 5: wq8a_row1s(t, n0, n1, 0, 5); break;
    case 7: wq8a_row1s(t, n0, n1, 0, 7); break;
    default:
        if (four) wq8a_row1s(t, n0, n1, 1, -1);
        else wq8a_row1s(t, n0, n1, 0, -1);
        break;
    }
}

/* Prefill (more rows than decode) with int8 activations in AVX2 integers: the
 * activations widened to int16 and the weights unpacked to int16 q - z, multiplied by
 * vpmaddwd (two int16 products summed into an int32 lane).  Exact and never saturating:
 * a pair is at most 2 * 127 * 255 in magnitude, and a block's int32 sum at most
 * block_size * 127 * 255 (blocks below 66,000 values: wq8w_fits).  The zero point is in
 * the weights (q - z), so per-block zero points need no correction.  Per job of WQ8W_NC
 * weight rows (output columns) a panel of q - z, four tiles of 8 columns, each laid out
 * [k / 2][8 columns][2] (a pair of k of a column in one int32 lane, a column per lane);
 * a register tile of 4 rows x 8 columns sums each block in int32, then adds it times
 * sa * the columns' scales into float accumulators (as the VNNI path, wq8_gemm_tile).
 * On this ISA's 2 vpmaddwd a cycle that is 32 products a cycle, twice the float panel's
 * FMAs (wq8f_gemm_tiles). */
#define WQ8W_NC 32
#define WQ8W_MR 4

typedef int32_t wq8w_i32 __attribute__((may_alias));   /* a pair of int16 as one lane */

static int wq8w_fits(const plait_wq_desc* d) {
    return d->block_size % 2 == 0 && d->block_size < 66000;
}

/* rows lo .. hi - 1 of a quantized per block (wq8_quantize_rows' operations: |x|
 * maxima, rint(x * (127 / amax)) half to even, clamped) as int16 in K order, each block
 * at blk * block_size, zeros past K; the blocks' sa */
static void wq8w_quantize_rows(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    const plait_wq_desc* d = t->d;
    const wq8_act* A = t->q8;
    const int64_t K = d->K, bs = d->block_size, kb = t->kb;
    const __m256 vhi = _mm256_set1_ps(127.0f), vlo = _mm256_set1_ps(-127.0f);
    for (int64_t m = lo; m < hi; m++) {
        const float* x = t->a + m * K;
        int16_t* q = A->a16 + m * A->arow;
        for (int64_t blk = 0; blk < kb; blk++) {
            const int64_t k0 = blk * bs, n = K - k0 < bs ? K - k0 : bs, nv = n / 8 * 8;
            float amax = wq8a_absmax(x + k0, nv);
            for (int64_t i = nv; i < n; i++) {
                const float ax = fabsf(x[k0 + i]);
                amax = ax > amax ? ax : amax;
            }
            const float r = amax != 0.0f ? 127.0f / amax : 0.0f;
            const __m256 vr = _mm256_set1_ps(r);
            int16_t* qb = q + k0;
            for (int64_t i = 0; i < nv; i += 8) {
                __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k0 + i), vr),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                v = _mm256_max_ps(_mm256_min_ps(v, vhi), vlo);
                const __m256i w = _mm256_cvtps_epi32(v);
                _mm_storeu_si128((__m128i*)(qb + i),
                                 _mm_packs_epi32(_mm256_castsi256_si128(w),
                                                 _mm256_extracti128_si256(w, 1)));
            }
            for (int64_t i = nv; i < n; i++) {
                float v = rintf(x[k0 + i] * r);
                v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
                qb[i] = (int16_t)v;
            }
            for (int64_t i = n; i < bs; i++) qb[i] = 0;
            A->sa[m * kb + blk] = amax / 127.0f;
        }
    }
}

/* the 8 x 8 int32 transpose: r[c] holds 8 units of column c; out r[u] the unit u of
 * the 8 columns */
static inline __attribute__((always_inline)) void wq8w_transpose8(__m256i* r) {
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    r[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    r[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    r[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    r[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    r[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    r[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    r[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    r[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* weight rows n0 .. n0 + WQ8W_NC - 1 as int16 q - z in the tiles' layout (a row's
 * values past K are read as stored: the activations there are zero), zeros past N;
 * their scales transposed, ps[blk][j] */
static void wq8w_pack_panel(const wq_task* t, int64_t n0, int16_t* panel, float* ps) {
    const plait_wq_desc* d = t->d;
    const int64_t N = d->N, bs = d->block_size, kb = t->kb, blob = t->blob;
    const int64_t kp = kb * bs / 2;   /* int32 units (k pairs) of a column */
    wq8w_i32* p32 = (wq8w_i32*)(void*)panel;
    for (int64_t j = 0; j < WQ8W_NC; j++)
        for (int64_t b = 0; b < kb; b++)
            ps[b * WQ8W_NC + j] = n0 + j < N ? t->s[(n0 + j) * kb + b] : 0.0f;
    for (int64_t sub = 0; sub < WQ8W_NC / 8; sub++) {
        wq8w_i32* ps32 = p32 + sub * kp * 8;
        const int64_t c0 = n0 + sub * 8;
        if (bs % 16 == 0) {   /* 16 values (8 units) of 8 columns at a time */
            for (int64_t b = 0; b < kb; b++) {
                __m256i zc[8];
                for (int c = 0; c < 8; c++)
                    zc[c] = _mm256_set1_epi16(
                        (int16_t)(c0 + c < N ? wq_zero_at(t, t->zp + (c0 + c) * t->zcols, b) : 0));
                for (int64_t i = 0; i < bs; i += 16) {
                    __m256i r[8];
                    for (int c = 0; c < 8; c++) {
                        if (c0 + c >= N) {
                            r[c] = _mm256_setzero_si256();
                            continue;
                        }
                        const uint8_t* p = t->b + (c0 + c) * kb * blob + b * blob;
                        __m128i v;
                        if (d->bits == 4) {   /* low nibble first */
                            const __m128i x = _mm_loadl_epi64((const __m128i*)(p + i / 2));
                            const __m128i nib = _mm_set1_epi8(15);
                            v = _mm_unpacklo_epi8(_mm_and_si128(x, nib),
                                                  _mm_and_si128(_mm_srli_epi16(x, 4), nib));
                        } else {
                            v = _mm_loadu_si128((const __m128i*)(p + i));
                        }
                        r[c] = _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), zc[c]);
                    }
                    wq8w_transpose8(r);
                    wq8w_i32* o = ps32 + (b * bs + i) / 2 * 8;
                    for (int u = 0; u < 8; u++) _mm256_storeu_si256((__m256i*)(o + u * 8), r[u]);
                }
            }
            continue;
        }
        int16_t* ps16 = (int16_t*)(void*)ps32;
        for (int c = 0; c < 8; c++) {
            const int64_t n = c0 + c;
            for (int64_t b = 0; b < kb; b++) {
                const int32_t z = n < N ? wq_zero_at(t, t->zp + n * t->zcols, b) : 0;
                const uint8_t* p = t->b + n * kb * blob + b * blob;
                for (int64_t i = 0; i < bs; i++) {
                    const int64_t k = b * bs + i;
                    int16_t v = 0;
                    if (n < N && k < d->K)
                        v = (int16_t)((d->bits == 4 ? (p[i >> 1] >> ((i & 1) * 4)) & 15 : p[i]) - z);
                    ps16[((k >> 1) * 8 + c) * 2 + (k & 1)] = v;
                }
            }
        }
    }
}

/* s0 += the products of the weights w0 (and s1 += of w1) by the pair at a, broadcast:
 * in assembly so that the accumulators stay in place (GCC's allocation of the same loop in
 * C moved each sum through a copy, and with two tiles spilled one to the stack: a store
 * and a reload on the loop's dependency chain) */
#define WQ8W_ROW2(s0, s1, w0, w1, a)                                                      \
    do {                                                                               \
        __m256i ab_, t_;                                                               \
        __asm__("vpbroadcastd %[m], %[ab]\n\t"                                          \
                "vpmaddwd %[x0], %[ab], %[t]\n\t"                                       \
                "vpaddd %[t], %[y0], %[y0]\n\t"                                         \
                "vpmaddwd %[x1], %[ab], %[ab]\n\t"                                      \
                "vpaddd %[ab], %[y1], %[y1]"                                           \
                : [y0] "+x"(s0), [y1] "+x"(s1), [ab] "=&x"(ab_), [t] "=&x"(t_)          \
                : [x0] "x"(w0), [x1] "x"(w1), [m] "m"(*(a)));                            \
    } while (0)
#define WQ8W_ROW1(s0, w0, a)                                                              \
    do {                                                                               \
        __m256i ab_;                                                                   \
        __asm__("vpbroadcastd %[m], %[ab]\n\t"                                          \
                "vpmaddwd %[x0], %[ab], %[ab]\n\t"                                      \
                "vpaddd %[ab], %[y0], %[y0]"                                           \
                : [y0] "+x"(s0), [ab] "=&x"(ab_)                                        \
                : [x0] "x"(w0), [m] "m"(*(a)));                                          \
    } while (0)

/* MR rows from m0 against tiles sub .. sub + NS - 1 (NS 1 or 2 tiles of 8 columns) of
 * the panel; BS2 the block's k pairs (a constant of the common formats, 0: read from t).
 * The int32 sums of a block (MR x NS vectors) stay in registers, the float sums in f (L1:
 * with them in registers too the sixteen ymm registers would not hold the loop) */
static inline __attribute__((always_inline)) void wq8w_tile(
        const wq_task* t, const int16_t* panel, const float* ps, int64_t n0, int64_t sub,
        int64_t m0, const int MR, const int NS, const int64_t BS2) {
    const wq8_act* A = t->q8;
    const int64_t kb = t->kb, N = t->d->N, bs2 = BS2 ? BS2 : t->d->block_size / 2;
    const wq8w_i32* pw0 = (const wq8w_i32*)(const void*)panel + sub * kb * bs2 * 8;
    const wq8w_i32* pw1 = pw0 + kb * bs2 * 8;
    const wq8w_i32* ar[WQ8W_MR];
    __m256 f[WQ8W_MR][2];
    for (int m = 0; m < MR; m++) {
        ar[m] = (const wq8w_i32*)(const void*)(A->a16 + (m0 + m) * A->arow);
        f[m][0] = f[m][1] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < kb; b++) {
        __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00;
        __m256i s20 = s00, s21 = s00, s30 = s00, s31 = s00;
        const wq8w_i32* wb0 = pw0 + b * bs2 * 8;
        const wq8w_i32* wb1 = pw1 + b * bs2 * 8;
        const int64_t a0 = b * bs2;
        for (int64_t u = 0; u < bs2; u++) {
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(wb0 + u * 8));
            if (NS > 1) {
                const __m256i w1 = _mm256_loadu_si256((const __m256i*)(wb1 + u * 8));
                WQ8W_ROW2(s00, s01, w0, w1, ar[0] + a0 + u);
                if (MR > 1) WQ8W_ROW2(s10, s11, w0, w1, ar[1] + a0 + u);
                if (MR > 2) WQ8W_ROW2(s20, s21, w0, w1, ar[2] + a0 + u);
                if (MR > 3) WQ8W_ROW2(s30, s31, w0, w1, ar[3] + a0 + u);
            } else {
                WQ8W_ROW1(s00, w0, ar[0] + a0 + u);
                if (MR > 1) WQ8W_ROW1(s10, w0, ar[1] + a0 + u);
                if (MR > 2) WQ8W_ROW1(s20, w0, ar[2] + a0 + u);
                if (MR > 3) WQ8W_ROW1(s30, w0, ar[3] + a0 + u);
            }
        }
        const __m256i s0[WQ8W_MR] = {s00, s10, s20, s30}, s1[WQ8W_MR] = {s01, s11, s21, s31};
        const __m256 ws0 = _mm256_loadu_ps(ps + b * WQ8W_NC + sub * 8);
        const __m256 ws1 = NS > 1 ? _mm256_loadu_ps(ps + b * WQ8W_NC + sub * 8 + 8)
                                  : _mm256_setzero_ps();
        for (int m = 0; m < MR; m++) {
            const __m256 sa = _mm256_set1_ps(A->sa[(m0 + m) * kb + b]);
            f[m][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0[m]), _mm256_mul_ps(ws0, sa), f[m][0]);
            if (NS > 1)
                f[m][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1[m]), _mm256_mul_ps(ws1, sa),
                                          f[m][1]);
        }
    }
    const int64_t c0 = n0 + sub * 8, nc = N - c0 < 8 * NS ? N - c0 : 8 * NS;
    for (int m = 0; m < MR; m++) {
        float* o = t->out + (m0 + m) * N + c0;
        float v[16];
        _mm256_storeu_ps(v, f[m][0]);
        _mm256_storeu_ps(v + 8, f[m][1]);
        for (int64_t c = 0; c < nc; c++) o[c] = v[c] + (t->bias ? t->bias[c0 + c] : 0.0f);
    }
}

/* rows m .. m + MR - 1 against every tile of the panel, two at a time */
static inline __attribute__((always_inline)) void wq8w_tiles(
        const wq_task* t, const int16_t* panel, const float* ps, int64_t n0, int64_t m,
        const int MR, const int64_t BS2) {
    const int64_t N = t->d->N;
    const int64_t subs = (N - n0 + 7) / 8 < WQ8W_NC / 8 ? (N - n0 + 7) / 8 : WQ8W_NC / 8;
    int64_t sub = 0;
    for (; sub + 2 <= subs; sub += 2) wq8w_tile(t, panel, ps, n0, sub, m, MR, 2, BS2);
    if (sub < subs) wq8w_tile(t, panel, ps, n0, sub, m, MR, 1, BS2);
}

static inline __attribute__((always_inline)) void wq8w_rows(
        const wq_task* t, const int16_t* panel, const float* ps, int64_t n0, const int64_t BS2) {
    const int64_t M = t->d->M;
    int64_t m = 0;
    for (; m + WQ8W_MR <= M; m += WQ8W_MR)   /* the 4 rows stay in L1 for every tile */
        wq8w_tiles(t, panel, ps, n0, m, WQ8W_MR, BS2);
    switch (M - m) {
    case 3: wq8w_tiles(t, panel, ps, n0, m, 3, BS2); break;
    case 2: wq8w_tiles(t, panel, ps, n0, m, 2, BS2); break;
    case 1: wq8w_tiles(t, panel, ps, n0, m, 1, BS2); break;
    default: break;
    }
}

/* jobs of WQ8W_NC weight rows: the panel packed once, then every row of activations */
static void wq8w_gemm(void* ctx, int64_t lo, int64_t hi) {
    wq_task* t = (wq_task*)ctx;
    const int64_t kb = t->kb, bs = t->d->block_size;
    int16_t* panel;
    float* ps;
    if (wq_buffers2(t, (void**)&panel, (size_t)(kb * bs * WQ8W_NC) * sizeof(int16_t),
                    (void**)&ps, (size_t)(kb * WQ8W_NC) * sizeof(float)))
        return;
    for (int64_t job = lo; job < hi; job++) {
        const int64_t n0 = job * WQ8W_NC;
        wq8w_pack_panel(t, n0, panel, ps);
        switch (bs) {
        case 32: wq8w_rows(t, panel, ps, n0, 16); break;
        case 128: wq8w_rows(t, panel, ps, n0, 64); break;
        default: wq8w_rows(t, panel, ps, n0, 0); break;
        }
    }
    free(panel);
    free(ps);
}
#endif


/* ------------------------------- int8 activations in float: every copy, exactly */

/* Without integer dot products the block sums are taken in float, exactly: qa and
 * q - z are small integers, so every product and every partial sum of a block is an
 * integer below 2^24 when 127 (2^bits - 1) block_size < 2^24 (blocks up to 518 values
 * of 8 bits, 8808 of 4), and float32 holds it exactly.  The loops are the float paths'
 * (wq_block4/8, a dequantized panel), with unit scales, and each block's sums are
 * multiplied by sa * scale at the block's end. */
static int wq8f_exact(const plait_wq_desc* d) {
    return 127 * ((1 << d->bits) - 1) * d->block_size < (1 << 24);
}

/* the quantized rows as floats: decode (split) in wq_prepare's layout, prefill (plain)
 * in K order */
static void wq8f_floats(const wq_task* t, float* ap) {
    const wq8_act* A = t->q8;
    const plait_wq_desc* d = t->d;
    const int64_t n = t->kb * t->blob;
    for (int64_t m = 0; m < d->M; m++) {
        const int8_t* q = A->qa + m * A->arow;
        float* r = ap + m * t->astride;
        if (A->plain) {
            for (int64_t k = 0; k < d->K; k++) r[k] = (float)q[k];
            continue;
        }
        for (int64_t i = 0; i < n; i++) r[i] = (float)q[i];
        if (d->bits == 4)
            for (int64_t i = 0; i < n; i++) r[t->half + i] = (float)q[A->ahalf + i];
    }
}

/* decode rows lo .. hi - 1 against MR rows of float qa */
static inline __attribute__((always_inline)) void wq8f_gemv(const wq_task* t, int64_t lo,
                                                            int64_t hi, const int MR) {
    const plait_wq_desc* d = t->d;
    const int64_t N = d->N, blob = t->blob, kb = t->kb, as = t->astride, half = t->half;
    const float* ap = t->ap;
    const float* sa = t->q8->sa;
    for (int64_t n = lo; n < hi; n++) {
        const uint8_t* row = t->b + n * kb * blob;
        const float* srow = t->s + n * kb;
        const uint8_t* zrow = t->zp + n * t->zcols;
        wq_f tot[WQ_MR];
        float ttail[WQ_MR];
        for (int m = 0; m < MR; m++) {
            tot[m] = (wq_f){0};
            ttail[m] = 0.0f;
        }
        for (int64_t blk = 0; blk < kb; blk++) {
            wq_f c0[WQ_MR], c1[WQ_MR];
            float tail[WQ_MR];
            for (int m = 0; m < MR; m++) {
                c0[m] = c1[m] = (wq_f){0};
                tail[m] = 0.0f;
            }
            const int32_t z = wq_zero_at(t, zrow, blk);
            if (d->bits == 4)
                wq_block4(row + blk * blob, blob, 1.0f, z, ap + blk * blob,
                          ap + half + blk * blob, as, MR, c0, c1, tail);
            else
                wq_block8(row + blk * blob, blob, 1.0f, z, ap + blk * blob, as, MR, c0, c1,
                          tail);
            for (int m = 0; m < MR; m++) {
                const float sc = sa[m * kb + blk] * srow[blk];
                tot[m] += (c0[m] + c1[m]) * ((wq_f){0} + sc);
                ttail[m] += tail[m] * sc;
            }
        }
        const float bn = t->bias ? t->bias[n] : 0.0f;
        for (int m = 0; m < MR; m++) *wq_dst(t, m, n) = wq_hsum(tot[m]) + ttail[m] + bn;
    }
}

static void wq8f_gemv_rows(void* ctx, int64_t lo, int64_t hi) {
    const wq_task* t = (const wq_task*)ctx;
    switch (t->d->M) {
    case 1: wq8f_gemv(t, lo, hi, 1); break;
    case 2: wq8f_gemv(t, lo, hi, 2); break;
    case 3: wq8f_gemv(t, lo, hi, 3); break;
    default: wq8f_gemv(t, lo, hi, 4); break;
    }
}

static void wq8f_gemv_jobs(void* ctx, int64_t lo, int64_t hi) {
    wq_rows_of_jobs(wq8f_gemv_rows, ctx, ((const wq_task*)ctx)->d->N, lo, hi);
}

/* prefill: per tile of WQ_NT columns a panel of q - z (wq_dequant_panel with unit
 * scales) and the columns' scales per block; 4 rows x WQ_NT a register tile, each block
 * summed apart and scaled at its end */
static void wq8f_gemm_tiles(void* ctx, int64_t lo, int64_t hi) {
    wq_task* t = (wq_task*)ctx;
    const plait_wq_desc* d = t->d;
    const int64_t M = d->M, N = d->N, K = d->K, bs = d->block_size, kb = t->kb;
    const float* sa = t->q8->sa;
    float* panel;
    float* sp;
    if (wq_buffers2(t, (void**)&panel, (size_t)(K * WQ_NT) * sizeof(float), (void**)&sp,
                    (size_t)(kb * WQ_NT) * sizeof(float)))
        return;
    for (int64_t tile = lo; tile < hi; tile++) {
        const int64_t n0 = tile * WQ_NT;
        const int64_t nc = N - n0 < WQ_NT ? N - n0 : WQ_NT;
        wq_dequant_panel(t, n0, panel, 1);
        for (int64_t blk = 0; blk < kb; blk++)
            for (int64_t j = 0; j < WQ_NT; j++)
                sp[blk * WQ_NT + j] = j < nc ? t->s[(n0 + j) * kb + blk] : 0.0f;
        float bias[WQ_NT];
        for (int64_t j = 0; j < WQ_NT; j++) bias[j] = t->bias && j < nc ? t->bias[n0 + j] : 0.0f;
        for (int64_t m0 = 0; m0 < M; m0 += WQ_MR) {
            const int64_t mr = M - m0 < WQ_MR ? M - m0 : WQ_MR;
            const float* ar[WQ_MR];
            int64_t rows[WQ_MR];
            for (int r = 0; r < WQ_MR; r++) {
                rows[r] = m0 + (r < mr ? r : mr - 1);
                ar[r] = t->ap + rows[r] * t->astride;
            }
            wq_f c0[WQ_MR], c1[WQ_MR];
            for (int r = 0; r < WQ_MR; r++) {
                c0[r] = WQ_LOAD(bias);
                c1[r] = WQ_LOAD(bias + WQ_V);
            }
            for (int64_t blk = 0; blk < kb; blk++) {
                const int64_t k0 = blk * bs, k1 = k0 + bs < K ? k0 + bs : K;
                wq_f b0[WQ_MR], b1[WQ_MR];
                for (int r = 0; r < WQ_MR; r++) b0[r] = b1[r] = (wq_f){0};
                for (int64_t k = k0; k < k1; k++) {
                    const wq_f w0 = *(const wq_f*)(panel + k * WQ_NT);
                    const wq_f w1 = *(const wq_f*)(panel + k * WQ_NT + WQ_V);
                    for (int r = 0; r < WQ_MR; r++) {
                        const float x = ar[r][k];
                        b0[r] += x * w0;
                        b1[r] += x * w1;
                    }
                }
                const wq_f s0 = *(const wq_f*)(sp + blk * WQ_NT);
                const wq_f s1 = *(const wq_f*)(sp + blk * WQ_NT + WQ_V);
                for (int r = 0; r < WQ_MR; r++) {
                    const float a = sa[rows[r] * kb + blk];
                    c0[r] += b0[r] * (s0 * a);
                    c1[r] += b1[r] * (s1 * a);
                }
            }
            for (int64_t r = 0; r < mr; r++) {
                float* o = t->out + (m0 + r) * N + n0;
                float tmp[WQ_NT];
                WQ_STORE(tmp, c0[r]);
                WQ_STORE(tmp + WQ_V, c1[r]);
                memcpy(o, tmp, (size_t)nc * sizeof(float));
            }
        }
    }
    free(panel);
    free(sp);
}

/* the product with int8 activations: quantize a, then the integer products */
static int wq8_matmul(wq_task* t, int threads) {
    const plait_wq_desc* d = t->d;
    const int64_t M = d->M, N = d->N, kb = t->kb;
    wq8_act A;
    memset(&A, 0, sizeof A);
    A.rbytes = kb * t->blob;
    A.nv = (A.rbytes + 63) / 64;
    A.ahalf = A.nv * 64;
    A.arow = d->bits == 4 ? 2 * A.ahalf : A.ahalf;
    A.lanes = A.nv * 16;
    A.zc = t->zero;
    const int exact = wq8f_exact(d);
#if defined(WQ8_VEC)
    A.plain = M > WQ_MR && t->zero >= 0 && d->block_size % 4 == 0;
    A.vec = !A.plain && t->zero >= 0 && t->blob >= 4 && (t->blob & (t->blob - 1)) == 0;
    const int floats = exact && !A.plain && !A.vec;
#elif defined(WQ8_VEC2)
    /* batch 1, one zero point, blocks of a power-of-two number of bytes >= 16 */
    A.vec = M == 1 && t->zero >= 0 && t->blob >= 16 && (t->blob & (t->blob - 1)) == 0;
    /* prefill: int16 products (any zero points) */
    const int wide = M > WQ_MR && wq8w_fits(d);
    const int floats = exact && !A.vec && !wide;
    if (A.vec && d->bits == 8) A.zc = t->zero - 128;
    if (wide) A.plain = 1;
#else
    const int floats = exact;
#endif
    if (floats && M > WQ_MR) A.plain = 1;
    if (A.plain) A.arow = (kb * d->block_size + 63) / 64 * 64;
    float* ap = NULL;
    if (floats) {
        t->astride = A.plain ? d->K : t->astride;
        ap = (float*)calloc((size_t)(M * t->astride), sizeof(float));
        if (!ap) return 1;
        t->ap = ap;
    }
    A.sa = (float*)malloc((size_t)(M * kb) * sizeof(float));
#if defined(WQ8_VEC2)
    if (wide) {
        A.a16 = (int16_t*)malloc((size_t)(M * A.arow) * sizeof(int16_t));
        t->q8 = &A;
        int rc = 1;
        if (A.a16 && A.sa) {
            plait_parallel_range(wq8w_quantize_rows, t, M, M * d->K >= 65536 ? threads : 1);
            plait_parallel_range(wq8w_gemm, t, (N + WQ8W_NC - 1) / WQ8W_NC, threads);
            rc = __atomic_load_n(&t->failed, __ATOMIC_RELAXED);
        }
        free(A.a16);
        free(A.sa);
        return rc;
    }
#endif
    A.qa = (int8_t*)malloc((size_t)(M * A.arow));
    A.qs = (int32_t*)malloc((size_t)(M * kb) * sizeof(int32_t));
    if (A.vec) {
        A.sl = (float*)malloc((size_t)(M * A.lanes) * sizeof(float));
        A.zl = (int32_t*)malloc((size_t)(M * A.lanes) * sizeof(int32_t));
    }
    int rc = 0;
    if (!A.qa || !A.sa || !A.qs || (A.vec && (!A.sl || !A.zl))) {
        rc = 1;
    } else {
        t->q8 = &A;
        plait_parallel_range(wq8_quantize_rows, t, M, M * d->K >= 65536 ? threads : 1);
        if (floats) {
            wq8f_floats(t, ap);
            if (M > WQ_MR)
                plait_parallel_range(wq8f_gemm_tiles, t, (N + WQ_NT - 1) / WQ_NT, threads);
            else
                plait_parallel_each(wq8f_gemv_jobs, t, (N + WQ_JOB_ROWS - 1) / WQ_JOB_ROWS,
                                    threads);
        }
#if defined(WQ8_VEC)
        else if (A.plain)
            plait_parallel_range(wq8_gemm, t, (N + WQ8_NC - 1) / WQ8_NC, threads);
        else if (A.vec)
            plait_parallel_each(wq8_panels, t, (N + WQ8_PANEL - 1) / WQ8_PANEL, threads);
#elif defined(WQ8_VEC2)
        else if (A.vec)
            plait_parallel_each(wq8a_jobs, t, (N + WQ_JOB_ROWS - 1) / WQ_JOB_ROWS, threads);
#endif
        else
            plait_parallel_range(wq8_rows, t, N, threads);
        rc = __atomic_load_n(&t->failed, __ATOMIC_RELAXED);
    }
    free(A.qa);
    free(A.sa);
    free(A.qs);
    free(A.sl);
    free(A.zl);
    free(ap);
    return rc;
}

/* ------------------------------------------------------------------- entry */

static int wq_matmul(const plait_wq_desc* d, const float* a, const uint8_t* b,
                     const float* scales, const uint8_t* zp, const float* bias, float* out,
                     const plait_wq_outs* outs) {
    const int64_t M = d->M, N = d->N, K = d->K, bs = d->block_size;
    if (M <= 0 || N <= 0) return 0;
    wq_task t;
    memset(&t, 0, sizeof t);
    t.d = d;
    t.a = a;
    t.b = b;
    t.s = scales;
    t.zp = zp;
    t.bias = bias;
    t.out = out;
    t.outs = outs;
    t.kb = (K + bs - 1) / bs;
    t.blob = bs * d->bits / 8;
    t.zcols = (t.kb * d->bits + 7) / 8;
    t.astride = t.kb * bs;
    t.half = t.kb * t.blob;
    t.zero = d->zero >= 0 && d->zero < (1 << d->bits) ? (int32_t)d->zero : -1;
    const int64_t work = M * N * K;
    const int threads = work >= 262144 ? plait_max_threads() : 1;
    if (d->act == 8) return wq8_matmul(&t, threads);
    if (M <= WQ_MR) {
        float* ap = (float*)malloc((size_t)(M * t.astride) * sizeof(float));
        if (!ap) return 1;
        wq_prepare(&t, a, ap);
        t.ap = ap;
        plait_parallel_each(wq_gemv_jobs, &t, (N + WQ_JOB_ROWS - 1) / WQ_JOB_ROWS, threads);
        free(ap);
        return 0;
    }
    plait_parallel_range(wq_gemm_tiles, &t, (N + WQ_NT - 1) / WQ_NT, threads);
    return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_wq_matmul)(const plait_wq_desc* d, const float* a, const uint8_t* b,
                              const float* scales, const uint8_t* zp, const float* bias,
                              float* out, const plait_wq_outs* outs) {
    if (!outs || d->M <= WQ_MR) return wq_matmul(d, a, b, scales, zp, bias, out, outs);
    /* several outputs, more rows than decode (a prefill): each output the product of
     * its own rows of W (their packed bytes, scales and zero points are consecutive) */
    const int64_t kb = (d->K + d->block_size - 1) / d->block_size;
    const int64_t blob = d->block_size * d->bits / 8, zcols = (kb * d->bits + 7) / 8;
    plait_wq_desc one = *d;
    int64_t lo = 0;
    for (int64_t j = 0; j < outs->count; j++) {
        one.N = outs->end[j] - lo;
        const int rc = wq_matmul(&one, a, b + lo * kb * blob, scales + lo * kb,
                                 zp + lo * zcols, bias ? bias + lo : NULL, outs->out[j], NULL);
        if (rc) return rc;
        lo = outs->end[j];
    }
    return 0;
}

PLAIT_ISA_FAMILY("wquant")
PLAIT_ISA_DISPATCH(int, plait_wq_matmul,
                   (const plait_wq_desc* d, const float* a, const uint8_t* b,
                    const float* scales, const uint8_t* zp, const float* bias, float* out,
                    const plait_wq_outs* outs),
                   (d, a, b, scales, zp, bias, out, outs))
