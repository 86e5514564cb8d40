/* plait_tile.h: what the c target's float32 families share (plait_gemm.c,
 * plait_conv.c, plait_winograd.c, plait_attention.c): the block sizes, the 8-lane vector
 * types and shuffles (GCC vector extensions), the register-tile micro-kernel with its
 * fused epilogue, and a parallel loop over the library's thread pool.
 *
 * Everything here is static inline: every ISA copy of a family (plait_isa.h) compiles
 * it with its own instruction set.
 *
 * The micro-kernel computes a PLAIT_MR x PLAIT_NR (6 x 16) tile in registers: R rows of
 * A (a packed panel, or rows read in place) times 16 columns of a packed B panel,
 * accumulated over kc, stored with the epilogue of plait_gemm_problem (bias, residual,
 * relu, or a 2x2 max pooling) on the last K block.  A last panel of fewer than 6 rows
 * runs a 4- or 2-row tile. */
#ifndef PLAIT_TILE_H
#define PLAIT_TILE_H
#include <stdlib.h>
#include <string.h>
#include "plait_gemm.h"
#include "plait_threads.h"
#include "plait_exp_f32.h"
/* vectors of PLAIT_SL floats for GELU and attention's exp (plait_vexp.h): 16 lanes
 * (zmm) in the AVX-512 copies, 8 elsewhere */
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#define PLAIT_SL 16
#else
#define PLAIT_SL 8
#endif
#include "plait_vexp.h"

#define PLAIT_MR 6
#define PLAIT_NR 16
#define PLAIT_KC 384
#define PLAIT_MC 96
#ifndef PLAIT_NC
#define PLAIT_NC 512
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
 * instruction slots), as on 2-vCPU cloud machines. */
#if defined(__clang__)
#define PLAIT_UNROLL4 _Pragma("unroll 4")
#elif defined(__GNUC__)
#define PLAIT_UNROLL4 _Pragma("GCC unroll 4")
#else
#define PLAIT_UNROLL4
#endif

/* ------------------------------------------------- implicit im2col offsets */

/* The offsets in a convolution's input (plait_conv_geom) of k = k0 .. k0 + kc - 1 of
 * its im2col matrix (k = (channel, kernel row, kernel column)), into koff. */
static inline void plait_conv_koff(const plait_conv_geom* g, int64_t k0, int64_t kc,
                                   int64_t* koff) {
    const int64_t khw = g->KH * g->KW;
    for (int64_t k = 0; k < kc; ++k) {
        const int64_t kk = k0 + k, c = kk / khw, r = kk % khw;
        const int64_t q = (r % g->KW) * g->DW;   /* the tap's column offset */
        koff[k] = c * g->HP * g->RL + (r / g->KW) * g->DH * g->RL + (q % g->SW) * g->WPP +
                  q / g->SW;
    }
}

/* The offsets of output pixels start .. start + n - 1 (row-major over OH x OW), into
 * pix: the im2col matrix's element (k, pixel j) is at koff[k] + pix[j]. */
static inline void plait_conv_pixels(const plait_conv_geom* g, int64_t start, int64_t n,
                                     int64_t* pix) {
    int64_t oh = start / g->OW, ow = start % g->OW;
    for (int64_t j = 0; j < n; ++j) {
        pix[j] = oh * g->SH * g->RL + ow * g->CS;
        if (++ow == g->OW) { ow = 0; ++oh; }
    }
}

/* ------------------------------------------------------------ activation */

/* FN (plait_vexp.h) over the row's nr columns: whole vectors, then a masked tail */
#define PLAIT_ACT_ROW_SV(FN)                                  \
    do {                                                      \
        int64_t j = 0;                                        \
        for (; j + PLAIT_SL <= nr; j += PLAIT_SL) {           \
            plait_sv v = *(const plait_svu*)(row + j);        \
            FN(&v);                                           \
            *(plait_svu*)(row + j) = v;                       \
        }                                                     \
        if (j < nr) {                                         \
            plait_sv v;                                       \
            plait_sv_load_n(&v, row + j, nr - j);             \
            FN(&v);                                           \
            plait_sv_store_n(row + j, &v, nr - j);            \
        }                                                     \
    } while (0)

