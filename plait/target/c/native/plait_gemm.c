/* plait_gemm.c: the c target's matrix product and convolution (float32).
 *
 * One blocked matrix product (after BLIS: Goto's algorithm) serves matmul, linear and
 * conv2d:  C[M,N] = epilogue(A[M,K] @ B[K,N]).
 *
 *  - A is either pre-packed at compile time (the weights of conv2d: panels of PLAIT_MR
 *    rows, [ceil(M/MR)][K][MR], zero-padded) or read from a strided matrix and packed
 *    here, block by block.
 *  - B is either pre-packed at compile time (the weights of linear/matmul:
 *    [ceil(N/NR)][K][NR]), a strided matrix, or the implicit im2col matrix of a
 *    convolution (packed straight from the zero-padded input image: no im2col buffer).
 *  - The epilogue, applied once per output element: + bias (per row or per column),
 *    + residual (a matrix shaped like C), then relu.
 *
 * The micro-kernel computes a PLAIT_MR x PLAIT_NR (6 x 16) tile in registers with GCC
 * vector extensions; on x86-64 the work function is compiled twice (AVX2+FMA and the
 * baseline) and the running CPU's features pick one, so the library stays portable
 * without -march=native.  Threads (the pool of plait_threads.h) split the N dimension (and the batch) into
 * blocks, and the M dimension too when there are fewer column blocks than threads; each
 * job packs its own B block.  A last panel of fewer than 6 rows runs a 4- or 2-row tile.
 * The same micro-kernel also serves the Winograd convolutions and the fused attention
 * (at the end of this file).
 */
#include <stdlib.h>
#include "plait_gemm.h"
#include "plait_threads.h"

#define PLAIT_MR 6
#define PLAIT_NR 16
#define PLAIT_KC 384
#define PLAIT_MC 96
#ifndef PLAIT_NC
#define PLAIT_NC 512
#endif
/* products of fewer multiply-adds run on one thread (about 6 us of work: waking a
 * second one costs about as much as it saves below this) */
#define PLAIT_GEMM_MIN_PARALLEL (1 << 18)

#if defined(__x86_64__) && defined(__GNUC__)
#define PLAIT_X86_DISPATCH 1
#endif

typedef float plait_v8 __attribute__((vector_size(32)));
typedef float plait_v8u __attribute__((vector_size(32), aligned(4)));
#if defined(__clang__)
#define PLAIT_INTERLEAVE_LO(a, b) __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define PLAIT_INTERLEAVE_HI(a, b) __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#else
#define PLAIT_INTERLEAVE_LO(a, b) \
    __builtin_shuffle(a, b, (plait_vi8){0, 8, 1, 9, 2, 10, 3, 11})
#define PLAIT_INTERLEAVE_HI(a, b) \
    __builtin_shuffle(a, b, (plait_vi8){4, 12, 5, 13, 6, 14, 7, 15})
#endif
/* relu that keeps NaN (like max(x, 0) in numpy) */
#define PLAIT_RELU(v) ((plait_v8)((plait_vi8)(v) & (((v) > (plait_v8){0}) | ((v) != (v)))))
#if defined(__clang__)
#define PLAIT_SWAP_PAIRS(a) __builtin_shufflevector(a, a, 1, 0, 3, 2, 5, 4, 7, 6)
#define PLAIT_EVEN_LANES(a) __builtin_shufflevector(a, a, 0, 2, 4, 6, 0, 2, 4, 6)
#else
#define PLAIT_SWAP_PAIRS(a) __builtin_shuffle(a, (plait_vi8){1, 0, 3, 2, 5, 4, 7, 6})
#define PLAIT_EVEN_LANES(a) __builtin_shuffle(a, (plait_vi8){0, 2, 4, 6, 0, 2, 4, 6})
#endif
/* Threads take (batch, block) jobs from a shared counter: a thread slowed down (by
 * another process, or a hypervisor taking its CPU) does fewer jobs instead of making the
 * others wait for it at the end. */
#define PLAIT_NEXT_JOB(next) __atomic_fetch_add((next), 1, __ATOMIC_RELAXED)
#if defined(__clang__)
#define PLAIT_SHUF2(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define PLAIT_SHUF2(a, b, ...) __builtin_shuffle(a, b, (plait_vi8){__VA_ARGS__})
#endif
#define PLAIT_BCAST(x) ((plait_v8){(x), (x), (x), (x), (x), (x), (x), (x)})
typedef int32_t plait_vi8 __attribute__((vector_size(32)));
/* The micro-kernel's K loop unrolled 4 times: its counter and pointer updates come once
 * per 4 steps, not every step, a tenth fewer instructions for the same multiply-adds.
 * The peak is the same, but the kernel keeps more of it when the core is shared (a
 * virtual CPU's sibling hardware thread running someone else's work competes for the
 * instruction slots): the MLP layer's median fell 11% (docs/performance.md, round 5). */
#if defined(__clang__)
#define PLAIT_UNROLL4 _Pragma("unroll 4")
#elif defined(__GNUC__)
#define PLAIT_UNROLL4 _Pragma("GCC unroll 4")
#else
#define PLAIT_UNROLL4
#endif

/* ------------------------------------------------------------------ packing */

static inline void pack_a_strided(const plait_gemm_problem* p, int64_t bi, int64_t i0,
                                  int64_t mc, int64_t k0, int64_t kc, float* dst) {
    const float* a = p->a + bi * p->a_bs;
    for (int64_t ir = 0; ir < mc; ir += PLAIT_MR) {
        int64_t mr = mc - ir < PLAIT_MR ? mc - ir : PLAIT_MR;
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = a + (i0 + ir) * p->lda_r + (k0 + k) * p->lda_c;
            int64_t r = 0;
            for (; r < mr; ++r) dst[r] = src[r * p->lda_r];
            for (; r < PLAIT_MR; ++r) dst[r] = 0.0f;
            dst += PLAIT_MR;
        }
    }
}

static inline void pack_b_strided(const plait_gemm_problem* p, int64_t bi, int64_t j0,
                                  int64_t nc, int64_t k0, int64_t kc, float* dst) {
    const float* b = p->b + bi * p->b_bs;
    for (int64_t jr = 0; jr < nc; jr += PLAIT_NR) {
        int64_t nr = nc - jr < PLAIT_NR ? nc - jr : PLAIT_NR;
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = b + (k0 + k) * p->ldb_r + (j0 + jr) * p->ldb_c;
            int64_t j = 0;
            if (p->ldb_c == 1 && nr == PLAIT_NR) {
                *(plait_v8u*)dst = *(const plait_v8u*)src;
                *(plait_v8u*)(dst + 8) = *(const plait_v8u*)(src + 8);
                j = PLAIT_NR;
            } else if (p->ldb_c == 1) {
                for (; j < nr; ++j) dst[j] = src[j];
            } else {
                for (; j < nr; ++j) dst[j] = src[j * p->ldb_c];
            }
            for (; j < PLAIT_NR; ++j) dst[j] = 0.0f;
            dst += PLAIT_NR;
        }
    }
}

/* B[k][j] of a convolution: k = (c, kh, kw), j = (oh, ow); the input is zero-padded,
 * so every read is in bounds.  The offsets of the block's k (channel, kernel tap) and
 * of each panel's NR pixels are computed once, so the copy itself has no divisions;
 * NR pixels of one output row at stride 1 are one contiguous copy. */
static inline void pack_b_conv(const plait_gemm_problem* p, int64_t bi, int64_t j0,
                               int64_t nc, int64_t k0, int64_t kc, float* dst) {
    const plait_conv_geom* g = p->conv;
    const float* img = p->b + bi * p->b_bs;
    const int64_t khw = g->KH * g->KW;
    int64_t koff[PLAIT_KC];
    for (int64_t k = 0; k < kc; ++k) {
        int64_t kk = k0 + k;
        int64_t c = kk / khw, r = kk % khw;
        int64_t q = (r % g->KW) * g->DW;   /* the tap's column offset */
        koff[k] = c * g->HP * g->RL + (r / g->KW) * g->DH * g->RL + (q % g->SW) * g->WPP +
                  q / g->SW;
    }
    for (int64_t jr = 0; jr < nc; jr += PLAIT_NR) {
        int64_t nr = nc - jr < PLAIT_NR ? nc - jr : PLAIT_NR;
        int64_t jstart = j0 + jr;
        int64_t pix[PLAIT_NR];
        if (p->pool) {
            /* a patch of 2 rows x 8 columns (see plait_gemm_problem.pool) */
            int64_t g16 = jstart / PLAIT_NR, tpr = g->OW / 8;
            int64_t oh = 2 * (g16 / tpr), ow = 8 * (g16 % tpr);
            for (int64_t j = 0; j < PLAIT_NR; ++j)
                pix[j] = (oh + j / 8) * g->SH * g->RL + (ow + j % 8) * g->CS;
            if (pix[7] - pix[0] == 7 && pix[15] - pix[8] == 7) {
                const float* b0 = img + pix[0];
                const float* b1 = img + pix[8];
                for (int64_t k = 0; k < kc; ++k) {
                    *(plait_v8u*)dst = *(const plait_v8u*)(b0 + koff[k]);
                    *(plait_v8u*)(dst + 8) = *(const plait_v8u*)(b1 + koff[k]);
                    dst += PLAIT_NR;
                }
                continue;
            }
        } else {
            int64_t oh = jstart / g->OW, ow = jstart % g->OW;
            for (int64_t j = 0; j < nr; ++j) {
                pix[j] = oh * g->SH * g->RL + ow * g->CS;
                if (++ow == g->OW) { ow = 0; ++oh; }
            }
        }
        if (nr == PLAIT_NR && pix[PLAIT_NR - 1] - pix[0] == PLAIT_NR - 1) {
            const float* base = img + pix[0];
            for (int64_t k = 0; k < kc; ++k) {
                const float* src = base + koff[k];
                *(plait_v8u*)dst = *(const plait_v8u*)src;
                *(plait_v8u*)(dst + 8) = *(const plait_v8u*)(src + 8);
                dst += PLAIT_NR;
            }
            continue;
        }
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = img + koff[k];
            int64_t j = 0;
            for (; j < nr; ++j) dst[j] = src[pix[j]];
            for (; j < PLAIT_NR; ++j) dst[j] = 0.0f;
            dst += PLAIT_NR;
        }
    }
}

