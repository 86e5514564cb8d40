/* plait_conv.c: the c target's direct 2-D convolution (float32, NCHW), a kernel family
 * of plait_isa.h.
 *
 * A convolution is the matrix product of plait_gemm.c with an implicit im2col B: the
 * O x (C*KH*KW) weights packed at compile time (6-row panels), the patches packed block
 * by block straight from the input (plait_conv_geom).  Here the input is prepared: a 1x1
 * stride-1 convolution is a plain product of the input planes; a padded input, or one
 * read with a column stride, is copied once into a zero-padded, phase-split image (padded
 * column q of a row at [q % SW][q / SW], so the NR pixels of an output row read NR
 * neighbouring values for every kernel tap); an unpadded input with a column stride is
 * read where it lies.  plait_conv2d_pool also pools 2x2 on the register tile.  Each copy
 * calls the product of its own ISA: the conv family needs the gemm family. */
#include "plait_isa.h"
#include "plait_tile.h"

/* this copy's ISA's product (plait_gemm.c, a family built for the same ISAs) */
PLAIT_HIDDEN int PLAIT_ISA_FN(plait_gemm)(const plait_gemm_problem* p);

/* One input row into its two column phases: padded column q = col + PL goes to
 * row[(q % 2) * WPP + q / 2].  16 columns at a time are split into even and odd by two
 * shuffles (a strided scalar copy was a visible share of a whole early layer's time). */
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

/* Input row in (W values; NULL: a padding row) into its zero-padded, phase-split copy
 * row (RL values): padded column q = col + PL at row[(q % SW) * WPP + q / SW]. */
