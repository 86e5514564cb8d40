/* plait_qconv.c: the c target's int8 convolutions (the transposed product on the
 * register tile of plait_qtile.h, and depthwise convolutions), a kernel family of
 * plait_isa.h compiled for AVX512-VNNI, AVX512, AVX-VNNI, AVX2 and the baseline; the
 * arithmetic and the output stage are plait_qgemm.c's (see its comment). */
#include "plait_isa.h"
#include "plait_qtile.h"

/* ------------------------------------------------------ convolutions, transposed */

/* out[n][o][p] = out(sum_k (w[o][k] - zw[o]) * (x[n][k][p] - zx)) computed as W' @ X'
 * with the weights broadcast (int8 W': rows of Kp bytes, blocks of 12 rows interleaved
 * by 4 bytes) and the image read in place as uint8 X'.
 *
 * The image is first rewritten, once per call and in parallel, in 4-byte groups of
 * channels: per image and block of 4 channels of one convolution group (a last block's
 * missing channels hold zx', their weights are 0) and per phase (rph, cph) of the
 * strides (the padded rows r and columns c with r % SH == rph, c % SW == cph), a plane
 * of Hpp x Wpp pixels of 4 bytes (x ^ 0x80 for int8 x; the padding zx').  Output pixel
 * (oh, ow) reads tap (kh, kw) of block j in phase ((kh*DH) % SH, (kw*DW) % SW) at pixel
 * (oh + kh*DH/SH, ow + kw*DW/SW): at a constant offset toff[j, kh, kw] from
 * 4 * (oh * Wpp + ow).  So the product's columns are the positions q = oh * Wpp + ow
 * (those with ow >= OW are computed and dropped), 16 of them 64 consecutive bytes at
 * every tap, which the register tile reads where they are: nothing is packed, no tap
 * is wasted, and a 1x1 convolution of stride 1 without padding is a plain product over
 * the image's pixels.  K runs over (j, kh, kw, 4 channels). */

/* The weights: blocks of Q_WROWS rows interleaved by 4 bytes ([rows / 12][Kp / 4][12][4],
 * each convolution group's rows starting a block), so the rows of a tile (Q_MR divides
 * 12) are one stream of 48 bytes per group of 4 taps. */
#define Q_WROWS 12
/* groups of 4 taps per block of K: a tile's columns of the block (Q_NP x Q_KC x 64
 * bytes) stay in L1 while every tile of the job's output channels reads them */
#define Q_KC 128
/* the most output channels one job computes (its accumulators stay in L2) */
#define Q_OCHUNK 240

/* q_tile over ntiles tiles of Q_MR weight rows from packed row row0 on (their groups
 * kb.. of 4 taps) times the same columns b, the tiles' sums one after the other at
 * out: the loop in one call per kind of tile, not a call per tile (a 1x1 convolution
 * of 16 input channels has 4 groups of K per tile: the calls cost as much as the
 * sums) */
#define Q_CT_TILES_FN(name, np, swapped)                                                   \
    static __attribute__((noinline)) void name(                                            \
        int64_t ntiles, int64_t k4, const uint8_t* restrict w, int64_t kp, int64_t row0,   \
        int64_t kb, const int8_t* restrict b, const int64_t* restrict koff,                \
        int32_t* restrict out, int acc_in) {                                               \
        for (int64_t i = 0; i < ntiles; ++i) {                                             \
            const int64_t row = row0 + i * Q_MR;                                           \
            const uint8_t* ar = w + row / Q_WROWS * Q_WROWS * kp + row % Q_WROWS * 4 +     \
                                Q_WROWS * 4 * kb;                                          \
            Q_TILE_CONST_ACC(np, swapped, k4, ar, 4, 4 * Q_WROWS, b, 64, koff,             \
                             out + i * (Q_MR * Q_TN), acc_in);                             \
        }                                                                                  \
    }
Q_CT_TILES_FN(q_ct_tiles_1s, 1, 1)   /* (the convolutions' tiles are all swapped) */
#if defined(PLAIT_ISA_AVX2)
Q_CT_TILES_FN(q_ct_tiles_1p, 1, 2)
#elif Q_NP > 2
Q_CT_TILES_FN(q_ct_tiles_2s, 2, 1)
Q_CT_TILES_FN(q_ct_tiles_3s, 3, 1)
Q_CT_TILES_FN(q_ct_tiles_4s, 4, 1)
#elif Q_NP > 1
Q_CT_TILES_FN(q_ct_tiles_2s, 2, 1)
#endif
#undef Q_CT_TILES_FN

/* q_ct_tiles_* for n (1 <= n <= Q_NP) panels; pairs: the weights' mode 1 (swapped 2
 * in the AVX2 copy, as swapped 1 in the others: see q_tile) */
static inline void q_ct_tiles(int64_t n, int pairs, int64_t ntiles, int64_t k4,
                              const uint8_t* w, int64_t kp, int64_t row0, int64_t kb,
                              const int8_t* b, const int64_t* koff, int32_t* out,
                              int acc_in) {
#define Q_CALL(fn) fn(ntiles, k4, w, kp, row0, kb, b, koff, out, acc_in)
#if defined(PLAIT_ISA_AVX2)
    if (pairs) {
        Q_CALL(q_ct_tiles_1p);
        return;
    }
#endif
    (void)pairs;
    (void)n;
#if Q_NP > 2
    if (n >= 4) Q_CALL(q_ct_tiles_4s);
    else if (n == 3) Q_CALL(q_ct_tiles_3s);
    else
#endif
#if Q_NP > 1
    if (n == 2) Q_CALL(q_ct_tiles_2s);
    else
#endif
        Q_CALL(q_ct_tiles_1s);
#undef Q_CALL
}

typedef struct {
    const plait_qconv_problem* p;
    uint8_t* xt;             /* the rewritten images */
    int64_t img_bytes;       /* bytes of one rewritten image */
    int64_t block_bytes, phase_bytes, hpp, wpp;   /* a block of 4 channels, a phase */
    int64_t cbg;             /* blocks of 4 channels per convolution group */
    const int64_t* toff;     /* per group of 4 taps (j, kh, kw): its offset */
    uint8_t rneed[8], cneed[8];   /* the phases some tap reads (strides up to 8; more:
                                   * every phase written) */
    const uint8_t* ones;     /* rows of 1 (0 at the missing channels): column sums */
    int64_t kp, cols, panels, pblock, nblocks, jobs;
    int64_t groups, og, ogp; /* the convolution's groups, output channels, packed rows */
    int64_t otiles, nochunks;   /* tiles of Q_MR channels per job, jobs per group's pixels */
    int need_cs;             /* some zw' != 0: the pixels' column sums are needed */
    int pairs;               /* the weights' mode: 1 their pairs safe (q_tile's swapped 2) */
    const int32_t* corr;     /* mode 1's corrections (packed row, k, residual), by row */
    const int32_t* cstart;   /* per packed row, its first correction (rows + 1 entries) */
    int flat;                /* stride 1, no padding, Wpp = W: each plane one run */
    int64_t next;
    int status;
} q_ct_task;