/* The activation of p (PLAIT_ACT_CLIP, _SILU, _GELU or _GELU_TANH) over an mr x nr tile
 * of C just stored (still in the L1 cache): one more pass over 6 x 32 floats instead of
 * a kernel of its own over the whole output.  Clip keeps NaN (like numpy's clip); SiLU is
 * plait_silu_sv of plait_vexp.h on vectors (a scalar loop over plait_exp_f32 is
 * vectorized by GCC only in the AVX-512 copies, where it is as fast: in the AVX2 copy it
 * stayed scalar, 3.3 against 0.75 ns per value, and MobileViT's SiLU-fused 1x1
 * convolutions ran 2.5-4x their unfused time); GELU is plait_gelu_sv (erf form: a rational erf with fused multiply-adds)
 * or plait_gelu_tanh_sv (tanh form: x sigmoid(2u)) on vectors, a row's last nr % PLAIT_SL
 * columns by masked loads and stores. */
static __attribute__((noinline)) void
plait_act_tile(float* restrict c, int64_t ldc, int64_t mr, int64_t nr,
               const plait_gemm_problem* p) {
    const float lo = p->act_lo, hi = p->act_hi;
    for (int64_t i = 0; i < mr; ++i) {
        float* restrict row = c + i * ldc;
        if (p->act == PLAIT_ACT_CLIP) {
            for (int64_t j = 0; j < nr; ++j) {
                float v = row[j];
                v = v < lo ? lo : v;
                row[j] = v > hi ? hi : v;
            }
        } else if (p->act == PLAIT_ACT_SILU) {
            PLAIT_ACT_ROW_SV(plait_silu_sv);
        } else if (p->act == PLAIT_ACT_GELU) {
            PLAIT_ACT_ROW_SV(plait_gelu_sv);
        } else {
            PLAIT_ACT_ROW_SV(plait_gelu_tanh_sv);
        }
    }
}
#undef PLAIT_ACT_ROW_SV

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

#if defined(PLAIT_ISA_BASELINE)
/* The baseline copies' tile: the 16 columns of a panel in passes of PLAIT_BW columns, so
 * that the accumulators fit the registers of the architecture's base: 6 x 8 in twelve
 * 4-lane vectors of SSE2's 16 registers on x86-64 (the 6 x 16 tile of 8-lane vectors
 * would take 24 and spill, and took the compiler 5 s per file), 6 x 4 otherwise (scalar
 * registers of aarch64 without Advanced SIMD).  Results go through a tile in memory to
 * the same epilogue as the other copies'. */
#if defined(__x86_64__) || defined(__i386__)
#define PLAIT_BW 8
#else
#define PLAIT_BW 4
#endif
typedef float plait_v4 __attribute__((vector_size(16)));
typedef float plait_v4u __attribute__((vector_size(16), aligned(4)));

/* The tile t ([MR][NR]) into C with the epilogue: one function for every tile of the
 * copy (inlined into each, the vectorized loops made the file slow to compile). */
static __attribute__((noinline)) void
store_tile_b(const float* t, float* restrict c, int64_t ldc, int64_t mr, int64_t nr,
             int first, int last, const plait_gemm_problem* p, int64_t i0, int64_t j0,
             const float* res) {
    if (last && p->pool) {
        for (int64_t i = 0; i < mr; ++i) {
            plait_v8 lo, hi;
            memcpy(&lo, t + i * PLAIT_NR, sizeof lo);
            memcpy(&hi, t + i * PLAIT_NR + 8, sizeof hi);
            store_row_pool(c + i * ldc, &lo, &hi, p, i0 + i);
        }
        return;
    }
    for (int64_t i = 0; i < mr; ++i) {
        float* row = c + i * ldc;
        for (int64_t j = 0; j < nr; ++j) {
            float v = t[i * PLAIT_NR + j];
            if (!first) v += row[j];
            if (last) {
                if (p->bias_kind == PLAIT_BIAS_ROW) v += p->bias[i0 + i];
                else if (p->bias_kind == PLAIT_BIAS_COL) v += p->bias[j0 + j];
                if (res) v += res[i * ldc + j];
                if (p->relu && !(v > 0.0f) && v == v) v = 0.0f;   /* as PLAIT_RELU */
            }
            row[j] = v;
        }
    }
}