static void pad_row(const plait_conv2d_desc* d, const float* in, float* row, int64_t RL,
                    int64_t WPP) {
    memset(row, 0, sizeof(float) * (size_t)RL);
    if (!in) return;
    if (d->SW == 1) {
        memcpy(row + d->PL, in, sizeof(float) * (size_t)d->W);
        return;
    }
    if (d->SW == 2) {
        split_row2(in, d->W, d->PL, row, WPP);
        return;
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
    const float* s = c->x + pl * d->H * d->W;
    float* o = c->dst + pl * c->HP * c->RL;
    for (int64_t r = 0; r < c->HP; ++r) {
        const int64_t h = r - d->PT;
        pad_row(d, h >= 0 && h < d->H ? s + h * d->W : NULL, o + r * c->RL, c->RL, c->WPP);
    }
}

/* plait_conv_band.fill: padded rows r0 .. r1 of channels c0 .. c1 of image bi */
static void conv_band_fill(const plait_conv_band* band, int64_t bi, int64_t c0, int64_t c1,
                           int64_t r0, int64_t r1, float* dst) {
    const plait_conv2d_desc* d = (const plait_conv2d_desc*)band->desc;
    const int64_t WP = d->W + d->PL + d->PR;
    const int64_t WPP = (WP + d->SW - 1) / d->SW, RL = WPP * d->SW;
    for (int64_t c = c0; c <= c1; ++c) {
        const float* s = band->x + (bi * d->C + c) * d->H * d->W;
        for (int64_t r = r0; r <= r1; ++r, dst += RL) {
            const int64_t h = r - d->PT;
            pad_row(d, h >= 0 && h < d->H ? s + h * d->W : NULL, dst, RL, WPP);
        }
    }
}

/* A padded or column-strided input of more than this many floats (a 3 x 224 x 224 image
 * padded: 153,228) is not copied whole before the product: each of the product's jobs
 * copies the rows that its pixels read, for the channels of one block of the sum at a
 * time (plait_gemm_problem.band), and packs them at once from its L1 cache.  The whole
 * copy was a parallel call of its own, over planes (3 of them for an RGB image: one
 * thread copied two), that every thread waited for. */
#define PLAIT_BAND_MIN 65536

/* The input of a convolution as the product reads it: *img and the geometry *g of its
 * implicit im2col matrix (see the file's comment).  A padded or column-strided input is
 * copied into this thread's scratch slot 3, or, larger than PLAIT_BAND_MIN and with band
 * given, described in *band for the product's jobs to copy.  0 on success, 1 out of
 * memory. */
static int conv2d_input(const plait_conv2d_desc* d, const float* x, plait_conv_geom* g,
                        const float** img, plait_conv_band* band) {
    const int64_t HP = d->H + d->PT + d->PB, WP = d->W + d->PL + d->PR;
    const int64_t WPP = (WP + d->SW - 1) / d->SW, RL = WPP * d->SW;
    plait_conv_geom geom = {d->C, HP, RL, WPP, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW,
                            d->OH, d->OW, 1};
    *g = geom;
    *img = x;
    if (!(d->PT | d->PL | d->PB | d->PR) && d->SW > 1 && (d->KW - 1) * d->DW + 1 <= d->SW) {
        /* unpadded with a column stride at least as wide as the window (a strided 1x1
         * shortcut, a patch embedding): the patches are gathered from the input where it
         * lies, rather than from a phase-split copy of all of it (of which a 1x1 reads a
         * fraction, and which a patch embedding reads once).  Windows wider than the
         * stride read each column several times: copied phase-split below, their patches
         * are contiguous loads, not gathers (wav2vec2's 3-wide stride-2 1-D convolution
         * over 3199 frames of 512 channels took 3.4x as long with gathers) */
        g->RL = g->WPP = d->W;
        g->SW = 1;
        g->CS = d->SW;
    } else if (d->PT | d->PL | d->PB | d->PR | (d->SW > 1)) {
        /* zero-padded, and with a column stride the columns split into SW phases:
         * padded column q of a row goes to [q % SW][q / SW], so the NR pixels of an
         * output row read NR neighbouring values for every kernel tap */
        size_t need = (size_t)(d->N * d->C * HP * RL);
        if (band && need > (size_t)PLAIT_BAND_MIN && d->OH > 1) {
            /* not copied whole: the product's jobs copy the rows they read (conv_band_fill;
             * with one output row, a 1-D convolution, every job would copy all of it) */
            band->fill = conv_band_fill;
            band->desc = d;
            band->x = x;
            return 0;
        }
        float* dst = plait_scratch(3, need);
        if (!dst) return 1;
        const int64_t planes = d->N * d->C;
        plait_pad_task pad = {d, x, dst, HP, RL, WPP};
        /* on every thread from 64K floats (a 64-channel 56 x 56 input, copied on one
         * thread, was a tenth of a stride-2 layer that scales to two) */
        plait_parallel_for(planes, plait_pad_plane, &pad,
                           planes * HP * RL > 65536 ? plait_max_threads() : 1);
        *img = dst;
    }
    return 0;
}

static int conv2d_impl(const plait_conv2d_desc* dg, const float* x, const float* apacked,
                       const float* bias, const float* res, int relu, int pool, float* out) {
    plait_conv2d_desc gd;
    const plait_conv2d_desc* d = plait_conv2d_groups(dg, &gd);
    plait_gemm_problem p;
    memset(&p, 0, sizeof p);
    if (dg->G > 1) {
        p.groups = dg->G;
        p.a_bs = (d->O + PLAIT_MR - 1) / PLAIT_MR * d->C * d->KH * d->KW * PLAIT_MR;
        p.bias_bs = d->O;
    }
    p.max_threads = (int)d->max_threads;
    p.split = (int)d->split;   /* a tuned point's (plait_conv2d_desc) */
    p.kc = d->kc;
    p.mc = d->mc;
    p.nc = d->nc;
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
    p.act = d->act;
    p.act_lo = d->act_lo;
    p.act_hi = d->act_hi;
    p.batch = d->N;
    p.c_bs = d->O * p.N;
    if (pool) {
        if (d->OH % 2 || d->OW % 8 || p.K > PLAIT_KC || res || d->act) return 2;
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
        return PLAIT_ISA_FN(plait_gemm)(&p);
    }
    plait_conv_geom g;
    const float* img;
    plait_conv_band band = {NULL, NULL, NULL};
    if (conv2d_input(d, x, &g, &img, pool ? NULL : &band)) return 1;
    if (band.fill) p.band = &band;
    p.b_kind = PLAIT_B_CONV;
    p.b = img;
    p.conv = &g;
    p.b_bs = d->C * g.HP * g.RL;
    return PLAIT_ISA_FN(plait_gemm)(&p);
}

/* ---------------------------------------------- output pixels as the rows */

/* Rows k0 .. k0 + kc - 1 (kc <= PLAIT_KC) of panels lo .. hi - 1 of the transposed im2col
 * matrix of one image of a convolution, A'[pixel][k], packed as the product's A panels
 * ([ceil(P/MR)][K][MR], zero rows past the last pixel), into dst.  The offsets of the k
 * are computed once, and the pixels' once per panel (plait_tile.h). */
static void pack_rows_part(const plait_conv_geom* g, const float* img, int64_t P, int64_t K,
                           int64_t k0, int64_t kc, int64_t lo, int64_t hi, float* dst) {
    int64_t koff[PLAIT_KC];
    plait_conv_koff(g, k0, kc, koff);
    for (int64_t panel = lo; panel < hi; ++panel) {
        const int64_t p0 = panel * PLAIT_MR, mr = P - p0 < PLAIT_MR ? P - p0 : PLAIT_MR;
        float* d = dst + (panel * K + k0) * PLAIT_MR;
        int64_t pix[PLAIT_MR];
        plait_conv_pixels(g, p0, mr, pix);
        if (mr == PLAIT_MR && pix[PLAIT_MR - 1] - pix[0] == PLAIT_MR - 1) {
            /* MR neighbouring pixels of one output row at stride 1 */
            const float* base = img + pix[0];
            for (int64_t k = 0; k < kc; ++k, d += PLAIT_MR)
                for (int64_t i = 0; i < PLAIT_MR; ++i) d[i] = base[koff[k] + i];
            continue;
        }
        for (int64_t k = 0; k < kc; ++k, d += PLAIT_MR) {
            const float* src = img + koff[k];
            int64_t i = 0;
            for (; i < mr; ++i) d[i] = src[pix[i]];
            for (; i < PLAIT_MR; ++i) d[i] = 0.0f;
        }
    }
}

/* All of one image's A' (see pack_rows_part) */
static void pack_rows_image(const plait_conv_geom* g, const float* img, int64_t P, int64_t K,
                            float* dst) {
    const int64_t panels = (P + PLAIT_MR - 1) / PLAIT_MR;
    for (int64_t k0 = 0; k0 < K; k0 += PLAIT_KC)
        pack_rows_part(g, img, P, K, k0, K - k0 < PLAIT_KC ? K - k0 : PLAIT_KC, 0, panels, dst);
}

/* A' of every image ([batch][ceil(P/MR)][K][MR]) by several threads: job = (image, block
 * of PLAIT_KC of k, group of PLAIT_ROWS_GROUP panels) */
#define PLAIT_ROWS_GROUP 8

typedef struct {
    const plait_conv_geom* g;
    const float* img;
    int64_t img_bs, P, K, panels, kblocks, groups;
    float* dst;
} plait_pack_rows_task;

static void plait_pack_rows(void* arg, int64_t job) {
    const plait_pack_rows_task* t = (const plait_pack_rows_task*)arg;
    const int64_t grp = job % t->groups, kb = job / t->groups % t->kblocks;
    const int64_t bi = job / (t->groups * t->kblocks);
    const int64_t k0 = kb * PLAIT_KC, kc = t->K - k0 < PLAIT_KC ? t->K - k0 : PLAIT_KC;
    const int64_t lo = grp * PLAIT_ROWS_GROUP;
    const int64_t hi = lo + PLAIT_ROWS_GROUP < t->panels ? lo + PLAIT_ROWS_GROUP : t->panels;
    pack_rows_part(t->g, t->img + bi * t->img_bs, t->P, t->K, k0, kc, lo, hi,
                   t->dst + bi * t->panels * t->K * PLAIT_MR);
}

/* PLAIT_SL x PLAIT_SL blocks transposed in registers (unpack_rows_block) */
#if PLAIT_SL == 16
#define CV_LOG2V 4
#define CV_ZIPLO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define CV_ZIPHI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#else
#define CV_LOG2V 3
#define CV_ZIPLO 0, 8, 1, 9, 2, 10, 3, 11
#define CV_ZIPHI 4, 12, 5, 13, 6, 14, 7, 15
#endif
#if defined(__clang__)
#define CV_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define CV_PRAGMA_UNROLL _Pragma("unroll")
#else
#define CV_SHUF(a, b, ...) __builtin_shuffle(a, b, (plait_svi){__VA_ARGS__})
#define CV_PRAGMA_UNROLL _Pragma("GCC unroll 16")
#endif

/* r[i][j] -> r[j][i] for a PLAIT_SL x PLAIT_SL block in registers */
static inline __attribute__((always_inline)) void cv_transpose(plait_sv* r) {
    CV_PRAGMA_UNROLL
    for (int s = 0; s < CV_LOG2V; ++s) {
        plait_sv n[PLAIT_SL];
        CV_PRAGMA_UNROLL
        for (int i = 0; i < PLAIT_SL / 2; ++i) {
            n[2 * i] = CV_SHUF(r[i], r[i + PLAIT_SL / 2], CV_ZIPLO);
            n[2 * i + 1] = CV_SHUF(r[i], r[i + PLAIT_SL / 2], CV_ZIPHI);
        }
        CV_PRAGMA_UNROLL
        for (int i = 0; i < PLAIT_SL; ++i) r[i] = n[i];
    }
}

/* out[bi][o][i .. i + n) = epilogue(t[i ..][o - o0]) for the PLAIT_SL channels from o
 * (n <= PLAIT_SL pixels from i; tc = t + (o - o0); bv their biases): the rows of the
 * tile, bias added, transposed in registers, then the residual and relu per channel */
static inline __attribute__((always_inline)) void
unpack_rows_vec(const float* tc, int64_t ldt, plait_sv bv, const float* res, int relu,
                float* out, int64_t P, int64_t i, int64_t n) {
    plait_sv r[PLAIT_SL];
    CV_PRAGMA_UNROLL
    for (int q = 0; q < PLAIT_SL; ++q)
        r[q] = q < n ? *(const plait_svu*)(tc + (i + q) * ldt) + bv : PLAIT_SSPLAT(0.0f);
    cv_transpose(r);
    CV_PRAGMA_UNROLL
    for (int k = 0; k < PLAIT_SL; ++k) {
        plait_sv v = r[k], rv;
        if (res) {
            if (n == PLAIT_SL) rv = *(const plait_svu*)(res + k * P + i);
            else plait_sv_load_n(&rv, res + k * P + i, n);
            v += rv;
        }
        if (relu) v = PLAIT_SELECT((v > PLAIT_SSPLAT(0.0f)) | (v != v), v, PLAIT_SSPLAT(0.0f));
        if (n == PLAIT_SL) *(plait_svu*)(out + k * P + i) = v;
        else plait_sv_store_n(out + k * P + i, &v, n);
    }
}

/* out[bi][o][pix] = epilogue(t[pix][o - o0]) for the oc channels from o0 (t: ldt floats
 * from one pixel to the next): the transposed product back into NCHW with the bias,
 * residual, relu and activation; PLAIT_SL channels at a time on PLAIT_SL x PLAIT_SL
 * blocks transposed in registers (one strided scalar load per value was a fifth of a
 * 512 -> 2048 1x1 layer's time on 7 x 7), the channels past them one by one. */
static void unpack_rows_block(const plait_conv2d_desc* d, const float* t, int64_t ldt,
                              const float* bias, const float* res, int relu, float* out,
                              int64_t P, int64_t bi, int64_t o0, int64_t oc) {
    const int64_t O = d->O;
    int64_t ov = o0;
    for (; ov + PLAIT_SL <= o0 + oc; ov += PLAIT_SL) {
        const float* tc = t + (ov - o0);
        const plait_sv bv = bias ? *(const plait_svu*)(bias + ov) : PLAIT_SSPLAT(0.0f);
        float* orow = out + (bi * O + ov) * P;
        const float* rrow = res ? res + (bi * O + ov) * P : NULL;
        int64_t i = 0;
        for (; i + PLAIT_SL <= P; i += PLAIT_SL)
            unpack_rows_vec(tc, ldt, bv, rrow, relu, orow, P, i, PLAIT_SL);
        if (i < P) unpack_rows_vec(tc, ldt, bv, rrow, relu, orow, P, i, P - i);
    }
    for (int64_t o = ov; o < o0 + oc; ++o) {
        float* restrict row = out + (bi * O + o) * P;
        const float* rrow = res ? res + (bi * O + o) * P : NULL;
        const float* tc = t + (o - o0);
        const float bv = bias ? bias[o] : 0.0f;
        for (int64_t i = 0; i < P; ++i) {
            float v = tc[i * ldt] + bv;
            if (rrow) v += rrow[i];
            if (relu && !(v > 0.0f) && v == v) v = 0.0f;   /* as PLAIT_RELU */
            row[i] = v;
        }
    }
    if (d->act) {
        plait_gemm_problem ap;
        memset(&ap, 0, sizeof ap);
        ap.act = d->act;
        ap.act_lo = d->act_lo;
        ap.act_hi = d->act_hi;
        plait_act_tile(out + (bi * O + o0) * P, P, oc, P, &ap);
    }
}

/* job = (image, block of 16 channels) of unpack_rows_block over the whole product */
typedef struct {
    const plait_conv2d_desc* d;
    const float* t;
    const float* bias;
    const float* res;
    int relu;
    float* out;
    int64_t P, oblocks;
} plait_unpack_rows_task;

static void plait_unpack_rows(void* arg, int64_t job) {
    const plait_unpack_rows_task* u = (const plait_unpack_rows_task*)arg;
    const int64_t O = u->d->O, P = u->P;
    const int64_t bi = job / u->oblocks, o0 = job % u->oblocks * 16;
    const int64_t oc = O - o0 < 16 ? O - o0 : 16;
    unpack_rows_block(u->d, u->t + bi * P * O + o0, O, u->bias, u->res, u->relu, u->out, P,
                      bi, o0, oc);
}

/* The convolution as the transposed product out^T[pix][o] = A'[pix][k] @ W^T[k][o]:
 * the output pixels are the rows (panels of 6, tails of 4 and 2) and the output
 * channels the columns (the vector lanes), so a 7 x 7 image computes 50 rows for its
 * 49 pixels instead of 64 columns.  One parallel call: jobs (image, block of output
 * channels), PLAIT_PIXEL_ROWS_JOBS per thread and image, taken from both ends.  A thread
 * packs the image's A' (the transposed im2col matrix) into its scratch slot 2 when it
 * takes its first job of the image, runs the block's product into a P x cols buffer
 * (slot 4: in its L2 cache) and writes that back into NCHW with the epilogue.  Each
 * thread reads its share of the weights and none waits for another, where packing A'
 * once for all threads, then the product, then the transposition would be three
 * parallel calls, each thread waiting at the end of each. */
#define PLAIT_PIXEL_ROWS_JOBS 1

typedef struct {
    const plait_conv2d_desc* d;
    const plait_conv_geom* g;
    const float* img;             /* the input as the packing reads it (conv2d_input) */
    int64_t img_bs;
    const float* bpacked;
    const float* bias;
    const float* res;
    int relu;
    float* out;
    int64_t cols, oblocks;        /* channels per job (whole wide tiles), jobs per image */
    int64_t G;                    /* groups (d's images are image x group: plait_conv2d_groups) */
    int64_t next;                 /* the jobs taken (see plait_take_job) */
    int status;                   /* 1: a thread was out of memory */
} plait_pixel_rows_task;

static void plait_pixel_rows_run(void* arg) {
    plait_pixel_rows_task* t = (plait_pixel_rows_task*)arg;
    const plait_conv2d_desc* d = t->d;
    const int64_t P = d->OH * d->OW, K = d->C * d->KH * d->KW, O = d->O;
    const int64_t panels = (P + PLAIT_MR - 1) / PLAIT_MR;
    float* apack = NULL;
    float* tb = NULL;
    int64_t packed = -1;          /* the image whose A' is in apack */
    for (int64_t job; (job = plait_take_job(&t->next, d->N * t->oblocks)) >= 0;) {
        const int64_t bi = job / t->oblocks, o0 = job % t->oblocks * t->cols;
        const int64_t oc = O - o0 < t->cols ? O - o0 : t->cols;
        const int64_t grp = t->G > 1 ? bi % t->G : 0;   /* its weights and bias */
        if (!apack) {
            apack = plait_scratch(2, (size_t)(panels * K * PLAIT_MR));
            tb = plait_scratch(4, (size_t)(P * t->cols));
            if (!apack || !tb) {
                __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
                return;
            }
        }
        if (packed != bi) {
            pack_rows_image(t->g, t->img + bi * t->img_bs, P, K, apack);
            packed = bi;
        }
        plait_gemm_problem p;
        memset(&p, 0, sizeof p);
        p.M = P;
        p.N = oc;
        p.K = K;
        p.a_kind = PLAIT_A_PACKED;
        p.a = apack;
        p.b_kind = PLAIT_B_PACKED;
        p.b = t->bpacked + (grp * ((O + PLAIT_NR - 1) / PLAIT_NR) + o0 / PLAIT_NR) * K * PLAIT_NR;
        p.c = tb;
        p.ldc = t->cols;
        p.batch = 1;
        p.max_threads = 1;
        if (PLAIT_ISA_FN(plait_gemm)(&p)) {
            __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
            return;
        }
        unpack_rows_block(d, tb, t->cols, t->bias ? t->bias + grp * O : NULL, t->res, t->relu,
                          t->out, P, bi, o0, oc);
    }
}

/* The same with A' packed once by all threads, the product and the transposition each a
 * parallel call of its own: for an A' larger than PLAIT_PIXEL_ROWS_OWN_MAX floats, which
 * every thread packing it for itself costs more than waiting (a few per cent on
 * ResNet-50's 7 x 7 layers, K 4608 and 2048, on two threads). */
#define PLAIT_PIXEL_ROWS_OWN_MAX 65536

static int conv2d_pixel_rows_shared(const plait_conv2d_desc* d, const plait_conv_geom* g,
                                    const float* img, const float* bpacked, const float* bias,
                                    const float* res, int relu, float* out, int nthreads) {
    const int64_t P = d->OH * d->OW, K = d->C * d->KH * d->KW, O = d->O;
    const int64_t panels = (P + PLAIT_MR - 1) / PLAIT_MR;
    const int64_t kblocks = (K + PLAIT_KC - 1) / PLAIT_KC;
    float* apack = plait_scratch(2, (size_t)(d->N * panels * K * PLAIT_MR));
    float* t = plait_scratch(4, (size_t)(d->N * P * O));
    if (!apack || !t) return 1;
    const int64_t groups = (panels + PLAIT_ROWS_GROUP - 1) / PLAIT_ROWS_GROUP;
    plait_pack_rows_task pk = {g, img, d->C * g->HP * g->RL, P, K, panels, kblocks, groups,
                               apack};
    plait_parallel_for(d->N * kblocks * groups, plait_pack_rows, &pk, nthreads);
    plait_gemm_problem p;
    memset(&p, 0, sizeof p);
    p.M = P;
    p.N = O;
    p.K = K;
    p.a_kind = PLAIT_A_PACKED;
    p.a = apack;
    p.a_bs = panels * K * PLAIT_MR;
    p.b_kind = PLAIT_B_PACKED;
    p.b = bpacked;
    p.c = t;
    p.ldc = O;
    p.c_bs = P * O;
    p.batch = d->N;
    p.max_threads = nthreads;
    int status = PLAIT_ISA_FN(plait_gemm)(&p);
    if (status) return status;
    const int64_t oblocks = (O + 15) / 16;
    plait_unpack_rows_task u = {d, t, bias, res, relu, out, P, oblocks};
    plait_parallel_for(d->N * oblocks, plait_unpack_rows, &u, nthreads);
    return 0;
}

/* A grouped convolution (G > 1) runs as one ungrouped convolution per image and group
 * (plait_conv2d_groups), each job (image, group) packing its own A' and computing all
 * of the group's output channels. */
static int conv2d_pixel_rows(const plait_conv2d_desc* dg, const float* x,
                             const float* bpacked, const float* bias, const float* res,
                             int relu, float* out) {
    plait_conv2d_desc gd;
    const plait_conv2d_desc* d = plait_conv2d_groups(dg, &gd);
    const int64_t G = dg->G > 1 ? dg->G : 1;
    plait_conv_geom g;
    const float* img;
    if (conv2d_input(d, x, &g, &img, NULL)) return 1;
    int nthreads = plait_max_threads();
    if (d->max_threads > 0 && nthreads > d->max_threads) nthreads = (int)d->max_threads;
    const int64_t apanels = (d->OH * d->OW + PLAIT_MR - 1) / PLAIT_MR;
    if (G == 1 && nthreads > 1 &&
        apanels * d->C * d->KH * d->KW * PLAIT_MR > PLAIT_PIXEL_ROWS_OWN_MAX)
        return conv2d_pixel_rows_shared(d, &g, img, bpacked, bias, res, relu, out, nthreads);
    /* blocks of whole wide tiles, PLAIT_PIXEL_ROWS_JOBS per thread (a group whole) */
    const int64_t tiles = (d->O + PLAIT_TILE_N - 1) / PLAIT_TILE_N;
    const int64_t per = G > 1 ? 1 : (int64_t)PLAIT_PIXEL_ROWS_JOBS * nthreads;
    const int64_t cols = (tiles + per - 1) / per * PLAIT_TILE_N;
    plait_pixel_rows_task t = {d, &g, img, d->C * g.HP * g.RL, bpacked, bias, res, relu, out,
                               cols, (d->O + cols - 1) / cols, G, 0, 0};
    const int64_t jobs = d->N * t.oblocks;
    plait_parallel(plait_pixel_rows_run, &t, jobs < nthreads ? (int)jobs : nthreads);
    return t.status;
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_conv2d)(const plait_conv2d_desc* d, const float* x, const float* apacked,
                           const float* bias, const float* res, int relu, float* out) {
    return conv2d_impl(d, x, apacked, bias, res, relu, 0, out);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_conv2d_pool)(const plait_conv2d_desc* d, const float* x,
                                const float* apacked, const float* bias, int relu,
                                float* out) {
    return conv2d_impl(d, x, apacked, bias, NULL, relu, 1, out);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_conv2d_pixel_rows)(const plait_conv2d_desc* d, const float* x,
                                      const float* bpacked, const float* bias,
                                      const float* res, int relu, float* out) {
    return conv2d_pixel_rows(d, x, bpacked, bias, res, relu, out);
}

PLAIT_ISA_FAMILY("conv")
PLAIT_ISA_DISPATCH(int, plait_conv2d,
                   (const plait_conv2d_desc* d, const float* x, const float* apacked,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, apacked, bias, res, relu, out))
PLAIT_ISA_DISPATCH(int, plait_conv2d_pool,
                   (const plait_conv2d_desc* d, const float* x, const float* apacked,
                    const float* bias, int relu, float* out),
                   (d, x, apacked, bias, relu, out))
PLAIT_ISA_DISPATCH(int, plait_conv2d_pixel_rows,
                   (const plait_conv2d_desc* d, const float* x, const float* bpacked,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, bpacked, bias, res, relu, out))
