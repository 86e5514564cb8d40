/* plait_qconv.c: the c target's int8 convolutions (the transposed product on the
 * register tile of plait_qtile.h, and depthwise convolutions), a kernel family of
 * plait_isa.h compiled for AVX512-VNNI, AVX512, AVX-VNNI, AVX2 and the baseline; the
 * arithmetic and the output stage are plait_qgemm.c's (see its comment). */
#include "plait_isa.h"
#include "plait_qtile.h"

/* ------------------------------------------------------ convolutions, transposed */

/* A grouped convolution (GR > 1) is the same per group: the jobs run over (image,
 * group, panel block), a group's panels read its channels of the padded image and its
 * weight rows are its output channels. */

/* out[n][o][p] = out(sum_k (w[o][k] - zw[o]) * (x[n][k][p] - zx)) computed as W' @ X'
 * with the weights broadcast (int8 W': rows of Kp bytes) and the image packed in
 * panels of 16 output pixels x 4 taps (uint8 X'): an output row of a channel is
 * contiguous in NCHW.
 *
 * The image is first copied into a padded image (x ^ 0x80 for int8 x; the padding holds
 * zx'), so no tap is ever out of bounds.  With the taps grouped (G > 0: K runs over
 * (c, kh, kw4) with KW rounded up to 4 per group, dilation 1 along W), the 4 taps of a
 * group are 4 consecutive bytes of one image row: a pixel's group is one 4-byte load
 * (AVX-512: one dword gather for 16 pixels); the extra taps of the rounding have the
 * weight zw' (they add (zw' - zw') * x = 0, and the weights' correction counts them).
 * When the 16 pixels of a panel are contiguous in the padded image (stride 1, within
 * one row), a group is 4 overlapping 16-byte loads interleaved. */

typedef uint8_t q_v16 __attribute__((vector_size(16)));
#if defined(__clang__)
#define Q_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define Q_SHUF(a, b, ...) __builtin_shuffle(a, b, (q_v16){__VA_ARGS__})
#endif

/* 16 pixels x 4 taps (rows t0..t3: the taps' 16 values) as the panel's 64 bytes
 * [pixel][tap] */
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

static inline q_v16 q_load16(const uint8_t* p) {
    q_v16 v;
    memcpy(&v, p, 16);
    return v;
}

typedef struct {
    const plait_qconv_problem* p;
    const uint8_t* xpad;     /* the padded images, uint8 */
    int64_t img_bytes, wp;   /* bytes of one padded image, its row */
    const int64_t* toff;     /* per group (G > 0) or tap: offset from a window's corner */
    int64_t kp, panels, pblock, jobs;
    int64_t groups, group_bytes;   /* the convolution's groups, one group's channels' bytes */
    int need_cs;             /* some zw' != 0: the pixels' column sums are needed */
    int64_t next;
    int status;
} q_ct_task;

/* The panels [j0, j0 + np) of image bi: X' packed; with need_cs the pixels' column sums
 * into cs */
static void q_ct_pack(const q_ct_task* t, int64_t bi, int64_t gi, int64_t j0, int64_t np,
                      uint8_t* restrict dst, uint32_t* restrict cs) {
    const plait_qconv_problem* p = t->p;
    const int64_t M = p->OH * p->OW, K = p->K, kp = t->kp, k4 = kp / 4;
    const uint8_t* img = t->xpad + bi * t->img_bytes + gi * t->group_bytes;
    for (int64_t jp = 0; jp < np; ++jp) {
        const int64_t m0 = (j0 + jp) * PLAIT_Q_NR;
        uint8_t* pd = dst + jp * kp * PLAIT_Q_NR;
        int32_t off[PLAIT_Q_NR];
        int contiguous = 1;
        for (int j = 0; j < PLAIT_Q_NR; ++j) {
            const int64_t m = m0 + j < M ? m0 + j : M - 1;
            off[j] = (int32_t)((m / p->OW) * p->SH * t->wp + (m % p->OW) * p->SW);
            if (off[j] != off[0] + j) contiguous = 0;
        }
        if (p->G) {
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
            const __m512i voff = _mm512_loadu_si512((const void*)off);
#endif
            for (int64_t g = 0; g < k4; ++g) {
                const uint8_t* s = img + t->toff[g];
                if (contiguous) {
                    const uint8_t* r = s + off[0];
                    q_interleave4(q_load16(r), q_load16(r + 1), q_load16(r + 2),
                                  q_load16(r + 3), pd + 64 * g);
                } else {
#if defined(PLAIT_ISA_AVX512VNNI) || defined(PLAIT_ISA_AVX512)
                    _mm512_storeu_si512((void*)(pd + 64 * g),
                                        _mm512_i32gather_epi32(voff, (const void*)s, 1));
#else
                    for (int j = 0; j < PLAIT_Q_NR; ++j) memcpy(pd + 64 * g + 4 * j, s + off[j], 4);
#endif
                }
            }
        } else {
            for (int64_t g = 0; g < k4; ++g) {
                if (contiguous) {
                    q_v16 tv[4];
                    for (int kk = 0; kk < 4; ++kk)
                        tv[kk] = 4 * g + kk < K ? q_load16(img + t->toff[4 * g + kk] + off[0])
                                                : (q_v16){0};
                    q_interleave4(tv[0], tv[1], tv[2], tv[3], pd + 64 * g);
                } else {
                    uint8_t* b = pd + 64 * g;
                    for (int kk = 0; kk < 4; ++kk) {
                        if (4 * g + kk < K) {
                            const uint8_t* s = img + t->toff[4 * g + kk];
                            for (int j = 0; j < PLAIT_Q_NR; ++j) b[4 * j + kk] = s[off[j]];
                        } else {
                            for (int j = 0; j < PLAIT_Q_NR; ++j) b[4 * j + kk] = 0;
                        }
                    }
                }
            }
        }
        if (t->need_cs) {
            uint32_t s[PLAIT_Q_NR] = {0};
            for (int64_t g = 0; g < k4; ++g) {
                const uint8_t* b = pd + 64 * g;
                for (int j = 0; j < PLAIT_Q_NR; ++j)
                    s[j] += (uint32_t)b[4 * j] + b[4 * j + 1] + b[4 * j + 2] + b[4 * j + 3];
            }
            memcpy(cs + jp * PLAIT_Q_NR, s, sizeof s);
        }
    }
}

