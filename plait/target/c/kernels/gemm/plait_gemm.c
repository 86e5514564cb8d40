/* plait_gemm.c: the c target's matrix product (float32), a kernel family of
 * plait_isa.h (compiled for every ISA of the machine, one copy chosen at load time).
 *
 * One blocked matrix product (after BLIS: Goto's algorithm) serves matmul, linear and
 * conv2d (plait_conv.c):  C[M,N] = epilogue(A[M,K] @ B[K,N]).
 *
 *  - A is either pre-packed at compile time (the weights of conv2d: panels of PLAIT_MR
 *    rows, [ceil(M/MR)][K][MR], zero-padded) or read from a strided matrix and packed
 *    here, block by block.
 *  - B is either pre-packed at compile time (the weights of linear/matmul:
 *    [ceil(N/NR)][K][NR]), a strided matrix, or the implicit im2col matrix of a
 *    convolution (packed straight from the zero-padded input image: no im2col buffer).
 *  - The epilogue, applied once per output element: + bias (per row or per column),
 *    + residual (a matrix shaped like C), then relu, then an activation (clip, SiLU:
 *    plait_act_tile, on each tile as it is stored).
 *
 * The register tile (plait_tile.h) is PLAIT_MR x PLAIT_NR (6 x 16).  Threads (the pool
 * of plait_threads.h) split the N dimension (and the batch) into blocks, or the M
 * dimension when there are few column blocks and A is the larger operand (see
 * plait_gemm); each job packs its own B block. */
#include "plait_isa.h"
#include "plait_tile.h"

/* products of fewer multiply-adds run on one thread (about 6 us of work: waking a
 * second one costs about as much as it saves below this) */
#define PLAIT_GEMM_MIN_PARALLEL (1 << 18)

/* A product with few column blocks whose jobs pack B splits its rows alone between the
 * threads when A has more than this many times B's elements (see plait_gemm) */
#define PLAIT_ROWS_ONLY_RATIO 1

/* the shortest sum split between two threads (see plait_gemm) */
#define PLAIT_SPLIT_K_MIN 384

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

/* Columns j0 .. j0 + nc - 1, rows k0 .. k0 + kc - 1 of a strided B into panels of NR
 * columns ([panel][kc][NR], zero columns past nc), ps floats from one panel to the
 * next. */
static inline void pack_b_strided(const plait_gemm_problem* p, int64_t bi, int64_t j0,
                                  int64_t nc, int64_t k0, int64_t kc, float* dst,
                                  int64_t ps) {
    const float* b = p->b + bi * p->b_bs;
    if (p->ldb_c == 1) {
        /* row by row: each row's nc columns are one run of memory, which the hardware
         * prefetchers follow; panel by panel the copy read one line of each of kc rows
         * a whole plane apart (a 1x1 convolution's input: 256 rows of 12 KB for ResNet's
         * 256 -> 64 on 56 x 56), every line a miss inside a model */
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = b + (k0 + k) * p->ldb_r + j0;
            float* d = dst + k * PLAIT_NR;
            int64_t jr = 0;
            for (; jr + PLAIT_NR <= nc; jr += PLAIT_NR, d += ps) {
                *(plait_v8u*)d = *(const plait_v8u*)(src + jr);
                *(plait_v8u*)(d + 8) = *(const plait_v8u*)(src + jr + 8);
            }
            if (jr < nc) {
                int64_t j = 0;
                for (; j < nc - jr; ++j) d[j] = src[jr + j];
                for (; j < PLAIT_NR; ++j) d[j] = 0.0f;
            }
        }
        return;
    }
    for (int64_t jr = 0; jr < nc; jr += PLAIT_NR) {
        int64_t nr = nc - jr < PLAIT_NR ? nc - jr : PLAIT_NR;
        float* d = dst + jr / PLAIT_NR * ps;
        for (int64_t k = 0; k < kc; ++k, d += PLAIT_NR) {
            const float* src = b + (k0 + k) * p->ldb_r + (j0 + jr) * p->ldb_c;
            int64_t j = 0;
            for (; j < nr; ++j) d[j] = src[j * p->ldb_c];
            for (; j < PLAIT_NR; ++j) d[j] = 0.0f;
        }
    }
}