static inline __attribute__((always_inline)) void
micro_kernel_r(const int R, int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
               const float* restrict b, float* restrict c,
               int64_t ldc, int64_t mr, int64_t nr, int first, int last,
               const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res) {
    float t[PLAIT_MR][PLAIT_NR] __attribute__((aligned(32)));
    const int64_t cols = last && p->pool ? PLAIT_NR : nr;   /* pooling reads the patch */
    for (int64_t h = 0; h < cols; h += PLAIT_BW) {
        plait_v4 acc[PLAIT_MR][PLAIT_BW / 4];
        for (int r = 0; r < PLAIT_MR; ++r)
            for (int q = 0; q < PLAIT_BW / 4; ++q) acc[r][q] = (plait_v4){0};
        const float* aa = a;
        const float* bb = b + h;
        for (int64_t k = 0; k < kc; ++k) {
            plait_v4 x[PLAIT_BW / 4];
            for (int q = 0; q < PLAIT_BW / 4; ++q) x[q] = *(const plait_v4u*)(bb + 4 * q);
            for (int r = 0; r < R; ++r) {
                float av = aa[r * a_rs];
                plait_v4 ar = {av, av, av, av};
                for (int q = 0; q < PLAIT_BW / 4; ++q) acc[r][q] += ar * x[q];
            }
            aa += a_ks;
            bb += PLAIT_NR;
        }
        for (int r = 0; r < R; ++r)
            for (int q = 0; q < PLAIT_BW / 4; ++q) *(plait_v4*)&t[r][h + 4 * q] = acc[r][q];
    }
    store_tile_b(&t[0][0], c, ldc, mr, nr, first, last, p, i0, j0, res);
}
#else
/* The register tile: R (6, 4 or 2, a constant once inlined) rows of A times 16 columns
 * of B, accumulated over kc, then stored (the first mr <= R rows, nr <= 16 columns).
 * PF: every 2^pf_shift steps of k, prefetch (into L2) the next line from pf on (see
 * micro_kernel_wide_pf). */