static void q_ct_run(void* arg) {
    q_ct_task* t = (q_ct_task*)arg;
    const plait_qconv_problem* p = t->p;
    const int64_t kp = t->kp, k4 = kp / 4, M = p->OH * p->OW;
    const int64_t panel = kp * PLAIT_Q_NR;
    size_t bytes = (size_t)(t->pblock * panel) + sizeof(uint32_t) * (size_t)(t->pblock * 16) + 64;
    uint8_t* xp = (uint8_t*)plait_scratch(0, (bytes + 3) / 4);
    if (!xp) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t* cs = (uint32_t*)(xp + (t->pblock * panel + 63) / 64 * 64);
    const int64_t nblocks = (t->panels + t->pblock - 1) / t->pblock;
    const uint32_t zx = (uint32_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                               : ((const uint8_t*)p->zx)[0]);
    int32_t tile[Q_MR * Q_TN];
    uint32_t v[Q_TN];
    for (int64_t job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED); job < t->jobs;
         job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) {
        const int64_t bg = job / nblocks, j0 = job % nblocks * t->pblock;
        const int64_t bi = bg / t->groups, gi = bg % t->groups;
        const int64_t og = p->O / t->groups, o_end = (gi + 1) * og;
        const int64_t np = t->panels - j0 < t->pblock ? t->panels - j0 : t->pblock;
        q_ct_pack(t, bi, gi, j0, np, xp, cs);
        for (int64_t jp = 0; jp < np; jp += Q_NP) {
            const int64_t nn = np - jp < Q_NP ? np - jp : Q_NP;
            const int64_t p0 = (j0 + jp) * PLAIT_Q_NR;
            const int64_t cnt = M - p0 < nn * PLAIT_Q_NR ? M - p0 : nn * PLAIT_Q_NR;
            const int8_t* bj = (const int8_t*)(xp + jp * panel);
            const uint32_t* csj = cs + jp * PLAIT_Q_NR;
            for (int64_t o0 = gi * og; o0 < o_end; o0 += Q_MR) {
                const uint8_t* ar = (const uint8_t*)(p->w + o0 * kp);
#if Q_NP > 1
                if (nn > 1) q_tile(2, 1, k4, ar, kp, bj, panel, tile);
                else q_tile(1, 1, k4, ar, kp, bj, panel, tile);
#else
                q_tile(1, 1, k4, ar, kp, bj, panel, tile);
#endif
                const int64_t mr = o_end - o0 < Q_MR ? o_end - o0 : Q_MR;
                for (int64_t r = 0; r < mr; ++r) {
                    const int64_t o = o0 + r;
                    const uint32_t zw = (uint32_t)p->w_zp[o];
                    const uint32_t corr = zx * (uint32_t)p->w_corr[o];
                    const int32_t* tr = tile + r * Q_TN;
                    if (t->need_cs)
                        for (int64_t q = 0; q < cnt; ++q)
                            v[q] = (uint32_t)tr[q] - zw * csj[q] - corr;
                    else
                        for (int64_t q = 0; q < cnt; ++q) v[q] = (uint32_t)tr[q] - corr;
                    q_store(&p->out, v, cnt, o, 0, p->c, (bi * p->O + o) * M + p0);
                }
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qconv2d)(const plait_qconv_problem* p) {
    const int64_t M = p->OH * p->OW;
    if (M <= 0 || p->O <= 0 || p->N <= 0) return 0;
    q_ct_task t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.groups = p->GR > 1 ? p->GR : 1;
    const int64_t cg = p->C / t.groups;   /* the channels a group reads */
    t.kp = p->G ? cg * p->KH * p->G * 4 : (p->K + 3) / 4 * 4;
    t.panels = (M + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    for (int64_t o = 0; o < p->O; ++o)
        if (p->w_zp[o]) t.need_cs = 1;
    /* the padded images: every tap a window reads (and the rounding of its groups) */
    const int64_t hp0 = (p->OH - 1) * p->SH + (p->KH - 1) * p->DH + 1;
    const int64_t wp0 = (p->OW - 1) * p->SW + (p->KW - 1) * p->DW + 1;
    const int64_t hp = hp0 > p->PT + p->H ? hp0 : p->PT + p->H;
    const int64_t wp = wp0 > p->PL + p->W ? wp0 : p->PL + p->W;
    const int64_t plane = hp * wp;
    t.wp = wp;
    t.img_bytes = p->C * plane;
    t.group_bytes = cg * plane;
    const int64_t ngroups = t.kp / 4;
    const int64_t noff = p->G ? ngroups : (p->K > 0 ? p->K : 1);
    /* 64 bytes past the end: the 16-byte runs and 4-byte groups of the last pixels */
    size_t words = (size_t)((p->N * t.img_bytes + 64 + 3) / 4) + 2 * (size_t)noff + 16;
    uint8_t* xpad = (uint8_t*)plait_scratch(1, words);
    if (!xpad) return 1;
    int64_t* toff = (int64_t*)(xpad + (p->N * t.img_bytes + 64 + 63) / 64 * 64);
    const uint8_t flip = p->x_signed ? 0x80 : 0;
    const uint8_t zx = (uint8_t)(p->x_signed ? ((const int8_t*)p->zx)[0] + 128
                                             : ((const uint8_t*)p->zx)[0]);
    memset(xpad, zx, (size_t)(p->N * t.img_bytes + 64));
    {
        const int64_t H = p->H, W = p->W, images = p->N * p->C;
        const int64_t wn = W < wp - p->PL ? W : wp - p->PL;
        const int64_t hn = H < hp - p->PT ? H : hp - p->PT;
        const uint8_t* x = (const uint8_t*)p->x;
        uint8_t* base = xpad + p->PT * wp + p->PL;
        for (int64_t ci = 0; ci < images; ++ci)
            for (int64_t h = 0; h < hn; ++h) {
                const uint8_t* restrict src = x + (ci * H + h) * W;
                uint8_t* restrict dst = base + ci * plane + h * wp;
                if (!flip) memcpy(dst, src, (size_t)wn);
                else
                    for (int64_t w = 0; w < wn; ++w) dst[w] = src[w] ^ 0x80;
            }
    }
    if (p->G) {
        int64_t g = 0;
        for (int64_t ch = 0; ch < cg; ++ch)
            for (int64_t kh = 0; kh < p->KH; ++kh)
                for (int64_t kw4 = 0; kw4 < p->G; ++kw4, ++g)
                    toff[g] = ch * plane + kh * p->DH * wp + 4 * kw4;
    } else {
        const int64_t khw = p->KH * p->KW;
        for (int64_t k = 0; k < p->K; ++k) {
            const int64_t ch = k / khw, r = k % khw;
            toff[k] = ch * plane + (r / p->KW) * p->DH * wp + (r % p->KW) * p->DW;
        }
    }
    t.xpad = xpad;
    t.toff = toff;
    int nthreads = plait_max_threads();
    const int64_t work = p->N * M * p->O * (t.kp > 0 ? t.kp : 1);
    if (work < Q_MIN_PARALLEL) nthreads = 1;
    /* blocks of panels: about 4 jobs per thread, at most 8 panels (128 pixels) */
    int64_t want = nthreads > 1 ? (t.panels * p->N * t.groups + 4 * nthreads - 1) /
                                      (4 * nthreads) : 8;
    t.pblock = want < 1 ? 1 : (want > 8 ? 8 : want);
    t.jobs = p->N * t.groups * ((t.panels + t.pblock - 1) / t.pblock);
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
    int status;
} q_dw_task;

#define Q_DW_ACC 1024

/* planes [lo, hi) of N * C: each plane copied centered (x - zx, int16) into a padded
 * plane (the padding 0), every output summed over the window in int32, then the output
 * stage.  Stride 1: rows of the padded width at once (one contiguous run per tap, the
 * columns past OW dropped); else row by row, the plane's rows split into their SW
 * column phases so each tap is still one contiguous run. */
static void q_dw_range(void* ctx, int64_t lo, int64_t hi) {
    q_dw_task* t = (q_dw_task*)ctx;
    const plait_qdw_desc* d = t->d;
    const int64_t hp = t->hp, wp = t->wp;
    /* the padded plane, each row split into SW phases of wpp columns (phase p holds
     * the padded columns p, p + SW, ...), so a strided output row reads one contiguous
     * run per tap; rows ws = SW * wpp apart (stride 1: wpp = wp, the plain plane) */
    const int64_t sw = d->SW, wpp = (wp + sw - 1) / sw, ws = sw * wpp;
    int16_t* xc = (int16_t*)plait_scratch(0, (size_t)(hp * ws + 64) / 2 + 1);
    if (!xc) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    uint32_t acc[Q_DW_ACC];
    const int wide = d->SH == 1 && d->SW == 1 && wp <= Q_DW_ACC;
    for (int64_t plane = lo; plane < hi; ++plane) {
        const int64_t ch = plane % d->C;
        const int32_t* w = t->w + ch * d->KH * d->KW;
        memset(xc, 0, sizeof(int16_t) * (size_t)(hp * ws));
        const int64_t H = d->H, W = d->W;
        const int64_t hn = H < hp - d->PT ? H : hp - d->PT;
        const int64_t wn = W < wp - d->PL ? W : wp - d->PL;
        const int16_t zx = (int16_t)t->zx;
        for (int64_t h = 0; h < hn; ++h) {
            int16_t* restrict row = xc + (h + d->PT) * ws;
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
            /* phase p holds the padded columns c = p + i * SW: the image's x = c - PL */
            for (int64_t p = 0; p < sw; ++p) {
                const int64_t i0 = d->PL - p <= 0 ? 0 : (d->PL - p + sw - 1) / sw;
                int16_t* restrict dst = row + p * wpp + i0;
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
        if (wide) {
            const int64_t rows = Q_DW_ACC / wp;
            for (int64_t oh0 = 0; oh0 < d->OH; oh0 += rows) {
                const int64_t nr = d->OH - oh0 < rows ? d->OH - oh0 : rows;
                /* the last row needs only OW columns: no read past the plane */
                const int64_t cnt = (nr - 1) * wp + d->OW;
                memset(acc, 0, sizeof(uint32_t) * (size_t)cnt);
                for (int64_t kh = 0; kh < d->KH; ++kh)
                    for (int64_t kw = 0; kw < d->KW; ++kw) {
                        const int32_t wv = w[kh * d->KW + kw];
                        const int16_t* src = xc + (oh0 + kh * d->DH) * ws + kw * d->DW;
                        for (int64_t i = 0; i < cnt; ++i)
                            acc[i] += (uint32_t)((int32_t)src[i] * wv);
                    }
                for (int64_t r = 0; r < nr; ++r)
                    q_store(t->out, acc + r * wp, d->OW, ch, 0, t->c,
                            (plane * d->OH + oh0 + r) * d->OW);
            }
            continue;
        }
        for (int64_t oh = 0; oh < d->OH; ++oh) {
            for (int64_t ow0 = 0; ow0 < d->OW; ow0 += Q_DW_ACC) {
                const int64_t cnt = d->OW - ow0 < Q_DW_ACC ? d->OW - ow0 : Q_DW_ACC;
                memset(acc, 0, sizeof(uint32_t) * (size_t)cnt);
                for (int64_t kh = 0; kh < d->KH; ++kh)
                    for (int64_t kw = 0; kw < d->KW; ++kw) {
                        const int32_t wv = w[kh * d->KW + kw];
                        const int64_t c0 = kw * d->DW;   /* + (ow0 + j) * SW: phase c0 % SW */
                        const int16_t* restrict src = xc + (oh * d->SH + kh * d->DH) * ws +
                                                      (c0 % sw) * wpp + c0 / sw + ow0;
                        for (int64_t j = 0; j < cnt; ++j)
                            acc[j] += (uint32_t)((int32_t)src[j] * wv);
                    }
                q_store(t->out, acc, cnt, ch, 0, t->c, (plane * d->OH + oh) * d->OW + ow0);
            }
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
    const int64_t work = planes * d->OH * d->OW * d->KH * d->KW;
    int nthreads = work < Q_MIN_PARALLEL / 4 ? 1 : plait_max_threads();
    plait_parallel_range(q_dw_range, &t, planes, nthreads);
    return t.status;
}

PLAIT_ISA_FAMILY("qconv")
PLAIT_ISA_DISPATCH(int, plait_qconv2d, (const plait_qconv_problem* p), (p))
PLAIT_ISA_DISPATCH(int, plait_qconv2d_depthwise,
                   (const plait_qdw_desc* d, const void* x, int x_signed, const void* zx,
                    const int32_t* w, const plait_q_out* out, void* c),
                   (d, x, x_signed, zx, w, out, c))