typedef uint8_t q_v16 __attribute__((vector_size(16)));
#if defined(__clang__)
#define Q_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define Q_SHUF(a, b, ...) __builtin_shuffle(a, b, (q_v16){__VA_ARGS__})
#endif

/* 16 pixels x 4 channels (rows t0..t3: the channels' 16 values) as 64 bytes
 * [pixel][channel] */
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

/* 16 bytes at p, each ^ flip */
static inline q_v16 q_load16(const uint8_t* p, uint8_t flip) {
    q_v16 v;
    memcpy(&v, p, 16);
    return v ^ flip;
}

/* whether a tap reads row phase rph (cph < 0) or column phase cph (rph < 0), or the
 * phase (rph, cph) */
static inline int q_phase_read(const q_ct_task* t, int64_t rph, int64_t cph) {
    return (rph < 0 || rph >= 8 || t->rneed[rph]) && (cph < 0 || cph >= 8 || t->cneed[cph]);
}

/* n pixels of 4 channel rows src[0..3] (each of n bytes) as 4-byte groups at dst */
static inline void q_ct_interleave_row(const uint8_t* const* src, int64_t n, uint8_t flip,
                                       uint8_t* dst) {
    int64_t w = 0;
    for (; w + 16 <= n; w += 16)
        q_interleave4(q_load16(src[0] + w, flip), q_load16(src[1] + w, flip),
                      q_load16(src[2] + w, flip), q_load16(src[3] + w, flip), dst + 4 * w);
    for (; w < n; ++w)
        for (int ci = 0; ci < 4; ++ci) dst[4 * w + ci] = (uint8_t)(src[ci][w] ^ flip);
}

/* blocks [lo, hi) of the N * groups * cbg blocks of 4 channels rewritten (see above) */
static void q_ct_layout(void* ctx, int64_t lo, int64_t hi) {
    q_ct_task* t = (q_ct_task*)ctx;
    const plait_qconv_problem* p = t->p;
    const int64_t H = p->H, W = p->W, SH = p->SH, SW = p->SW, wpp = t->wpp;
    const int64_t cg = p->C / t->groups, nb = t->groups * t->cbg;
    const int64_t hn = H < t->hpp * SH - p->PT ? H : t->hpp * SH - p->PT;
    const int64_t wn = W < wpp * SW - p->PL ? W : wpp * SW - p->PL;
    const uint8_t flip = p->x_signed ? 0x80 : 0;
    const uint8_t zx = (uint8_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                             : ((const uint8_t*)p->zx)[0]);
    uint8_t* tmp = (uint8_t*)plait_scratch(2, (size_t)(5 * W + 64 + 3) / 4 + 16);
    if (!tmp) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    uint8_t* pad = tmp + 4 * W + 64;   /* the missing channels' row: zx' once flipped */
    memset(pad, zx ^ flip, (size_t)W);
    for (int64_t u = lo; u < hi; ++u) {
        const int64_t bi = u / nb, gb = u % nb, gi = gb / t->cbg, j = gb % t->cbg;
        const int64_t c0 = gi * cg + 4 * j, nc = cg - 4 * j < 4 ? cg - 4 * j : 4;
        uint8_t* blk = t->xt + bi * t->img_bytes + gb * t->block_bytes;
        if (t->flat && nc == 4) {
            /* no padding, stride 1: the plane is one row of H * W pixels */
            const uint8_t* src[4];
            for (int ci = 0; ci < 4; ++ci)
                src[ci] = (const uint8_t*)p->x + (bi * p->C + c0 + ci) * H * W;
            q_ct_interleave_row(src, H * W, flip, blk);
            continue;
        }
        for (int64_t ph = 0; ph < SH * SW; ++ph)
            if (q_phase_read(t, ph / SW, ph % SW))
                memset(blk + ph * t->phase_bytes, zx, (size_t)t->phase_bytes);
        for (int64_t h = 0; h < hn; ++h) {
            const int64_t r = h + p->PT;
            if (!q_phase_read(t, r % SH, -1)) continue;
            const uint8_t* src[4];
            for (int ci = 0; ci < 4; ++ci)
                src[ci] = ci < nc ? (const uint8_t*)p->x + ((bi * p->C + c0 + ci) * H + h) * W
                                  : pad;
            uint8_t* row = blk + (r % SH) * SW * t->phase_bytes + (r / SH) * wpp * 4;
            /* stride 1 along W: straight into the plane; else into tmp, then by phase */
            uint8_t* dst = SW == 1 ? row + 4 * p->PL : tmp;
            q_ct_interleave_row(src, wn, flip, dst);
            if (SW == 1) continue;
            for (int64_t cph = 0; cph < SW; ++cph) {
                if (!q_phase_read(t, -1, cph)) continue;
                const int64_t w0 = ((cph - p->PL) % SW + SW) % SW;
                uint32_t* restrict d = (uint32_t*)(void*)(row + cph * t->phase_bytes);
                const uint32_t* restrict s4 = (const uint32_t*)(const void*)tmp;
                for (int64_t x = w0; x < wn; x += SW) d[(x + p->PL) / SW] = s4[x];
            }
        }
    }
}

/* Mode 1's corrections of one job's tiles: a weight clamped at packing (a pair of
 * channels safe for vpmaddubsw) left residual * x' of its tap out of the sums; added
 * here, before the output stage, modulo 2^32 as the sums.  The tiles' columns are
 * pixels q of the rewritten image, the tap's byte at toff[k / 4] + 4 * q + k % 4. */
static void q_ct_correct(const q_ct_task* t, const int8_t* img, int64_t j0, int64_t np,
                         int64_t gi, int64_t r_lo, int64_t r_hi, int32_t* accs) {
    const int64_t tsz = Q_MR * Q_TN;
    for (int64_t jp = 0; jp < np; jp += Q_NP) {
        const int64_t nn = np - jp < Q_NP ? np - jp : Q_NP, ncol = nn * PLAIT_Q_NR;
        const uint8_t* base = (const uint8_t*)img + 4 * (j0 + jp) * PLAIT_Q_NR;
        int32_t* acc = accs + jp / Q_NP * t->otiles * tsz;
        for (int64_t r0 = r_lo; r0 < r_hi; r0 += Q_MR, acc += tsz) {
            const int64_t row0 = gi * t->ogp + r0;
            const int64_t row1 = row0 + (r_hi - r0 < Q_MR ? r_hi - r0 : Q_MR);
            for (int32_t e = t->cstart[row0]; e < t->cstart[row1]; ++e) {
                const int32_t* c = t->corr + 3 * e;
                const uint32_t res = (uint32_t)c[2];
                const uint8_t* restrict src = base + t->toff[c[1] / 4] + c[1] % 4;
                uint32_t* restrict dst = (uint32_t*)(acc + (c[0] - row0) * Q_TN);
                for (int64_t i = 0; i < ncol; ++i) dst[i] += res * (uint32_t)src[4 * i];
            }
        }
    }
}