static inline __attribute__((always_inline)) void
micro_kernel_rp(const int R, int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
                const float* restrict b, float* restrict c,
                int64_t ldc, int64_t mr, int64_t nr, int first, int last,
                const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res,
                const int PF, const float* pf, int pf_shift) {
    /* A's element (r, k) is a[r * a_rs + k * a_ks]: a packed panel (1, MR) or rows of
     * a row-major matrix (lda, 1) */
    plait_v8 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};
    plait_v8 c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};
    const int64_t pf_mask = ((int64_t)1 << pf_shift) - 1;
    PLAIT_UNROLL4
    for (int64_t k = 0; k < kc; ++k) {
        if (PF && !(k & pf_mask)) __builtin_prefetch(pf + (k >> pf_shift) * PLAIT_NR, 0, 2);
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

static inline __attribute__((always_inline)) void
micro_kernel_r(const int R, int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
               const float* restrict b, float* restrict c,
               int64_t ldc, int64_t mr, int64_t nr, int first, int last,
               const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res) {
    micro_kernel_rp(R, kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res, 0,
                    NULL, 0);
}

#endif

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

/* ------------------------------------------------------------ wide tile */

/* The wide tile: mr (<= 6) rows times nr (<= PLAIT_TILE_N) columns of consecutive B
 * panels, b_ps floats apart (columns 16..31 are the second panel's).  Every caller walks
 * the columns PLAIT_TILE_N at a time through it (not the pooling epilogue, whose panels
 * are patches of the image).  With AVX-512 it is one 6 x 32 register tile in zmm
 * registers (12 accumulators, half the instructions of two 6 x 16 ymm tiles; the ymm
 * code compiled for AVX-512 takes ymm16-31 and ran 14% slower on Zen 4; with the
 * pooling epilogue 6 x 16, one patch); elsewhere the 6 x 16 tile of one panel.  Each output element is the same sum of products in the
 * same order either way. */
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#include <immintrin.h>
#define PLAIT_TILE_N 32   /* the columns of the wide tile: two panels */

/* 16 columns of one row (mask m: those that exist) into dst, accumulated onto it
 * unless first, with the epilogue when last (bcol: the row's column bias), clip
 * included: max(lo, v) then min(hi, v) compare as plait_act_tile's v < lo ? lo : v and
 * v > hi ? hi : v (a NaN stays, -0 stays), so the results are the same bits; SiLU and
 * GELU are left to plait_act_tile.  (A clip as a second pass over each stored tile cost 17% of a
 * 16 -> 96 1x1 convolution on 112 x 112, whose tile does 16 multiply-adds per output.) */
static inline __attribute__((always_inline)) void
store16_z(float* dst, __m512 v, __mmask16 m, int first, int last,
          const plait_gemm_problem* p, int64_t i, const float* bcol, const float* res) {
    if (!first) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, dst));
    if (last) {
        if (p->bias_kind == PLAIT_BIAS_ROW) v = _mm512_add_ps(v, _mm512_set1_ps(p->bias[i]));
        else if (p->bias_kind == PLAIT_BIAS_COL)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bcol));
        if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res));
        /* relu that keeps NaN (v > 0 or unordered) and turns -0 into 0, as PLAIT_RELU */
        if (p->relu)
            v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
        if (p->act == PLAIT_ACT_CLIP && !p->pool)
            v = _mm512_min_ps(_mm512_set1_ps(p->act_hi),
                              _mm512_max_ps(_mm512_set1_ps(p->act_lo), v));
    }
    _mm512_mask_storeu_ps(dst, m, v);
}

#define PLAIT_Z_ROW(r)                                                               \
    if (R > r) {                                                                      \
        __m512 ar = _mm512_set1_ps(a[(r) * a_rs]);                                   \
        acc[r][0] = _mm512_fmadd_ps(ar, x0, acc[r][0]);                               \
        if (W > 1) acc[r][1] = _mm512_fmadd_ps(ar, x1, acc[r][1]);                    \
    }

/* PF: every 2^pf_shift steps of k, prefetch (into L2) the next line from pf on (see
 * micro_kernel_wide_pf) */