/* ------------------------------------------------------------- micro-kernel */

/* Row i of a full tile (lo: columns 0-7, hi: 8-15) into C: accumulated onto C unless
 * first, and with the epilogue when last. */
static inline __attribute__((always_inline)) void
store_row(float* restrict c, const plait_v8* vlo, const plait_v8* vhi, int first, int last,
          const plait_gemm_problem* p, int64_t i, const plait_v8* blo, const plait_v8* bhi,
          const float* res) {
    plait_v8u* row = (plait_v8u*)c;
    plait_v8 lo = *vlo, hi = *vhi;
    if (!first) { lo += row[0]; hi += row[1]; }
    if (last) {
        if (p->bias_kind == PLAIT_BIAS_ROW) {
            float bv = p->bias[i];
            lo += bv; hi += bv;
        } else {
            lo += *blo; hi += *bhi;
        }
        if (res) {
            const plait_v8u* rr = (const plait_v8u*)res;
            lo += rr[0]; hi += rr[1];
        }
        if (p->relu) {
            lo = PLAIT_RELU(lo);
            hi = PLAIT_RELU(hi);
        }
    }
    row[0] = lo; row[1] = hi;
}

/* max that propagates NaN (like numpy's maximum) */
static inline float plait_fmax_nan(float a, float b) { return (a > b || a != a) ? a : b; }

/* Pool mode: row i of a full tile (two output rows of 8 columns: lo, hi) + bias, relu,
 * then the 2x2 maxima: 4 pooled values at c. */
static inline __attribute__((always_inline)) void
store_row_pool(float* restrict c, const plait_v8* vlo, const plait_v8* vhi,
               const plait_gemm_problem* p, int64_t i) {
    plait_v8 lo = *vlo, hi = *vhi;
    if (p->bias_kind == PLAIT_BIAS_ROW) {
        float bv = p->bias[i];
        lo += bv; hi += bv;
    }
    if (p->relu) { lo = PLAIT_RELU(lo); hi = PLAIT_RELU(hi); }
    /* m = max(lo, hi) lane by lane (a NaN wins), then neighbouring lanes */
    plait_vi8 take = (lo > hi) | (lo != lo);
    plait_v8 m = (plait_v8)(((plait_vi8)lo & take) | ((plait_vi8)hi & ~take));
    plait_v8 n = PLAIT_SWAP_PAIRS(m);
    take = (m > n) | (m != m);
    m = (plait_v8)(((plait_vi8)m & take) | ((plait_vi8)n & ~take));
    m = PLAIT_EVEN_LANES(m);     /* lanes 0, 2, 4, 6 first */
    memcpy(c, &m, 4 * sizeof(float));
}

/* The register tile: R (6, 4 or 2, a constant once inlined) rows of A times 16 columns
 * of B, accumulated over kc, then stored (the first mr <= R rows, nr <= 16 columns). */
static inline __attribute__((always_inline)) void
micro_kernel_r(const int R, int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
               const float* restrict b, float* restrict c,
               int64_t ldc, int64_t mr, int64_t nr, int first, int last,
               const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res) {
    /* A's element (r, k) is a[r * a_rs + k * a_ks]: a packed panel (1, MR) or rows of
     * a row-major matrix (lda, 1) */
    plait_v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    plait_v8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    PLAIT_UNROLL4
    for (int64_t k = 0; k < kc; ++k) {
        plait_v8 b0 = *(const plait_v8u*)b;
        plait_v8 b1 = *(const plait_v8u*)(b + 8);
        plait_v8 a0 = PLAIT_BCAST(a[0 * a_rs]);
        c00 += a0 * b0; c01 += a0 * b1;
        plait_v8 a1 = PLAIT_BCAST(a[1 * a_rs]);
        c10 += a1 * b0; c11 += a1 * b1;
        if (R > 2) {
            plait_v8 a2 = PLAIT_BCAST(a[2 * a_rs]);
            c20 += a2 * b0; c21 += a2 * b1;
            plait_v8 a3 = PLAIT_BCAST(a[3 * a_rs]);
            c30 += a3 * b0; c31 += a3 * b1;
        }
        if (R > 4) {
            plait_v8 a4 = PLAIT_BCAST(a[4 * a_rs]);
            c40 += a4 * b0; c41 += a4 * b1;
            plait_v8 a5 = PLAIT_BCAST(a[5 * a_rs]);
            c50 += a5 * b0; c51 += a5 * b1;
        }
        a += a_ks;
        b += PLAIT_NR;
    }
    if (last && p->pool) {
        /* (no array of the accumulators: an indexed one would keep them in memory) */
        store_row_pool(c, &c00, &c01, p, i0);
        if (mr > 1) store_row_pool(c + ldc, &c10, &c11, p, i0 + 1);
        if (mr > 2) store_row_pool(c + 2 * ldc, &c20, &c21, p, i0 + 2);
        if (mr > 3) store_row_pool(c + 3 * ldc, &c30, &c31, p, i0 + 3);
        if (mr > 4) store_row_pool(c + 4 * ldc, &c40, &c41, p, i0 + 4);
        if (mr > 5) store_row_pool(c + 5 * ldc, &c50, &c51, p, i0 + 5);
        return;
    }
    if (nr == PLAIT_NR) {
        /* whole rows of 16: straight from the registers */
        plait_v8 blo = {0}, bhi = {0};
        if (last && p->bias_kind == PLAIT_BIAS_COL) {
            blo = *(const plait_v8u*)(p->bias + j0);
            bhi = *(const plait_v8u*)(p->bias + j0 + 8);
        }
        store_row(c, &c00, &c01, first, last, p, i0, &blo, &bhi, res);
        if (mr > 1)
            store_row(c + ldc, &c10, &c11, first, last, p, i0 + 1, &blo, &bhi,
                      res ? res + ldc : NULL);
        if (mr > 2)
            store_row(c + 2 * ldc, &c20, &c21, first, last, p, i0 + 2, &blo, &bhi,
                      res ? res + 2 * ldc : NULL);
        if (mr > 3)
            store_row(c + 3 * ldc, &c30, &c31, first, last, p, i0 + 3, &blo, &bhi,
                      res ? res + 3 * ldc : NULL);
        if (mr > 4)
            store_row(c + 4 * ldc, &c40, &c41, first, last, p, i0 + 4, &blo, &bhi,
                      res ? res + 4 * ldc : NULL);
        if (mr > 5)
            store_row(c + 5 * ldc, &c50, &c51, first, last, p, i0 + 5, &blo, &bhi,
                      res ? res + 5 * ldc : NULL);
        return;
    }
    float t[PLAIT_MR][PLAIT_NR] __attribute__((aligned(32)));
    *(plait_v8*)&t[0][0] = c00; *(plait_v8*)&t[0][8] = c01;
    *(plait_v8*)&t[1][0] = c10; *(plait_v8*)&t[1][8] = c11;
    *(plait_v8*)&t[2][0] = c20; *(plait_v8*)&t[2][8] = c21;
    *(plait_v8*)&t[3][0] = c30; *(plait_v8*)&t[3][8] = c31;
    *(plait_v8*)&t[4][0] = c40; *(plait_v8*)&t[4][8] = c41;
    *(plait_v8*)&t[5][0] = c50; *(plait_v8*)&t[5][8] = c51;
    for (int64_t i = 0; i < mr; ++i) {
        float* row = c + i * ldc;
        for (int64_t j = 0; j < nr; ++j) {
            float v = t[i][j];
            if (!first) v += row[j];
            if (last) {
                if (p->bias_kind == PLAIT_BIAS_ROW) v += p->bias[i0 + i];
                else if (p->bias_kind == PLAIT_BIAS_COL) v += p->bias[j0 + j];
                if (res) v += res[i * ldc + j];
                if (p->relu && v < 0.0f) v = 0.0f;
            }
            row[j] = v;
        }
    }
}

/* The tile for mr rows: the 6-row kernel, or for a last panel of 1 to 4 rows one that
 * computes only 4 or 2 (a 128-row product's last 2 rows cost a third of a panel, not a
 * whole one).  A must hold R readable rows (packed panels are zero-padded to 6). */
static inline __attribute__((always_inline)) void
micro_kernel(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
             const float* restrict b, float* restrict c,
             int64_t ldc, int64_t mr, int64_t nr, int first, int last,
             const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res) {
    if (mr > 4)
        micro_kernel_r(6, kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res);
    else if (mr > 2)
        micro_kernel_r(4, kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res);
    else
        micro_kernel_r(2, kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res);
}

/* ------------------------------------------------------- parallel regions */

/* Every parallel part of the library goes through the library's thread pool
 * (plait_threads.h, shared with the generated kernels): fn(arg) runs on up to nthreads
 * threads, each taking its work from a counter in arg, so any thread may do any share. */
/* body(ctx, i) for i in [0, n), the indices taken one by one from a shared counter. */
typedef struct {
    void (*body)(void* ctx, int64_t i);
    void* ctx;
    int64_t n, next;
} plait_for_task;

static void plait_for_run(void* arg) {
    plait_for_task* t = (plait_for_task*)arg;
    for (int64_t i = PLAIT_NEXT_JOB(&t->next); i < t->n; i = PLAIT_NEXT_JOB(&t->next))
        t->body(t->ctx, i);
}

static void plait_parallel_for(int64_t n, void (*body)(void*, int64_t), void* ctx,
                               int nthreads) {
    plait_for_task t = {body, ctx, n, 0};
    plait_parallel(plait_for_run, &t, n < nthreads ? (int)n : nthreads);
}

/* ----------------------------------------------------------------- scratch */

/* Packing and transform buffers come from per-thread scratch buffers that only grow
 * (plait_scratch in plait_threads.h): a fresh multi-hundred-kilobyte allocation would
 * cost its page faults (or an mmap/munmap pair) on every call.  Slots: 0 A panels,
 * 1 B panels or V, 2 products, 3 padded input. */