#if defined(Q_VSTORE)
/* The 8-bit output stage of output channel o (row r of the job's tiles from acc0)
 * straight from the tiles: column group g of 16 (np * 16 columns from qa) at its tile
 * row (or, when some zw != 0, less zw times the column sums cs, in a row of their
 * own first), less corr (folded into the bias), Q_VL codes at a time.  all: the
 * columns qa .. qb are the plane's elements from plane + first on; else (Q_VL 8
 * copies, no residual add: its tensor is read by output element) every column's code
 * goes into a buffer and the kept columns (ow < OW) are copied to the plane a row's
 * run at a time.  Not inlined: its vector loop keeps the output stage's constants in
 * registers (inlined into q_ct_run they were read from the stack every vector). */
static __attribute__((noinline)) void
q_ct_store8(const q_ct_task* t, const int32_t* acc0, int64_t tstride, const int32_t* cs,
            int64_t r, int64_t o, uint32_t zw, uint32_t corr, int64_t np, int64_t qa,
            int64_t qb, int all, int64_t plane, int64_t first) {
    const plait_qconv_problem* p = t->p;
    q_vparams k;
    q_vparams_init(&k, &p->out, o, 0, plane + first);
    k.vb = q_isub(k.vb, q_iset((int32_t)corr));
    uint8_t codes[4 * PLAIT_Q_NR];
    uint8_t* d = all ? (uint8_t*)p->c + plane + first : codes;
    uint32_t tmp[4 * PLAIT_Q_NR];
    const int64_t n = all ? qb - qa : 16 * np;
    /* group g's 16 sums at base + (g / Q_NP) * gstride + (g % Q_NP) * 16 */
    const uint32_t* base = (const uint32_t*)(acc0 + r * Q_TN);
    int64_t gstride = tstride;
    if (t->need_cs) {
        for (int64_t g = 0; g < np; ++g) {
            const uint32_t* src = base + g / Q_NP * tstride + g % Q_NP * 16;
            const int32_t* csj = cs + g / Q_NP * (Q_MR * Q_TN) + g % Q_NP * 16;
            for (int i = 0; i < 16; ++i) tmp[16 * g + i] = src[i] - zw * (uint32_t)csj[i];
        }
        base = tmp;
        gstride = 16 * Q_NP;
    }
#define Q_CT_SRC(j) (base + ((j) >> 4) / Q_NP * gstride + ((j) >> 4) % Q_NP * 16 + ((j) & 15))
    int64_t j = 0;
#if Q_VL == 16
    for (; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1);
        q_vstore_src(&k, Q_CT_SRC(j), j, m, d);
    }
#else
    for (; j + Q_VL <= n; j += Q_VL) q_vstore_src(&k, Q_CT_SRC(j), j, 0, d);
    if (j < n) {   /* the plane's last columns (all): less corr, then as q_store */
        uint32_t last[Q_VL];
        for (int64_t i = 0; i < n - j; ++i) last[i] = Q_CT_SRC(j)[i] - corr;
        q_store_generic(&p->out, last, n - j, o, 0, p->c, plane + first + j);
    }
#endif
#undef Q_CT_SRC
    if (all) return;
    for (int64_t q = qa; q < qb;) {   /* the kept runs: a row's columns ow < OW */
        const int64_t oh = q / t->wpp, ow = q % t->wpp;
        if (ow >= p->OW) {
            q = (oh + 1) * t->wpp;
            continue;
        }
        const int64_t len = p->OW - ow < qb - q ? p->OW - ow : qb - q;
        memcpy((uint8_t*)p->c + plane + oh * p->OW + ow, codes + (q - qa), (size_t)len);
        q += len;
    }
}
#endif

