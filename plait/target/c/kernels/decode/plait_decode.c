/* plait_decode.c: the c target's decode family (float32), a kernel family of
 * plait_isa.h: the matrix-vector product of batch-1 decoding and attention over the
 * key/value cache (plait_decode.h).
 *
 * Decoding one token reads every weight once, so the product runs at the memory's
 * bandwidth when the weights stream in order on every thread: each job is a block of
 * weight rows, (N, K) row-major as the model stores them (linear's weight), read one
 * row at a time at batch 1 (one sequential stream per thread: four interleaved rows
 * streamed worse from memory) and four at a time for 2-4 rows; the activations (a few rows of K floats)
 * stay in the L1 cache.  Sums are kept on 16 lanes (one zmm, two ymm, four xmm or NEON
 * registers: GCC vector extensions) and the lanes are added in a fixed tree order, so
 * every ISA copy gives the same bits when the compiler does not contract multiply-adds
 * differently. */
#include "plait_isa.h"
#include "plait_threads.h"
#include "plait_decode.h"
/* the softmax's vectors (plait_vexp.h: the vector form of plait_exp_f32; GCC leaves a
 * scalar loop over plait_exp_f32 unvectorized in the AVX2 and baseline copies) */
#if defined(PLAIT_ISA_AVX512)
#define PLAIT_SL 16
#else
#define PLAIT_SL 8
#endif
#include "plait_vexp.h"

typedef float dec_v16 __attribute__((vector_size(64)));
typedef float dec_v16u __attribute__((vector_size(64), aligned(4)));

/* Weight rows per job: 64 KB of weights at K = 1024, enough to keep the prefetchers
 * streaming, small enough that two threads share N = 1024 rows evenly. */
#define DEC_JOB_ROWS 16
/* how far ahead (floats) each weight row is prefetched; 0: not at all.  Not in the AVX2
 * copy: on AMD Zen 3 (AVX2, no AVX-512) the hardware prefetchers stream the rows alone,
 * and a prefetch a line 4 KB ahead made the batch-1 products of the 0.5B's layers and
 * lm_head slower in every interleaved round (two threads, 187-247 ms a token without,
 * 231-266 with: the instructions and their page walks ahead of the stream) */
#ifndef DEC_PREFETCH
#if defined(PLAIT_ISA_AVX2)
#define DEC_PREFETCH 0
#else
#define DEC_PREFETCH 1024
#endif
#endif
#if DEC_PREFETCH > 0
#define DEC_PF(p) __builtin_prefetch((p) + DEC_PREFETCH, 0, 0)
#else
#define DEC_PF(p) ((void)(p))
#endif
/* batch 1: one weight row at a time (one sequential stream per thread) */
#ifndef DEC_ONE_ROW
#define DEC_ONE_ROW 1
#endif
/* below this many weights (64 KB) a product runs on the calling thread */
#define DEC_SERIAL_WEIGHTS 16384

/* The 16 lanes of a sum are kept as DEC_NP vectors of the copy's own width (DEC_NV
 * floats: one zmm, two ymm, four xmm or NEON registers): GCC lowers a 64-byte generic
 * vector carried from one iteration to the next through the stack in the AVX2 and
 * baseline copies (each multiply-add stored and reloaded in pieces: a batch-1 product
 * ran at half the speed of the same loop on native vectors). */
#if defined(PLAIT_ISA_AVX512)
#define DEC_NV 16
#elif defined(PLAIT_ISA_AVX2) || defined(PLAIT_ISA_AVXVNNI)
#define DEC_NV 8
#else
#define DEC_NV 4
#endif
#define DEC_NP (16 / DEC_NV)
typedef float dec_vn __attribute__((vector_size(DEC_NV * 4)));
typedef float dec_vnu __attribute__((vector_size(DEC_NV * 4), aligned(4)));
#define DEC_LD(p) (*(const dec_vnu*)(p))