/* ------------------------------------------------------------------ driver */

/* The part of the product that thread `tid` of `nthreads` computes: it takes the
 * (batch, N-block) jobs tid, tid + nthreads, ... */
static inline __attribute__((always_inline)) void
gemm_thread(const plait_gemm_problem* p, int64_t nc_block, int64_t mc_rows, int64_t* next,
            float* apack, float* bpack) {
    const int64_t N = p->N, K = p->K;
    const int64_t nblocks = (N + nc_block - 1) / nc_block;
    const int64_t mblocks = (p->M + mc_rows - 1) / mc_rows;
    const int64_t jobs = p->batch * nblocks * mblocks;
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t bi = job / (nblocks * mblocks);
        int64_t j0 = (job / mblocks % nblocks) * nc_block;
        int64_t m0 = job % mblocks * mc_rows;
        const int64_t M = p->M - m0 < mc_rows ? p->M : m0 + mc_rows;   /* rows m0..M-1 */
        int64_t nc = N - j0 < nc_block ? N - j0 : nc_block;
        float* cb = p->c + bi * p->c_bs;
        const float* rb = p->res ? p->res + bi * p->c_bs : NULL;
        /* K in equal blocks of at most PLAIT_KC (a short last block would pay the
         * tile's load and store for little work) */
        const int64_t kblocks = (K + PLAIT_KC - 1) / PLAIT_KC;
        const int64_t kc_block = (K + kblocks - 1) / kblocks;
        for (int64_t k0 = 0; k0 < K; k0 += kc_block) {
            int64_t kc = K - k0 < kc_block ? K - k0 : kc_block;
            const float* bp;
            int64_t bpanel_stride;
            if (p->b_kind == PLAIT_B_PACKED) {
                bp = p->b + bi * p->b_bs + (j0 / PLAIT_NR) * K * PLAIT_NR + k0 * PLAIT_NR;
                bpanel_stride = K * PLAIT_NR;
            } else {
                if (p->b_kind == PLAIT_B_CONV) pack_b_conv(p, bi, j0, nc, k0, kc, bpack);
                else pack_b_strided(p, bi, j0, nc, k0, kc, bpack);
                bp = bpack;
                bpanel_stride = kc * PLAIT_NR;
            }
            int first = k0 == 0, last = k0 + kc == K;
            for (int64_t i0 = m0; i0 < M; i0 += PLAIT_MC) {
                int64_t mc = M - i0 < PLAIT_MC ? M - i0 : PLAIT_MC;
                const float* ap;
                int64_t apanel_stride;
                /* a row-major A is read in place, 6 rows at a time (no packing); only
                 * a last panel of fewer rows is packed (with zero rows) */
                const int direct = p->a_kind == PLAIT_A_STRIDED && p->lda_c == 1;
                const float* arows = p->a + bi * p->a_bs + i0 * p->lda_r + k0;
                if (p->a_kind == PLAIT_A_PACKED) {
                    ap = p->a + bi * p->a_bs + (i0 / PLAIT_MR) * K * PLAIT_MR + k0 * PLAIT_MR;
                    apanel_stride = K * PLAIT_MR;
                } else if (direct) {
                    int64_t full = mc / PLAIT_MR * PLAIT_MR;
                    if (full < mc) pack_a_strided(p, bi, i0 + full, mc - full, k0, kc, apack);
                    ap = apack;            /* the tail panel, whatever its index */
                    apanel_stride = 0;
                } else {
                    pack_a_strided(p, bi, i0, mc, k0, kc, apack);
                    ap = apack;
                    apanel_stride = kc * PLAIT_MR;
                }
                for (int64_t jr = 0; jr < nc; jr += PLAIT_NR) {
                    int64_t nr = nc - jr < PLAIT_NR ? nc - jr : PLAIT_NR;
                    const float* bpj = bp + (jr / PLAIT_NR) * bpanel_stride;
                    for (int64_t ir = 0; ir < mc; ir += PLAIT_MR) {
                        int64_t mr = mc - ir < PLAIT_MR ? mc - ir : PLAIT_MR;
                        int64_t i = i0 + ir, j = j0 + jr;
                        int64_t coff = j;
                        if (p->pool) {   /* the patch's 4 pooled outputs */
                            int64_t g16 = j / PLAIT_NR, tpr = p->conv->OW / 8;
                            coff = (g16 / tpr) * (p->conv->OW / 2) + 4 * (g16 % tpr);
                        }
                        if (direct && mr == PLAIT_MR)
                            micro_kernel(kc, arows + ir * p->lda_r, p->lda_r, 1, bpj,
                                         cb + i * p->ldc + coff, p->ldc, mr, nr, first, last,
                                         p, i, j, rb ? rb + i * p->ldc + j : NULL);
                        else
                            micro_kernel(kc, ap + (ir / PLAIT_MR) * apanel_stride, 1, PLAIT_MR,
                                         bpj, cb + i * p->ldc + coff, p->ldc, mr, nr, first,
                                         last, p, i, j, rb ? rb + i * p->ldc + j : NULL);
                    }
                }
            }
        }
    }
}

/* gemm_thread compiled for the baseline ISA and, on x86-64, for AVX2+FMA; the
 * variant is chosen at run time from the CPU's features. */
static void gemm_thread_base(const plait_gemm_problem* p, int64_t nc_block, int64_t mc_rows,
                             int64_t* next, float* apack, float* bpack) {
    gemm_thread(p, nc_block, mc_rows, next, apack, bpack);
}

#ifdef PLAIT_X86_DISPATCH
__attribute__((target("avx2,fma")))
static void gemm_thread_avx2(const plait_gemm_problem* p, int64_t nc_block, int64_t mc_rows,
                             int64_t* next, float* apack, float* bpack) {
    gemm_thread(p, nc_block, mc_rows, next, apack, bpack);
}
#endif

typedef void (*plait_gemm_thread_fn)(const plait_gemm_problem*, int64_t, int64_t, int64_t*,
                                     float*, float*);

/* Whether to run the AVX2+FMA variants: PLAIT_GEMM_ISA=baseline in the environment
 * forces the portable ones (tests). */
static int plait_use_avx2(void) {
    static int chosen = -1;
    if (chosen >= 0) return chosen;
    int use = 0;
    const char* isa = getenv("PLAIT_GEMM_ISA");
#ifdef PLAIT_X86_DISPATCH
    __builtin_cpu_init();
    use = !(isa && strcmp(isa, "baseline") == 0) && __builtin_cpu_supports("avx2") &&
          __builtin_cpu_supports("fma");
#else
    (void)isa;
#endif
    chosen = use;
    return use;
}

static plait_gemm_thread_fn plait_gemm_variant(void) {
#ifdef PLAIT_X86_DISPATCH
    if (plait_use_avx2()) return gemm_thread_avx2;
#endif
    return gemm_thread_base;
}

typedef struct {
    const plait_gemm_problem* p;
    int64_t nc_block, mc_rows;
    int64_t next;                 /* the next job (see PLAIT_NEXT_JOB) */
    plait_gemm_thread_fn run;
    int status;                   /* 1: a thread was out of memory */
} plait_gemm_task;

static void plait_gemm_task_run(void* arg) {
    plait_gemm_task* t = (plait_gemm_task*)arg;
    const plait_gemm_problem* p = t->p;
    float* apack = NULL;
    float* bpack = NULL;
    int ok = 1;
    if (p->a_kind != PLAIT_A_PACKED) {
        apack = plait_scratch(0, (size_t)PLAIT_MC * PLAIT_KC);
        ok &= apack != NULL;
    }
    if (p->b_kind != PLAIT_B_PACKED) {
        bpack = plait_scratch(1, (size_t)t->nc_block * PLAIT_KC);
        ok &= bpack != NULL;
    }
    if (ok) t->run(p, t->nc_block, t->mc_rows, &t->next, apack, bpack);
    else __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
}

