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
 * without -march=native.  Threads (OpenMP) split the N
 * dimension (and the batch) into blocks; each packs its own B block.
 */
#include <stdlib.h>
#include "plait_gemm.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define PLAIT_MR 6
#define PLAIT_NR 16
#define PLAIT_KC 384
#define PLAIT_MC 96
#ifndef PLAIT_NC
#define PLAIT_NC 512
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define PLAIT_X86_DISPATCH 1
#endif

typedef float plait_v8 __attribute__((vector_size(32)));
typedef float plait_v8u __attribute__((vector_size(32), aligned(4)));
#define PLAIT_BCAST(x) ((plait_v8){(x), (x), (x), (x), (x), (x), (x), (x)})
typedef int32_t plait_vi8 __attribute__((vector_size(32)));

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
        koff[k] = c * g->HP * g->WP + (r / g->KW) * g->DH * g->WP + (r % g->KW) * g->DW;
    }
    for (int64_t jr = 0; jr < nc; jr += PLAIT_NR) {
        int64_t nr = nc - jr < PLAIT_NR ? nc - jr : PLAIT_NR;
        int64_t jstart = j0 + jr;
        int64_t oh = jstart / g->OW, ow = jstart % g->OW;
        int64_t pix[PLAIT_NR];
        for (int64_t j = 0; j < nr; ++j) {
            pix[j] = oh * g->SH * g->WP + ow * g->SW;
            if (++ow == g->OW) { ow = 0; ++oh; }
        }
        if (nr == PLAIT_NR && g->SW == 1 && pix[PLAIT_NR - 1] - pix[0] == PLAIT_NR - 1) {
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

static inline __attribute__((always_inline)) void
micro_kernel(int64_t kc, const float* restrict a, const float* restrict b, float* restrict c,
             int64_t ldc, int64_t mr, int64_t nr, int first, int last,
             const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res) {
    plait_v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    plait_v8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    for (int64_t k = 0; k < kc; ++k) {
        plait_v8 b0 = *(const plait_v8u*)b;
        plait_v8 b1 = *(const plait_v8u*)(b + 8);
        plait_v8 a0 = PLAIT_BCAST(a[0]);
        c00 += a0 * b0; c01 += a0 * b1;
        plait_v8 a1 = PLAIT_BCAST(a[1]);
        c10 += a1 * b0; c11 += a1 * b1;
        plait_v8 a2 = PLAIT_BCAST(a[2]);
        c20 += a2 * b0; c21 += a2 * b1;
        plait_v8 a3 = PLAIT_BCAST(a[3]);
        c30 += a3 * b0; c31 += a3 * b1;
        plait_v8 a4 = PLAIT_BCAST(a[4]);
        c40 += a4 * b0; c41 += a4 * b1;
        plait_v8 a5 = PLAIT_BCAST(a[5]);
        c50 += a5 * b0; c51 += a5 * b1;
        a += PLAIT_MR;
        b += PLAIT_NR;
    }
    float t[PLAIT_MR][PLAIT_NR] __attribute__((aligned(32)));
    *(plait_v8*)&t[0][0] = c00; *(plait_v8*)&t[0][8] = c01;
    *(plait_v8*)&t[1][0] = c10; *(plait_v8*)&t[1][8] = c11;
    *(plait_v8*)&t[2][0] = c20; *(plait_v8*)&t[2][8] = c21;
    *(plait_v8*)&t[3][0] = c30; *(plait_v8*)&t[3][8] = c31;
    *(plait_v8*)&t[4][0] = c40; *(plait_v8*)&t[4][8] = c41;
    *(plait_v8*)&t[5][0] = c50; *(plait_v8*)&t[5][8] = c51;
    if (mr == PLAIT_MR && nr == PLAIT_NR) {
        plait_v8 blo = {0}, bhi = {0};
        if (last && p->bias_kind == PLAIT_BIAS_COL) {
            blo = *(const plait_v8u*)(p->bias + j0);
            bhi = *(const plait_v8u*)(p->bias + j0 + 8);
        }
        for (int64_t i = 0; i < PLAIT_MR; ++i) {
            plait_v8u* row = (plait_v8u*)(c + i * ldc);
            plait_v8 lo = *(plait_v8*)&t[i][0], hi = *(plait_v8*)&t[i][8];
            if (!first) { lo += row[0]; hi += row[1]; }
            if (last) {
                if (p->bias_kind == PLAIT_BIAS_ROW) {
                    float bv = p->bias[i0 + i];
                    lo += bv; hi += bv;
                } else {
                    lo += blo; hi += bhi;
                }
                if (res) {
                    const plait_v8u* rr = (const plait_v8u*)(res + i * ldc);
                    lo += rr[0]; hi += rr[1];
                }
                if (p->relu) {
                    plait_v8 zero = {0};
                    lo = (plait_v8)((plait_vi8)lo & (lo > zero));
                    hi = (plait_v8)((plait_vi8)hi & (hi > zero));
                }
            }
            row[0] = lo; row[1] = hi;
        }
        return;
    }
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

/* ------------------------------------------------------------------ driver */

/* The part of the product that thread `tid` of `nthreads` computes: it takes the
 * (batch, N-block) jobs tid, tid + nthreads, ... */
static inline __attribute__((always_inline)) void
gemm_thread(const plait_gemm_problem* p, int64_t nc_block, int tid, int nthreads,
            float* apack, float* bpack) {
    const int64_t M = p->M, N = p->N, K = p->K;
    const int64_t nblocks = (N + nc_block - 1) / nc_block;
    const int64_t jobs = p->batch * nblocks;
    for (int64_t job = tid; job < jobs; job += nthreads) {
        int64_t bi = job / nblocks;
        int64_t j0 = (job % nblocks) * nc_block;
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
            for (int64_t i0 = 0; i0 < M; i0 += PLAIT_MC) {
                int64_t mc = M - i0 < PLAIT_MC ? M - i0 : PLAIT_MC;
                const float* ap;
                int64_t apanel_stride;
                if (p->a_kind == PLAIT_A_PACKED) {
                    ap = p->a + bi * p->a_bs + (i0 / PLAIT_MR) * K * PLAIT_MR + k0 * PLAIT_MR;
                    apanel_stride = K * PLAIT_MR;
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
                        micro_kernel(kc, ap + (ir / PLAIT_MR) * apanel_stride, bpj,
                                     cb + i * p->ldc + j, p->ldc, mr, nr, first, last, p, i, j,
                                     rb ? rb + i * p->ldc + j : NULL);
                    }
                }
            }
        }
    }
}

/* gemm_thread compiled for the baseline ISA and, on x86-64, for AVX2+FMA; the
 * variant is chosen at run time from the CPU's features. */
static void gemm_thread_base(const plait_gemm_problem* p, int64_t nc_block, int tid,
                             int nthreads, float* apack, float* bpack) {
    gemm_thread(p, nc_block, tid, nthreads, apack, bpack);
}

#ifdef PLAIT_X86_DISPATCH
__attribute__((target("avx2,fma")))
static void gemm_thread_avx2(const plait_gemm_problem* p, int64_t nc_block, int tid,
                             int nthreads, float* apack, float* bpack) {
    gemm_thread(p, nc_block, tid, nthreads, apack, bpack);
}
#endif

typedef void (*plait_gemm_thread_fn)(const plait_gemm_problem*, int64_t, int, int, float*,
                                     float*);

/* PLAIT_GEMM_ISA=baseline in the environment forces the portable variant (tests). */
static plait_gemm_thread_fn plait_gemm_variant(void) {
    static plait_gemm_thread_fn chosen;
    if (chosen) return chosen;
    plait_gemm_thread_fn fn = gemm_thread_base;
    const char* isa = getenv("PLAIT_GEMM_ISA");
#ifdef PLAIT_X86_DISPATCH
    __builtin_cpu_init();
    if (!(isa && strcmp(isa, "baseline") == 0) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        fn = gemm_thread_avx2;
#else
    (void)isa;
#endif
    chosen = fn;
    return fn;
}

int plait_gemm(const plait_gemm_problem* p) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return 0;
    const int64_t work = p->M * p->N * (p->K > 0 ? p->K : 1) * p->batch;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
    if (work < 262144) nthreads = 1;
#endif
    /* N blocks of at most PLAIT_NC columns (a multiple of NR), as many as it takes to
     * give every thread the same number of (batch, block) jobs */
    int64_t nblocks = (p->N + PLAIT_NC - 1) / PLAIT_NC;
    if (p->batch * nblocks < nthreads) nblocks = (nthreads + p->batch - 1) / p->batch;
    else if (nthreads > 1 && (p->batch * nblocks) % nthreads)
        nblocks += (nthreads - (p->batch * nblocks) % nthreads + p->batch - 1) / p->batch;
    int64_t nc_block = (p->N + nblocks - 1) / nblocks;
    nc_block = (nc_block + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
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
    int status = 0;
    plait_gemm_thread_fn run = plait_gemm_variant();
#ifdef _OPENMP
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
#endif
    {
        int tid = 0, nt = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        float* apack = NULL;
        float* bpack = NULL;
        int ok = 1;
        if (p->a_kind != PLAIT_A_PACKED)
            ok &= posix_memalign((void**)&apack, 64,
                                 sizeof(float) * PLAIT_MC * PLAIT_KC) == 0;
        if (p->b_kind != PLAIT_B_PACKED)
            ok &= posix_memalign((void**)&bpack, 64,
                                 sizeof(float) * (size_t)nc_block * PLAIT_KC) == 0;
        if (ok) {
            run(p, nc_block, tid, nt, apack, bpack);
        } else {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            status = 1;
        }
        free(apack);
        free(bpack);
    }
    return status;
}

/* --------------------------------------------------------------- conv2d */


/* A growing buffer per thread for the zero-padded input (never shrunk, so a model's
 * convolutions pay the page faults once). */
static __thread float* plait_pad_buf;
static __thread size_t plait_pad_cap;

int plait_conv2d(const plait_conv2d_desc* d, const float* x, const float* apacked,
                        const float* bias, const float* res, int relu, float* out) {
    const int64_t HP = d->H + d->PT + d->PB, WP = d->W + d->PL + d->PR;
    const float* img = x;
    plait_conv_geom g = {d->C, HP, WP, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW,
                         d->OH, d->OW};
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
    const int pointwise = d->KH == 1 && d->KW == 1 && d->SH == 1 && d->SW == 1 &&
                          !(d->PT | d->PL | d->PB | d->PR);
    if (pointwise) {
        p.b_kind = PLAIT_B_STRIDED;
        p.b = x;
        p.ldb_r = d->H * d->W;
        p.ldb_c = 1;
        p.b_bs = d->C * d->H * d->W;
        return plait_gemm(&p);
    }
    if (d->PT | d->PL | d->PB | d->PR) {
        size_t need = (size_t)(d->N * d->C * HP * WP);
        if (need > plait_pad_cap) {
            free(plait_pad_buf);
            plait_pad_buf = NULL;
            plait_pad_cap = 0;
            if (posix_memalign((void**)&plait_pad_buf, 64, need * sizeof(float))) {
                plait_pad_buf = NULL;
                return 1;
            }
            plait_pad_cap = need;
        }
        float* dst = plait_pad_buf;
        const int64_t planes = d->N * d->C;
#ifdef _OPENMP
#pragma omp parallel for if (planes * HP * WP > 262144)
#endif
        for (int64_t pl = 0; pl < planes; ++pl) {
            float* o = dst + pl * HP * WP;
            const float* s = x + pl * d->H * d->W;
            memset(o, 0, sizeof(float) * (size_t)(d->PT * WP));
            for (int64_t h = 0; h < d->H; ++h) {
                float* row = o + (d->PT + h) * WP;
                memset(row, 0, sizeof(float) * (size_t)d->PL);
                memcpy(row + d->PL, s + h * d->W, sizeof(float) * (size_t)d->W);
                memset(row + d->PL + d->W, 0, sizeof(float) * (size_t)d->PR);
            }
            memset(o + (d->PT + d->H) * WP, 0, sizeof(float) * (size_t)(d->PB * WP));
        }
        img = dst;
    }
    p.b_kind = PLAIT_B_CONV;
    p.b = img;
    p.conv = &g;
    p.b_bs = d->C * HP * WP;
    return plait_gemm(&p);
}