/* the sum of 16 lanes (v[p] holds lanes p * DEC_NV ...), in one fixed tree order */
static inline __attribute__((always_inline)) float dec_hsum(const dec_vn* v) {
    float l[16], a[8], b[4];
    for (int p = 0; p < DEC_NP; ++p)
        for (int i = 0; i < DEC_NV; ++i) l[p * DEC_NV + i] = v[p][i];
    for (int i = 0; i < 8; ++i) a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; ++i) b[i] = a[i] + a[i + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* acc[0 .. DEC_NP) += the 16 products x[0 .. 16) * w[0 .. 16) */
#define DEC_FMA16(acc, x, w)                                                          \
    do {                                                                               \
        for (int p_ = 0; p_ < DEC_NP; ++p_)                                            \
            (acc)[p_] += DEC_LD((x) + p_ * DEC_NV) * DEC_LD((w) + p_ * DEC_NV);        \
    } while (0)

/* y[n0 .. n0+R) of one row of x: R (1..4) weight rows at once */
static inline __attribute__((always_inline)) void
dec_rows(const float* restrict x, const float* restrict w, int64_t K, int R, float* out) {
    dec_vn a0[DEC_NP], a1[DEC_NP], a2[DEC_NP], a3[DEC_NP];
    for (int p = 0; p < DEC_NP; ++p) a0[p] = a1[p] = a2[p] = a3[p] = (dec_vn){0};
    const float* w0 = w;
    const float* w1 = w + (R > 1 ? K : 0);
    const float* w2 = w + (R > 2 ? 2 * K : 0);
    const float* w3 = w + (R > 3 ? 3 * K : 0);
    int64_t k = 0;
    if (R == 1) {   /* one row: two chains, even and odd 16s (joined below) */
        dec_vn b0[DEC_NP];
        for (int p = 0; p < DEC_NP; ++p) b0[p] = (dec_vn){0};
        for (; k + 32 <= K; k += 32) {
            DEC_PF(w0 + k);
            DEC_PF(w0 + k + 16);
            DEC_FMA16(a0, x + k, w0 + k);
            DEC_FMA16(b0, x + k + 16, w0 + k + 16);
        }
        for (int p = 0; p < DEC_NP; ++p) a0[p] += b0[p];
    }
    for (; k + 16 <= K; k += 16) {
        /* the rows ahead (the next block's, for short rows), a line per row and step */
        DEC_PF(w0 + k);
        if (R > 1) DEC_PF(w1 + k);
        if (R > 2) DEC_PF(w2 + k);
        if (R > 3) DEC_PF(w3 + k);
        DEC_FMA16(a0, x + k, w0 + k);
        if (R > 1) DEC_FMA16(a1, x + k, w1 + k);
        if (R > 2) DEC_FMA16(a2, x + k, w2 + k);
        if (R > 3) DEC_FMA16(a3, x + k, w3 + k);
    }
    float s0 = dec_hsum(a0), s1 = dec_hsum(a1), s2 = dec_hsum(a2), s3 = dec_hsum(a3);
    for (; k < K; ++k) {
        float xk = x[k];
        s0 += xk * w0[k];
        if (R > 1) s1 += xk * w1[k];
        if (R > 2) s2 += xk * w2[k];
        if (R > 3) s3 += xk * w3[k];
    }
    out[0] = s0;
    if (R > 1) out[1] = s1;
    if (R > 2) out[2] = s2;
    if (R > 3) out[3] = s3;
}

static void dec_gemv_block(const plait_gemv_problem* p, int64_t n0, int64_t n1) {
    const int64_t K = p->K, N = p->N;
    const int step = p->M == 1 && DEC_ONE_ROW ? 1 : 4;
    for (int64_t n = n0; n < n1; n += step) {
        int R = (int)(n1 - n < step ? n1 - n : step);
        const float* w = p->w + n * K;
        for (int64_t m = 0; m < p->M; ++m) {
            float s[4];
            const float* x = p->x + m * p->ldx;
            switch (R) {
            case 4: dec_rows(x, w, K, 4, s); break;
            case 3: dec_rows(x, w, K, 3, s); break;
            case 2: dec_rows(x, w, K, 2, s); break;
            default: dec_rows(x, w, K, 1, s); break;
            }
            float* y = p->y + m * N + n;
            for (int r = 0; r < R; ++r) {
                float v = s[r];
                if (p->bias) v += p->bias[n + r];
                if (p->res) v += p->res[m * N + n + r];
                y[r] = v;
            }
        }
    }
}

/* jobs lo .. hi - 1, each DEC_JOB_ROWS weight rows */
static void dec_gemv_jobs(void* ctx, int64_t lo, int64_t hi) {
    const plait_gemv_problem* p = (const plait_gemv_problem*)ctx;
    int64_t n0 = lo * DEC_JOB_ROWS, n1 = hi * DEC_JOB_ROWS;
    dec_gemv_block(p, n0, n1 < p->N ? n1 : p->N);
}

PLAIT_ISA_HIDDEN int PLAIT_ISA_FN(plait_gemv)(const plait_gemv_problem* p) {
    if (p->M > PLAIT_GEMV_MAX_ROWS) return 2;
    if (p->M <= 0 || p->N <= 0) return 0;
    if (p->K == 0) {
        for (int64_t m = 0; m < p->M; ++m)
            for (int64_t n = 0; n < p->N; ++n)
                p->y[m * p->N + n] = (p->bias ? p->bias[n] : 0.0f)
                                     + (p->res ? p->res[m * p->N + n] : 0.0f);
        return 0;
    }
    int64_t jobs = (p->N + DEC_JOB_ROWS - 1) / DEC_JOB_ROWS;
    int nt = p->N * p->K < DEC_SERIAL_WEIGHTS ? 1 : plait_max_threads();
    /* each job taken alone (the threads end within one job of each other: the lm_head
     * of a large vocabulary in 8 chunks left one thread idle for up to a chunk) */
    plait_parallel_each(dec_gemv_jobs, (void*)p, jobs, nt);
    return 0;
}

/* ----------------------------------------------------------------- attention */

/* query rows per job (with the G heads of the group: G * ATT_ROWS query vectors) */
#define ATT_ROWS 8

static inline __attribute__((always_inline)) float
dec_dot(const float* restrict a, const float* restrict b, int64_t n) {
    dec_vn acc[DEC_NP];
    for (int p = 0; p < DEC_NP; ++p) acc[p] = (dec_vn){0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) DEC_FMA16(acc, a + k, b + k);
    float s = dec_hsum(acc);
    for (; k < n; ++k) s += a[k] * b[k];
    return s;
}

static inline __attribute__((always_inline)) void
dec_axpy(float* restrict y, float a, const float* restrict x, int64_t n) {
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int p = 0; p < DEC_NP; ++p)
            *(dec_vnu*)(y + k + p * DEC_NV) = DEC_LD(y + k + p * DEC_NV)
                                              + a * DEC_LD(x + k + p * DEC_NV);
    for (; k < n; ++k) y[k] += a * x[k];
}