int plait_gemm(const plait_gemm_problem* p) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return 0;
    const int64_t work = p->M * p->N * (p->K > 0 ? p->K : 1) * p->batch;
    int nthreads = plait_max_threads();
    if (work < PLAIT_GEMM_MIN_PARALLEL) nthreads = 1;
    /* N blocks of at most PLAIT_NC columns (a multiple of NR), as many as it takes to
     * give every thread the same number of (batch, block) jobs */
    int64_t nblocks = (p->N + PLAIT_NC - 1) / PLAIT_NC;
    if (nthreads > 1 && p->batch * nblocks < 4 * nthreads) {
        /* about 4 jobs per thread (taken dynamically), blocks of at least 4 panels */
        int64_t want = (4 * nthreads + p->batch - 1) / p->batch;
        int64_t most = (p->N + 4 * PLAIT_NR - 1) / (4 * PLAIT_NR);
        nblocks = want < most ? want : most;
        if (nblocks < 1) nblocks = 1;
    }
    int64_t nc_block = (p->N + nblocks - 1) / nblocks;
    nc_block = (nc_block + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
    nblocks = (p->N + nc_block - 1) / nc_block;
    /* too few column blocks for the threads (a narrow output, say 10 classes): the
     * rows are split too, in blocks of at least 2 panels */
    int64_t mc_rows = p->M;
    if (nthreads > 1 && p->batch * nblocks < 2 * nthreads) {
        int64_t want = (2 * nthreads + p->batch * nblocks - 1) / (p->batch * nblocks);
        int64_t most = p->M / (2 * PLAIT_MR);
        int64_t mblocks = want < most ? want : most;
        if (mblocks > 1) {
            mc_rows = (p->M + mblocks - 1) / mblocks;
            mc_rows = (mc_rows + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
        }
    }
    const int64_t jobs = p->batch * nblocks * ((p->M + mc_rows - 1) / mc_rows);
    if (jobs < nthreads) nthreads = (int)jobs;
    if (p->K == 0) {
        /* an empty sum: the epilogue of zero */
        for (int64_t bi = 0; bi < p->batch; ++bi)
            for (int64_t i = 0; i < p->M; ++i)
                for (int64_t j = 0; j < p->N; ++j) {
                    float v = 0.0f;
                    if (p->bias_kind == PLAIT_BIAS_ROW) v += p->bias[i];
                    else if (p->bias_kind == PLAIT_BIAS_COL) v += p->bias[j];
                    if (p->res) v += p->res[bi * p->c_bs + i * p->ldc + j];
                    if (p->relu && v < 0.0f) v = 0.0f;
                    p->c[bi * p->c_bs + i * p->ldc + j] = v;
                }
        return 0;
    }
    plait_gemm_task task = {p, nc_block, mc_rows, 0, plait_gemm_variant(), 0};
    plait_parallel(plait_gemm_task_run, &task, nthreads);
    return task.status;
}

/* --------------------------------------------------------------- conv2d */



/* One input row into its two column phases: padded column q = col + PL goes to
 * row[(q % 2) * WPP + q / 2].  16 columns at a time are split into even and odd by two
 * shuffles (the strided scalar copy cost 0.4 ms of a 32-channel 112x112 input). */
static void split_row2(const float* in, int64_t W, int64_t PL, float* row, int64_t WPP) {
    float* phase[2] = {row, row + WPP};
    int64_t c = 0;
    if (W > 0 && PL % 2) {   /* then columns c, c + 1 share an index from c = 1 on */
        phase[1][PL / 2] = in[0];
        c = 1;
    }
    for (; c + 16 <= W; c += 16) {
        plait_v8 v0 = *(const plait_v8u*)(in + c), v1 = *(const plait_v8u*)(in + c + 8);
        int64_t idx = (c + PL) / 2;
        *(plait_v8u*)(phase[0] + idx) = PLAIT_SHUF2(v0, v1, 0, 2, 4, 6, 8, 10, 12, 14);
        *(plait_v8u*)(phase[1] + idx) = PLAIT_SHUF2(v0, v1, 1, 3, 5, 7, 9, 11, 13, 15);
    }
    for (; c < W; ++c) phase[(c + PL) % 2][(c + PL) / 2] = in[c];
}

/* Plane pl of a convolution's input into its zero-padded, phase-split copy (see
 * conv2d_impl). */
typedef struct {
    const plait_conv2d_desc* d;
    const float* x;
    float* dst;
    int64_t HP, RL, WPP;
} plait_pad_task;

static void plait_pad_plane(void* arg, int64_t pl) {
    const plait_pad_task* c = (const plait_pad_task*)arg;
    const plait_conv2d_desc* d = c->d;
    const int64_t HP = c->HP, RL = c->RL, WPP = c->WPP;
    float* dst = c->dst;
    const float* x = c->x;
    float* o = dst + pl * HP * RL;
    const float* s = x + pl * d->H * d->W;
    memset(o, 0, sizeof(float) * (size_t)(HP * RL));
    for (int64_t h = 0; h < d->H; ++h) {
        float* row = o + (d->PT + h) * RL;
        const float* in = s + h * d->W;
        if (d->SW == 1) {
            memcpy(row + d->PL, in, sizeof(float) * (size_t)d->W);
            continue;
        }
        if (d->SW == 2) {
            split_row2(in, d->W, d->PL, row, WPP);
            continue;
        }
        for (int64_t ph = 0; ph < d->SW; ++ph) {
            /* padded columns q = j * SW + ph hold input column q - PL */
            float* dph = row + ph * WPP;
            int64_t j0 = d->PL > ph ? (d->PL - ph + d->SW - 1) / d->SW : 0;
            for (int64_t j = j0; j < WPP; ++j) {
                int64_t col = j * d->SW + ph - d->PL;
                if (col >= d->W) break;
                dph[j] = in[col];
            }
        }
    }
}

static int conv2d_impl(const plait_conv2d_desc* d, const float* x, const float* apacked,
                       const float* bias, const float* res, int relu, int pool, float* out) {
    const int64_t HP = d->H + d->PT + d->PB, WP = d->W + d->PL + d->PR;
    const int64_t WPP = (WP + d->SW - 1) / d->SW, RL = WPP * d->SW;
    const float* img = x;
    plait_conv_geom g = {d->C, HP, RL, WPP, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW,
                         d->OH, d->OW, 1};
    plait_gemm_problem p;
    memset(&p, 0, sizeof p);
    p.M = d->O;
    p.N = d->OH * d->OW;
    p.K = d->C * d->KH * d->KW;
    p.a_kind = PLAIT_A_PACKED;
    p.a = apacked;
    p.c = out;
    p.ldc = p.N;
    p.bias_kind = bias ? PLAIT_BIAS_ROW : PLAIT_BIAS_NONE;
    p.bias = bias;
    p.res = res;
    p.relu = relu;
    p.batch = d->N;
    p.c_bs = d->O * p.N;
    if (pool) {
        if (d->OH % 2 || d->OW % 8 || p.K > PLAIT_KC || res) return 2;
        p.pool = 1;
        p.ldc = (d->OH / 2) * (d->OW / 2);
        p.c_bs = d->O * p.ldc;
    }
    const int pointwise = !pool && d->KH == 1 && d->KW == 1 && d->SH == 1 && d->SW == 1 &&
                          !(d->PT | d->PL | d->PB | d->PR);
    if (pointwise) {
        p.b_kind = PLAIT_B_STRIDED;
        p.b = x;
        p.ldb_r = d->H * d->W;
        p.ldb_c = 1;
        p.b_bs = d->C * d->H * d->W;
        return plait_gemm(&p);
    }
    if (!(d->PT | d->PL | d->PB | d->PR) && d->SW > 1) {
        /* unpadded with a column stride (a strided 1x1 shortcut, say): the patches are
         * gathered from the input where it lies, rather than from a phase-split copy of
         * all of it (of which such a convolution reads a fraction) */
        g.RL = g.WPP = d->W;
        g.SW = 1;
        g.CS = d->SW;
    } else if (d->PT | d->PL | d->PB | d->PR | (d->SW > 1)) {
        /* zero-padded, and with a column stride the columns split into SW phases:
         * padded column q of a row goes to [q % SW][q / SW], so the NR pixels of an
         * output row read NR neighbouring values for every kernel tap */
        size_t need = (size_t)(d->N * d->C * HP * RL);
        float* dst = plait_scratch(3, need);
        if (!dst) return 1;
        const int64_t planes = d->N * d->C;
        plait_pad_task pad = {d, x, dst, HP, RL, WPP};
        plait_parallel_for(planes, plait_pad_plane, &pad,
                           planes * HP * RL > 262144 ? plait_max_threads() : 1);
        img = dst;
    }
    p.b_kind = PLAIT_B_CONV;
    p.b = img;
    p.conv = &g;
    p.b_bs = d->C * HP * g.RL;
    return plait_gemm(&p);
}

int plait_conv2d(const plait_conv2d_desc* d, const float* x, const float* apacked,
                 const float* bias, const float* res, int relu, float* out) {
    return conv2d_impl(d, x, apacked, bias, res, relu, 0, out);
}

int plait_conv2d_pool(const plait_conv2d_desc* d, const float* x, const float* apacked,
                      const float* bias, int relu, float* out) {
    return conv2d_impl(d, x, apacked, bias, NULL, relu, 1, out);
}

/* ------------------------------------------------ conv2d 3x3 by Winograd F(2x2, 3x3) */

/* Y = A^T [ (G g G^T) * (B^T d B) ] A per 2x2 output tile: 16 element-wise products per
 * tile instead of 36 multiply-adds, i.e. 2.25x fewer multiplications.  The 16 products
 * over the channels are 16 matrix products U[xi] (O x C) @ V[xi] (C x tiles): U is the
 * weight transform, done at compile time and packed in PLAIT_MR-row panels
 * ([16][ceil(O/MR)][C][MR]); V is the input transform, written straight into the
 * micro-kernel's B panels.  Tiles are processed in blocks small enough for V and the
 * products to stay in the L2 cache, each block by one thread, so the transformed data
 * never goes to memory.  Tile rows are padded to a multiple of 8 tiles so that 8
 * neighbouring tiles always share a row (contiguous vector loads and stores).
 *
 * The input is zero-padded and de-interleaved: each padded row holds its even columns,
 * then its odd columns, so that d[r][s] of 8 neighbouring tiles is one vector load. */

typedef struct {
    const plait_conv2d_desc* d;
    int64_t TH, TWp, T, HP, RL, tb;
    const float* img;    /* F(2x2): the de-interleaved padded input [N][C][HP][RL];
                          * F(4x4): the input itself [N][C][H][W] */
    const float* u;      /* packed transformed weights */
    const float* bias;
    const float* res;
    int relu;
    float* out;
} plait_wino;

/* The strides between the 16 transform elements in the V ([16][tb/NR][C][NR]) and
 * product ([16][O][tb]) buffers, one cache line more than the data: a power-of-two
 * stride would put all 16 in the same cache set. */
#define PLAIT_WINO_VS(w) ((w)->tb * (w)->d->C + 16)
#define PLAIT_WINO_MS(w) ((w)->tb * (w)->d->O + 16)

/* The outputs of 8 neighbouring m x m tiles that reach past the output's edge, one by
 * one with bounds: y[r * m + c][k] is row r, column c of tile k (tiles from (th, tw)),
 * bias included; the residual and relu are applied here. */
static inline void wino_store_edge(const plait_wino* w, float* outo, const float* reso,
                                   int64_t th, int64_t tw, int m, const float (*y)[8]) {
    const int64_t OH = w->d->OH, OW = w->d->OW;
    for (int r = 0; r < m; ++r) {
        int64_t oh = m * th + r;
        if (oh >= OH) break;
        float* orow = outo + oh * OW;
        const float* rrow = reso ? reso + oh * OW : NULL;
        for (int k = 0; k < 8; ++k) {
            int64_t ow = m * (tw + k);
            for (int cc = 0; cc < m && ow + cc < OW; ++cc) {
                float val = y[r * m + cc][k];
                if (rrow) val += rrow[ow + cc];
                if (w->relu && val < 0.0f) val = 0.0f;
                orow[ow + cc] = val;
            }
        }
    }
}

/* 8 tiles past the last one (a block's padding): zero their lanes of every transform
 * element's panel (nx elements, xs apart). */
static inline __attribute__((always_inline)) void
wino_zero_lanes(float* v, int nx, int64_t xs, int64_t C, int64_t panel, int64_t lane) {
    for (int xi = 0; xi < nx; ++xi)
        for (int64_t c = 0; c < C; ++c)
            *(plait_v8u*)(v + xi * xs + (panel * C + c) * PLAIT_NR + lane) = (plait_v8){0};
}

static inline __attribute__((always_inline)) void
wino_input(const plait_wino* w, int64_t n, int64_t t0, float* v) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, tb = w->tb, half = w->TWp + 1;
    /* v: [16][panels][C][NR] */
    for (int64_t g = 0; g < tb; g += 8) {
        int64_t t = t0 + g;
        int64_t panel = g / PLAIT_NR, lane = g % PLAIT_NR;
        if (t >= w->T) {
            wino_zero_lanes(v, 16, PLAIT_WINO_VS(w), C, panel, lane);
            continue;
        }
        int64_t th = t / w->TWp, tw = t % w->TWp;
        for (int64_t c = 0; c < C; ++c) {
            const float* base = w->img + ((n * C + c) * w->HP + 2 * th) * w->RL + tw;
            plait_v8 dd[4][4];
            for (int r = 0; r < 4; ++r) {
                const float* row = base + r * w->RL;
                dd[r][0] = *(const plait_v8u*)row;
                dd[r][1] = *(const plait_v8u*)(row + half);
                dd[r][2] = *(const plait_v8u*)(row + 1);
                dd[r][3] = *(const plait_v8u*)(row + half + 1);
            }
            plait_v8 tt[4][4];   /* B^T d */
            for (int s2 = 0; s2 < 4; ++s2) {
                tt[0][s2] = dd[0][s2] - dd[2][s2];
                tt[1][s2] = dd[1][s2] + dd[2][s2];
                tt[2][s2] = dd[2][s2] - dd[1][s2];
                tt[3][s2] = dd[1][s2] - dd[3][s2];
            }
            float* vc = v + (panel * C + c) * PLAIT_NR + lane;
            const int64_t xs = PLAIT_WINO_VS(w);   /* stride between xi */
            for (int r = 0; r < 4; ++r) {                /* (B^T d) B */
                *(plait_v8u*)(vc + (r * 4 + 0) * xs) = tt[r][0] - tt[r][2];
                *(plait_v8u*)(vc + (r * 4 + 1) * xs) = tt[r][1] + tt[r][2];
                *(plait_v8u*)(vc + (r * 4 + 2) * xs) = tt[r][2] - tt[r][1];
                *(plait_v8u*)(vc + (r * 4 + 3) * xs) = tt[r][1] - tt[r][3];
            }
        }
    }
}