#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
/* A panel of nr (<= 16) pixels that are not one run of neighbours, with AVX-512: as at
 * most 4 runs of neighbouring pixels (a panel that wraps around the end of an output
 * row, on images narrower than 16 pixels, or 16 pixels on 2-3 rows), one masked load
 * per run and k, the runs merged into one vector; else (pixels a stride apart: a
 * strided 1x1 convolution read in place) one gather per k.  A masked-out lane is never
 * read.  The element-by-element copy cost a quarter of ResNet-50's 256 -> 256 3x3
 * stride-2 layer on 28 x 28 (1 thread).  0 when the pixels' offsets do not fit the
 * gather's 32-bit indices (the caller copies element by element). */
static inline int pack_b_conv_z(const float* img, const int64_t* koff, int64_t kc,
                                const int64_t* pix, int64_t nr, float* dst) {
    int64_t start[4];
    __mmask16 mask[4];
    int runs = 0;
    for (int64_t j = 0; j < nr && runs <= 4;) {
        int64_t e = j + 1;
        while (e < nr && pix[e] == pix[e - 1] + 1) ++e;
        if (runs < 4) {
            start[runs] = pix[j] - j;   /* lane j reads start + j */
            mask[runs] = (__mmask16)(((1u << e) - 1) & ~((1u << j) - 1));
        }
        ++runs;
        j = e;
    }
    if (runs <= 4) {
        for (int64_t k = 0; k < kc; ++k, dst += PLAIT_NR) {
            const float* src = img + koff[k];
            __m512 v = _mm512_maskz_loadu_ps(mask[0], src + start[0]);
            for (int r = 1; r < runs; ++r) v = _mm512_mask_loadu_ps(v, mask[r], src + start[r]);
            _mm512_storeu_ps(dst, v);
        }
        return 1;
    }
    int32_t rel[PLAIT_NR] = {0};
    for (int64_t j = 0; j < nr; ++j) {
        if (pix[j] - pix[0] > INT32_MAX || pix[j] < pix[0]) return 0;
        rel[j] = (int32_t)(pix[j] - pix[0]);
    }
    const __m512i idx = _mm512_loadu_si512(rel);
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    for (int64_t k = 0; k < kc; ++k, dst += PLAIT_NR)
        _mm512_storeu_ps(dst, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx,
                                                       img + koff[k] + pix[0], 4));
    return 1;
}
#endif

/* B[k][j] of a convolution: k = (c, kh, kw), j = (oh, ow); the input is zero-padded,
 * so every read is in bounds.  The offsets of the block's k (channel, kernel tap) and
 * of each panel's NR pixels are computed once, so the copy itself has no divisions;
 * NR pixels of one output row at stride 1 are one contiguous copy. */