static void q_ct_run(void* arg) {
    q_ct_task* t = (q_ct_task*)arg;
    const plait_qconv_problem* p = t->p;
    const int64_t kp = t->kp, k4 = kp / 4;
    const int64_t steps = (t->pblock + Q_NP - 1) / Q_NP;   /* tiles' columns per job */
    const int64_t tsz = Q_MR * Q_TN;
    const int64_t tiles = steps * (t->otiles + (t->need_cs ? 1 : 0));
    int32_t* accs = (int32_t*)plait_scratch(0, (size_t)(tiles * tsz) + 16);
    if (!accs) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    int32_t* cs = accs + steps * t->otiles * tsz;   /* row 0 of a tile: the column sums */
    const uint32_t zx = (uint32_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                               : ((const uint8_t*)p->zx)[0]);
    const int64_t og = t->og, M = p->OH * p->OW;
    const int sw = t->pairs ? 2 : 1;   /* the rows of ones (column sums) are safe too */
    uint32_t v[4 * PLAIT_Q_NR + 16];   /* a job's columns; + 16: a last group's
                                        * compressed lanes */
    for (int64_t job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED); job < t->jobs;
         job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) {
        const int64_t ob = job % t->nochunks, rest = job / t->nochunks;
        const int64_t j0 = rest % t->nblocks * t->pblock, bg = rest / t->nblocks;
        const int64_t bi = bg / t->groups, gi = bg % t->groups;
        const int64_t r_lo = ob * t->otiles * Q_MR;   /* rows of the group */
        const int64_t r_hi = og < r_lo + t->otiles * Q_MR ? og : r_lo + t->otiles * Q_MR;
        const int64_t np = t->panels - j0 < t->pblock ? t->panels - j0 : t->pblock;
        const int8_t* img = (const int8_t*)(t->xt + bi * t->img_bytes +
                                            gi * t->cbg * t->block_bytes);
        /* the sums, a block of K at a time: each tile's accumulators in accs */
        for (int64_t kb = 0; kb < k4; kb += Q_KC) {
            const int64_t kc = k4 - kb < Q_KC ? k4 - kb : Q_KC;
            const int64_t* koff = t->toff + kb;
            for (int64_t jp = 0; jp < np; jp += Q_NP) {
                const int8_t* bj = img + 4 * (j0 + jp) * PLAIT_Q_NR;
                const int64_t nn = np - jp < Q_NP ? np - jp : Q_NP;
                q_ct_tiles(nn, t->pairs, (r_hi - r_lo + Q_MR - 1) / Q_MR, kc,
                           (const uint8_t*)p->w, kp, gi * t->ogp + r_lo, kb, bj, koff,
                           accs + jp / Q_NP * t->otiles * tsz, kb > 0);
                if (t->need_cs) {
                    const uint8_t* ar = t->ones + Q_WROWS * 4 * kb;
                    int32_t* c = cs + jp / Q_NP * tsz;
                    q_tile_n(nn, sw, kc, ar, 4, 4 * Q_WROWS, bj, 64, koff, c, kb > 0);
                }
            }
        }
        if (t->corr) q_ct_correct(t, img, j0, np, gi, r_lo, r_hi, accs);
        /* the output stage, one output channel at a time over all the job's columns
         * (np panels, their tiles' rows; q_store's per-call setup paid once per
         * channel and job, not per tile: a 1x1 convolution of 16 input channels spent
         * most of its time there on AVX2): the columns of its pixels (those with
         * ow < OW) are consecutive elements of the channel's plane */
        const int64_t qa = j0 * PLAIT_Q_NR;
        const int64_t qb = t->cols - qa < np * PLAIT_Q_NR ? t->cols : qa + np * PLAIT_Q_NR;
        int32_t sel[4 * PLAIT_Q_NR];   /* the kept columns (job's column index) */
        int64_t cnt = 0, first = qa;
        if (t->wpp == p->OW) {
            cnt = qb - qa;
        } else {
            int64_t oh = qa / t->wpp, ow = qa % t->wpp;
            first = -1;
            for (int64_t q = qa; q < qb; ++q) {
                if (ow < p->OW) {
                    if (first < 0) first = oh * p->OW + ow;
                    sel[cnt++] = (int32_t)(q - qa);
                }
                if (++ow == t->wpp) ow = 0, ++oh;
            }
        }
        if (!cnt) continue;
        const int all = cnt == qb - qa;   /* no column dropped */
        const int64_t ntl = (np + Q_NP - 1) / Q_NP;   /* the tiles' column groups */
        const int64_t tstride = t->otiles * tsz;      /* from one column group to the next */
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
        /* the kept columns of each group of 16, compressed in registers */
        __mmask16 keep[4];
        for (int64_t g = 0; g < np; ++g) {
            uint32_t k = 0;
            for (int64_t i = 0; i < 16; ++i) {
                const int64_t q = qa + 16 * g + i;
                if (q < qb && (t->wpp == p->OW || q % t->wpp < p->OW)) k |= 1u << i;
            }
            keep[g] = (__mmask16)k;
        }
#endif
        const int32_t* acc0 = accs;
        const int q8 = p->out.kind == PLAIT_Q_OUT_U8 || p->out.kind == PLAIT_Q_OUT_S8;
        (void)q8;
        for (int64_t r0 = r_lo; r0 < r_hi; r0 += Q_MR, acc0 += tsz) {
            const int64_t mr = r_hi - r0 < Q_MR ? r_hi - r0 : Q_MR;
            for (int64_t r = 0; r < mr; ++r) {
                const int64_t o = gi * og + r0 + r;
                const uint32_t zw = (uint32_t)p->w_zp[o];
                const uint32_t corr = zx * (uint32_t)p->w_corr[o];
#if defined(Q_VSTORE)
                if (q8 && (all || (Q_VL == 8 && !p->out.add2_kind))) {
                    q_ct_store8(t, acc0, tstride, cs, r, o, zw, corr, np, qa, qb, all,
                                (bi * p->O + o) * M, first);
                    continue;
                }
#endif
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
                const __m512i vc = _mm512_set1_epi32((int32_t)corr);
                const __m512i vzw = _mm512_set1_epi32((int32_t)zw);
                int64_t k = 0;
                for (int64_t g = 0; g < np; ++g) {
                    const int32_t* tr = acc0 + g / Q_NP * tstride + r * Q_TN + g % Q_NP * 16;
                    const int32_t* csj = cs + g / Q_NP * tsz + g % Q_NP * 16;
                    __m512i x = _mm512_sub_epi32(_mm512_loadu_si512((const void*)tr), vc);
                    if (t->need_cs)
                        x = _mm512_sub_epi32(
                            x, _mm512_mullo_epi32(vzw, _mm512_loadu_si512((const void*)csj)));
                    _mm512_storeu_si512((void*)(v + k), _mm512_maskz_compress_epi32(keep[g], x));
                    k += __builtin_popcount((unsigned)keep[g]);
                }
                (void)all;
                (void)ntl;
#else
                if (all) {
                    for (int64_t g = 0; g < ntl; ++g) {
                        const int32_t* restrict tr = acc0 + g * tstride + r * Q_TN;
                        const int32_t* restrict csj = cs + g * tsz;
                        uint32_t* restrict vg = v + g * Q_TN;
                        const int64_t n = cnt - g * Q_TN < Q_TN ? cnt - g * Q_TN : Q_TN;
                        if (t->need_cs)
                            for (int64_t i = 0; i < n; ++i)
                                vg[i] = (uint32_t)tr[i] - zw * (uint32_t)csj[i] - corr;
                        else
                            for (int64_t i = 0; i < n; ++i) vg[i] = (uint32_t)tr[i] - corr;
                    }
                } else {
                    for (int64_t i = 0; i < cnt; ++i) {
                        const int64_t c = sel[i], g = c / Q_TN, ci = c % Q_TN;
                        const uint32_t x = (uint32_t)acc0[g * tstride + r * Q_TN + ci];
                        v[i] = t->need_cs ? x - zw * (uint32_t)cs[g * tsz + ci] - corr
                                          : x - corr;
                    }
                }
#endif
                q_store(&p->out, v, cnt, o, 0, p->c, (bi * p->O + o) * M + first);
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qconv2d)(const plait_qconv_problem* p) {
    if (p->OH <= 0 || p->OW <= 0 || p->O <= 0 || p->N <= 0) return 0;
    q_ct_task t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.groups = p->GR > 1 ? p->GR : 1;
    const int64_t cg = p->C / t.groups;   /* the channels a group reads */
    t.cbg = (cg + 3) / 4;
    const int64_t ntaps = p->KH * p->KW, k4 = t.cbg * ntaps;
    t.kp = 4 * k4;
    for (int64_t o = 0; o < p->O; ++o)
        if (p->w_zp[o]) t.need_cs = 1;
    /* the padded image: every tap a window reads; its phases */
    const int64_t hp0 = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int64_t wp0 = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    const int64_t hp = hp0 > p->PT + p->H ? hp0 : p->PT + p->H;
    const int64_t wp = wp0 > p->PL + p->W ? wp0 : p->PL + p->W;
    t.hpp = (hp + p->SH - 1) / p->SH;
    t.wpp = (wp + p->SW - 1) / p->SW;
    t.phase_bytes = t.hpp * t.wpp * 4;
    t.block_bytes = p->SH * p->SW * t.phase_bytes;
    t.img_bytes = t.groups * t.cbg * t.block_bytes;
    t.cols = (p->OH - 1) * t.wpp + p->OW;
    t.flat = p->SH == 1 && p->SW == 1 && p->PT == 0 && p->PL == 0 && t.wpp == p->W &&
             t.hpp == p->H;
    t.panels = (t.cols + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    /* 512 bytes past the last image: the columns of the last panels past the end */
    const int64_t xbytes = (p->N * t.img_bytes + 512 + 63) / 64 * 64;
    const int64_t obytes = t.need_cs ? Q_WROWS * t.kp : 0;
    /* the weights' tail (plait's pack_conv_rows): the mode, the count of corrections,
     * the corrections */
    t.og = p->O / t.groups;
    t.ogp = (t.og + Q_WROWS - 1) / Q_WROWS * Q_WROWS;
    const int64_t prows = t.groups * t.ogp;
    int32_t head[2];
    memcpy(head, p->w + prows * t.kp, sizeof head);
    t.pairs = head[0] == 1;
    const int64_t ncorr = t.pairs ? head[1] : 0;
    if (ncorr) t.corr = (const int32_t*)(const void*)(p->w + prows * t.kp + 8);
    size_t words = (size_t)(xbytes + obytes) / 4 + 2 * (size_t)k4 + 16 +
                   (ncorr ? (size_t)prows + 2 : 0);
    uint8_t* xt = (uint8_t*)plait_scratch(1, words);
    if (!xt) return 1;
    t.xt = xt;
    memset(xt + p->N * t.img_bytes, 0, 512);
    uint8_t* ones = xt + xbytes;
    int64_t* toff = (int64_t*)(void*)(ones + obytes);
    for (int64_t j = 0, g = 0; j < t.cbg; ++j)
        for (int64_t kh = 0; kh < p->KH; ++kh)
            for (int64_t kw = 0; kw < p->KW; ++kw, ++g) {
                const int64_t dh = kh * p->DH, dw = kw * p->DW;
                const int64_t phase = (dh % p->SH) * p->SW + dw % p->SW;
                toff[g] = j * t.block_bytes + phase * t.phase_bytes +
                          ((dh / p->SH) * t.wpp + dw / p->SW) * 4;
                if (t.need_cs)
                    for (int64_t r = 0; r < Q_WROWS; ++r)
                        for (int ci = 0; ci < 4; ++ci)
                            ones[(g * Q_WROWS + r) * 4 + ci] = 4 * j + ci < cg ? 1 : 0;
            }
    t.toff = toff;
    t.ones = ones;
    if (ncorr) {   /* each packed row's first correction (they come by row) */
        int32_t* cstart = (int32_t*)(void*)(toff + k4);
        for (int64_t r = 0, e = 0; r <= prows; ++r) {
            while (e < ncorr && t.corr[3 * e] < r) ++e;
            cstart[r] = (int32_t)e;
        }
        t.cstart = cstart;
    }
    for (int64_t kh = 0; kh < p->KH; ++kh)
        if ((kh * p->DH) % p->SH < 8) t.rneed[(kh * p->DH) % p->SH] = 1;
    for (int64_t kw = 0; kw < p->KW; ++kw)
        if ((kw * p->DW) % p->SW < 8) t.cneed[(kw * p->DW) % p->SW] = 1;
    int nthreads = plait_max_threads();
    const int64_t work = p->N * t.cols * p->O * (t.kp > 0 ? t.kp : 1);
    if (work < Q_MIN_PARALLEL) nthreads = 1;
    const int64_t units = p->N * t.groups * t.cbg;
    plait_parallel_range(q_ct_layout, &t, units, units < nthreads ? (int)units : nthreads);
    if (t.status) return t.status;
    /* jobs: blocks of 4 panels (64 columns) times chunks of at most Q_OCHUNK output
     * channels, split further into chunks until there are about 4 jobs per thread */
    t.pblock = t.panels < 4 ? t.panels : 4;
    t.nblocks = (t.panels + t.pblock - 1) / t.pblock;
    const int64_t tiles = (t.og + Q_MR - 1) / Q_MR, most = Q_OCHUNK / Q_MR;
    int64_t chunks = (tiles + most - 1) / most;
    const int64_t others = p->N * t.groups * t.nblocks;
    if (nthreads > 1 && others * chunks < 4 * nthreads) {
        const int64_t want = (4 * nthreads + others - 1) / others;
        chunks = want < tiles ? want : tiles;
    }
    t.otiles = (tiles + chunks - 1) / chunks;
    t.nochunks = (tiles + t.otiles - 1) / t.otiles;
    t.jobs = others * t.nochunks;
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
    int64_t xbytes;     /* the image's bytes */
    int status;
} q_dw_task;

#define Q_DW_ACC 1024

/* The vectors of the copy's own width (32-bit lanes: AVX-512 16, AVX2 8, SSE2 and
 * NEON 4), for both paths below: a 64-byte generic vector in the AVX2 and baseline copies is carried through the stack
 * by GCC (MobileNetV2's 144-channel 56 x 56 layer took 10x the time).  Q_DWF_R rows
 * of 16 columns are summed at once: their Q_DWF_R * 16 / Q_FVL accumulators fit the
 * registers (AVX-512 4, AVX2 8, SSE2 and NEON 8). */
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
#define Q_FVL 16
#define Q_DWF_R 4
#elif defined(PLAIT_ISA_AVXVNNI) || defined(PLAIT_ISA_AVX2)
#define Q_FVL 8
#define Q_DWF_R 4
#else
#define Q_FVL 4
#define Q_DWF_R 2
#endif
#define Q_FVN (16 / Q_FVL)
typedef float q_fv __attribute__((vector_size(4 * Q_FVL)));
typedef int32_t q_iv __attribute__((vector_size(4 * Q_FVL)));
typedef uint32_t q_uv __attribute__((vector_size(4 * Q_FVL)));
typedef int16_t q_hv __attribute__((vector_size(2 * Q_FVL)));

typedef int8_t q_s8x16 __attribute__((vector_size(16)));
typedef int16_t q_i16x16 __attribute__((vector_size(32)));

/* An image row of wn values centered (x - zx, int16) into a padded row split into its
 * 2 column phases (padded column c = x + PL at row[(c % 2) * wpp + c / 2], wpp the
 * distance of the phases): 32 (then
 * 16) values a step, split into even and odd ones by byte shuffles. */
static void q_dw_row_s2(const uint8_t* src, int is_signed, int16_t zx, int64_t wn,
                        int64_t pl, int16_t* row, int64_t wpp) {
    const q_i16x16 z = (q_i16x16){0} + zx;
    int64_t x = 0;
    for (; x + 32 <= wn; x += 32) {
        const q_v16 a = q_load16(src + x, 0), b = q_load16(src + x + 16, 0);
        const q_v16 ev = Q_SHUF(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const q_v16 od = Q_SHUF(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        const q_i16x16 e = (is_signed ? __builtin_convertvector((q_s8x16)ev, q_i16x16)
                                      : __builtin_convertvector(ev, q_i16x16)) - z;
        const q_i16x16 o = (is_signed ? __builtin_convertvector((q_s8x16)od, q_i16x16)
                                      : __builtin_convertvector(od, q_i16x16)) - z;
        const int64_t c = x + pl;
        memcpy(row + (c & 1) * wpp + (c >> 1), &e, sizeof e);
        memcpy(row + ((c + 1) & 1) * wpp + ((c + 1) >> 1), &o, sizeof o);
    }
    for (; x + 16 <= wn; x += 16) {   /* 16 values: the 8 even and 8 odd ones */
        const q_v16 a = q_load16(src + x, 0);
        const q_v16 eo = Q_SHUF(a, a, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
        const q_i16x16 v = (is_signed ? __builtin_convertvector((q_s8x16)eo, q_i16x16)
                                      : __builtin_convertvector(eo, q_i16x16)) - z;
        const int64_t c = x + pl;
        memcpy(row + (c & 1) * wpp + (c >> 1), &v, 16);
        memcpy(row + ((c + 1) & 1) * wpp + ((c + 1) >> 1), (const int16_t*)&v + 8, 16);
    }
    for (; x < wn; ++x) {
        const int64_t c = x + pl;
        const int32_t v = is_signed ? (int32_t)(int8_t)src[x] : (int32_t)src[x];
        row[(c & 1) * wpp + (c >> 1)] = (int16_t)(v - zx);
    }
}

/* acc[i] = sum over the taps k of w[k] * src[toff[k] + i], i < cnt (int32, modulo
 * 2^32): 4 vectors of the copy's width summed in registers over the taps (GCC jammed
 * two taps of a plain loop over i and left it scalar), the last columns one by one */
static inline void q_dw_sums(const int16_t* src, const int64_t* restrict toff,
                             const int32_t* restrict w, int64_t taps, int64_t cnt,
                             uint32_t* restrict acc) {
    int64_t i = 0;
    for (; i + 4 * Q_FVL <= cnt; i += 4 * Q_FVL) {
        q_uv a[4] = {{0}};
        for (int64_t k = 0; k < taps; ++k) {
            const int16_t* s = src + toff[k] + i;
            const q_uv wv = (q_uv){0} + (uint32_t)w[k];
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                q_hv h;
                memcpy(&h, s + j * Q_FVL, sizeof h);
                a[j] += (q_uv)__builtin_convertvector(h, q_iv) * wv;
            }
        }
        memcpy(acc + i, a, sizeof a);
    }
    for (; i < cnt; ++i) {
        uint32_t v = 0;
        for (int64_t k = 0; k < taps; ++k) v += (uint32_t)((int32_t)src[toff[k] + i] * w[k]);
        acc[i] = v;
    }
}

/* planes [lo, hi) of N * C: each plane copied centered (x - zx, int16) into a padded
 * plane (the padding 0) split into the strides' phases, every output summed over the
 * window in int32 a block of whole output rows at a time (one contiguous run per tap,
 * the columns past OW dropped), then the output stage. */
static void q_dw_range(void* ctx, int64_t lo, int64_t hi) {
    q_dw_task* t = (q_dw_task*)ctx;
    const plait_qdw_desc* d = t->d;
    const int64_t hp = t->hp, wp = t->wp, sh = d->SH, sw = d->SW;
    /* the padded plane split into the strides' phases: phase (rph, cph) holds the padded
     * rows r = rph + SH * i and columns c = cph + SW * j as a plane of hpp x wpp (stride
     * 1: the plain padded plane), so tap (kh, kw) of output (oh, ow) is at one offset
     * toff from oh * wpp + ow, and a block of output rows is one run per tap */
    const int64_t hpp = (hp + sh - 1) / sh, wpp = (wp + sw - 1) / sw, pp = hpp * wpp;
    const int64_t taps = d->KH * d->KW, psize = sh * sw * pp;
    int16_t* xc = (int16_t*)plait_scratch(0, (size_t)(psize + 64) / 2 + (size_t)taps * 2 + 16);
    if (!xc) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    int64_t* toff = (int64_t*)(void*)(xc + (psize + 64 + 3) / 4 * 4);
    for (int64_t kh = 0; kh < d->KH; ++kh)
        for (int64_t kw = 0; kw < d->KW; ++kw) {
            const int64_t dh = kh * d->DH, dw = kw * d->DW;
            toff[kh * d->KW + kw] = ((dh % sh) * sw + dw % sw) * pp + dh / sh * wpp + dw / sw;
        }
    uint32_t acc[Q_DW_ACC];
    const int64_t H = d->H, W = d->W;
    const int64_t hn = H < hp - d->PT ? H : hp - d->PT;
    const int64_t wn = W < wp - d->PL ? W : wp - d->PL;
    const int16_t zx = (int16_t)t->zx;
    for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t ch = plane % d->C;
        const int32_t* w = t->w + ch * taps;
        memset(xc, 0, sizeof(int16_t) * (size_t)psize);
        int64_t rph = d->PT % sh, ridx = d->PT / sh;   /* padded row h + PT's phase, index */
        for (int64_t h = 0; h < hn; ++h, rph = rph + 1 == sh ? 0 : rph + 1,
                     ridx += rph == 0) {
            int16_t* restrict row = xc + rph * sw * pp + ridx * wpp;
            if (sw == 1) {
                int16_t* restrict dst = row + d->PL;
                if (t->x_signed) {
                    const int8_t* restrict src = (const int8_t*)t->x + (plane * H + h) * W;
                    for (int64_t x = 0; x < wn; ++x) dst[x] = (int16_t)(src[x] - zx);
                } else {
                    const uint8_t* restrict src = t->x + (plane * H + h) * W;
                    for (int64_t x = 0; x < wn; ++x) dst[x] = (int16_t)(src[x] - zx);
                }
                continue;
            }
            if (sw == 2) {
                q_dw_row_s2(t->x + (plane * H + h) * W, t->x_signed, zx, wn, d->PL, row, pp);
                continue;
            }
            /* phase p holds the padded columns c = p + i * SW: the image's x = c - PL */
            for (int64_t p = 0; p < sw; ++p) {
                const int64_t i0 = d->PL - p <= 0 ? 0 : (d->PL - p + sw - 1) / sw;
                int16_t* restrict dst = row + p * pp + i0;
                const int64_t x0 = p + i0 * sw - d->PL;
                if (t->x_signed) {
                    const int8_t* restrict src = (const int8_t*)t->x + (plane * H + h) * W;
                    for (int64_t x = x0, i = 0; x < wn; x += sw, ++i)
                        dst[i] = (int16_t)(src[x] - zx);
                } else {
                    const uint8_t* restrict src = t->x + (plane * H + h) * W;
                    for (int64_t x = x0, i = 0; x < wn; x += sw, ++i)
                        dst[i] = (int16_t)(src[x] - zx);
                }
            }
        }
        /* blocks of whole output rows (positions oh * wpp + ow, those with ow >= OW
         * dropped); a row wider than the accumulators in pieces */
        const int64_t rows = wpp <= Q_DW_ACC ? Q_DW_ACC / wpp : 1;
        const int64_t piece = wpp <= Q_DW_ACC ? wpp : Q_DW_ACC;
        for (int64_t oh0 = 0; oh0 < d->OH; oh0 += rows) {
            const int64_t nr = d->OH - oh0 < rows ? d->OH - oh0 : rows;
            for (int64_t ow0 = 0; ow0 < d->OW; ow0 += piece) {
                /* the last row needs only its columns up to OW: no read past the plane */
                const int64_t last = d->OW - ow0 < piece ? d->OW - ow0 : piece;
                const int64_t cnt = (nr - 1) * wpp + last;
                q_dw_sums(xc + oh0 * wpp + ow0, toff, w, taps, cnt, acc);
                for (int64_t r = 0; r < nr; ++r)
                    q_store(t->out, acc + r * wpp, last, ch, 0, t->c,
                            (plane * d->OH + oh0 + r) * d->OW + ow0);
            }
        }
    }
}

/* The depthwise convolution in float32 lanes: every product (x - zx) * w is an
 * integer of magnitude at most 255 * 255 and a window of at most Q_DWF_TAPS of them
 * sums below 2^24, so float32 holds every partial sum exactly and the result converts
 * to the same int32 (no rounding anywhere, whatever the order or fusion).  Per plane:
 * the centered image as float32 in a padded plane split into the strides' phases (as
 * q_dw_range), then each output row 16 columns at a time with the 16 sums in
 * registers over the taps (a vector of the copy's width: 16 lanes on AVX-512, two of
 * 8 on AVX2, four of 4 on SSE2 or NEON), the sums of a block of rows converted to int32
 * and handed to the output stage at once. */
#define Q_DWF_TAPS 256

/* 16 8-bit values at src centered (x - zx) as float32 at dst, those from lane n on
 * written as 0; src holds 16 readable bytes (GCC lowers a portable conversion of a
 * byte vector value by value: the x86 copies widen with vpmovzxbd / vpmovsxbd) */
static inline void q_dwf_16(const uint8_t* restrict src, int is_signed, float zx,
                            int64_t n, float* restrict dst) {
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
    const __m128i b = _mm_loadu_si128((const __m128i*)(const void*)src);
    const __m512i i = is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    _mm512_storeu_ps(dst, _mm512_maskz_sub_ps(m, _mm512_cvtepi32_ps(i), _mm512_set1_ps(zx)));
#elif defined(PLAIT_ISA_AVXVNNI) || defined(PLAIT_ISA_AVX2)
    const __m128i b = _mm_loadu_si128((const __m128i*)(const void*)src);
    const __m128i bh = _mm_srli_si128(b, 8);
    const __m256i lo = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
    const __m256i hi = is_signed ? _mm256_cvtepi8_epi32(bh) : _mm256_cvtepu8_epi32(bh);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i vn = _mm256_set1_epi32((int32_t)n);
    const __m256 z = _mm256_set1_ps(zx);
    const __m256 flo = _mm256_sub_ps(_mm256_cvtepi32_ps(lo), z);
    const __m256 fhi = _mm256_sub_ps(_mm256_cvtepi32_ps(hi), z);
    const __m256i klo = _mm256_cmpgt_epi32(vn, idx);
    const __m256i khi = _mm256_cmpgt_epi32(vn, _mm256_add_epi32(idx, _mm256_set1_epi32(8)));
    _mm256_storeu_ps(dst, _mm256_and_ps(flo, _mm256_castsi256_ps(klo)));
    _mm256_storeu_ps(dst + 8, _mm256_and_ps(fhi, _mm256_castsi256_ps(khi)));
#else
    for (int i = 0; i < 16; ++i) {
        const int32_t v = is_signed ? (int32_t)(int8_t)src[i] : (int32_t)src[i];
        dst[i] = i < n ? (float)v - zx : 0.0f;
    }
#endif
}

/* wn 8-bit values at src centered (x - zx) as float32 at dst, 16 a step: a last
 * step writes 0 to the lanes past wn (up to 15 floats past dst + wn).  avail: the
 * bytes readable from src (a last step past them reads a copy). */
static inline void q_dwf_row(const uint8_t* restrict src, int is_signed, float zx, int64_t wn,
                             int64_t avail, float* restrict dst) {
    for (int64_t x = 0; x < wn; x += 16) {
        const int64_t n = wn - x < 16 ? wn - x : 16;
        if (avail - x >= 16) {
            q_dwf_16(src + x, is_signed, zx, n, dst + x);
        } else {
            uint8_t b[16] = {0};
            memcpy(b, src + x, (size_t)n);
            q_dwf_16(b, is_signed, zx, n, dst + x);
        }
    }
}

/* An image row of wn 8-bit values centered into a padded float32 row split into its
 * 2 column phases (padded column c = x + PL at row[(c % 2) * ppad + c / 2]): 32
 * values a step split into even and odd ones by byte shuffles, a last step's lanes
 * past the row written as 0 (into the row's padding, the next row of its phase plane,
 * written after, or the plane's slack of 16); avail: the bytes readable from src. */
static void q_dwf_row_s2(const uint8_t* src, int is_signed, float zx, int64_t wn,
                         int64_t avail, int64_t pl, float* row, int64_t ppad) {
    for (int64_t x = 0; x < wn; x += 32) {
        const int64_t n = wn - x < 32 ? wn - x : 32;
        uint8_t buf[32] = {0};
        const uint8_t* s = src + x;
        if (avail - x < 32) {
            memcpy(buf, src + x, (size_t)n);
            s = buf;
        }
        const q_v16 a = q_load16(s, 0), b = q_load16(s + 16, 0);
        const q_v16 ev = Q_SHUF(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const q_v16 od = Q_SHUF(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        uint8_t e[16], o[16];
        memcpy(e, &ev, 16);
        memcpy(o, &od, 16);
        const int64_t c = x + pl;
        q_dwf_16(e, is_signed, zx, (n + 1) / 2, row + (c & 1) * ppad + (c >> 1));
        q_dwf_16(o, is_signed, zx, n / 2, row + ((c + 1) & 1) * ppad + ((c + 1) >> 1));
    }
}

/* The sums of nr output rows (the first at base in the plane) into acc (rows of OW),
 * Q_DWF_R rows at a time (independent sums; a last group repeats its last row) */
static inline __attribute__((always_inline)) void
q_dwf_rows(const float* base, const int64_t* restrict toff, const float* restrict wf,
           const int64_t taps, int64_t wpp, int64_t OW, int64_t nr, int32_t* acc) {
    for (int64_t r = 0; r < nr; r += Q_DWF_R) {
        int64_t ri[Q_DWF_R];
        for (int i = 0; i < Q_DWF_R; ++i) ri[i] = r + i < nr ? r + i : nr - 1;
        /* the columns from the right: a row's last vector spills its lanes past OW into
         * the next row's first 16 sums, written after it (in this column step, or in
         * the step of column 0 that comes last) */
        for (int64_t ow = (OW - 1) / 16 * 16; ow >= 0; ow -= 16) {
            q_fv a[Q_DWF_R][Q_FVN];
#pragma GCC unroll 4
            for (int i = 0; i < Q_DWF_R; ++i)
#pragma GCC unroll 4
                for (int j = 0; j < Q_FVN; ++j) a[i][j] = (q_fv){0};
            for (int64_t k = 0; k < taps; ++k) {
                const float* b = base + toff[k] + ow;
                const q_fv w = (q_fv){0} + wf[k];
#pragma GCC unroll 4
                for (int i = 0; i < Q_DWF_R; ++i)
#pragma GCC unroll 4
                    for (int j = 0; j < Q_FVN; ++j) {
                        q_fv x;
                        memcpy(&x, b + ri[i] * wpp + j * Q_FVL, sizeof x);
                        a[i][j] += x * w;
                    }
            }
#pragma GCC unroll 4
            for (int i = 0; i < Q_DWF_R; ++i)
#pragma GCC unroll 4
                for (int j = 0; j < Q_FVN; ++j) {
                    const q_iv v = __builtin_convertvector(a[i][j], q_iv);
                    memcpy(acc + ri[i] * OW + ow + j * Q_FVL, &v, sizeof v);
                }
        }
    }
}

static void q_dwf_range(void* ctx, int64_t lo, int64_t hi) {
    q_dw_task* t = (q_dw_task*)ctx;
    const plait_qdw_desc* d = t->d;
    const int64_t hp = t->hp, wp = t->wp, sh = d->SH, sw = d->SW;
    const int64_t hpp = (hp + sh - 1) / sh, wpp = (wp + sw - 1) / sw;
    /* the phase planes 16 floats apart: a last vector's lanes past a row (read, or
     * written as 0) stay in its plane */
    const int64_t pp = hpp * wpp + 16;
    const int64_t taps = d->KH * d->KW, psize = sh * sw * pp;
    const int64_t OH = d->OH, OW = d->OW;
    /* the plane (+ 16 floats: a last vector reads past the last row), the taps' offsets
     * and weights, and the sums of a block of output rows (+ 16: a last vector's lanes) */
    const int64_t rows = OW <= Q_DW_ACC ? Q_DW_ACC / OW : 1;
    float* xf = (float*)plait_scratch(0, (size_t)(psize + 16 + 3 * taps + rows * OW + 32 + 16));
    if (!xf) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    int64_t* toff = (int64_t*)(void*)(xf + (psize + 16 + 1) / 2 * 2);
    float* wf = (float*)(void*)(toff + taps);
    int32_t* acc = (int32_t*)(void*)(wf + taps);
    for (int64_t kh = 0; kh < d->KH; ++kh)
        for (int64_t kw = 0; kw < d->KW; ++kw) {
            const int64_t dh = kh * d->DH, dw = kw * d->DW;
            toff[kh * d->KW + kw] = ((dh % sh) * sw + dw % sw) * pp + dh / sh * wpp + dw / sw;
        }
    const int64_t H = d->H, W = d->W;
    const int64_t hn = H < hp - d->PT ? H : hp - d->PT;
    const int64_t wn = W < wp - d->PL ? W : wp - d->PL;
    const float zx = (float)t->zx;
    for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t ch = plane % d->C;
        for (int64_t k = 0; k < taps; ++k) wf[k] = (float)t->w[ch * taps + k];
        memset(xf, 0, sizeof(float) * (size_t)(psize + 16));
        int64_t rph = d->PT % sh, ridx = d->PT / sh;
        for (int64_t h = 0; h < hn; ++h, rph = rph + 1 == sh ? 0 : rph + 1, ridx += rph == 0) {
            float* restrict row = xf + rph * sw * pp + ridx * wpp;
            const int64_t at = (plane * H + h) * W;   /* the row's first byte */
            /* strides 1 and 2 only (plait_qconv2d_depthwise takes the int16 planes
             * past them) */
            if (sw == 1)
                /* 16 values a step; the lanes past the row write 0 into its padding and
                 * the next row of its phase plane (written after) or the plane's slack */
                q_dwf_row(t->x + at, t->x_signed, zx, wn, t->xbytes - at, row + d->PL);
            else
                q_dwf_row_s2(t->x + at, t->x_signed, zx, wn, t->xbytes - at, d->PL, row, pp);
        }
        for (int64_t oh0 = 0; oh0 < OH; oh0 += rows) {
            const int64_t nr = OH - oh0 < rows ? OH - oh0 : rows;
            if (taps == 9)   /* 3x3: the taps' loop unrolled, its weights in registers */
                q_dwf_rows(xf + oh0 * wpp, toff, wf, 9, wpp, OW, nr, acc);
            else
                q_dwf_rows(xf + oh0 * wpp, toff, wf, taps, wpp, OW, nr, acc);
            q_store(t->out, (const uint32_t*)acc, nr * OW, ch, 0, t->c, (plane * OH + oh0) * OW);
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
    t.xbytes = planes * d->H * d->W;
    const int64_t work = planes * d->OH * d->OW * d->KH * d->KW;
    int nthreads = work < Q_MIN_PARALLEL / 4 ? 1 : plait_max_threads();
    /* the float32 lanes when every window's sum is exact in them, a row of output fits
     * the sums' block and the strides are at most 2; strided, when the float32 plane
     * fits in 32 KB (past it the int16 planes measured faster: MobileNetV1's 113 x 113
     * stride-2 layer 1.1x) */
    const int64_t fplane = (t.hp + 1) * (t.wp + 1) * 4;
    const int exact = d->KH * d->KW <= Q_DWF_TAPS && d->OW <= Q_DW_ACC && d->SH <= 2 &&
                      d->SW <= 2 && (d->SH * d->SW == 1 || fplane <= 32768);
    plait_parallel_range(exact ? q_dwf_range : q_dw_range, &t, planes, nthreads);
    return t.status;
}

PLAIT_ISA_FAMILY("qconv")
PLAIT_ISA_DISPATCH(int, plait_qconv2d, (const plait_qconv_problem* p), (p))
PLAIT_ISA_DISPATCH(int, plait_qconv2d_depthwise,
                   (const plait_qdw_desc* d, const void* x, int x_signed, const void* zx,
                    const int32_t* w, const plait_q_out* out, void* c),
                   (d, x, x_signed, zx, w, out, c))