static inline __attribute__((always_inline)) void
wino_output(const plait_wino* w, int64_t n, int64_t t0, const float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t O = d->O, tb = w->tb, OH = d->OH, OW = d->OW;
    /* m: [16][O][tb] */
    for (int64_t o = 0; o < O; ++o) {
        const float bo = w->bias ? w->bias[o] : 0.0f;
        float* outo = w->out + (n * O + o) * OH * OW;
        const float* reso = w->res ? w->res + (n * O + o) * OH * OW : NULL;
        for (int64_t g = 0; g < tb; g += 8) {
            int64_t t = t0 + g;
            if (t >= w->T) break;
            const float* mg = m + o * tb + g;
            plait_v8 mm[16];
            for (int xi = 0; xi < 16; ++xi) mm[xi] = *(const plait_v8u*)(mg + xi * PLAIT_WINO_MS(w));
            plait_v8 s0[4], s1[4];   /* A^T M: rows 0 and 1, per column */
            for (int c2 = 0; c2 < 4; ++c2) {
                s0[c2] = mm[0 * 4 + c2] + mm[1 * 4 + c2] + mm[2 * 4 + c2];
                s1[c2] = mm[1 * 4 + c2] - mm[2 * 4 + c2] - mm[3 * 4 + c2];
            }
            float y[4][8] __attribute__((aligned(32)));
            *(plait_v8*)y[0] = s0[0] + s0[1] + s0[2] + bo;
            *(plait_v8*)y[1] = s0[1] - s0[2] - s0[3] + bo;
            *(plait_v8*)y[2] = s1[0] + s1[1] + s1[2] + bo;
            *(plait_v8*)y[3] = s1[1] - s1[2] - s1[3] + bo;
            int64_t th = t / w->TWp, tw = t % w->TWp;
            if (2 * th + 2 <= OH && 2 * tw + 16 <= OW) {
                /* all 8 tiles inside: rows of 16 outputs, even and odd columns
                 * interleaved */
                for (int r = 0; r < 2; ++r) {
                    plait_v8 e = *(plait_v8*)y[2 * r], od = *(plait_v8*)y[2 * r + 1];
                    plait_v8 lo = PLAIT_INTERLEAVE_LO(e, od), hi = PLAIT_INTERLEAVE_HI(e, od);
                    int64_t off = (2 * th + r) * OW + 2 * tw;
                    if (reso) {
                        lo += *(const plait_v8u*)(reso + off);
                        hi += *(const plait_v8u*)(reso + off + 8);
                    }
                    if (w->relu) {
                        lo = PLAIT_RELU(lo);
                        hi = PLAIT_RELU(hi);
                    }
                    *(plait_v8u*)(outo + off) = lo;
                    *(plait_v8u*)(outo + off + 8) = hi;
                }
                continue;
            }
            wino_store_edge(w, outo, reso, th, tw, 2, y);
        }
    }
}

static inline __attribute__((always_inline)) void
wino_thread(const plait_wino* w, int64_t* next, float* v, float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, O = d->O, tb = w->tb;
    const int64_t blocks = (w->T + tb - 1) / tb;
    const int64_t jobs = d->N * blocks;
    const int64_t apanels = (O + PLAIT_MR - 1) / PLAIT_MR;
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t n = job / blocks, t0 = (job % blocks) * tb;
        wino_input(w, n, t0, v);
        for (int64_t xi = 0; xi < 16; ++xi) {
            const float* uxi = w->u + xi * apanels * C * PLAIT_MR;
            const float* vxi = v + xi * PLAIT_WINO_VS(w);
            float* mxi = m + xi * PLAIT_WINO_MS(w);
            for (int64_t jr = 0; jr < tb; jr += PLAIT_NR) {
                for (int64_t ir = 0; ir < O; ir += PLAIT_MR) {
                    int64_t mr = O - ir < PLAIT_MR ? O - ir : PLAIT_MR;
                    micro_kernel(C, uxi + (ir / PLAIT_MR) * C * PLAIT_MR, 1, PLAIT_MR,
                                 vxi + (jr / PLAIT_NR) * C * PLAIT_NR, mxi + ir * tb + jr, tb,
                                 mr, PLAIT_NR, 1, 0, NULL, 0, 0, NULL);
                }
            }
        }
        wino_output(w, n, t0, m);
    }
}

static void wino_thread_base(const plait_wino* w, int64_t* next, float* v, float* m) {
    wino_thread(w, next, v, m);
}

#ifdef PLAIT_X86_DISPATCH
__attribute__((target("avx2,fma")))
static void wino_thread_avx2(const plait_wino* w, int64_t* next, float* v, float* m) {
    wino_thread(w, next, v, m);
}
#endif

typedef void (*plait_wino_fn)(const plait_wino*, int64_t*, float*, float*);

#ifdef PLAIT_X86_DISPATCH
#define PLAIT_AVX2_OR(avx2, base) (avx2)
#else
#define PLAIT_AVX2_OR(avx2, base) (base)
#endif

typedef struct {
    const plait_wino* w;
    plait_wino_fn run;
    size_t vfloats, mfloats;
    int64_t next;                 /* the next job (see PLAIT_NEXT_JOB) */
    int status;                   /* 1: a thread was out of memory */
} plait_wino_task;

static void plait_wino_task_run(void* arg) {
    plait_wino_task* t = (plait_wino_task*)arg;
    float* v = plait_scratch(1, t->vfloats);
    float* m = plait_scratch(2, t->mfloats);
    if (v && m) t->run(t->w, &t->next, v, m);
    else __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
}

/* Run a Winograd convolution's tile-block jobs on nthreads threads, each with its own
 * transformed-input (vfloats) and product (mfloats) buffers; 0, or 1 out of memory. */
static int wino_run(const plait_wino* w, int nthreads, size_t vfloats, size_t mfloats,
                    plait_wino_fn base, plait_wino_fn avx2) {
    const plait_conv2d_desc* d = w->d;
    const int64_t blocks = d->N * ((w->T + w->tb - 1) / w->tb);
    if (blocks < nthreads) nthreads = (int)blocks;
    plait_wino_task task = {w, plait_use_avx2() ? avx2 : base, vfloats, mfloats, 0, 0};
    plait_parallel(plait_wino_task_run, &task, nthreads);
    return task.status;
}

typedef struct {
    const plait_wino* w;
    const float* x;
    float* img;
    int64_t half;
} plait_wino_pad_task;

/* Plane pl of F(2x2)'s padded, de-interleaved input (see plait_conv2d_winograd). */
static void plait_wino_pad_plane(void* arg, int64_t pl) {
    const plait_wino_pad_task* c = (const plait_wino_pad_task*)arg;
    const plait_wino w = *c->w;
    const plait_conv2d_desc* d = w.d;
    const float* x = c->x;
    float* img = c->img;
    const int64_t half = c->half;
    float* o = img + pl * w.HP * w.RL;
    const float* src = x + pl * d->H * d->W;
    for (int64_t r = 0; r < w.HP; ++r) {
        float* row = o + r * w.RL;
        int64_t ih = r - d->PT;
        if (ih < 0 || ih >= d->H) {
            memset(row, 0, sizeof(float) * (size_t)w.RL);
            continue;
        }
        const float* in = src + ih * d->W;
        /* even padded columns 2j hold input column 2j - PL, odd ones 2j + 1 - PL */
        memset(row, 0, sizeof(float) * (size_t)w.RL);
        int64_t e0 = (d->PL + 1) / 2, e1 = (d->W - 1 + d->PL) / 2 + 1;
        int64_t o0 = d->PL / 2;
        int64_t o1 = d->W - 2 + d->PL >= 0 ? (d->W - 2 + d->PL) / 2 + 1 : 0;
        if (e1 > half) e1 = half;
        if (o1 > half) o1 = half;
        for (int64_t j = e0; j < e1; ++j) row[j] = in[2 * j - d->PL];
        for (int64_t j = o0; j < o1; ++j) row[half + j] = in[2 * j + 1 - d->PL];
    }
}