static inline __attribute__((always_inline)) void
micro_kernel_z(const int R, const int W, int64_t kc, const float* restrict a, int64_t a_rs,
               int64_t a_ks, const float* restrict b, int64_t b_ps, float* restrict c,
               int64_t ldc, int64_t mr, int64_t nr, int first, int last,
               const plait_gemm_problem* p, int64_t i0, int64_t j0, const float* res,
               const int PF, const float* pf, int pf_shift) {
    __m512 acc[6][2];
    for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float* b1 = b + b_ps;
    const int64_t pf_mask = ((int64_t)1 << pf_shift) - 1;
    PLAIT_UNROLL4
    for (int64_t k = 0; k < kc; ++k) {
        if (PF && !(k & pf_mask)) __builtin_prefetch(pf + (k >> pf_shift) * PLAIT_NR, 0, 2);
        __m512 x0 = _mm512_loadu_ps(b);
        __m512 x1 = W > 1 ? _mm512_loadu_ps(b1) : x0;
        PLAIT_Z_ROW(0) PLAIT_Z_ROW(1) PLAIT_Z_ROW(2) PLAIT_Z_ROW(3) PLAIT_Z_ROW(4)
        PLAIT_Z_ROW(5)
        a += a_ks;
        b += PLAIT_NR;
        b1 += PLAIT_NR;
    }
    if (last && p->pool) {
        /* each panel is a 2 x 8 patch of the image (lanes 0-7, 8-15): its 4 pooled
         * outputs per row (one panel per tile: the caller steps 16 columns) */
#define PLAIT_Z_POOL(r)                                                              \
        if (R > r && mr > r) {                                                        \
            plait_v8 lo = (plait_v8)_mm512_castps512_ps256(acc[r][0]);                \
            plait_v8 hi = (plait_v8)_mm512_extractf32x8_ps(acc[r][0], 1);             \
            store_row_pool(c + (r) * ldc, &lo, &hi, p, i0 + (r));                     \
        }
        PLAIT_Z_POOL(0) PLAIT_Z_POOL(1) PLAIT_Z_POOL(2) PLAIT_Z_POOL(3) PLAIT_Z_POOL(4)
        PLAIT_Z_POOL(5)
#undef PLAIT_Z_POOL
        return;
    }
    const __mmask16 m0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? (__mmask16)0xFFFF
                         : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : (__mmask16)0;
    const float* bcol = last && p->bias_kind == PLAIT_BIAS_COL ? p->bias + j0 : NULL;
#define PLAIT_Z_STORE(r)                                                             \
    if (R > r && mr > r) {                                                            \
        const float* rr = res ? res + (r) * ldc : NULL;                               \
        store16_z(c + (r) * ldc, acc[r][0], m0, first, last, p, i0 + (r), bcol, rr);  \
        if (W > 1)                                                                    \
            store16_z(c + (r) * ldc + PLAIT_NR, acc[r][1], m1, first, last, p, i0 + (r), \
                      bcol ? bcol + PLAIT_NR : NULL, rr ? rr + PLAIT_NR : NULL);      \
    }
    PLAIT_Z_STORE(0) PLAIT_Z_STORE(1) PLAIT_Z_STORE(2) PLAIT_Z_STORE(3) PLAIT_Z_STORE(4)
    PLAIT_Z_STORE(5)
}
#undef PLAIT_Z_ROW
#undef PLAIT_Z_STORE

static __attribute__((noinline)) void
micro_kernel_wide(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
                  const float* restrict b, int64_t b_ps, float* restrict c, int64_t ldc,
                  int64_t mr, int64_t nr, int first, int last, const plait_gemm_problem* p,
                  int64_t i0, int64_t j0, const float* res) {
#define PLAIT_Z(R, W) \
    micro_kernel_z(R, W, kc, a, a_rs, a_ks, b, b_ps, c, ldc, mr, nr, first, last, p, i0, j0, \
                   res, 0, NULL, 0)
    if (nr > PLAIT_NR) {
        if (mr > 4) PLAIT_Z(6, 2);
        else if (mr > 2) PLAIT_Z(4, 2);
        else PLAIT_Z(2, 2);
    } else {
        if (mr > 4) PLAIT_Z(6, 1);
        else if (mr > 2) PLAIT_Z(4, 1);
        else PLAIT_Z(2, 1);
    }
#undef PLAIT_Z
    if (last && p->act && p->act != PLAIT_ACT_CLIP && !p->pool)   /* SiLU, GELU */
        plait_act_tile(c, ldc, mr, nr, p);
}

/* The same, prefetching into L2, every 2^pf_shift steps of k, the next line from pf on:
 * a slice of the weights that a later tile reads (plait_gemm.c), so that weights
 * packed at compile time stream in at an even rate over the tiles that reuse the
 * current ones instead of in one burst when a tile first reads them.  Full 6-row
 * tiles only (the rest go through micro_kernel_wide). */
