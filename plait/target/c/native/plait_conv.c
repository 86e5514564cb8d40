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

/* The input of a convolution as the product reads it: *img and the geometry *g of its
 * implicit im2col matrix (see the file's comment).  A padded or column-strided input is
 * copied into this thread's scratch slot 3.  0 on success, 1 out of memory. */
static int conv2d_input(const plait_conv2d_desc* d, const float* x, plait_conv_geom* g,
                        const float** img) {
    const int64_t HP = d->H + d->PT + d->PB, WP = d->W + d->PL + d->PR;
    const int64_t WPP = (WP + d->SW - 1) / d->SW, RL = WPP * d->SW;
    plait_conv_geom geom = {d->C, HP, RL, WPP, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW,
                            d->OH, d->OW, 1};
    *g = geom;
    *img = x;
    if (!(d->PT | d->PL | d->PB | d->PR) && d->SW > 1) {
        /* unpadded with a column stride (a strided 1x1 shortcut, say): the patches are
         * gathered from the input where it lies, rather than from a phase-split copy of
         * all of it (of which such a convolution reads a fraction) */
        g->RL = g->WPP = d->W;
        g->SW = 1;
        g->CS = d->SW;
    } else if (d->PT | d->PL | d->PB | d->PR | (d->SW > 1)) {
        /* zero-padded, and with a column stride the columns split into SW phases:
         * padded column q of a row goes to [q % SW][q / SW], so the NR pixels of an
         * output row read NR neighbouring values for every kernel tap */
        size_t need = (size_t)(d->N * d->C * HP * RL);
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

static int conv2d_impl(const plait_conv2d_desc* d, const float* x, const float* apacked,
                       const float* bias, const float* res, int relu, int pool, float* out) {
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
    if (conv2d_input(d, x, &g, &img)) return 1;
    p.b_kind = PLAIT_B_CONV;
    p.b = img;
    p.conv = &g;
    p.b_bs = d->C * g.HP * g.RL;
    return PLAIT_ISA_FN(plait_gemm)(&p);
}

/* ---------------------------------------------- output pixels as the rows */

/* The transposed im2col matrix of a convolution, A'[pixel][k], packed as the product's
 * A panels ([batch][ceil(P/MR)][K][MR], zero rows past the last pixel): job = (image,
 * block of PLAIT_KC of k, group of PLAIT_ROWS_GROUP panels).  The offsets of the
 * block's k are computed once per job, and the pixels' once per panel (plait_tile.h). */
#define PLAIT_ROWS_GROUP 8

typedef struct {
    const plait_conv_geom* g;
    const float* img;
    int64_t img_bs, P, K, panels, kblocks, groups;
    float* dst;
} plait_pack_rows_task;

static void plait_pack_rows(void* arg, int64_t job) {
    const plait_pack_rows_task* t = (const plait_pack_rows_task*)arg;
    const plait_conv_geom* g = t->g;
    const int64_t grp = job % t->groups, kb = job / t->groups % t->kblocks;
    const int64_t bi = job / (t->groups * t->kblocks);
    const int64_t k0 = kb * PLAIT_KC, kc = t->K - k0 < PLAIT_KC ? t->K - k0 : PLAIT_KC;
    const float* img = t->img + bi * t->img_bs;
    int64_t koff[PLAIT_KC];
    plait_conv_koff(g, k0, kc, koff);
    const int64_t pend = (grp + 1) * PLAIT_ROWS_GROUP < t->panels
                         ? (grp + 1) * PLAIT_ROWS_GROUP : t->panels;
    for (int64_t panel = grp * PLAIT_ROWS_GROUP; panel < pend; ++panel) {
        const int64_t p0 = panel * PLAIT_MR, mr = t->P - p0 < PLAIT_MR ? t->P - p0 : PLAIT_MR;
        float* dst = t->dst + ((bi * t->panels + panel) * t->K + k0) * PLAIT_MR;
        int64_t pix[PLAIT_MR];
        plait_conv_pixels(g, p0, mr, pix);
        if (mr == PLAIT_MR && pix[PLAIT_MR - 1] - pix[0] == PLAIT_MR - 1) {
            /* MR neighbouring pixels of one output row at stride 1 */
            const float* base = img + pix[0];
            for (int64_t k = 0; k < kc; ++k, dst += PLAIT_MR)
                for (int64_t i = 0; i < PLAIT_MR; ++i) dst[i] = base[koff[k] + i];
            continue;
        }
        for (int64_t k = 0; k < kc; ++k, dst += PLAIT_MR) {
            const float* src = img + koff[k];
            int64_t i = 0;
            for (; i < mr; ++i) dst[i] = src[pix[i]];
            for (; i < PLAIT_MR; ++i) dst[i] = 0.0f;
        }
    }
}

/* out[b][o][pix] = epilogue(t[b][pix][o]): the transposed product back into NCHW with
 * the bias, residual, relu and activation; job = (image, block of 16 channels). */
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
    const float* t = u->t + bi * P * O;
    for (int64_t o = o0; o < o0 + oc; ++o) {
        float* restrict row = u->out + (bi * O + o) * P;
        const float* rrow = u->res ? u->res + (bi * O + o) * P : NULL;
        const float bv = u->bias ? u->bias[o] : 0.0f;
        for (int64_t i = 0; i < P; ++i) {
            float v = t[i * O + o] + bv;
            if (rrow) v += rrow[i];
            if (u->relu && !(v > 0.0f) && v == v) v = 0.0f;   /* as PLAIT_RELU */
            row[i] = v;
        }
    }
    if (u->d->act) {
        plait_gemm_problem ap;
        memset(&ap, 0, sizeof ap);
        ap.act = u->d->act;
        ap.act_lo = u->d->act_lo;
        ap.act_hi = u->d->act_hi;
        plait_act_tile(u->out + (bi * O + o0) * P, P, oc, P, &ap);
    }
}

/* The convolution as the transposed product out^T[pix][o] = A'[pix][k] @ W^T[k][o]:
 * the output pixels are the rows (panels of 6, tails of 4 and 2) and the output
 * channels the columns (the vector lanes), so a 7 x 7 image computes 50 rows for its
 * 49 pixels instead of 64 columns.  A' (the transposed im2col matrix) is packed once,
 * whole, by every thread into this thread's scratch slot 2; the product accumulates
 * into slot 4, which is then transposed into out with the epilogue. */
static int conv2d_pixel_rows(const plait_conv2d_desc* d, const float* x,
                             const float* bpacked, const float* bias, const float* res,
                             int relu, float* out) {
    plait_conv_geom g;
    const float* img;
    if (conv2d_input(d, x, &g, &img)) return 1;
    const int64_t P = d->OH * d->OW, K = d->C * d->KH * d->KW, O = d->O;
    const int64_t panels = (P + PLAIT_MR - 1) / PLAIT_MR;
    const int64_t kblocks = (K + PLAIT_KC - 1) / PLAIT_KC;
    float* apack = plait_scratch(2, (size_t)(d->N * panels * K * PLAIT_MR));
    float* t = plait_scratch(4, (size_t)(d->N * P * O));
    if (!apack || !t) return 1;
    const int nthreads = plait_max_threads();
    const int64_t groups = (panels + PLAIT_ROWS_GROUP - 1) / PLAIT_ROWS_GROUP;
    plait_pack_rows_task pk = {&g, img, d->C * g.HP * g.RL, P, K, panels, kblocks, groups,
                               apack};
    const int64_t jobs = d->N * kblocks * groups;
    plait_parallel_for(jobs, plait_pack_rows, &pk,
                       d->N * panels * K * PLAIT_MR > 65536 ? nthreads : 1);
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
    int status = PLAIT_ISA_FN(plait_gemm)(&p);
    if (status) return status;
    const int64_t oblocks = (O + 15) / 16;
    plait_unpack_rows_task u = {d, t, bias, res, relu, out, P, oblocks};
    plait_parallel_for(d->N * oblocks, plait_unpack_rows, &u,
                       d->N * P * O > 65536 ? nthreads : 1);
    return 0;
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