int plait_conv2d_winograd(const plait_conv2d_desc* d, const float* x, const float* u,
                          const float* bias, const float* res, int relu, float* out) {
    plait_wino w;
    w.d = d;
    w.TH = (d->OH + 1) / 2;
    w.TWp = ((d->OW + 1) / 2 + 7) / 8 * 8;
    w.T = w.TH * w.TWp;
    w.HP = 2 * w.TH + 2;
    w.RL = 2 * (w.TWp + 1);
    /* tiles per block: V and the products (16 x (C + O) x tb floats) near 256 KB, half
     * the L2 cache; a multiple of NR */
    int64_t tb = 4096 / (d->C + d->O);
    tb = tb / PLAIT_NR * PLAIT_NR;
    if (tb < PLAIT_NR) tb = PLAIT_NR;
    if (tb > 256) tb = 256;
    w.tb = tb;
    w.u = u;
    w.bias = bias;
    w.res = res;
    w.relu = relu;
    w.out = out;
    const int64_t planes = d->N * d->C, half = w.TWp + 1;
    size_t need = (size_t)(planes * w.HP * w.RL);
    float* img = plait_scratch(3, need);   /* the padded input, this thread's */
    if (!img) return 1;
    int nthreads = plait_max_threads();
    /* zero-pad and de-interleave: padded row r, column q (input row r - PT, column
     * q - PL) goes to [r][q / 2] (even q) or [r][half + q / 2] (odd q) */
    plait_wino_pad_task pad = {&w, x, img, half};
    plait_parallel_for(planes, plait_wino_pad_plane, &pad, need > 262144 ? nthreads : 1);
    w.img = img;
    return wino_run(&w, nthreads, 16 * (size_t)PLAIT_WINO_VS(&w),
                    16 * (size_t)PLAIT_WINO_MS(&w), wino_thread_base,
                    PLAIT_AVX2_OR(wino_thread_avx2, wino_thread_base));
}

/* ------------------------------------------------ conv2d 3x3 by Winograd F(4x4, 3x3) */

/* As F(2x2, 3x3) above, with 4x4 output tiles from 6x6 input tiles: 36 products per 16
 * outputs (4x fewer multiplications than the direct product).  The input is read in
 * place, with no padded copy: 40 floats of a row cover 8 neighbouring tiles (input
 * columns 4t + s) and are de-interleaved by 4 in registers (wino4_row); rows and columns
 * in the padding read as zero.  The products of a
 * tile block are computed for PLAIT_W4_OB output channels at a time, so the transformed
 * input and the block's products fit the L2 cache together. */

#define PLAIT_W4_OB 48
#define PLAIT_W4_VS(w) ((w)->tb * (w)->d->C + 16)
#define PLAIT_W4_MS(w) ((w)->tb * PLAIT_W4_OB + 16)

/* The 6 columns d[.][s] (s = 0..5) of one input row for 8 neighbouring tiles: the
 * tiles' input columns are 4k + s from col0 (k = 0..7), so 40 floats from col0 are
 * de-interleaved by 4 in registers.  Columns outside [0, W) (the padding) and a NULL
 * row (a padding row) read as zero. */
static inline __attribute__((always_inline)) void
wino4_row(const float* row, int64_t col0, int64_t W, plait_v8 out[6]) {
    if (!row) {
        for (int s2 = 0; s2 < 6; ++s2) out[s2] = (plait_v8){0};
        return;
    }
    float tmp[40];
    const float* b = row + col0;
    if (col0 < 0 || col0 + 40 > W) {
        for (int i = 0; i < 40; ++i) {
            int64_t q = col0 + i;
            tmp[i] = q >= 0 && q < W ? row[q] : 0.0f;
        }
        b = tmp;
    }
    plait_v8 v0 = *(const plait_v8u*)b, v1 = *(const plait_v8u*)(b + 8);
    plait_v8 v2 = *(const plait_v8u*)(b + 16), v3 = *(const plait_v8u*)(b + 24);
    plait_v8 v4 = *(const plait_v8u*)(b + 32);
    plait_v8 t0 = PLAIT_SHUF2(v0, v1, 0, 4, 8, 12, 1, 5, 9, 13);
    plait_v8 t1 = PLAIT_SHUF2(v0, v1, 2, 6, 10, 14, 3, 7, 11, 15);
    plait_v8 t2 = PLAIT_SHUF2(v2, v3, 0, 4, 8, 12, 1, 5, 9, 13);
    plait_v8 t3 = PLAIT_SHUF2(v2, v3, 2, 6, 10, 14, 3, 7, 11, 15);
    out[0] = PLAIT_SHUF2(t0, t2, 0, 1, 2, 3, 8, 9, 10, 11);
    out[1] = PLAIT_SHUF2(t0, t2, 4, 5, 6, 7, 12, 13, 14, 15);
    out[2] = PLAIT_SHUF2(t1, t3, 0, 1, 2, 3, 8, 9, 10, 11);
    out[3] = PLAIT_SHUF2(t1, t3, 4, 5, 6, 7, 12, 13, 14, 15);
    out[4] = PLAIT_SHUF2(out[0], v4, 1, 2, 3, 4, 5, 6, 7, 8);
    out[5] = PLAIT_SHUF2(out[1], v4, 1, 2, 3, 4, 5, 6, 7, 9);
}

static inline __attribute__((always_inline)) void
wino4_input(const plait_wino* w, int64_t n, int64_t t0, float* v) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, tb = w->tb;
    const int64_t xs = PLAIT_W4_VS(w);
    for (int64_t g = 0; g < tb; g += 8) {
        int64_t t = t0 + g;
        int64_t panel = g / PLAIT_NR, lane = g % PLAIT_NR;
        if (t >= w->T) {
            wino_zero_lanes(v, 36, xs, C, panel, lane);
            continue;
        }
        int64_t th = t / w->TWp, tw = t % w->TWp;
        int64_t row0 = 4 * th - d->PT, col0 = 4 * tw - d->PL;
        for (int64_t c = 0; c < C; ++c) {
            const float* plane = w->img + (n * C + c) * d->H * d->W;
            plait_v8 dd[6][6];   /* dd[r][s]: input row r, column s of the 8 tiles */
            for (int r = 0; r < 6; ++r) {
                int64_t ih = row0 + r;
                wino4_row(ih >= 0 && ih < d->H ? plane + ih * d->W : NULL, col0, d->W, dd[r]);
            }
            plait_v8 tt[6][6];   /* B^T d, column by column */
            for (int s2 = 0; s2 < 6; ++s2) {
                plait_v8 d0 = dd[0][s2], d1 = dd[1][s2], d2 = dd[2][s2];
                plait_v8 d3 = dd[3][s2], d4 = dd[4][s2], d5 = dd[5][s2];
                tt[0][s2] = 4.0f * d0 - 5.0f * d2 + d4;
                tt[1][s2] = -4.0f * (d1 + d2) + d3 + d4;
                tt[2][s2] = 4.0f * (d1 - d2) - d3 + d4;
                tt[3][s2] = 2.0f * (d3 - d1) - d2 + d4;
                tt[4][s2] = 2.0f * (d1 - d3) - d2 + d4;
                tt[5][s2] = 4.0f * d1 - 5.0f * d3 + d5;
            }
            float* vc = v + (panel * C + c) * PLAIT_NR + lane;
            for (int r = 0; r < 6; ++r) {    /* (B^T d) B */
                plait_v8 e0 = tt[r][0], e1 = tt[r][1], e2 = tt[r][2];
                plait_v8 e3 = tt[r][3], e4 = tt[r][4], e5 = tt[r][5];
                float* vr = vc + r * 6 * xs;
                *(plait_v8u*)(vr) = 4.0f * e0 - 5.0f * e2 + e4;
                *(plait_v8u*)(vr + xs) = -4.0f * (e1 + e2) + e3 + e4;
                *(plait_v8u*)(vr + 2 * xs) = 4.0f * (e1 - e2) - e3 + e4;
                *(plait_v8u*)(vr + 3 * xs) = 2.0f * (e3 - e1) - e2 + e4;
                *(plait_v8u*)(vr + 4 * xs) = 2.0f * (e1 - e3) - e2 + e4;
                *(plait_v8u*)(vr + 5 * xs) = 4.0f * e1 - 5.0f * e3 + e5;
            }
        }
    }
}

/* The output transform of channels [o0, o0 + ob) of a tile block: m holds their
 * products, [36][ob][tb] (stride PLAIT_W4_MS between transform elements). */