static __attribute__((noinline)) void
micro_kernel_wide_pf(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
                     const float* restrict b, int64_t b_ps, float* restrict c, int64_t ldc,
                     int64_t mr, int64_t nr, int first, int last, const plait_gemm_problem* p,
                     int64_t i0, int64_t j0, const float* res, const float* pf, int pf_shift) {
    if (nr > PLAIT_NR)
        micro_kernel_z(6, 2, kc, a, a_rs, a_ks, b, b_ps, c, ldc, mr, nr, first, last, p, i0,
                       j0, res, 1, pf, pf_shift);
    else
        micro_kernel_z(6, 1, kc, a, a_rs, a_ks, b, b_ps, c, ldc, mr, nr, first, last, p, i0,
                       j0, res, 1, pf, pf_shift);
    if (last && p->act && p->act != PLAIT_ACT_CLIP && !p->pool)   /* SiLU, GELU */
        plait_act_tile(c, ldc, mr, nr, p);
}
#else
#define PLAIT_TILE_N 16
/* one panel per tile: the 6 x 16 tile (two calls for two panels would inline the tile
 * twice at every call site: twice the compile time of the baseline copies) */
static inline __attribute__((always_inline)) void
micro_kernel_wide(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
                  const float* restrict b, int64_t b_ps, float* restrict c, int64_t ldc,
                  int64_t mr, int64_t nr, int first, int last, const plait_gemm_problem* p,
                  int64_t i0, int64_t j0, const float* res) {
    (void)b_ps;
    micro_kernel(kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res);
    if (last && p->act && !p->pool) plait_act_tile(c, ldc, mr, nr, p);
}

/* The 6 x 16 tile prefetching as the AVX-512 one does (not in the baseline copies,
 * whose tile goes through memory) */
static __attribute__((noinline)) void
micro_kernel_wide_pf(int64_t kc, const float* restrict a, int64_t a_rs, int64_t a_ks,
                     const float* restrict b, int64_t b_ps, float* restrict c, int64_t ldc,
                     int64_t mr, int64_t nr, int first, int last, const plait_gemm_problem* p,
                     int64_t i0, int64_t j0, const float* res, const float* pf, int pf_shift) {
    (void)b_ps;
#if defined(PLAIT_ISA_BASELINE)
    (void)pf;
    (void)pf_shift;
    micro_kernel(kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res);
#else
    micro_kernel_rp(6, kc, a, a_rs, a_ks, b, c, ldc, mr, nr, first, last, p, i0, j0, res, 1,
                    pf, pf_shift);
#endif
    if (last && p->act && !p->pool) plait_act_tile(c, ldc, mr, nr, p);
}
#endif

/* ------------------------------------------------------- parallel regions */

/* Every parallel part of the library goes through the library's thread pool
 * (plait_threads.h, shared with the generated kernels): fn(arg) runs on up to nthreads
 * threads, each taking its work from a counter in arg, so any thread may do any share. */
/* body(ctx, i) for i in [0, n), the indices taken one by one from both ends (the
 * caller's from the front: plait_take_job). */
typedef struct {
    void (*body)(void* ctx, int64_t i);
    void* ctx;
    int64_t n, ends;
} plait_for_task;

static inline void plait_for_run(void* arg) {
    plait_for_task* t = (plait_for_task*)arg;
    for (int64_t i; (i = plait_take_job(&t->ends, t->n)) >= 0;) t->body(t->ctx, i);
}

static inline void plait_parallel_for(int64_t n, void (*body)(void*, int64_t), void* ctx,
                                      int nthreads) {
    plait_for_task t = {body, ctx, n, 0};
    plait_parallel(plait_for_run, &t, n < nthreads ? (int)n : nthreads);
}

/* Packing and transform buffers come from per-thread scratch buffers that only grow
 * (plait_scratch in plait_threads.h): a fresh multi-hundred-kilobyte allocation would
 * cost its page faults (or an mmap/munmap pair) on every call.  Slots: 0 A panels,
 * 1 B panels or V, 2 products (or a whole packed operand), 3 padded input, 4 the
 * transposed output of plait_conv2d_pixel_rows. */
#endif