static inline int pack_b_conv(const plait_gemm_problem* p, int64_t bi, int64_t j0,
                              int64_t nc, int64_t k0, int64_t kc, float* dst) {
    const plait_conv_geom* g = p->conv;
    const float* img = p->b + bi * p->b_bs;
    int64_t koff[PLAIT_KC];
    int64_t pix0 = 0;   /* the offset of the band's first row */
    plait_conv_geom gb;
    if (p->band) {
        /* the padded rows r0 .. r1 that output rows oh0 .. oh1 read, channels c0 .. c1 */
        const int64_t khw = g->KH * g->KW, c0 = k0 / khw, c1 = (k0 + kc - 1) / khw;
        const int64_t r0 = j0 / g->OW * g->SH;
        const int64_t r1 = (j0 + nc - 1) / g->OW * g->SH + (g->KH - 1) * g->DH;
        float* band = plait_scratch(3, (size_t)((c1 - c0 + 1) * (r1 - r0 + 1) * g->RL));
        if (!band) return 1;
        p->band->fill(p->band, bi, c0, c1, r0, r1, band);
        gb = *g;
        gb.HP = r1 - r0 + 1;
        g = &gb;
        img = band;
        pix0 = r0 * g->RL;
        plait_conv_koff(g, k0 - c0 * khw, kc, koff);
    } else {
        plait_conv_koff(g, k0, kc, koff);
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
            plait_conv_pixels(g, jstart, nr, pix);
            for (int64_t j = 0; j < nr; ++j) pix[j] -= pix0;
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
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
        if (pack_b_conv_z(img, koff, kc, pix, nr, dst)) {
            dst += kc * PLAIT_NR;
            continue;
        }
#endif
        for (int64_t k = 0; k < kc; ++k) {
            const float* src = img + koff[k];
            int64_t j = 0;
            for (; j < nr; ++j) dst[j] = src[pix[j]];
            for (; j < PLAIT_NR; ++j) dst[j] = 0.0f;
            dst += PLAIT_NR;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ driver */

/* The block sizes of p: its tuned point's (plait_gemm_problem.kc, .mc) where given, else
 * PLAIT_KC (the sum in equal blocks of at most that; one block when pooling) and
 * PLAIT_MC rows */
static inline int64_t gemm_kc(const plait_gemm_problem* p) {
    return p->kc > 0 && p->kc < PLAIT_KC && !p->pool ? p->kc : PLAIT_KC;
}

static inline int64_t gemm_mc(const plait_gemm_problem* p) {
    return p->mc > 0 ? (p->mc + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR : PLAIT_MC;
}

/* The part of the product that one thread computes: (batch, N-block, M-block) jobs (or
 * (batch, M-block, N-block): rows_outer), the caller's from the first, the workers' from
 * the last (plait_take_job: the columns, the pixels of a convolution, or the rows, its
 * output channels, that the same thread wrote or read in the layer before). */
static int
gemm_thread(const plait_gemm_problem* pg, int64_t nc_block, int64_t mc_rows, int rows_outer,
            int64_t* next, float* apack, float* bpack) {
    const int64_t N = pg->N, K = pg->K;
    const int64_t nblocks = (N + nc_block - 1) / nc_block;
    const int64_t mblocks = (pg->M + mc_rows - 1) / mc_rows;
    const int64_t jobs = pg->batch * nblocks * mblocks;
    for (int64_t job; (job = plait_take_job(next, jobs)) >= 0;) {
        const int64_t bi = job / (nblocks * mblocks), in = job % (nblocks * mblocks);
        /* a grouped convolution: this group's weights and bias (plait_gemm_problem.groups) */
        plait_gemm_problem grp;
        const plait_gemm_problem* p = pg;
        if (pg->groups > 1) {
            grp = *pg;
            grp.a = pg->a + bi % pg->groups * pg->a_bs;
            grp.a_bs = 0;
            if (pg->bias) grp.bias = pg->bias + bi % pg->groups * pg->bias_bs;
            p = &grp;
        }
        const int64_t j0 = (rows_outer ? in % nblocks : in / mblocks) * nc_block;
        const int64_t m0 = (rows_outer ? in / nblocks : in % mblocks) * mc_rows;
        const int64_t M = p->M - m0 < mc_rows ? p->M : m0 + mc_rows;   /* rows m0..M-1 */
        int64_t nc = N - j0 < nc_block ? N - j0 : nc_block;
        float* cb = p->c + bi * p->c_bs;
        const float* rb = p->res ? p->res + bi * p->c_bs : NULL;
        /* K in equal blocks of at most PLAIT_KC (a short last block would pay the
         * tile's load and store for little work; gemm_kc) */
        const int64_t Klo = p->k_hi ? p->k_lo : 0, Khi = p->k_hi ? p->k_hi : K;
        const int64_t kcap = gemm_kc(p), MC = gemm_mc(p);
        const int64_t kblocks = (Khi - Klo + kcap - 1) / kcap;
        const int64_t kc_block = (Khi - Klo + kblocks - 1) / kblocks;
        for (int64_t k0 = Klo; k0 < Khi; k0 += kc_block) {
            int64_t kc = Khi - k0 < kc_block ? Khi - k0 : kc_block;
            const float* bp;
            int64_t bpanel_stride;
            if (p->b_kind == PLAIT_B_PACKED) {
                bp = p->b + bi * p->b_bs + (j0 / PLAIT_NR) * K * PLAIT_NR + k0 * PLAIT_NR;
                bpanel_stride = K * PLAIT_NR;
            } else {
                if (p->b_kind == PLAIT_B_CONV) {
                    if (pack_b_conv(p, bi, j0, nc, k0, kc, bpack)) return 1;
                } else pack_b_strided(p, bi, j0, nc, k0, kc, bpack, kc * PLAIT_NR);
                bp = bpack;
                bpanel_stride = kc * PLAIT_NR;
            }
            int first = k0 == Klo, last = k0 + kc == Khi;
            for (int64_t i0 = m0; i0 < M; i0 += MC) {
                int64_t mc = M - i0 < MC ? M - i0 : MC;
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
                if (p->a_kind == PLAIT_A_PACKED && p->b_kind != PLAIT_B_PACKED && !p->pool
                    && K <= 256) {
                    /* a convolution with a short sum (weights packed at compile time, the
                     * block's B packed here, in the L2 cache): a row panel at a time,
                     * across the block's columns, so the tiles' output and residual rows
                     * are read and written as 6 runs of memory each, which the hardware
                     * prefetchers follow (column by column, down the 96 rows of the block,
                     * they were 96 runs of each: inside a model every line a miss, and
                     * ResNet-50's 64 -> 256 1x1 with its residual on 56 x 56 ran 1.6x its
                     * time alone; with a long sum, K 2304, the tiles' B from L2 cost more
                     * than that saves) */
                    for (int64_t ir = 0; ir < mc; ir += PLAIT_MR) {
                        const int64_t mr = mc - ir < PLAIT_MR ? mc - ir : PLAIT_MR;
                        const int64_t i = i0 + ir;
                        const float* apanel = ap + (ir / PLAIT_MR) * apanel_stride;
                        for (int64_t jr = 0; jr < nc; jr += PLAIT_TILE_N) {
                            const int64_t nr = nc - jr < PLAIT_TILE_N ? nc - jr : PLAIT_TILE_N;
                            const int64_t j = j0 + jr;
                            micro_kernel_wide(kc, apanel, 1, PLAIT_MR,
                                              bp + (jr / PLAIT_NR) * bpanel_stride,
                                              bpanel_stride, cb + i * p->ldc + j, p->ldc, mr,
                                              nr, first, last, p, i, j,
                                              rb ? rb + i * p->ldc + j : NULL);
                        }
                    }
                    continue;
                }
                /* columns PLAIT_TILE_N at a time, the wide tile (16, one patch, when
                 * pooling) */
                const int64_t step = p->pool ? PLAIT_NR : PLAIT_TILE_N;
                for (int64_t jr = 0; jr < nc; jr += step) {
                    int64_t nr = nc - jr < step ? nc - jr : step;
                    const float* bpj = bp + (jr / PLAIT_NR) * bpanel_stride;
                    /* weights packed at compile time (B_PACKED) are read from memory by
                     * the first row panel of a tile and from the caches by the rest: the
                     * full row panels prefetch the next tile (the next columns, or the
                     * next K block's first), a slice each (see micro_kernel_wide_pf) */
                    const float* nxt = NULL;
                    int64_t nxt_lines = 0, nxt_panels = 0;
                    if (p->b_kind == PLAIT_B_PACKED && !p->pool) {
                        if (jr + step < nc) {
                            nxt = bpj + (step / PLAIT_NR) * bpanel_stride;
                            nxt_lines = kc;
                            nxt_panels = (nc - jr - step + PLAIT_NR - 1) / PLAIT_NR;
                        } else if (k0 + kc < Khi && i0 + MC >= M) {
                            nxt = bp + kc * PLAIT_NR;
                            nxt_lines = Khi - k0 - kc < kc_block ? Khi - k0 - kc : kc_block;
                            nxt_panels = (nc + PLAIT_NR - 1) / PLAIT_NR;
                        }
                        if (nxt_panels > step / PLAIT_NR) nxt_panels = step / PLAIT_NR;
                    }
                    const int64_t full_panels = mc / PLAIT_MR;
                    int64_t slice = 0;
                    int pf_shift = 0;
                    if (nxt && full_panels > 0) {
                        slice = (nxt_panels * nxt_lines + full_panels - 1) / full_panels;
                        while (pf_shift < 6 && (kc >> (pf_shift + 1)) >= slice) ++pf_shift;
                    }
                    for (int64_t ir = 0; ir < mc; ir += PLAIT_MR) {
                        int64_t mr = mc - ir < PLAIT_MR ? mc - ir : PLAIT_MR;
                        const float* pf = NULL;
                        if (slice && mr == PLAIT_MR) {   /* this panel's slice of lines */
                            const int64_t l = ir / PLAIT_MR * slice;
                            pf = nxt + (l / nxt_lines) * bpanel_stride + (l % nxt_lines) * PLAIT_NR;
                        }
                        int64_t i = i0 + ir, j = j0 + jr;
                        const float* rij = rb ? rb + i * p->ldc + j : NULL;
                        const float* apanel = ap + (ir / PLAIT_MR) * apanel_stride;
                        if (p->pool) {   /* the patch's 4 pooled outputs (A is packed) */
                            int64_t g16 = j / PLAIT_NR, tpr = p->conv->OW / 8;
                            int64_t coff = (g16 / tpr) * (p->conv->OW / 2) + 4 * (g16 % tpr);
                            micro_kernel_wide(kc, apanel, 1, PLAIT_MR, bpj, bpanel_stride,
                                              cb + i * p->ldc + coff, p->ldc, mr, nr, first,
                                              last, p, i, j, rij);
                        } else if (direct && mr == PLAIT_MR && pf) {
                            micro_kernel_wide_pf(kc, arows + ir * p->lda_r, p->lda_r, 1, bpj,
                                                 bpanel_stride, cb + i * p->ldc + j, p->ldc,
                                                 mr, nr, first, last, p, i, j, rij, pf,
                                                 pf_shift);
                        } else if (direct && mr == PLAIT_MR) {
                            micro_kernel_wide(kc, arows + ir * p->lda_r, p->lda_r, 1, bpj,
                                              bpanel_stride, cb + i * p->ldc + j, p->ldc, mr,
                                              nr, first, last, p, i, j, rij);
                        } else if (pf) {
                            micro_kernel_wide_pf(kc, apanel, 1, PLAIT_MR, bpj, bpanel_stride,
                                                 cb + i * p->ldc + j, p->ldc, mr, nr, first,
                                                 last, p, i, j, rij, pf, pf_shift);
                        } else {
                            micro_kernel_wide(kc, apanel, 1, PLAIT_MR, bpj, bpanel_stride,
                                              cb + i * p->ldc + j, p->ldc, mr, nr, first, last,
                                              p, i, j, rij);
                        }
                    }
                }
            }
        }
    }
    return 0;
}

typedef struct {
    const plait_gemm_problem* p;
    int64_t nc_block, mc_rows;
    int rows_outer;               /* jobs row block by row block (else column blocks) */
    int64_t next;                 /* the jobs taken (see plait_take_job) */
    int status;                   /* 1: a thread was out of memory */
} plait_gemm_task;

static void plait_gemm_task_run(void* arg) {
    plait_gemm_task* t = (plait_gemm_task*)arg;
    const plait_gemm_problem* p = t->p;
    float* apack = NULL;
    float* bpack = NULL;
    int ok = 1;
    if (p->a_kind != PLAIT_A_PACKED) {
        apack = plait_scratch(0, (size_t)gemm_mc(p) * PLAIT_KC);
        ok &= apack != NULL;
    }
    if (p->b_kind != PLAIT_B_PACKED) {
        bpack = plait_scratch(1, (size_t)t->nc_block * PLAIT_KC);
        ok &= bpack != NULL;
    }
    if (!ok || gemm_thread(p, t->nc_block, t->mc_rows, t->rows_outer, &t->next, apack, bpack))
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
}

PLAIT_ISA_HIDDEN int PLAIT_ISA_FN(plait_gemm)(const plait_gemm_problem* p);

/* The sum split in two (see plait_gemm): each part's product (k_lo .. k_hi, no epilogue)
 * into a buffer of its own, the parts taken from both ends (the caller the first half of
 * the input channels: those its depthwise layer wrote), then the two added with the
 * epilogue by blocks of rows.  Two parallel calls. */

typedef struct {
    const plait_gemm_problem* p;
    float* part;
    int64_t ends;
    int status;
} plait_ks_task;

static void ks_run(void* arg) {
    plait_ks_task* t = (plait_ks_task*)arg;
    const plait_gemm_problem* p = t->p;
    for (int64_t j; (j = plait_take_job(&t->ends, 2)) >= 0;) {
        plait_gemm_problem sub = *p;
        const int64_t half = (p->K / 2 + 7) / 8 * 8;
        sub.k_lo = j ? half : 0;
        sub.k_hi = j ? p->K : half;
        sub.c = t->part + j * p->M * p->N;
        sub.ldc = p->N;
        sub.bias_kind = PLAIT_BIAS_NONE;
        sub.res = NULL;
        sub.relu = 0;
        sub.act = 0;
        sub.max_threads = 1;
        if (PLAIT_ISA_FN(plait_gemm)(&sub)) __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
    }
}

typedef struct {
    const plait_gemm_problem* p;
    const float* part;
    int64_t rows;
} plait_ksr_task;

static void ks_reduce(void* arg, int64_t job) {
    const plait_ksr_task* t = (const plait_ksr_task*)arg;
    const plait_gemm_problem* p = t->p;
    const int64_t M = p->M, N = p->N, i0 = job * t->rows;
    const int64_t i1 = i0 + t->rows < M ? i0 + t->rows : M;
    for (int64_t i = i0; i < i1; ++i) {
        const float* a = t->part + i * N;
        const float* b = t->part + (M + i) * N;
        const float* r = p->res ? p->res + i * p->ldc : NULL;
        float* c = p->c + i * p->ldc;
        const float bi = p->bias_kind == PLAIT_BIAS_ROW ? p->bias[i] : 0.0f;
        for (int64_t j = 0; j < N; ++j) {
            float v = a[j] + b[j];
            if (p->bias_kind == PLAIT_BIAS_ROW) v += bi;
            else if (p->bias_kind == PLAIT_BIAS_COL) v += p->bias[j];
            if (r) v += r[j];
            if (p->relu && !(v > 0.0f) && v == v) v = 0.0f;
            c[j] = v;
        }
    }
    if (p->act && i1 > i0) plait_act_tile(p->c + i0 * p->ldc, p->ldc, i1 - i0, N, p);
}

/* The partial products live in this thread's scratch slot 2.  The sub-products use slots
 * 0 and 1 (bands 3); plait_conv.c's pixels-as-rows paths also hold slot 2 across a call of
 * plait_gemm, but with a packed B or one thread, which this split never takes: a caller
 * that holds slot 2 and calls it with a strided B on several threads must change slots. */
static int gemm_split_k(const plait_gemm_problem* p) {
    float* part = plait_scratch(2, (size_t)(2 * p->M * p->N));
    if (!part) return 1;
    plait_ks_task t = {p, part, 0, 0};
    plait_parallel(ks_run, &t, 2);
    if (t.status) return 1;
    plait_ksr_task r = {p, part, (p->M + 1) / 2};
    plait_parallel_for(2, ks_reduce, &r, 2);
    return 0;
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_gemm)(const plait_gemm_problem* p) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return 0;
    const int64_t work = p->M * p->N * (p->K > 0 ? p->K : 1) * p->batch;
    int nthreads = plait_max_threads();
    if (work < PLAIT_GEMM_MIN_PARALLEL) nthreads = 1;
    if (p->max_threads > 0 && nthreads > p->max_threads) nthreads = p->max_threads;
    /* N blocks of at most PLAIT_NC columns (a multiple of NR), as many as it takes to
     * give every thread the same amount of work */
    int64_t nblocks = (p->N + PLAIT_NC - 1) / PLAIT_NC;
    if (nthreads > 1 && p->batch * nblocks < 4 * nthreads) {
        /* blocks of at least 2 panels (the AVX-512 wide tile), up to about 8 jobs per
         * thread (taken dynamically), of a size that finishes first: the fewest panels
         * on the busiest thread (49 panels on 2 threads: 10 blocks of 5, 25 on each, not
         * 7 of 7, 28 on one; 13 panels: 7 + 6, not 4 + 4 + 4 + 1) */
        const int64_t panels = (p->N + PLAIT_NR - 1) / PLAIT_NR;
        const int64_t want = (8 * nthreads + p->batch - 1) / p->batch;
        int64_t least = (panels + want - 1) / want;
        if (least < 2) least = 2;
        int64_t best = 0, best_span = 0, ppb_of[64], span_of[64], n = 0;
        for (int64_t ppb = least; ppb <= panels && n < 64; ++ppb) {
            const int64_t blocks = (panels + ppb - 1) / ppb;
            const int64_t span = (p->batch * blocks + nthreads - 1) / nthreads * ppb;
            ppb_of[n] = ppb;
            span_of[n++] = span;
            if (!best || span < best_span) { best = ppb; best_span = span; }
        }
        /* of the sizes within 5% of the best, the one nearest 8 jobs per thread: the
         * two threads of a 2-vCPU machine run at different speeds from one call to the
         * next (in ELECTRA's 128 x 256 x 256 products the caller's two jobs took 22%
         * longer than the worker's two in one run, 11% less in the next), and a thread
         * that finishes first finds more, smaller jobs left to take (at 4 per thread,
         * 4-15% of the two threads' time in the products of ELECTRA and Whisper's
         * encoder went idle waiting for the other's last job) */
        const int64_t aim = (8 * nthreads + p->batch - 1) / p->batch;
        int64_t ppb = best ? best : least, off = -1;
        for (int64_t i = 0; i < n; ++i) {
            const int64_t blocks = (panels + ppb_of[i] - 1) / ppb_of[i];
            const int64_t d = blocks > aim ? blocks - aim : aim - blocks;
            if (20 * span_of[i] <= 21 * best_span && (off < 0 || d < off)) {
                ppb = ppb_of[i];
                off = d;
            }
        }
        nblocks = (panels + ppb - 1) / ppb;
    }
    int64_t nc_block = (p->N + nblocks - 1) / nblocks;
    nc_block = (nc_block + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
    nblocks = (p->N + nc_block - 1) / nc_block;
    /* Few column blocks for the threads (a product on a 7 x 7 or 14 x 14 image, a narrow
     * output) when the jobs pack B themselves (a 1x1 convolution's input planes, an
     * im2col matrix): every thread would read either all of A or all of B.  The columns
     * alone are split when A (the weights) is at most PLAIT_ROWS_ONLY_RATIO times B and
     * there is a column block per thread, the rows alone otherwise: each thread then
     * packs all of B for itself, but reads only its share of A, and no thread waits for
     * a B that another packs (splitting both, with B packed once for all threads by a
     * parallel call of its own, made every thread wait for that copy and read half of
     * A or B from the other core's cache).  The rows a thread computes are the output
     * channels that the same thread reads in a depthwise layer after it (both take
     * their jobs from both ends).  With B packed at compile time (linear, matmul) the rows
     * are split too when there are fewer column blocks than twice the threads, in
     * blocks of at least 2 panels (with the pooling epilogue, when there are fewer column
     * blocks than threads). */
    int64_t mc_rows = p->M;
    int rows_outer = 0;
    if (nthreads > 1 && p->batch * nblocks < 2 * nthreads) {
        const int64_t most = p->M / (2 * PLAIT_MR);
        int64_t mblocks = 1;
        if (p->b_kind == PLAIT_B_PACKED || (p->pool && p->batch * nblocks < nthreads)) {
            const int64_t want = (2 * nthreads + p->batch * nblocks - 1) / (p->batch * nblocks);
            mblocks = want < most ? want : most;
        } else if (p->pool) {
            mblocks = 1;   /* a column block per thread: each packs its own patches */
        } else if (p->batch * nblocks < nthreads || p->M > PLAIT_ROWS_ONLY_RATIO * p->N) {
            /* the rows alone: column blocks as on one thread, all of a row block's in turn */
            nblocks = (p->N + PLAIT_NC - 1) / PLAIT_NC;
            nc_block = (p->N + nblocks - 1) / nblocks;
            nc_block = (nc_block + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
            nblocks = (p->N + nc_block - 1) / nc_block;
            rows_outer = 1;
            const int64_t want = (nthreads + p->batch - 1) / p->batch;
            mblocks = want < most ? want : most;
        }
        if (mblocks > 1) {
            mc_rows = (p->M + mblocks - 1) / mblocks;
            mc_rows = (mc_rows + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
        }
    }
    /* a tuned split (plait/target/c/tuning) replaces the rule: column blocks alone, or
     * row blocks too (one per thread, of at least 2 panels) */
    if (p->split == PLAIT_SPLIT_COLUMNS) {
        mc_rows = p->M;
        rows_outer = 0;
    } else if (p->split == PLAIT_SPLIT_ROWS && nthreads > 1) {
        const int64_t most = p->M / (2 * PLAIT_MR);
        const int64_t mblocks = nthreads < most ? nthreads : most;
        if (mblocks > 1) {
            mc_rows = (p->M + mblocks - 1) / mblocks;
            mc_rows = (mc_rows + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
        }
    }
    /* a tuned column block (plait_gemm_problem.nc) replaces the rule's */
    if (p->nc > 0) {
        nc_block = (p->nc + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
        nblocks = (p->N + nc_block - 1) / nc_block;
    }
    /* A 1x1 convolution with few pixels and a long sum (K >= PLAIT_SPLIT_K_MIN) on several
     * threads splits the sum in two instead: each thread reads half of A and half of B,
     * the input channels that the same thread wrote in the depthwise layer before (whose
     * jobs are channel blocks), and the partial outputs, smaller than B, are added: no
     * thread reads an input channel from the other core's cache */
    if (nthreads > 1 && !p->split && p->batch == 1 && p->a_kind == PLAIT_A_PACKED
        && p->b_kind == PLAIT_B_STRIDED && !p->pool && !p->k_hi && p->K >= PLAIT_SPLIT_K_MIN
        && (p->N + PLAIT_NC - 1) / PLAIT_NC < 2 * nthreads)
        return gemm_split_k(p);
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
        if (p->act)
            for (int64_t bi = 0; bi < p->batch; ++bi)
                plait_act_tile(p->c + bi * p->c_bs, p->ldc, p->M, p->N, p);
        return 0;
    }
    plait_gemm_task task = {p, nc_block, mc_rows, rows_outer, 0, 0};
    plait_parallel(plait_gemm_task_run, &task, nthreads);
    return task.status;
}

PLAIT_ISA_FAMILY("gemm")
PLAIT_ISA_DISPATCH(int, plait_gemm, (const plait_gemm_problem* p), (p))