static inline __attribute__((always_inline)) void
wino4_output(const plait_wino* w, int64_t n, int64_t t0, int64_t o0, int64_t ob,
             const float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t O = d->O, tb = w->tb, OH = d->OH, OW = d->OW, ms = PLAIT_W4_MS(w);
    for (int64_t oo = 0; oo < ob; ++oo) {
        const int64_t o = o0 + oo;
        const float bo = w->bias ? w->bias[o] : 0.0f;
        float* outo = w->out + (n * O + o) * OH * OW;
        const float* reso = w->res ? w->res + (n * O + o) * OH * OW : NULL;
        for (int64_t g = 0; g < tb; g += 8) {
            int64_t t = t0 + g;
            if (t >= w->T) break;
            const float* mg = m + oo * tb + g;
            plait_v8 s[4][6];   /* A^T M, column by column */
            for (int c2 = 0; c2 < 6; ++c2) {
                plait_v8 m0 = *(const plait_v8u*)(mg + (0 * 6 + c2) * ms);
                plait_v8 m1 = *(const plait_v8u*)(mg + (1 * 6 + c2) * ms);
                plait_v8 m2 = *(const plait_v8u*)(mg + (2 * 6 + c2) * ms);
                plait_v8 m3 = *(const plait_v8u*)(mg + (3 * 6 + c2) * ms);
                plait_v8 m4 = *(const plait_v8u*)(mg + (4 * 6 + c2) * ms);
                plait_v8 m5 = *(const plait_v8u*)(mg + (5 * 6 + c2) * ms);
                plait_v8 p12 = m1 + m2, d12 = m1 - m2, p34 = m3 + m4, d34 = m3 - m4;
                s[0][c2] = m0 + p12 + p34;
                s[1][c2] = d12 + 2.0f * d34;
                s[2][c2] = p12 + 4.0f * p34;
                s[3][c2] = d12 + 8.0f * d34 + m5;
            }
            plait_v8 y[4][4];
            for (int r = 0; r < 4; ++r) {
                plait_v8 p12 = s[r][1] + s[r][2], d12 = s[r][1] - s[r][2];
                plait_v8 p34 = s[r][3] + s[r][4], d34 = s[r][3] - s[r][4];
                y[r][0] = s[r][0] + p12 + p34 + bo;
                y[r][1] = d12 + 2.0f * d34 + bo;
                y[r][2] = p12 + 4.0f * p34 + bo;
                y[r][3] = d12 + 8.0f * d34 + s[r][5] + bo;
            }
            int64_t th = t / w->TWp, tw = t % w->TWp;
            if (4 * th + 4 <= OH && 4 * tw + 32 <= OW) {
                for (int r = 0; r < 4; ++r) {
                    /* rows of 32 outputs: the 4 columns of 8 tiles interleaved */
                    plait_v8 alo = PLAIT_INTERLEAVE_LO(y[r][0], y[r][2]);
                    plait_v8 ahi = PLAIT_INTERLEAVE_HI(y[r][0], y[r][2]);
                    plait_v8 blo = PLAIT_INTERLEAVE_LO(y[r][1], y[r][3]);
                    plait_v8 bhi = PLAIT_INTERLEAVE_HI(y[r][1], y[r][3]);
                    plait_v8 q[4] = {PLAIT_INTERLEAVE_LO(alo, blo), PLAIT_INTERLEAVE_HI(alo, blo),
                                     PLAIT_INTERLEAVE_LO(ahi, bhi), PLAIT_INTERLEAVE_HI(ahi, bhi)};
                    int64_t off = (4 * th + r) * OW + 4 * tw;
                    for (int k = 0; k < 4; ++k) {
                        plait_v8 val = q[k];
                        if (reso) val += *(const plait_v8u*)(reso + off + 8 * k);
                        if (w->relu) {
                            val = PLAIT_RELU(val);
                        }
                        *(plait_v8u*)(outo + off + 8 * k) = val;
                    }
                }
                continue;
            }
            float yy[4][4][8] __attribute__((aligned(32)));
            for (int r = 0; r < 4; ++r)
                for (int cc = 0; cc < 4; ++cc) *(plait_v8*)yy[r][cc] = y[r][cc];
            wino_store_edge(w, outo, reso, th, tw, 4, &yy[0][0]);
        }
    }
}

static inline __attribute__((always_inline)) void
wino4_thread(const plait_wino* w, int64_t* next, float* v, float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, O = d->O, tb = w->tb;
    const int64_t blocks = (w->T + tb - 1) / tb;
    const int64_t jobs = d->N * blocks;
    const int64_t apanels = (O + PLAIT_MR - 1) / PLAIT_MR;
    const int64_t vs = PLAIT_W4_VS(w), ms = PLAIT_W4_MS(w);
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t n = job / blocks, t0 = (job % blocks) * tb;
        wino4_input(w, n, t0, v);
        for (int64_t o0 = 0; o0 < O; o0 += PLAIT_W4_OB) {
            int64_t ob = O - o0 < PLAIT_W4_OB ? O - o0 : PLAIT_W4_OB;
            for (int64_t xi = 0; xi < 36; ++xi) {
                const float* uxi = w->u + xi * apanels * C * PLAIT_MR;
                const float* vxi = v + xi * vs;
                float* mxi = m + xi * ms;
                for (int64_t jr = 0; jr < tb; jr += PLAIT_NR) {
                    for (int64_t ir = 0; ir < ob; ir += PLAIT_MR) {
                        int64_t mr = ob - ir < PLAIT_MR ? ob - ir : PLAIT_MR;
                        micro_kernel(C, uxi + ((o0 + ir) / PLAIT_MR) * C * PLAIT_MR, 1,
                                     PLAIT_MR, vxi + (jr / PLAIT_NR) * C * PLAIT_NR, mxi + ir * tb + jr,
                                     tb, mr, PLAIT_NR, 1, 0, NULL, 0, 0, NULL);
                    }
                }
            }
            wino4_output(w, n, t0, o0, ob, m);
        }
    }
}

static void wino4_thread_base(const plait_wino* w, int64_t* next, float* v, float* m) {
    wino4_thread(w, next, v, m);
}

#ifdef PLAIT_X86_DISPATCH
__attribute__((target("avx2,fma")))
static void wino4_thread_avx2(const plait_wino* w, int64_t* next, float* v, float* m) {
    wino4_thread(w, next, v, m);
}
#endif

int plait_conv2d_winograd4(const plait_conv2d_desc* d, const float* x, const float* u,
                           const float* bias, const float* res, int relu, float* out) {
    plait_wino w;
    w.d = d;
    w.TH = (d->OH + 3) / 4;
    w.TWp = ((d->OW + 3) / 4 + 7) / 8 * 8;
    w.T = w.TH * w.TWp;
    w.HP = w.RL = 0;   /* the input is read in place (see wino4_row): no padded copy */
    /* tiles per block: the transformed input (36 x C x tb floats) near 200 KB */
    int64_t tb = 1408 / (d->C > 0 ? d->C : 1);
    tb = tb / PLAIT_NR * PLAIT_NR;
    if (tb < PLAIT_NR) tb = PLAIT_NR;
    w.tb = tb;
    w.u = u;
    w.bias = bias;
    w.res = res;
    w.relu = relu;
    w.out = out;
    w.img = x;
    return wino_run(&w, plait_max_threads(), 36 * (size_t)PLAIT_W4_VS(&w),
                    36 * (size_t)PLAIT_W4_MS(&w), wino4_thread_base,
                    PLAIT_AVX2_OR(wino4_thread_avx2, wino4_thread_base));
}

/* ------------------------------------------------------------ attention */

/* out = softmax(scale * Q @ K^T + mask_scale * M) @ V per (batch, head), without the
 * score matrix going to memory: each job (one batch and head, a range of query rows)
 * packs K^T and V of its head into the micro-kernel's B panels once, then for every 6
 * query rows computes the 6 x SK scores on the register tile into a scratch row block
 * (in L1), adds the mask, applies the softmax row by row (max, exp, sum: vectorized, a
 * fixed order) and multiplies the probabilities by V straight into the output rows.
 * Q, K, V, the mask and out are strided views (the heads of one QKV projection are read
 * where they lie; a mask broadcast over heads or query rows has strides of 0). */

#include "plait_exp_f32.h"

#define PLAIT_SELECT(mask, a, b) \
    ((plait_v8)(((plait_vi8)(a) & (mask)) | ((plait_vi8)(b) & ~(mask))))

/* *v = plait_exp_f32 of its 8 lanes (the same operations, so the same results; a pointer,
 * not a vector argument, so the baseline variant keeps the default ABI) */
