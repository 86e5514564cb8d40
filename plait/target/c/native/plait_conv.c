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
        /* on every thread from 64K floats (a 64-channel 56 x 56 input, copied on one
         * thread, was a tenth of a stride-2 layer that scales to two) */
        plait_parallel_for(planes, plait_pad_plane, &pad,
                           planes * HP * RL > 65536 ? plait_max_threads() : 1);
        img = dst;
    }
    p.b_kind = PLAIT_B_CONV;
    p.b = img;
    p.conv = &g;
    p.b_bs = d->C * HP * g.RL;
    return PLAIT_ISA_FN(plait_gemm)(&p);
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

PLAIT_ISA_FAMILY("conv")
PLAIT_ISA_DISPATCH(int, plait_conv2d,
                   (const plait_conv2d_desc* d, const float* x, const float* apacked,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, apacked, bias, res, relu, out))
PLAIT_ISA_DISPATCH(int, plait_conv2d_pool,
                   (const plait_conv2d_desc* d, const float* x, const float* apacked,
                    const float* bias, int relu, float* out),
                   (d, x, apacked, bias, relu, out))