/* x[0 .. n-1] = softmax(x), n >= 1, PLAIT_SL lanes at a time (the exponentials of
 * plait_exp_sv; the lanes' maxima and sums joined in lane order) */
static inline __attribute__((always_inline)) void dec_softmax(float* restrict x, int64_t n) {
    const int64_t nv = n / PLAIT_SL * PLAIT_SL, rest = n - nv;
    plait_sv vm = PLAIT_SSPLAT(-__builtin_inff()), v;
    for (int64_t j = 0; j < nv; j += PLAIT_SL) {
        v = *(const plait_svu*)(x + j);
        vm = PLAIT_SELECT(v > vm, v, vm);
    }
    float mx = -__builtin_inff();
    for (int l = 0; l < PLAIT_SL; ++l) mx = vm[l] > mx ? vm[l] : mx;
    for (int64_t j = nv; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
    plait_sv vs = PLAIT_SSPLAT(0.0f);
    for (int64_t j = 0; j < nv; j += PLAIT_SL) {
        v = *(const plait_svu*)(x + j) - mx;
        plait_exp_sv(&v);
        *(plait_svu*)(x + j) = v;
        vs += v;
    }
    float sum = 0.0f;
    for (int l = 0; l < PLAIT_SL; ++l) sum += vs[l];
    if (rest) {
        plait_sv_load_n(&v, x + nv, rest);
        v -= mx;
        plait_exp_sv(&v);
        plait_sv_store_n(x + nv, &v, rest);
        for (int64_t j = nv; j < n; ++j) sum += x[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < nv; j += PLAIT_SL) *(plait_svu*)(x + j) = *(plait_svu*)(x + j) * inv;
    for (int64_t j = nv; j < n; ++j) x[j] *= inv;
}

#if defined(PLAIT_ISA_AVX512)
/* Scores 16 keys at a time (AVX-512): each key's dot product is a vector of 16 partial
 * sums, and the 16 vectors are summed lane-wise by one transposing tree (15 pairs of
 * shuffles and adds, each level halving the lanes per key) instead of a horizontal sum
 * each (about 12 operations and a dependency chain per key and query head). */
#define DEC_KEYS 16
typedef int32_t dec_i16 __attribute__((vector_size(64)));

/* lanes lo of a and b, then lanes hi: [a(m lanes) b(m lanes)] blocks of m = w lanes */
#define DEC_T(a, b, x, y) (__builtin_shuffle((a), (b), (x)) + __builtin_shuffle((a), (b), (y)))

/* the sums of the lanes of v[0 .. 15], as the lanes 0 .. 15 of one vector */
static inline __attribute__((always_inline)) dec_v16 dec_hsum16(const dec_v16* v) {
    const dec_i16 a1 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
    const dec_i16 b1 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
    const dec_i16 a2 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    const dec_i16 b2 = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    const dec_i16 a3 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
    const dec_i16 b3 = {2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31};
    const dec_i16 a4 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
    const dec_i16 b4 = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    const dec_v16 w0 = DEC_T(v[0], v[1], a1, b1), w1 = DEC_T(v[2], v[3], a1, b1);
    const dec_v16 w2 = DEC_T(v[4], v[5], a1, b1), w3 = DEC_T(v[6], v[7], a1, b1);
    const dec_v16 w4 = DEC_T(v[8], v[9], a1, b1), w5 = DEC_T(v[10], v[11], a1, b1);
    const dec_v16 w6 = DEC_T(v[12], v[13], a1, b1), w7 = DEC_T(v[14], v[15], a1, b1);
    const dec_v16 x0 = DEC_T(w0, w1, a2, b2), x1 = DEC_T(w2, w3, a2, b2);
    const dec_v16 x2 = DEC_T(w4, w5, a2, b2), x3 = DEC_T(w6, w7, a2, b2);
    const dec_v16 y0 = DEC_T(x0, x1, a3, b3), y1 = DEC_T(x2, x3, a3, b3);
    return DEC_T(y0, y1, a4, b4);
}

/* out[0 .. 15] = scale * (q . k[c]) for the 16 key rows k[c] (D a multiple of 16) */
static inline __attribute__((always_inline)) void dec_scores16(
        float* restrict out, const float* restrict q, const float* const* k, int64_t D,
        float scale) {
    dec_v16 acc[DEC_KEYS];
    for (int c = 0; c < DEC_KEYS; ++c) acc[c] = (dec_v16){0};
    for (int64_t e = 0; e < D; e += 16) {
        const dec_v16 qv = *(const dec_v16u*)(q + e);
        for (int c = 0; c < DEC_KEYS; ++c) acc[c] += qv * *(const dec_v16u*)(k[c] + e);
    }
    *(dec_v16u*)out = dec_hsum16(acc) * scale;
}
#endif

typedef struct {
    const plait_kv_attention_desc* d;
    int64_t blocks;       /* query row blocks per (b, kv) */
    int status;
} dec_att_task;

static void dec_att_jobs(void* ctx, int64_t lo, int64_t hi) {
    dec_att_task* t = (dec_att_task*)ctx;
    const plait_kv_attention_desc* d = t->d;
    const int64_t G = d->G, S = d->S, P = d->P, D = d->D, KV = d->KV, B = d->B, W = d->W;
    for (int64_t job = lo; job < hi; ++job) {
        const int64_t blk = job % t->blocks, bk = job / t->blocks;
        const int64_t b = bk / KV, kv = bk % KV;
        const int64_t i0 = blk * ATT_ROWS, i1 = i0 + ATT_ROWS < S ? i0 + ATT_ROWS : S;
        const int64_t rows = i1 - i0, n = P + i1;      /* keys any row of the block sees */
        float* s = plait_scratch(0, (size_t)(G * rows * n));
        if (!s) {
            __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
            return;
        }
        const float* q0 = d->q + ((b * KV + kv) * G * S) * D;   /* head kv*G, row 0 */
        const float* kn = d->kn + (b * KV + kv) * S * D;
        const float* vn = d->vn + (b * KV + kv) * S * D;
        /* scores: each key row once for the G x rows queries (the rows before the
         * window of the block's first row are seen by none of its rows: skipped by the
         * scores, the softmax and the product alike) */
        const int64_t j0 = W > 0 && P + i0 - W + 1 > 0 ? P + i0 - W + 1 : 0;
        int64_t j = j0;
#if defined(DEC_KEYS)
        if (D % 16 == 0)
            for (; j + DEC_KEYS <= n; j += DEC_KEYS) {
                const float* kc[DEC_KEYS];
                for (int c = 0; c < DEC_KEYS; ++c)
                    kc[c] = j + c < P ? d->kp + (((j + c) * B + b) * KV + kv) * D
                                      : kn + (j + c - P) * D;
                for (int64_t g = 0; g < G; ++g)
                    for (int64_t r = 0; r < rows; ++r) {
                        const int64_t i = i0 + r;
                        float* row = s + (g * rows + r) * n;
                        dec_scores16(row + j, q0 + (g * S + i) * D, kc, D, d->scale);
                        for (int c = 0; c < DEC_KEYS; ++c)   /* the causal and window masks */
                            if (j + c - P > i || (W > 0 && P + i - (j + c) >= W))
                                row[j + c] = -__builtin_inff();
                    }
            }
#endif
        for (; j < n; ++j) {
            const float* k = j < P ? d->kp + ((j * B + b) * KV + kv) * D : kn + (j - P) * D;
            for (int64_t g = 0; g < G; ++g)
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t i = i0 + r;
                    float* row = s + (g * rows + r) * n;
                    const int masked = j - P > i || (W > 0 && P + i - j >= W);
                    row[j] = masked ? -__builtin_inff()
                                    : d->scale * dec_dot(q0 + (g * S + i) * D, k, D);
                }
        }
        /* softmax of each row over its P + i + 1 keys (the later ones are masked) */
        for (int64_t g = 0; g < G; ++g)
            for (int64_t r = 0; r < rows; ++r) {
                float* row = s + (g * rows + r) * n;
                const int64_t len = P + i0 + r + 1;
                dec_softmax(row + j0, len - j0);
                for (int64_t j = len; j < n; ++j) row[j] = 0.0f;
                float* o = d->out + (((b * KV + kv) * G + g) * S + i0 + r) * D;
                for (int64_t e = 0; e < D; ++e) o[e] = 0.0f;
            }
        /* out = P @ V: each value row once for the group */
        for (int64_t j = j0; j < n; ++j) {
            const float* v = j < P ? d->vp + ((j * B + b) * KV + kv) * D : vn + (j - P) * D;
            for (int64_t g = 0; g < G; ++g)
                for (int64_t r = 0; r < rows; ++r) {
                    const float p = s[(g * rows + r) * n + j];
                    if (p != 0.0f)
                        dec_axpy(d->out + (((b * KV + kv) * G + g) * S + i0 + r) * D, p, v, D);
                }
        }
    }
}

PLAIT_ISA_HIDDEN int PLAIT_ISA_FN(plait_kv_attention)(const plait_kv_attention_desc* d) {
    if (d->B <= 0 || d->KV <= 0 || d->G <= 0 || d->S <= 0) return 0;
    if (d->D <= 0) return 2;
    dec_att_task t = {d, (d->S + ATT_ROWS - 1) / ATT_ROWS, 0};
    const int64_t jobs = d->B * d->KV * t.blocks;
    const int64_t keys = d->W > 0 && d->W < d->P + d->S ? d->W : d->P + d->S;
    const int64_t work = d->B * d->KV * d->G * d->S * keys * d->D;
    plait_parallel_range(dec_att_jobs, &t, jobs, work < 32768 ? 1 : plait_max_threads());
    return t.status;
}

PLAIT_ISA_FAMILY("decode")
PLAIT_ISA_DISPATCH(int, plait_gemv, (const plait_gemv_problem* p), (p))
PLAIT_ISA_DISPATCH(int, plait_kv_attention, (const plait_kv_attention_desc* d), (d))

#ifdef PLAIT_ISA_DISPATCHER
/* The choice between the two products is made per call, on the run-time row count;
 * each callee dispatches to its ISA copy itself, so this entry exists once. */
#include "plait_gemm.h"

PLAIT_HIDDEN int plait_dlinear(const plait_dlinear_desc* d) {
    if (d->M <= 0) return 0;
    if (d->M <= PLAIT_GEMV_MAX_ROWS) {
        const plait_gemv_problem g = {d->M, d->N, d->K, d->x, d->K, d->w, d->bias, d->res,
                                      d->out};
        return plait_gemv(&g);
    }
    plait_gemm_problem p;
    memset(&p, 0, sizeof p);
    p.M = d->M; p.N = d->N; p.K = d->K;
    p.a_kind = PLAIT_A_STRIDED; p.a = d->x; p.lda_r = d->K; p.lda_c = 1;
    p.b_kind = PLAIT_B_STRIDED; p.b = d->w; p.ldb_r = 1; p.ldb_c = d->K;
    p.c = d->out; p.ldc = d->N;
    p.bias_kind = d->bias ? PLAIT_BIAS_COL : PLAIT_BIAS_NONE;
    p.bias = d->bias; p.res = d->res;
    p.batch = 1;
    return plait_gemm(&p);
}
#endif