static inline __attribute__((always_inline)) void plait_exp_v8(plait_v8* v) {
    plait_v8 x = *v;
    plait_v8 xc = PLAIT_SELECT(x > PLAIT_BCAST(88.8f), PLAIT_BCAST(88.8f), x);
    xc = PLAIT_SELECT(xc < PLAIT_BCAST(-104.0f), PLAIT_BCAST(-104.0f), xc);
    plait_v8 m = xc * 1.44269504088896341f + 12582912.0f;
    plait_v8 kf = m - 12582912.0f;
    plait_vi8 k = (plait_vi8)m - 0x4B400000;
    plait_v8 r = xc - kf * 0.693359375f;
    r = r - kf * (-2.12194440e-4f);
    plait_v8 z = r * r;
    plait_v8 p = PLAIT_BCAST(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    plait_vi8 k1 = (k + (plait_vi8)((uint32_t __attribute__((vector_size(32))))k >> 31)) >> 1;
    plait_v8 s1 = (plait_v8)((k1 + 127) << 23);
    plait_v8 s2 = (plait_v8)((k - k1 + 127) << 23);
    *v = p * s1 * s2;
}

/* softmax(scale * s[0:n]) in place: the max, then the exponentials and their sum on 8
 * lanes (added up in a fixed order), then the division; NaN anywhere makes the row NaN
 * (as in numpy), a row of -inf gives NaN (0/0, as in numpy). */
static inline __attribute__((always_inline)) void
softmax_row(float* restrict s, int64_t n, float scale) {
    plait_v8 vmax = PLAIT_BCAST(-__builtin_inff());
    plait_vi8 nan = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        plait_v8 v = *(plait_v8u*)(s + j) * scale;
        *(plait_v8u*)(s + j) = v;
        nan |= v != v;
        vmax = PLAIT_SELECT(v > vmax, v, vmax);
    }
    float mx = -__builtin_inff();
    int isnan = 0;
    for (int l = 0; l < 8; ++l) {
        isnan |= nan[l] != 0;
        mx = vmax[l] > mx ? vmax[l] : mx;
    }
    for (; j < n; ++j) {
        float v = s[j] * scale;
        s[j] = v;
        isnan |= v != v;
        mx = v > mx ? v : mx;
    }
    if (isnan) {
        for (j = 0; j < n; ++j) s[j] = __builtin_nanf("");
        return;
    }
    if (mx == -__builtin_inff()) mx = 0.0f;   /* all -inf: exp gives 0 everywhere */
    plait_v8 vsum = {0};
    for (j = 0; j + 8 <= n; j += 8) {
        plait_v8 e = *(plait_v8u*)(s + j) - mx;
        plait_exp_v8(&e);
        *(plait_v8u*)(s + j) = e;
        vsum += e;
    }
    float sum = ((vsum[0] + vsum[4]) + (vsum[1] + vsum[5])) +
                ((vsum[2] + vsum[6]) + (vsum[3] + vsum[7]));
    for (; j < n; ++j) {
        float e = plait_exp_f32(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (j = 0; j + 8 <= n; j += 8) *(plait_v8u*)(s + j) *= inv;
    for (; j < n; ++j) s[j] *= inv;
}

/* K^T of one head as B panels ([ceil(SK/NR)][D][NR], zero-padded) and V as B panels
 * ([ceil(DV/NR)][SK][NR]). */
static void attention_pack(const plait_attention_desc* d, const float* k, const float* v,
                           float* kt, float* vp) {
    const int64_t skp = (d->SK + PLAIT_NR - 1) / PLAIT_NR;
    for (int64_t jp = 0; jp < skp; ++jp) {
        float* dst = kt + jp * d->D * PLAIT_NR;
        for (int64_t jj = 0; jj < PLAIT_NR; ++jj) {
            int64_t j = jp * PLAIT_NR + jj;
            if (j >= d->SK) {
                for (int64_t e = 0; e < d->D; ++e) dst[e * PLAIT_NR + jj] = 0.0f;
                continue;
            }
            const float* row = k + j * d->k_ss;
            for (int64_t e = 0; e < d->D; ++e) dst[e * PLAIT_NR + jj] = row[e * d->k_sd];
        }
    }
    const int64_t dvp = (d->DV + PLAIT_NR - 1) / PLAIT_NR;
    for (int64_t cp = 0; cp < dvp; ++cp) {
        float* dst = vp + cp * d->SK * PLAIT_NR;
        int64_t c0 = cp * PLAIT_NR;
        int64_t nc = d->DV - c0 < PLAIT_NR ? d->DV - c0 : PLAIT_NR;
        for (int64_t j = 0; j < d->SK; ++j) {
            const float* row = v + j * d->v_ss + c0 * d->v_sd;
            int64_t c = 0;
            if (d->v_sd == 1 && nc == PLAIT_NR) {
                *(plait_v8u*)dst = *(const plait_v8u*)row;
                *(plait_v8u*)(dst + 8) = *(const plait_v8u*)(row + 8);
                c = PLAIT_NR;
            }
            for (; c < nc; ++c) dst[c] = row[c * d->v_sd];
            for (; c < PLAIT_NR; ++c) dst[c] = 0.0f;
            dst += PLAIT_NR;
        }
    }
}

static inline __attribute__((always_inline)) void
attention_thread(const plait_attention_desc* d, const float* q, const float* k,
                 const float* v, const float* m, float* out, int64_t chunks, int64_t* next,
                 float* kt, float* s, float* qpad) {
    const int64_t H = d->H, SK = d->SK, D = d->D;
    const int64_t skp = (SK + PLAIT_NR - 1) / PLAIT_NR, ldS = skp * PLAIT_NR;
    float* vp = kt + skp * D * PLAIT_NR;
    const int64_t rows = (d->SQ + chunks - 1) / chunks;
    const int64_t chunk_rows = (rows + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
    const int64_t jobs = d->B * H * chunks;
    plait_gemm_problem p;   /* the micro-kernel's epilogue: a plain store */
    memset(&p, 0, sizeof p);
    int64_t packed = -1;   /* the head whose K^T and V are in kt / vp */
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t bh = job / chunks, b = bh / H, h = bh % H;
        const float* qh = q + b * d->q_sb + h * d->q_sh;
        const float* mh = m ? m + b * d->m_sb + h * d->m_sh : NULL;
        float* oh = out + b * d->o_sb + h * d->o_sh;
        if (packed != bh) {
            attention_pack(d, k + b * d->k_sb + h * d->k_sh, v + b * d->v_sb + h * d->v_sh,
                           kt, vp);
            packed = bh;
        }
        int64_t i0 = (job % chunks) * chunk_rows;
        int64_t i1 = i0 + chunk_rows < d->SQ ? i0 + chunk_rows : d->SQ;
        for (int64_t i = i0; i < i1; i += PLAIT_MR) {
            int64_t mr = i1 - i < PLAIT_MR ? i1 - i : PLAIT_MR;
            const float* a = qh + i * d->q_ss;
            int64_t a_rs = d->q_ss, a_ks = d->q_sd;
            if (mr < PLAIT_MR) {
                /* the last rows, zero-padded to a panel ([D][MR]) */
                for (int64_t e = 0; e < D; ++e)
                    for (int64_t r = 0; r < PLAIT_MR; ++r)
                        qpad[e * PLAIT_MR + r] = r < mr ? a[r * d->q_ss + e * d->q_sd] : 0.0f;
                a = qpad;
                a_rs = 1;
                a_ks = PLAIT_MR;
            }
            /* scores: 6 x SK (padded to whole panels) */
            for (int64_t jp = 0; jp < skp; ++jp)
                micro_kernel(D, a, a_rs, a_ks, kt + jp * D * PLAIT_NR, s + jp * PLAIT_NR, ldS,
                             PLAIT_MR, PLAIT_NR, 1, 1, &p, 0, 0, NULL);
            if (mh) {
                /* scale and mask the rows first; the tail's padding rows take row i's */
                for (int64_t r = 0; r < PLAIT_MR; ++r) {
                    float* row = s + r * ldS;
                    const float* mrow = mh + (r < mr ? i + r : i) * d->m_si;
                    for (int64_t j = 0; j < SK; ++j)
                        row[j] = row[j] * d->scale + d->mask_scale * mrow[j * d->m_sj];
                    softmax_row(row, SK, 1.0f);
                }
            } else {
                for (int64_t r = 0; r < PLAIT_MR; ++r) softmax_row(s + r * ldS, SK, d->scale);
            }
            /* probabilities @ V into the output rows */
            for (int64_t cp = 0; cp * PLAIT_NR < d->DV; ++cp) {
                int64_t nr = d->DV - cp * PLAIT_NR < PLAIT_NR ? d->DV - cp * PLAIT_NR : PLAIT_NR;
                micro_kernel(SK, s, ldS, 1, vp + cp * SK * PLAIT_NR,
                             oh + i * d->o_ss + cp * PLAIT_NR, d->o_ss, mr, nr, 1, 1, &p, 0,
                             0, NULL);
            }
        }
    }
}

typedef void (*plait_attention_fn)(const plait_attention_desc*, const float*, const float*,
                                   const float*, const float*, float*, int64_t, int64_t*,
                                   float*, float*, float*);

static void attention_thread_base(const plait_attention_desc* d, const float* q,
                                  const float* k, const float* v, const float* m, float* out,
                                  int64_t chunks, int64_t* next, float* kt, float* s,
                                  float* qpad) {
    attention_thread(d, q, k, v, m, out, chunks, next, kt, s, qpad);
}

#ifdef PLAIT_X86_DISPATCH
__attribute__((target("avx2,fma")))
static void attention_thread_avx2(const plait_attention_desc* d, const float* q,
                                  const float* k, const float* v, const float* m, float* out,
                                  int64_t chunks, int64_t* next, float* kt, float* s,
                                  float* qpad) {
    attention_thread(d, q, k, v, m, out, chunks, next, kt, s, qpad);
}
#endif

typedef struct {
    const plait_attention_desc* d;
    const float *q, *k, *v, *m;
    float* out;
    int64_t chunks;
    size_t kvfloats, sfloats;
    int64_t next;                 /* the next job (see PLAIT_NEXT_JOB) */
    plait_attention_fn run;
    int status;                   /* 1: a thread was out of memory */
} plait_attention_task;

static void plait_attention_task_run(void* arg) {
    plait_attention_task* t = (plait_attention_task*)arg;
    float* kt = plait_scratch(1, t->kvfloats);
    float* s = plait_scratch(2, t->sfloats);
    float* qpad = plait_scratch(0, (size_t)(t->d->D * PLAIT_MR));
    if (kt && s && qpad)
        t->run(t->d, t->q, t->k, t->v, t->m, t->out, t->chunks, &t->next, kt, s, qpad);
    else
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
}

int plait_attention(const plait_attention_desc* d, const float* q, const float* k,
                    const float* v, const float* m, float* out) {
    if (d->B <= 0 || d->H <= 0 || d->SQ <= 0 || d->DV <= 0) return 0;
    if (d->SK <= 0 || d->D <= 0) return 2;
    q += d->q_off;
    k += d->k_off;
    v += d->v_off;
    if (m) m += d->m_off;
    const int64_t heads = d->B * d->H;
    int nthreads = plait_max_threads();
    if (heads * d->SQ * d->SK * (d->D + d->DV) < (1 << 20)) nthreads = 1;
    /* jobs: each head's query rows in chunks (of whole panels), so that every thread
     * has about 2 jobs */
    int64_t chunks = (2 * nthreads + heads - 1) / heads;
    int64_t most = (d->SQ + PLAIT_MR - 1) / PLAIT_MR;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    if (heads * chunks < nthreads) nthreads = (int)(heads * chunks);
    const int64_t skp = (d->SK + PLAIT_NR - 1) / PLAIT_NR;
    const int64_t dvp = (d->DV + PLAIT_NR - 1) / PLAIT_NR;
    const size_t kvfloats = (size_t)((skp * d->D + dvp * d->SK) * PLAIT_NR);
    const size_t sfloats = (size_t)(PLAIT_MR * skp * PLAIT_NR);
    plait_attention_task task = {d, q, k, v, m, out, chunks, kvfloats, sfloats, 0,
                                 attention_thread_base, 0};
#ifdef PLAIT_X86_DISPATCH
    if (plait_use_avx2()) task.run = attention_thread_avx2;
#endif
    plait_parallel(plait_attention_task_run, &task, nthreads);
    return task.status;
}
