/* plait_dwconv.c: the c target's grouped and depthwise 2-D convolutions (float32, NCHW),
 * a kernel family of plait_isa.h.
 *
 * A job is one group of one image (on several threads, a part of its output rows: the
 * parts of every plane go to the threads the products around it give those pixels,
 * plait_take_job): its C / G input planes are copied into a per-thread
 * scratch image (in L1/L2; large planes band by band, just before the tile reads them:
 * dw_fill), zero-padded and split into column phases (padded column q of
 * a row at [q % SW][q / SW], so output column j and kernel column kw read index
 * j + kw * DW / SW of phase kw * DW % SW: every tap is a contiguous vector load, for any
 * stride and dilation, with no bounds test).  Each of the group's output planes is then
 * computed on a register tile of R output rows x NB vectors of DW_V columns (8
 * accumulators): for every input channel and kernel tap, one load and one multiply-add
 * per accumulator, the weight broadcast.  The common windows (3x3, 5x5 and 7x7 at
 * stride 1 and 3x3, 5x5 at stride 2, no dilation) are compiled with constant taps
 * (unrolled); any other window runs the same tile with its sizes read at run time.
 * The bias starts the accumulators; without a residual, relu and clip run on the
 * accumulators before they are stored; otherwise the residual, relu and the activation
 * (clip, SiLU or GELU) run over each output plane just stored.  Depthwise 3x3 and 5x5 windows
 * of stride 1 or 2 read their input rows in place instead (no scratch copy:
 * dw_rows_plane), and depthwise calls with short output rows put channels in the lanes
 * (dw_cl_jobs).  Jobs
 * go to the library's threads (plait_threads.h). */
#include "plait_isa.h"
/* before plait_exp_f32.h: a function with other optimization options than its caller's
 * is not inlined (and the SiLU loop calling it would not vectorize) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("no-trapping-math", "no-tree-loop-distribute-patterns")
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "plait_dwconv.h"
#include "plait_exp_f32.h"
#include "plait_means.h"
#include "plait_threads.h"

/* 16 lanes (zmm) in the AVX-512 copies, 4 in the baseline copy (SSE2's, or no vector
 * unit: the generic vectors of 8 lanes that the AVX2 and NEON copies use, carried
 * through two SSE2 registers each, took GCC 12 two to four minutes to compile at -O3,
 * most of it in register allocation and PRE over the unrolled tiles), 8 elsewhere */
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#define DW_V 16
#define DW_LOG2V 4
#define DW_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#define DW_ODD 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31
#define DW_ZIPLO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define DW_ZIPHI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif defined(PLAIT_ISA_BASELINE)
#define DW_V 4
#define DW_LOG2V 2
#define DW_EVEN 0, 2, 4, 6
#define DW_ODD 1, 3, 5, 7
#define DW_ZIPLO 0, 4, 1, 5
#define DW_ZIPHI 2, 6, 3, 7
#else
#define DW_V 8
#define DW_LOG2V 3
#define DW_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#define DW_ODD 1, 3, 5, 7, 9, 11, 13, 15
#define DW_ZIPLO 0, 8, 1, 9, 2, 10, 3, 11
#define DW_ZIPHI 4, 12, 5, 13, 6, 14, 7, 15
#endif
#define PLAIT_SL DW_V
#include "plait_vexp.h"
typedef float dw_v __attribute__((vector_size(DW_V * 4)));
typedef float dw_vu __attribute__((vector_size(DW_V * 4), aligned(4)));
typedef int32_t dw_vi __attribute__((vector_size(DW_V * 4)));
#if defined(__clang__)
#define DW_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define DW_PRAGMA_UNROLL _Pragma("unroll")
#else
#define DW_SHUF(a, b, ...) __builtin_shuffle(a, b, (dw_vi){__VA_ARGS__})
#define DW_PRAGMA_UNROLL _Pragma("GCC unroll 16")
#endif
#define DW_LOAD(p) (*(const dw_vu*)(p))

/* the first n < DW_V lanes of a vector (plait_vexp.h: masked where the ISA has it).  In
 * the baseline copy (lane by lane through memory there) these and the SiLU below are
 * calls, not inlined into every unrolled tile: that copy runs only on CPUs without AVX2
 * and took GCC 12 about 18 s to compile with them inlined, 15 s without. */
#if defined(PLAIT_ISA_BASELINE)
static __attribute__((noinline)) void dw_load_n(dw_v* v, const float* p, int64_t n) {
    plait_sv_load_n(v, p, n);
}
static __attribute__((noinline)) void dw_store_n(float* p, const dw_v* v, int64_t n) {
    plait_sv_store_n(p, v, n);
}
#define DW_SILU_INLINE __attribute__((noinline))
#else
#define dw_load_n plait_sv_load_n
#define dw_store_n plait_sv_store_n
#define DW_SILU_INLINE inline __attribute__((always_inline))
#endif

/* SiLU of a vector (plait_vexp.h) */
static DW_SILU_INLINE dw_v dw_silu_v(dw_v x) {
    plait_silu_sv(&x);
    return x;
}

/* relu (keeping NaN), then a clip to [lo, hi] (keeping NaN) of a tile's vector: the
 * scalar epilogue's results, bit for bit */
static inline __attribute__((always_inline)) dw_v
dw_tile_act(dw_v v, int relu, int clip, float lo, float hi) {
    if (clip < 0) return dw_silu_v(v);   /* SiLU (no relu before it: see tile_act) */
    if (relu) v = (dw_v)(((v > (dw_v){0}) | (v != v)) & (dw_vi)v);
    if (clip) {
        const dw_v vl = (dw_v){0} + lo, vh = (dw_v){0} + hi;
        dw_vi m = v < vl;
        v = (dw_v)((m & (dw_vi)vl) | (~m & (dw_vi)v));
        m = v > vh;
        v = (dw_v)((m & (dw_vi)vh) | (~m & (dw_vi)v));
    }
    return v;
}

#define DW_ACC 8          /* accumulators of the tile: R x NB */
#define DW_SCRATCH_SLOT 3 /* the per-thread scratch buffer (plait_threads.h) */

/* The geometry of a call: the scratch image of one input plane is HA rows, each SW
 * phases of RL floats; the tile runs over OHA >= OH rows and OWA >= OW columns. */
typedef struct {
    const plait_dwconv2d_desc* d;
    const float* x;
    const float* w;
    const float* bias;
    const float* res;
    int relu;
    float* out;
    int64_t CG, OG, NB, R, RL, HA, OWA, plane;
    int64_t HP, WP;         /* channels in lanes: the scratch image's rows and columns */
    int tile_act;           /* no residual, no GELU, no SiLU after a relu: relu and
                             * clip (or SiLU alone) run on the tile */
    int failed;             /* a thread found no scratch memory: its jobs are undone */
    int bands;              /* the scratch image is filled band by band (dw_fill) */
    int ring;               /* rows on the ring (dw_ring_plane), not read in place */
    int64_t part_rows;      /* the output rows of a job (jobs: parts x images x groups) */
} dw_call;

/* one input row into its column phases (padded column q = c + PL at [q % SW][q / SW]);
 * the scratch row's other floats are left as they are (zero) */
static void dw_split_row(const float* restrict in, int64_t W, int64_t PL, int64_t SW,
                         float* restrict row, int64_t RL) {
    int64_t c = 0;
    if (SW == 1) {
        float* dst = row + PL;
        for (; c + DW_V <= W; c += DW_V) *(dw_vu*)(dst + c) = DW_LOAD(in + c);
        if (c < W) {
            dw_v v;
            dw_load_n(&v, in + c, W - c);
            dw_store_n(dst + c, &v, W - c);
        }
    } else if (SW == 2) {
        float* ph[2] = {row, row + RL};
        if (W > 0 && PL % 2) {   /* then columns c, c + 1 share an index from c = 1 on */
            ph[1][PL / 2] = in[0];
            c = 1;
        }
        for (; c + 2 * DW_V <= W; c += 2 * DW_V) {
            dw_v v0 = DW_LOAD(in + c), v1 = DW_LOAD(in + c + DW_V);
            int64_t idx = (c + PL) / 2;
            *(dw_vu*)(ph[0] + idx) = DW_SHUF(v0, v1, DW_EVEN);
            *(dw_vu*)(ph[1] + idx) = DW_SHUF(v0, v1, DW_ODD);
        }
        if (c < W) {   /* the last n < 2 * DW_V columns, the same way */
            const int64_t n = W - c, idx = (c + PL) / 2;
            dw_v v0, v1 = {0};
            if (n < DW_V) {
                dw_load_n(&v0, in + c, n);
            } else {
                v0 = DW_LOAD(in + c);
                if (n > DW_V) dw_load_n(&v1, in + c + DW_V, n - DW_V);
            }
            dw_v even = DW_SHUF(v0, v1, DW_EVEN), odd = DW_SHUF(v0, v1, DW_ODD);
            const int64_t ne = (n + 1) / 2, no = n / 2;
            if (ne == DW_V) *(dw_vu*)(ph[0] + idx) = even;
            else dw_store_n(ph[0] + idx, &even, ne);
            if (no > 0) dw_store_n(ph[1] + idx, &odd, no);
        }
    } else {
        for (; c < W; ++c) {
            int64_t q = c + PL;
            row[(q % SW) * RL + q / SW] = in[c];
        }
    }
}

/* The scratch image of a job is filled as the tile goes down the planes: `done` padded
 * rows of each of the group's CG planes (from `src`, the group's first input plane) are
 * split so far (the padding a thread zeroes once per call: every plane fills the same
 * places).  When the job's scratch planes are larger than DW_BAND_BYTES, each band of R
 * output rows first splits the input rows it reads (and no more), so the tile reads
 * rows just written, from L1, instead of a whole split plane from L2; smaller images are
 * split whole before the first band.  DW_BAND_BYTES sits between the planes that gain
 * from bands (MobileNetV2's 112 x 112, about 58 KB: a split plane no longer fits a 48 KB
 * L1) and those that lose a few percent to them (56 x 56, about 15 KB: the whole split
 * plane stays in L1 anyway, and each band costs a call). */
#define DW_BAND_BYTES 32768
typedef struct {
    const float* src;
    float* img;
    int64_t done;
    int64_t oh_lo, oh_hi;   /* the job's output rows (a multiple of R, then <= OH) */
} dw_fill;

/* padded rows f->done .. need-1 of every plane of the job into the scratch image */
static __attribute__((noinline)) void dw_fill_rows(const dw_call* t, dw_fill* f,
                                                    int64_t need) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t rowlen = d->SW * t->RL, HW = d->H * d->W;
    const int64_t r0 = f->done > d->PT ? f->done : d->PT;
    const int64_t r1 = d->PT + d->H < need ? d->PT + d->H : need;
    for (int64_t ci = 0; ci < t->CG; ++ci)
        for (int64_t r = r0; r < r1; ++r)
            dw_split_row(f->src + ci * HW + (r - d->PT) * d->W, d->W, d->PL, d->SW,
                         f->img + ci * t->plane + r * rowlen, t->RL);
    f->done = need;
}

/* padded rows up to `need` (exclusive) filled (the test inline: the tile's loops keep
 * their registers when there is nothing to do) */
static inline __attribute__((always_inline)) void dw_fill_to(const dw_call* t, dw_fill* f,
                                                             int64_t need) {
    if (need > t->HA) need = t->HA;
    if (f->done < need) dw_fill_rows(t, f, need);
}

/* The output plane `o` (its weights wo, its C / G scratch planes at img) on the R x NB
 * tile; KH ... DW are constants where the caller's are, so the taps unroll. */
static inline __attribute__((always_inline)) void
dw_plane(const int R, const int NB, const int64_t KH, const int64_t KW, const int64_t SH,
         const int64_t SW, const int64_t DH, const int64_t DW, const dw_call* t,
         dw_fill* f, const float* wo, float b, float* op) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t RL = t->RL, OW = d->OW, OH = d->OH, CG = t->CG;
    const int64_t rstep = SH * SW * RL;   /* one output row further down the image */
    const float* img = f->img;
    const int bands = t->bands;
    const int64_t oh_end = f->oh_lo + (f->oh_hi - f->oh_lo + R - 1) / R * R;
    if (!bands) dw_fill_to(t, f, (oh_end - 1) * SH + (KH - 1) * DH + 1);
    for (int64_t oh0 = f->oh_lo; oh0 < oh_end; oh0 += R) {
        if (bands) dw_fill_to(t, f, (oh0 + R - 1) * SH + (KH - 1) * DH + 1);
        for (int64_t j0 = 0; j0 < t->OWA; j0 += NB * DW_V) {
            dw_v acc[8][2];
            DW_PRAGMA_UNROLL
            for (int r = 0; r < R; ++r)
                DW_PRAGMA_UNROLL
                for (int v = 0; v < NB; ++v) acc[r][v] = (dw_v){0} + b;
            for (int64_t ci = 0; ci < CG; ++ci) {
                const float* pl = img + ci * t->plane + oh0 * rstep + j0;
                const float* wc = wo + ci * KH * KW;
                for (int64_t kh = 0; kh < KH; ++kh) {
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const float wv = wc[kh * KW + kw];
                        const float* s = pl + (kh * DH * SW + (kw * DW) % SW) * RL
                                         + (kw * DW) / SW;
                        DW_PRAGMA_UNROLL
                        for (int r = 0; r < R; ++r)
                            DW_PRAGMA_UNROLL
                            for (int v = 0; v < NB; ++v)
                                acc[r][v] += DW_LOAD(s + r * rstep + v * DW_V) * wv;
                    }
                }
            }
            if (t->tile_act) {
                const int clip = d->act == PLAIT_DW_ACT_SILU ? -1 : d->act == PLAIT_DW_ACT_CLIP;
                DW_PRAGMA_UNROLL
                for (int r = 0; r < R; ++r)
                    DW_PRAGMA_UNROLL
                    for (int v = 0; v < NB; ++v)
                        acc[r][v] = dw_tile_act(acc[r][v], t->relu, clip, d->act_lo, d->act_hi);
            }
            DW_PRAGMA_UNROLL
            for (int r = 0; r < R; ++r) {
                if (oh0 + r >= OH) break;
                float* orow = op + (oh0 + r) * OW;
                DW_PRAGMA_UNROLL
                for (int v = 0; v < NB; ++v) {
                    int64_t j = j0 + v * DW_V;
                    if (j + DW_V <= OW) {
                        *(dw_vu*)(orow + j) = acc[r][v];
                    } else if (j < OW) {
                        dw_store_n(orow + j, &acc[r][v], OW - j);
                    }
                }
            }
        }
    }
}

/* GELU of a vector, erf or tanh form (plait_vexp.h) */
static inline __attribute__((always_inline)) dw_v dw_gelu_v(dw_v x, int tanh_form) {
    if (tanh_form) plait_gelu_tanh_sv(&x);
    else plait_gelu_sv(&x);
    return x;
}

/* the epilogue after the bias over n outputs at o (res: the residual's, or NULL):
 * + res, relu (keeping NaN), then clip (keeping NaN), SiLU or GELU (on vectors: the
 * planes just stored are in the cache) */
static void dw_epilogue(const dw_call* t, float* restrict o, const float* restrict res,
                        int64_t n) {
    const plait_dwconv2d_desc* d = t->d;
    if (res)
        for (int64_t j = 0; j < n; ++j) o[j] += res[j];
    if (t->relu)
        for (int64_t j = 0; j < n; ++j) o[j] = (o[j] > 0.0f || o[j] != o[j]) ? o[j] : 0.0f;
    if (d->act == PLAIT_DW_ACT_CLIP) {
        const float lo = d->act_lo, hi = d->act_hi;
        for (int64_t j = 0; j < n; ++j) {
            float v = o[j];
            v = v < lo ? lo : v;
            o[j] = v > hi ? hi : v;
        }
    } else if (d->act == PLAIT_DW_ACT_SILU) {
        int64_t j = 0;
        for (; j + DW_V <= n; j += DW_V) *(dw_vu*)(o + j) = dw_silu_v(DW_LOAD(o + j));
        if (j < n) {
            dw_v v;
            dw_load_n(&v, o + j, n - j);
            v = dw_silu_v(v);
            dw_store_n(o + j, &v, n - j);
        }
    } else if (d->act == PLAIT_DW_ACT_GELU || d->act == PLAIT_DW_ACT_GELU_TANH) {
        const int tf = d->act == PLAIT_DW_ACT_GELU_TANH;
        int64_t j = 0;
        for (; j + DW_V <= n; j += DW_V) *(dw_vu*)(o + j) = dw_gelu_v(DW_LOAD(o + j), tf);
        if (j < n) {
            dw_v v;
            dw_load_n(&v, o + j, n - j);
            v = dw_gelu_v(v, tf);
            dw_store_n(o + j, &v, n - j);
        }
    }
}

/* Each specialization of the tile is a function of its own (as are those of the rows,
 * the lanes and the channels-last rows below): GCC's register allocation and load CSE
 * grow faster than the function they run on, and one function holding every unrolled
 * window took it most of the copy's compile time. */
#define DW_PLANE_FN(K_, S_, NB_)                                                         \
    static __attribute__((noinline)) void dw_plane_k##K_##s##S_##n##NB_(                 \
        const dw_call* t, dw_fill* f, const float* wo, float b, float* op) {            \
        dw_plane(DW_ACC / NB_, NB_, K_, K_, S_, S_, 1, 1, t, f, wo, b, op);             \
    }
DW_PLANE_FN(3, 1, 1) DW_PLANE_FN(3, 1, 2) DW_PLANE_FN(3, 2, 1) DW_PLANE_FN(3, 2, 2)
DW_PLANE_FN(5, 1, 1) DW_PLANE_FN(5, 1, 2) DW_PLANE_FN(5, 2, 1) DW_PLANE_FN(5, 2, 2)
DW_PLANE_FN(7, 1, 1) DW_PLANE_FN(7, 1, 2)
#undef DW_PLANE_FN

/* any window, its sizes read at run time */
static __attribute__((noinline)) void dw_plane_any(const dw_call* t, dw_fill* f,
                                                   const float* wo, float b, float* op) {
    const plait_dwconv2d_desc* d = t->d;
    if (t->NB == 2)
        dw_plane(DW_ACC / 2, 2, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW, t, f, wo, b, op);
    else
        dw_plane(DW_ACC, 1, d->KH, d->KW, d->SH, d->SW, d->DH, d->DW, t, f, wo, b, op);
}

#define DW_TILE(K_, S_) \
    (t->NB == 2 ? dw_plane_k##K_##s##S_##n2 : dw_plane_k##K_##s##S_##n1)(t, f, wo, b, op)


/* the unrolled windows (square, dilation 1: 3x3 and 5x5 of stride 1 or 2, 7x7 of
 * stride 1) by M(K, S), where ``plain``, ``K`` and ``S`` are in scope; OTHER for any
 * other window */
#define DW_EACH_WINDOW(M, OTHER)                                                        \
    do {                                                                               \
        if (plain && K == 3 && S == 1) M(3, 1);                                        \
        else if (plain && K == 3 && S == 2) M(3, 2);                                   \
        else if (plain && K == 5 && S == 1) M(5, 1);                                   \
        else if (plain && K == 5 && S == 2) M(5, 2);                                   \
        else if (plain && K == 7 && S == 1) M(7, 1);                                   \
        else OTHER;                                                                    \
    } while (0)

/* output plane o of image n (the group's scratch planes filled through f) */
static void dw_output(const dw_call* t, int64_t n, int64_t o, dw_fill* f) {
    const plait_dwconv2d_desc* d = t->d;
    const float* wo = t->w + o * t->CG * d->KH * d->KW;
    const float b = t->bias ? t->bias[o] : 0.0f;
    float* op = t->out + (n * d->O + o) * d->OH * d->OW;
    const int64_t K = d->KH, S = d->SH;
    const int plain = d->KH == d->KW && d->SH == d->SW && d->DH == 1 && d->DW == 1;
    DW_EACH_WINDOW(DW_TILE, dw_plane_any(t, f, wo, b, op));
    if (!t->tile_act && (t->res || t->relu || d->act)) {
        float* o0 = op + f->oh_lo * d->OW;
        const int64_t n_out = (f->oh_hi - f->oh_lo) * d->OW;
        dw_epilogue(t, o0, t->res ? t->res + (o0 - t->out) : NULL, n_out);
    }
}
#undef DW_TILE

/* jobs lo .. hi-1: (image, group) pairs */
static void dw_jobs(void* ctx, int64_t lo, int64_t hi) {
    dw_call* t = (dw_call*)ctx;
    const plait_dwconv2d_desc* d = t->d;
    float* img = plait_scratch(DW_SCRATCH_SLOT, (size_t)(t->CG * t->plane + DW_V));
    if (!img) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    memset(img, 0, sizeof(float) * (size_t)(t->CG * t->plane));
    const int64_t groups = d->N * d->G;
    for (int64_t job = lo; job < hi; ++job) {
        const int64_t part = job / groups, n = job % groups / d->G, g = job % d->G;
        const int64_t oh_lo = part * t->part_rows, oh_hi = oh_lo + t->part_rows;
        dw_fill f = {t->x + ((n * d->C) + g * t->CG) * d->H * d->W, img, oh_lo * d->SH,
                     oh_lo, oh_hi < d->OH ? oh_hi : d->OH};
        for (int64_t k = 0; k < t->OG; ++k) dw_output(t, n, g * t->OG + k, &f);
    }
}

/* ------------------------------------------------------- input rows read in place */
/* A depthwise convolution of a 3x3 or 5x5 window at stride 1 or 2 (no dilation) reads
 * its input rows where they are, with no scratch copy.  For a block of DW_V output
 * columns starting at j0 (base = S j0 - PL), tap kw at stride 1 is the vector at base +
 * kw; at stride 2 it is the even lanes of the 2 DW_V floats at base + kw, so the pair of
 * vectors at base + 2p gives taps 2p (its even lanes) and 2p + 1 (its odd lanes) with one
 * shuffle each.  Each input row's taps are made once and multiplied into every output
 * row that reads it (ceil(K / S) accumulators per column block, rolling down the plane,
 * S input rows per output row); the blocks at the plane's left and right edges load with
 * masks (zero outside the row), rows above and below the image are skipped.  Against the
 * scratch copy this saves the copy and reads each input row once while it is in L1:
 * on MobileNetV2's layers from 112 x 112 down to 14 x 14 it takes 0.5-0.7 of the time. */

/* a mask of lanes [lo, hi) (0 <= lo, hi <= DW_V; empty when hi <= lo) and a load of
 * those lanes of p[lane], zero elsewhere (nothing else read) */
#if defined(PLAIT_ISA_AVX512) && DW_V == 16
typedef __mmask16 dw_rmask;
static inline __attribute__((always_inline)) dw_rmask dw_range_mask(int64_t lo, int64_t hi) {
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
static inline __attribute__((always_inline)) dw_v dw_load_masked(const float* p, dw_rmask m) {
    return (dw_v)_mm512_maskz_loadu_ps(m, p);
}
#elif defined(PLAIT_ISA_AVX2) && DW_V == 8
typedef dw_vi dw_rmask;
static inline __attribute__((always_inline)) dw_rmask dw_range_mask(int64_t lo, int64_t hi) {
    const dw_vi lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return (lane >= (int32_t)lo) & (lane < (int32_t)hi);
}
static inline __attribute__((always_inline)) dw_v dw_load_masked(const float* p, dw_rmask m) {
    return (dw_v)_mm256_maskload_ps(p, (__m256i)m);
}
#else
typedef struct {
    int64_t lo, hi;
} dw_rmask;
static inline __attribute__((always_inline)) dw_rmask dw_range_mask(int64_t lo, int64_t hi) {
    dw_rmask m = {lo, hi};
    return m;
}
static inline __attribute__((always_inline)) dw_v dw_load_masked(const float* p, dw_rmask m) {
    float tmp[DW_V] = {0};
    for (int64_t q = m.lo; q < m.hi; ++q) tmp[q] = p[q];
    return *(const dw_vu*)tmp;
}
#endif

/* the mask of the columns [0, W) among s .. s + DW_V - 1 */
static inline __attribute__((always_inline)) dw_rmask dw_cols_mask(int64_t s, int64_t W) {
    int64_t lo = -s, hi = W - s;
    lo = lo < 0 ? 0 : lo > DW_V ? DW_V : lo;
    hi = hi > DW_V ? DW_V : hi;
    return dw_range_mask(lo, hi);
}

/* the K taps of one input row of stride S for the column block at base (edge: the
 * loads masked by m, the row's columns [0, W)) */
static inline __attribute__((always_inline)) void
dw_rows_taps(const int K, const int S, const float* row, int64_t base, int edge,
             const dw_rmask* m, dw_v* tap) {
    if (S == 1) {
        DW_PRAGMA_UNROLL
        for (int kw = 0; kw < K; ++kw)
            tap[kw] = edge ? dw_load_masked(row + base + kw, m[kw]) : DW_LOAD(row + base + kw);
        return;
    }
    DW_PRAGMA_UNROLL
    for (int p = 0; p < (K + 1) / 2; ++p) {
        const float* s = row + base + 2 * p;
        dw_v a, b;
        if (!edge) {
            a = DW_LOAD(s);
            b = DW_LOAD(s + DW_V);
        } else {
            a = dw_load_masked(s, m[2 * p]);
            b = dw_load_masked(s + DW_V, m[2 * p + 1]);
        }
        tap[2 * p] = DW_SHUF(a, b, DW_EVEN);
        if (2 * p + 1 < K) tap[2 * p + 1] = DW_SHUF(a, b, DW_ODD);
    }
}

/* output rows oh_lo .. oh_hi-1 of plane x -> op (stride S, a K x K window), NB column
 * blocks at a time */
static inline __attribute__((always_inline)) void
dw_rows_plane(const int K, const int S, const int NB, const dw_call* t, const float* x,
              const float* wo, float b, float* op, int64_t oh_lo, int64_t oh_hi) {
    const int A = (K + S - 1) / S;   /* output rows an input row feeds (at most 5) */
    const int NM = S == 1 ? K : 2 * A;   /* loads (masks) per row and block */
    const plait_dwconv2d_desc* d = t->d;
    const int64_t H = d->H, W = d->W, OW = d->OW, PT = d->PT, PL = d->PL;
    const int clip = d->act == PLAIT_DW_ACT_SILU ? -1 : d->act == PLAIT_DW_ACT_CLIP;
    const float* w = wo;
    for (int64_t j0 = 0; j0 < OW; j0 += NB * DW_V) {
        int64_t base[4];
        int edge[4];
        dw_rmask m[4][6];
        DW_PRAGMA_UNROLL
        for (int v = 0; v < NB; ++v) {
            base[v] = S * (j0 + v * DW_V) - PL;
            edge[v] = base[v] < 0 ||
                      base[v] + (S == 1 ? K - 1 + DW_V : 2 * (A - 1) + 2 * DW_V) > W;
            DW_PRAGMA_UNROLL
            for (int q = 0; q < NM; ++q)
                m[v][q] = dw_cols_mask(S == 1 ? base[v] + q
                                              : base[v] + 2 * (q / 2) + (q % 2) * DW_V, W);
        }
        dw_v acc[5][4];
        DW_PRAGMA_UNROLL
        for (int j = 0; j < A; ++j)
            DW_PRAGMA_UNROLL
            for (int v = 0; v < NB; ++v) acc[j][v] = (dw_v){0} + b;
        /* the rows before the first step's: acc[j] is output row oh_lo + j */
        for (int64_t ih = S * oh_lo - PT; ih < S * oh_lo - PT + K - S; ++ih) {
            if (ih < 0 || ih >= H) continue;
            DW_PRAGMA_UNROLL
            for (int v = 0; v < NB; ++v) {
                dw_v tap[5];
                dw_rows_taps(K, S, x + ih * W, base[v], edge[v], m[v], tap);
                DW_PRAGMA_UNROLL
                for (int j = 0; j < A; ++j) {
                    const int64_t kh = ih + PT - S * (oh_lo + j);
                    if (kh < 0 || kh >= K) continue;
                    DW_PRAGMA_UNROLL
                    for (int kw = 0; kw < K; ++kw) acc[j][v] += tap[kw] * w[kh * K + kw];
                }
            }
        }
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            /* input rows S oh - PT + K - S + r, r < S (kh = K - S + r - S j of output row
             * oh + j): output row oh is then complete */
            DW_PRAGMA_UNROLL
            for (int r = 0; r < S; ++r) {
                const int64_t ih = S * oh - PT + K - S + r;
                if (ih < 0 || ih >= H) continue;
                DW_PRAGMA_UNROLL
                for (int v = 0; v < NB; ++v) {
                    dw_v tap[5];
                    dw_rows_taps(K, S, x + ih * W, base[v], edge[v], m[v], tap);
                    DW_PRAGMA_UNROLL
                    for (int j = 0; j < A; ++j) {
                        const int kh = K - S + r - S * j;
                        if (kh < 0) continue;
                        DW_PRAGMA_UNROLL
                        for (int kw = 0; kw < K; ++kw) acc[j][v] += tap[kw] * w[kh * K + kw];
                    }
                }
            }
            float* orow = op + oh * OW;
            DW_PRAGMA_UNROLL
            for (int v = 0; v < NB; ++v) {
                dw_v o = acc[0][v];
                if (t->tile_act) o = dw_tile_act(o, t->relu, clip, d->act_lo, d->act_hi);
                const int64_t j = j0 + v * DW_V;
                if (j + DW_V <= OW) *(dw_vu*)(orow + j) = o;
                else if (j < OW) dw_store_n(orow + j, &o, OW - j);
            }
            DW_PRAGMA_UNROLL
            for (int j = 0; j + 1 < A; ++j)
                DW_PRAGMA_UNROLL
                for (int v = 0; v < NB; ++v) acc[j][v] = acc[j + 1][v];
            DW_PRAGMA_UNROLL
            for (int v = 0; v < NB; ++v) acc[A - 1][v] = (dw_v){0} + b;
        }
    }
}

/* ------------------------------------------------ rows split into a ring (L1) */
/* The same depthwise 3x3 windows (K = 3; stride S 1 or 2) on whole output rows: each input row is copied once, one
 * output row before it is first read (so its stores are done by then), into a ring of
 * K + S rows in the thread's scratch (a few KB: L1), zero-padded and split into its S
 * column phases as dw_split_row does for the scratch image, whole vectors stored (masked
 * stores are slow on AMD's cores); rows above and below the image are a row of zeros.
 * An output vector is then K x K plain loads from L1 and as many multiply-adds, with no
 * masks, no shuffles and no test in the loop: DW_RING_NB vectors of a row at a time,
 * the weights broadcast once per plane (the last vector of a row stored whole when the
 * job's next row follows: that row overwrites the lanes past the end).  In the AVX2 copy
 * (16 registers) the rows read in place keep their taps, masks and accumulators on the
 * stack: on its wide rows this takes 0.85-0.95 of their time (DW_RULE_AVX2). */
#define DW_RING_NB 4

/* one input row into a ring row's S phases (padded column q = c + PL at [q % S][q / S]),
 * as dw_split_row but storing whole vectors (the lanes past the row's end zero: masked
 * stores are slow on AMD's cores); the ring's phases are long enough for them */
static inline __attribute__((always_inline)) void
dw_ring_split(const int S, const float* restrict in, int64_t W, int64_t PL,
              float* restrict row, int64_t RL) {
    if (S == 1) {
        float* dst = row + PL;
        int64_t c = 0;
        for (; c + DW_V <= W; c += DW_V) *(dw_vu*)(dst + c) = DW_LOAD(in + c);
        if (c < W) {
            dw_v v;
            dw_load_n(&v, in + c, W - c);
            *(dw_vu*)(dst + c) = v;
        }
        return;
    }
    float* ph0 = row;
    float* ph1 = row + RL;
    int64_t c = 0;
    if (W > 0 && PL % 2) {   /* then columns c, c + 1 share an index from c = 1 on */
        ph1[PL / 2] = in[0];
        c = 1;
    }
    for (; c < W; c += 2 * DW_V) {
        const int64_t n = W - c, idx = (c + PL) / 2;
        dw_v v0, v1;
        if (n >= 2 * DW_V) {
            v0 = DW_LOAD(in + c);
            v1 = DW_LOAD(in + c + DW_V);
        } else if (n > DW_V) {
            v0 = DW_LOAD(in + c);
            dw_load_n(&v1, in + c + DW_V, n - DW_V);
        } else {
            v1 = (dw_v){0};
            if (n == DW_V) v0 = DW_LOAD(in + c);
            else dw_load_n(&v0, in + c, n);
        }
        *(dw_vu*)(ph0 + idx) = DW_SHUF(v0, v1, DW_EVEN);
        *(dw_vu*)(ph1 + idx) = DW_SHUF(v0, v1, DW_ODD);
    }
}

/* the ring's geometry: RL floats a phase (the output row's vectors and the window's
 * reach, padded), S phases a row, K rows and a row of zeros */
static inline int64_t dw_ring_rl(const plait_dwconv2d_desc* d) {
    const int64_t nvec = (d->OW + DW_V * DW_RING_NB - 1) / (DW_V * DW_RING_NB) * DW_RING_NB;
    const int64_t cols = (d->PL + d->W + d->SW - 1) / d->SW + 1;
    int64_t rl = nvec * DW_V + (d->KW - 1) / d->SW + 1;
    if (rl < cols + DW_V) rl = cols + DW_V;   /* dw_ring_split's whole vectors */
    return (rl + DW_V - 1) / DW_V * DW_V;
}

/* output rows oh_lo .. oh_hi-1 of plane x -> op, a K x K window of stride S; ring: the
 * thread's scratch of (K + S + 1) S RL floats, zero where no input column lands */
static inline __attribute__((always_inline)) void
dw_ring_plane(const int K, const int S, const dw_call* t, const float* x, const float* wo,
              float b, float* op, int64_t oh_lo, int64_t oh_hi, float* ring, int64_t RL) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t H = d->H, W = d->W, OW = d->OW, PT = d->PT, PL = d->PL;
    const int64_t rowlen = S * RL;
    const float* zero = ring + (K + S) * rowlen;
    const int clip = d->act == PLAIT_DW_ACT_SILU ? -1 : d->act == PLAIT_DW_ACT_CLIP;
    const int NS = K + S;   /* slots: the rows of this output row and the next's */
    int64_t tag[5] = {-1, -1, -1, -1, -1};   /* the input row in each slot */
    dw_v wv[9];
    DW_PRAGMA_UNROLL
    for (int k = 0; k < K * K; ++k) wv[k] = (dw_v){0} + wo[k];
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
        /* the rows of this output row, then those of the next one: its stores are done
         * by the time the next row's loads read them */
        const int64_t ih_hi = oh * S - PT + K + (oh + 1 < oh_hi ? S : 0);
        for (int64_t ih = oh * S - PT; ih < ih_hi; ++ih) {
            if (ih < 0 || ih >= H || tag[ih % NS] == ih) continue;
            dw_ring_split(S, x + ih * W, W, PL, ring + (ih % NS) * rowlen, RL);
            tag[ih % NS] = ih;
        }
        const float* row[3];
        DW_PRAGMA_UNROLL
        for (int kh = 0; kh < K; ++kh) {
            const int64_t ih = oh * S - PT + kh;
            row[kh] = ih < 0 || ih >= H ? zero : ring + (ih % NS) * rowlen;
        }
        float* orow = op + oh * OW;
        for (int64_t j = 0; j < OW; j += DW_RING_NB * DW_V) {
            dw_v acc[DW_RING_NB];
            DW_PRAGMA_UNROLL
            for (int v = 0; v < DW_RING_NB; ++v) acc[v] = (dw_v){0} + b;
            DW_PRAGMA_UNROLL
            for (int kh = 0; kh < K; ++kh)
                DW_PRAGMA_UNROLL
                for (int kw = 0; kw < K; ++kw) {
                    const float* s = row[kh] + (kw % S) * RL + kw / S + j;
                    DW_PRAGMA_UNROLL
                    for (int v = 0; v < DW_RING_NB; ++v)
                        acc[v] += DW_LOAD(s + v * DW_V) * wv[kh * K + kw];
                }
            DW_PRAGMA_UNROLL
            for (int v = 0; v < DW_RING_NB; ++v) {
                dw_v o = acc[v];
                if (t->tile_act) o = dw_tile_act(o, t->relu, clip, d->act_lo, d->act_hi);
                const int64_t jj = j + v * DW_V;
                if (jj + DW_V <= OW || (jj < OW && (oh_hi - oh) * OW - jj >= DW_V))
                    *(dw_vu*)(orow + jj) = o;   /* past the row: the job's next rows, stored later */
                else if (jj < OW) dw_store_n(orow + jj, &o, OW - jj);
            }
        }
    }
}

/* each specialization of the rows a function of its own (see DW_PLANE_FN) */
#define DW_ROWS_FN(K_, S_, NB_)                                                          \
    static __attribute__((noinline)) void dw_rows_k##K_##s##S_##n##NB_(                  \
        const dw_call* t, const float* x, const float* wo, float b, float* op,          \
        int64_t oh_lo, int64_t oh_hi) {                                                  \
        dw_rows_plane(K_, S_, NB_, t, x, wo, b, op, oh_lo, oh_hi);                       \
    }
DW_ROWS_FN(3, 1, 1) DW_ROWS_FN(3, 1, 2) DW_ROWS_FN(3, 1, 4)
DW_ROWS_FN(3, 2, 1) DW_ROWS_FN(3, 2, 2) DW_ROWS_FN(3, 2, 4)
DW_ROWS_FN(5, 1, 1) DW_ROWS_FN(5, 1, 2) DW_ROWS_FN(5, 2, 1) DW_ROWS_FN(5, 2, 2)
#undef DW_ROWS_FN
#define DW_RING_FN(S_)                                                                   \
    static __attribute__((noinline)) void dw_ring_k3s##S_(                               \
        const dw_call* t, const float* x, const float* wo, float b, float* op,          \
        int64_t oh_lo, int64_t oh_hi, float* ring, int64_t RL) {                         \
        dw_ring_plane(3, S_, t, x, wo, b, op, oh_lo, oh_hi, ring, RL);                   \
    }
DW_RING_FN(1) DW_RING_FN(2)
#undef DW_RING_FN

/* The AVX2 copy's choice among the three depthwise layouts of a 3x3 or 5x5 window of
 * stride 1 or 2 (8 lanes, 16 registers; each layer measured alone, one thread, on an
 * AVX2-only AMD Zen 3: benchmarks/results/journal.md, "MobileNetV2's depthwise layers on
 * AVX2"): 3x3 windows on the ring once output rows are wide (28 columns at stride 1, 56
 * at stride 2), because the ring's 9 weight vectors and plain loads fit the registers
 * where the rows read in place spill their sums and end each row with masked stores; in
 * the lanes below that, where a row fills few vectors; read in place for stride 2 to
 * fewer than 28 (but more than 8) columns.  5x5 windows go in the lanes up to 32 columns
 * and read in place above: 25 weight vectors do not fit the registers, so the ring loses
 * on them.  The other copies were not measured on these layers and keep their rule (rows
 * in place from 9 columns; with 16 lanes the rows' taps and masks fit the 32 registers). */
#if defined(PLAIT_ISA_AVX2)
#define DW_RULE_AVX2 1
#else
#define DW_RULE_AVX2 0
#endif

/* A depthwise 3x3 or 5x5 window of stride 1 or 2, no dilation: what the rows serve */
static int dw_rows_valid(const plait_dwconv2d_desc* d) {
    return d->C == d->G && d->O == d->G && d->SH == d->SW && (d->SH == 1 || d->SH == 2) &&
           d->DH == 1 && d->DW == 1 && d->KH == d->KW && (d->KH == 3 || d->KH == 5);
}

/* PLAIT_DW_LANES forcing a layout (read per call: measurements and tests run each on one
 * model): 0 planes on the tile, 1 channels in lanes, 2 rows read in place, 3 rows on the
 * ring (2 where the rows apply, 3 for their 3x3 windows; any width); -1 when not set */
static int dw_forced(void) {
    const char* e = getenv("PLAIT_DW_LANES");
    return e && e[0] >= '0' && e[0] <= '3' && !e[1] ? e[0] - '0' : -1;
}

/* Rows (read in place or on the ring) for this call?  Depthwise, 3x3 or 5x5 windows of
 * stride 1 or 2, no dilation, output rows wider than 8 columns (on 7 x 7 outputs a row
 * fills 7 of 16 lanes: channels in lanes are faster there), in the AVX2 copy as its rule
 * says (DW_RULE_AVX2); PLAIT_DW_LANES=2 or 3 forces them for any width, 0 or 1 turns
 * them off (see dw_channels_in_lanes). */
static int dw_rows_in_place(const plait_dwconv2d_desc* d) {
    const int valid = dw_rows_valid(d);
    if (d->layout != PLAIT_DW_LAYOUT_AUTO) return valid && d->layout == PLAIT_DW_LAYOUT_ROWS;
    const int forced = dw_forced();
    if (forced == 0 || forced == 1) return 0;
    if (forced >= 2) return valid;
    if (!valid) return 0;
    if (DW_RULE_AVX2) {
        const int64_t K = d->KH, S = d->SH, OW = d->OW;
        if (K == 3) return OW >= 28 * S || (S == 2 && OW < 28 && OW > 8);
        return OW > 32;
    }
    return d->OW > 8;
}

/* On the ring (dw_ring_plane) rather than read in place, for a call that takes the rows:
 * 3x3 windows from 28 output columns at stride 1, 56 at stride 2 in the AVX2 copy (see
 * DW_RULE_AVX2); PLAIT_DW_LANES=3 forces it, 2 the rows in place */
static int dw_rows_on_ring(const plait_dwconv2d_desc* d) {
    const int forced = dw_forced();
    if (d->KH != 3) return 0;   /* 5x5 windows lose on it (DW_RULE_AVX2): not compiled */
    if (forced == 2 || forced == 3) return forced == 3;
    return DW_RULE_AVX2 && d->OW >= 28 * d->SH;
}

/* jobs lo .. hi-1: (part of rows, image, channel), read in place or on the ring */
static void dw_rows_jobs(void* ctx, int64_t lo, int64_t hi) {
    dw_call* t = (dw_call*)ctx;
    const plait_dwconv2d_desc* d = t->d;
    const int64_t planes = d->N * d->C, HW = d->H * d->W, OHW = d->OH * d->OW;
    const int64_t nvec = (d->OW + DW_V - 1) / DW_V;
    const int64_t RL = t->ring ? dw_ring_rl(d) : 0, floats = (d->KH + d->SH + 1) * d->SH * RL;
    float* ring = NULL;
    if (t->ring) {
        ring = plait_scratch(DW_SCRATCH_SLOT, (size_t)floats);
        if (!ring) {
            __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
            return;
        }
        memset(ring, 0, sizeof(float) * (size_t)floats);
    }
    for (int64_t job = lo; job < hi; ++job) {
        const int64_t part = job / planes, p = job % planes, c = p % d->C;
        const int64_t oh_lo = part * t->part_rows;
        const int64_t oh_hi = oh_lo + t->part_rows < d->OH ? oh_lo + t->part_rows : d->OH;
        const float* x = t->x + p * HW;
        const float* wo = t->w + c * d->KH * d->KW;
        const float b = t->bias ? t->bias[c] : 0.0f;
        float* op = t->out + p * OHW;
        if (ring) {
            if (d->SH == 2) dw_ring_k3s2(t, x, wo, b, op, oh_lo, oh_hi, ring, RL);
            else dw_ring_k3s1(t, x, wo, b, op, oh_lo, oh_hi, ring, RL);
        } else if (d->SH == 2) {
            if (d->KH == 3) {
                if (nvec >= 4) dw_rows_k3s2n4(t, x, wo, b, op, oh_lo, oh_hi);
                else if (nvec >= 2) dw_rows_k3s2n2(t, x, wo, b, op, oh_lo, oh_hi);
                else dw_rows_k3s2n1(t, x, wo, b, op, oh_lo, oh_hi);
            } else {
                if (nvec >= 2) dw_rows_k5s2n2(t, x, wo, b, op, oh_lo, oh_hi);
                else dw_rows_k5s2n1(t, x, wo, b, op, oh_lo, oh_hi);
            }
        } else if (d->KH == 3) {
            if (nvec >= 4) dw_rows_k3s1n4(t, x, wo, b, op, oh_lo, oh_hi);
            else if (nvec >= 2) dw_rows_k3s1n2(t, x, wo, b, op, oh_lo, oh_hi);
            else dw_rows_k3s1n1(t, x, wo, b, op, oh_lo, oh_hi);
        } else {
            if (nvec >= 2) dw_rows_k5s1n2(t, x, wo, b, op, oh_lo, oh_hi);
            else dw_rows_k5s1n1(t, x, wo, b, op, oh_lo, oh_hi);
        }
        if (!t->tile_act && (t->res || t->relu || d->act)) {
            float* o0 = op + oh_lo * d->OW;
            dw_epilogue(t, o0, t->res ? t->res + (o0 - t->out) : NULL, (oh_hi - oh_lo) * d->OW);
        }
    }
}

/* ------------------------------------------ depthwise with channels in the lanes */
/* A depthwise convolution (one input and one output channel per group) on small output
 * rows wastes lanes on the tile above (a 7-column row fills 7 of 16) and pays a copy and
 * a tile per plane.  Here a job is DW_V channels of one image instead, as in the NCHWc
 * kernels of onnxruntime's MLAS: their planes are transposed into a scratch image of
 * pixels of DW_V channels each (zero-padded; every tap of every stride and dilation is
 * one full vector load), each output row is computed DW_CL_J pixels at a time (one
 * multiply-add per pixel and tap, the tap's DW_V weights one vector), and the output
 * pixels are transposed back to planes (relu and clip run on the accumulators, the
 * residual and SiLU on the planes, as on the tile).  The transposes go
 * DW_V pixels at a time through log2(DW_V) rounds of interleaving. */

#define DW_CL_J 8   /* output pixels of a row per tile */

/* A depthwise call with channels in lanes, or planes on the tile?  Lanes where output
 * rows are short: narrower than a vector or at most 8 columns (a tile per plane wastes
 * lanes and costs more than the transposes), and with 16 lanes under a 7-wide window
 * (ConvNeXt's).  Each layer alone on 2 threads, with 16 lanes, lanes take about half the
 * tile's time on 7x7 outputs and about 0.8 of it on 14x14 and for 7x7 windows up to
 * 56x56, but more than the tile for smaller windows on 28 and more columns; with 8
 * lanes (AVX2) they win only on 7x7 outputs, by about a tenth, outside the windows the
 * AVX2 rule places (DW_RULE_AVX2).  PLAIT_DW_LANES=0 or 1
 * forces the choice (read per call: measurements and tests run both on one model). */
static int dw_channels_in_lanes(const plait_dwconv2d_desc* d) {
    if (d->layout != PLAIT_DW_LAYOUT_AUTO) return d->layout == PLAIT_DW_LAYOUT_LANES;
    const int forced = dw_forced();
    if (forced == 0 || forced == 1) return forced == 1;
    return d->OW < DW_V || d->OW <= 8 || (DW_V >= 16 && d->KW >= 7) ||
           (DW_RULE_AVX2 && dw_rows_valid(d));   /* those the AVX2 rows leave */
}

/* r[i][j] -> r[j][i] for a DW_V x DW_V block in registers */
static inline __attribute__((always_inline)) void dw_transpose(dw_v* r) {
    DW_PRAGMA_UNROLL
    for (int s = 0; s < DW_LOG2V; ++s) {
        dw_v n[DW_V];
        DW_PRAGMA_UNROLL
        for (int i = 0; i < DW_V / 2; ++i) {
            n[2 * i] = DW_SHUF(r[i], r[i + DW_V / 2], DW_ZIPLO);
            n[2 * i + 1] = DW_SHUF(r[i], r[i + DW_V / 2], DW_ZIPHI);
        }
        DW_PRAGMA_UNROLL
        for (int i = 0; i < DW_V; ++i) r[i] = n[i];
    }
}

/* r[k] = lane i: src[i * stride + k] for i < nc (0 past them), k < m <= DW_V: DW_V
 * pixels (or taps) of nc channel planes, each a vector of channels */
static inline __attribute__((always_inline)) void
dw_load_transposed(dw_v* r, const float* src, int64_t stride, int64_t nc, int64_t m) {
    DW_PRAGMA_UNROLL
    for (int i = 0; i < DW_V; ++i) {
        if (i >= nc) r[i] = (dw_v){0};
        else if (m == DW_V) r[i] = DW_LOAD(src + i * stride);
        else dw_load_n(&r[i], src + i * stride, m);
    }
    dw_transpose(r);
}

/* the output rows of one job: img the transposed padded input (HP x WP pixels), wt the
 * KH * KW weight vectors, bv the bias vector; pixels into ob (OH * OW of them) */
static inline __attribute__((always_inline)) void
dw_cl_rows(const int64_t KH, const int64_t KW, const int64_t SH, const int64_t SW,
           const int64_t DH, const int64_t DW, const dw_call* t, const float* img,
           const float* wt, dw_v bv, float* ob) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t OH = d->OH, OW = d->OW, WP = t->WP;
    for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow0 = 0; ow0 < OW; ow0 += DW_CL_J) {
            dw_v acc[DW_CL_J];
            DW_PRAGMA_UNROLL
            for (int j = 0; j < DW_CL_J; ++j) acc[j] = bv;
            for (int64_t kh = 0; kh < KH; ++kh) {
                const float* row = img + ((oh * SH + kh * DH) * WP + ow0 * SW) * DW_V;
                for (int64_t kw = 0; kw < KW; ++kw) {
                    const dw_v wv = *(const dw_v*)(wt + (kh * KW + kw) * DW_V);
                    const float* s = row + kw * DW * DW_V;
                    DW_PRAGMA_UNROLL
                    for (int j = 0; j < DW_CL_J; ++j)
                        acc[j] += *(const dw_v*)(s + j * SW * DW_V) * wv;
                }
            }
            if (t->tile_act) {
                const int clip = d->act == PLAIT_DW_ACT_SILU ? -1 : d->act == PLAIT_DW_ACT_CLIP;
                DW_PRAGMA_UNROLL
                for (int j = 0; j < DW_CL_J; ++j)
                    acc[j] = dw_tile_act(acc[j], t->relu, clip, d->act_lo, d->act_hi);
            }
            float* o = ob + (oh * OW + ow0) * DW_V;
            DW_PRAGMA_UNROLL
            for (int j = 0; j < DW_CL_J; ++j)
                if (ow0 + j < OW) *(dw_v*)(o + j * DW_V) = acc[j];
        }
    }
}

/* each window's rows a function of its own (see DW_PLANE_FN) */
#define DW_CL_FN(K_, S_)                                                                 \
    static __attribute__((noinline)) void dw_cl_k##K_##s##S_(                            \
        const dw_call* t, const float* img, const float* wt, dw_v bv, float* ob) {       \
        dw_cl_rows(K_, K_, S_, S_, 1, 1, t, img, wt, bv, ob);                            \
    }
DW_CL_FN(3, 1) DW_CL_FN(3, 2) DW_CL_FN(5, 1) DW_CL_FN(5, 2) DW_CL_FN(7, 1)
#undef DW_CL_FN
static __attribute__((noinline)) void dw_cl_any(const dw_call* t, const float* img,
                                                const float* wt, dw_v bv, float* ob) {
    const plait_dwconv2d_desc* d = t->d;
    dw_cl_rows(d->KH, d->KW, d->SH, d->SW, d->DH, d->DW, t, img, wt, bv, ob);
}
#define DW_CL(K_, S_) dw_cl_k##K_##s##S_(t, img, wt, bv, ob)

/* jobs lo .. hi-1: (image, block of DW_V channels) pairs */
static void dw_cl_jobs(void* ctx, int64_t lo, int64_t hi) {
    dw_call* t = (dw_call*)ctx;
    const plait_dwconv2d_desc* d = t->d;
    const int64_t C = d->C, HW = d->H * d->W, OHW = d->OH * d->OW, KK = d->KH * d->KW;
    const int64_t HP = t->HP, WP = t->WP;
    float* img = plait_scratch(DW_SCRATCH_SLOT, (size_t)((HP * WP + KK + OHW) * DW_V));
    if (!img) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float* wt = img + HP * WP * DW_V;
    float* ob = wt + KK * DW_V;
    /* the padding (the image's other pixels are rewritten by every job) */
    const int64_t r0 = d->PT < HP ? d->PT : HP, r1 = d->PT + d->H < HP ? d->PT + d->H : HP;
    const int64_t c0 = d->PL < WP ? d->PL : WP, c1 = d->PL + d->W < WP ? d->PL + d->W : WP;
    for (int64_t r = 0; r < HP; ++r) {
        float* row = img + r * WP * DW_V;
        if (r < r0 || r >= r1) {
            memset(row, 0, sizeof(float) * (size_t)(WP * DW_V));
        } else {
            memset(row, 0, sizeof(float) * (size_t)(c0 * DW_V));
            memset(row + c1 * DW_V, 0, sizeof(float) * (size_t)((WP - c1) * DW_V));
        }
    }
    const int plain = d->KH == d->KW && d->SH == d->SW && d->DH == 1 && d->DW == 1;
    for (int64_t job = lo; job < hi; ++job) {
        const int64_t n = job / t->R, cb = (job % t->R) * DW_V;
        const int64_t nc = C - cb < DW_V ? C - cb : DW_V;
        /* the channels' planes, DW_V pixels at a time, into the image's pixels */
        const float* xb = t->x + (n * C + cb) * HW;
        int64_t ih = 0, iw = 0;
        for (int64_t p0 = 0; p0 < HW; p0 += DW_V) {
            const int64_t m = HW - p0 < DW_V ? HW - p0 : DW_V;
            dw_v r[DW_V];
            dw_load_transposed(r, xb + p0, HW, nc, m);
            for (int64_t k = 0; k < m; ++k) {
                const int64_t pr = ih + d->PT, pc = iw + d->PL;
                if (pr < HP && pc < WP) *(dw_v*)(img + (pr * WP + pc) * DW_V) = r[k];
                if (++iw == d->W) {
                    iw = 0;
                    ++ih;
                }
            }
        }
        /* the weights and the bias of the block (0 past the last channel) */
        for (int64_t k0 = 0; k0 < KK; k0 += DW_V) {
            const int64_t m = KK - k0 < DW_V ? KK - k0 : DW_V;
            dw_v r[DW_V];
            dw_load_transposed(r, t->w + cb * KK + k0, KK, nc, m);
            for (int64_t k = 0; k < m; ++k) *(dw_v*)(wt + (k0 + k) * DW_V) = r[k];
        }
        dw_v bv = {0};
        if (t->bias)
            for (int64_t i = 0; i < nc; ++i) bv[i] = t->bias[cb + i];
        const int64_t K = d->KH, S = d->SH;
        DW_EACH_WINDOW(DW_CL, dw_cl_any(t, img, wt, bv, ob));
        /* the output pixels back into the channels' planes, then the epilogue */
        float* outb = t->out + (n * C + cb) * OHW;
        for (int64_t q0 = 0; q0 < OHW; q0 += DW_V) {
            const int64_t m = OHW - q0 < DW_V ? OHW - q0 : DW_V;
            dw_v r[DW_V];
            DW_PRAGMA_UNROLL
            for (int i = 0; i < DW_V; ++i)
                r[i] = i < m ? *(const dw_v*)(ob + (q0 + i) * DW_V) : (dw_v){0};
            dw_transpose(r);
            for (int64_t c = 0; c < nc; ++c) {
                if (m == DW_V) *(dw_vu*)(outb + c * OHW + q0) = r[c];
                else dw_store_n(outb + c * OHW + q0, &r[c], m);
            }
        }
        if (!t->tile_act && (t->res || t->relu || d->act))
            for (int64_t c = 0; c < nc; ++c)
                dw_epilogue(t, outb + c * OHW,
                            t->res ? t->res + (outb - t->out) + c * OHW : NULL, OHW);
    }
}
#undef DW_CL

/* ------------------------------------------ depthwise, channels last (NHWC) */
/* x[N][H][W][C], out and the residual [N][OH][OW][C], the weights w[KH][KW][C] (packed so
 * at compile time by c.DispatchDepthwise's channels-last rule): the depthwise convolution
 * of a token-major model between two products (SegFormer's and PVT-v2's Mix-FFN, CvT's
 * convolutional projections) reads and writes the products' layout, with no transpose on
 * either side.  A job is a band of output rows of one image and a part of its channels
 * (at most DW_NHWC_PART): the input rows it reads go, each once, into a ring of
 * (KH - 1) DH + 1 zero-padded scratch rows of that part (rows above and below the image
 * all zero), each pixel's channels at a stride of a vector more than the part's, so that
 * the taps of neighbouring pixels do not fall in the same cache sets (with C a multiple
 * of 256, the input's own stride of 1, 2 or 4 KB put a window's 30 pixels in one or two
 * sets: 512 channels on 28 x 28 took 1.8 times 480's time read in place).  The output
 * pixels of a row then go DW_NJ at a time (then 4) with no bounds test, for each
 * block of DW_V channels one multiply-add per pixel and tap (the tap's DW_V weights one
 * vector); the whole epilogue (bias, residual, relu, then clip, SiLU or GELU) runs on
 * the accumulators, and a last block of fewer than DW_V channels stores with a mask. */
#if DW_V == 16
#define DW_NJ 8
#else
#define DW_NJ 4
#endif
#define DW_NHWC_PART 128   /* channels of a job at most */

/* relu (keeping NaN), then the activation of one output vector */
static inline __attribute__((always_inline)) dw_v dw_nhwc_act(const dw_call* t, dw_v v) {
    const plait_dwconv2d_desc* d = t->d;
    if (t->relu) v = (dw_v)(((v > (dw_v){0}) | (v != v)) & (dw_vi)v);
    switch (d->act) {
    case PLAIT_DW_ACT_CLIP: return dw_tile_act(v, 0, 1, d->act_lo, d->act_hi);
    case PLAIT_DW_ACT_SILU: return dw_silu_v(v);
    case PLAIT_DW_ACT_GELU: return dw_gelu_v(v, 0);
    case PLAIT_DW_ACT_GELU_TANH: return dw_gelu_v(v, 1);
    default: return v;
    }
}

/* the n < DW_V or all DW_V floats at p (the other lanes 0) */
static inline __attribute__((always_inline)) dw_v dw_load_c(const float* p, int64_t n) {
    if (n == DW_V) return DW_LOAD(p);
    dw_v v;
    dw_load_n(&v, p, n);
    return v;
}

/* A job's scratch: the ring of KR rows of WP pixels of CP floats (channels c0 .. c0+nc-1
 * of the input, then zeros) */
typedef struct {
    float* img;
    int64_t c0, nc, CP, WP, KR;
    int64_t n;   /* the job's image */
} dw_ring;

/* input row ih (any row: outside the image a zero row) into its ring slot */
static void dw_nhwc_fill(const dw_call* t, const float* xn, const dw_ring* g, int64_t ih) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t C = d->C, W = d->W, PL = d->PL, CP = g->CP, nc = g->nc;
    float* row = g->img + ((ih + d->PT) % g->KR) * g->WP * CP;
    if (ih < 0 || ih >= d->H) {
        memset(row, 0, sizeof(float) * (size_t)(g->WP * CP));
        return;
    }
    const int64_t q0 = PL < g->WP ? PL : g->WP, q1 = PL + W < g->WP ? PL + W : g->WP;
    memset(row, 0, sizeof(float) * (size_t)(q0 * CP));
    memset(row + q1 * CP, 0, sizeof(float) * (size_t)((g->WP - q1) * CP));
    const float* src = xn + ih * W * C + g->c0;
    for (int64_t q = q0; q < q1; ++q) {
        const float* s = src + (q - PL) * C;
        float* o = row + q * CP;
        int64_t c = 0;
        for (; c + DW_V <= nc; c += DW_V) *(dw_vu*)(o + c) = DW_LOAD(s + c);
        if (c < nc) {
            dw_v v;
            dw_load_n(&v, s + c, nc - c);
            *(dw_vu*)(o + c) = v;
        }
    }
}

/* the bias (or 0) of channels cb .., then + residual, relu and the activation, stored
 * (nc of them) at off */
static inline __attribute__((always_inline)) void
dw_nhwc_store(const dw_call* t, dw_v v, float* orow, const float* rrow, int64_t off,
              int64_t nc) {
    if (rrow) v += dw_load_c(rrow + off, nc);
    v = dw_nhwc_act(t, v);
    if (nc == DW_V) *(dw_vu*)(orow + off) = v;
    else dw_store_n(orow + off, &v, nc);
}

/* J output pixels from column ow0 on, channels cb .. cb+nc-1 (all DW_V when full; cl:
 * their place in a scratch pixel) of the output row whose first input row is ih0 */
static inline __attribute__((always_inline)) void
dw_nhwc_block(const int J, const int full, const int64_t KH, const int64_t KW,
              const int64_t SW, const int64_t DH, const int64_t DW, const dw_call* t,
              const dw_ring* g, int64_t ih0, int64_t ow0, int64_t cl, int64_t nc,
              float* orow, const float* rrow) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t C = d->C, CP = g->CP, cb = g->c0 + cl, rowlen = g->WP * CP;
    const dw_v bv = t->bias ? (full ? DW_LOAD(t->bias + cb) : dw_load_c(t->bias + cb, nc))
                            : (dw_v){0};
    dw_v acc[DW_NJ];
    DW_PRAGMA_UNROLL
    for (int j = 0; j < J; ++j) acc[j] = bv;
    for (int64_t kh = 0; kh < KH; ++kh) {
        const float* xr = g->img + ((ih0 + kh * DH + d->PT) % g->KR) * rowlen +
                          ow0 * SW * CP + cl;
        const float* wr = t->w + kh * KW * C + cb;
        DW_PRAGMA_UNROLL
        for (int64_t kw = 0; kw < KW; ++kw) {
            const dw_v wv = full ? DW_LOAD(wr + kw * C) : dw_load_c(wr + kw * C, nc);
            const float* s = xr + kw * DW * CP;
            DW_PRAGMA_UNROLL
            for (int j = 0; j < J; ++j) acc[j] += DW_LOAD(s + j * SW * CP) * wv;
        }
    }
    DW_PRAGMA_UNROLL
    for (int j = 0; j < J; ++j)
        dw_nhwc_store(t, acc[j], orow, rrow, (ow0 + j) * C + cb, full ? DW_V : nc);
}

/* the same for any J <= DW_NJ and window, the sizes read at run time (the rows' last
 * few pixels and a last block of fewer than DW_V channels: not unrolled, so that the
 * unrolled bodies above stay few) */
static __attribute__((noinline)) void
dw_nhwc_block_any(int J, const dw_call* t, const dw_ring* g, int64_t ih0, int64_t ow0,
                  int64_t cl, int64_t nc) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t C = d->C, CP = g->CP, cb = g->c0 + cl, rowlen = g->WP * CP;
    dw_v acc[DW_NJ];
    const dw_v bv = t->bias ? dw_load_c(t->bias + cb, nc) : (dw_v){0};
    for (int j = 0; j < J; ++j) acc[j] = bv;
    for (int64_t kh = 0; kh < d->KH; ++kh) {
        const float* xr = g->img + ((ih0 + kh * d->DH + d->PT) % g->KR) * rowlen +
                          ow0 * d->SW * CP + cl;
        for (int64_t kw = 0; kw < d->KW; ++kw) {
            const dw_v wv = dw_load_c(t->w + (kh * d->KW + kw) * C + cb, nc);
            const float* s = xr + kw * d->DW * CP;
            for (int j = 0; j < J; ++j) acc[j] += DW_LOAD(s + j * d->SW * CP) * wv;
        }
    }
    const int64_t oh = (ih0 + d->PT) / d->SH;
    const int64_t off = (g->n * d->OH + oh) * d->OW * C;
    for (int j = 0; j < J; ++j)
        dw_nhwc_store(t, acc[j], t->out + off, t->res ? t->res + off : NULL,
                      (ow0 + j) * C + cb, nc);
}

/* J output pixels from column ow0 on, every channel of the ring */
static inline __attribute__((always_inline)) void
dw_nhwc_cols(const int J, const int64_t KH, const int64_t KW, const int64_t SW,
             const int64_t DH, const int64_t DW, const dw_call* t, const dw_ring* g,
             int64_t ih0, int64_t ow0, float* orow, const float* rrow) {
    const int64_t full_end = g->nc / DW_V * DW_V;
    for (int64_t cl = 0; cl < full_end; cl += DW_V)
        dw_nhwc_block(J, 1, KH, KW, SW, DH, DW, t, g, ih0, ow0, cl, DW_V, orow, rrow);
    if (full_end < g->nc) dw_nhwc_block_any(J, t, g, ih0, ow0, full_end, g->nc - full_end);
}

/* output rows oh_lo .. oh_hi-1 of image n for the ring's channels; KH ... DW are
 * constants where the caller's are, so the taps unroll */
static inline __attribute__((always_inline)) void
dw_nhwc_rows(const int64_t KH, const int64_t KW, const int64_t SH, const int64_t SW,
             const int64_t DH, const int64_t DW, const dw_call* t, const dw_ring* g,
             int64_t n, int64_t oh_lo, int64_t oh_hi) {
    const plait_dwconv2d_desc* d = t->d;
    const int64_t C = d->C, OW = d->OW;
    const float* xn = t->x + n * d->H * d->W * C;
    int64_t next = oh_lo * SH - d->PT;   /* the first input row not in the ring yet */
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
        const int64_t ih0 = oh * SH - d->PT, ih_end = ih0 + (KH - 1) * DH + 1;
        for (int64_t ih = next > ih0 ? next : ih0; ih < ih_end; ++ih)
            dw_nhwc_fill(t, xn, g, ih);
        next = ih_end;
        const int64_t ooff = (n * d->OH + oh) * OW * C;
        float* orow = t->out + ooff;
        const float* rrow = t->res ? t->res + ooff : NULL;
        int64_t ow0 = 0;
        for (; ow0 + DW_NJ <= OW; ow0 += DW_NJ)
            dw_nhwc_cols(DW_NJ, KH, KW, SW, DH, DW, t, g, ih0, ow0, orow, rrow);
#if DW_NJ > 4
        if (ow0 + 4 <= OW) {
            dw_nhwc_cols(4, KH, KW, SW, DH, DW, t, g, ih0, ow0, orow, rrow);
            ow0 += 4;
        }
#endif
        if (ow0 < OW)
            for (int64_t cl = 0; cl < g->nc; cl += DW_V)
                dw_nhwc_block_any((int)(OW - ow0), t, g, ih0, ow0, cl,
                                  g->nc - cl < DW_V ? g->nc - cl : DW_V);
    }
}

/* each window's rows a function of its own (see DW_PLANE_FN) */
#define DW_NHWC_FN(K_, S_)                                                               \
    static __attribute__((noinline)) void dw_nhwc_k##K_##s##S_(                          \
        const dw_call* t, const dw_ring* g, int64_t n, int64_t oh_lo, int64_t oh_hi) {   \
        dw_nhwc_rows(K_, K_, S_, S_, 1, 1, t, g, n, oh_lo, oh_hi);                       \
    }
DW_NHWC_FN(3, 1) DW_NHWC_FN(3, 2) DW_NHWC_FN(5, 1) DW_NHWC_FN(5, 2) DW_NHWC_FN(7, 1)
#undef DW_NHWC_FN
static __attribute__((noinline)) void dw_nhwc_any(const dw_call* t, const dw_ring* g,
                                                  int64_t n, int64_t oh_lo, int64_t oh_hi) {
    const plait_dwconv2d_desc* d = t->d;
    dw_nhwc_rows(d->KH, d->KW, d->SH, d->SW, d->DH, d->DW, t, g, n, oh_lo, oh_hi);
}
#define DW_NHWC(K_, S_) dw_nhwc_k##K_##s##S_(t, &g, n, oh_lo, oh_hi)

/* jobs lo .. hi-1: (image, band of output rows, part of the channels) */
static void dw_nhwc_jobs(void* ctx, int64_t lo, int64_t hi) {
    dw_call* t = (dw_call*)ctx;
    const plait_dwconv2d_desc* d = t->d;
    const int64_t parts = t->R, per = t->HP, bands = t->WP, band = t->part_rows;
    dw_ring g;
    g.KR = (d->KH - 1) * d->DH + 1;
    g.WP = (d->OW - 1) * d->SW + (d->KW - 1) * d->DW + 1;
    g.CP = (per + DW_V - 1) / DW_V * DW_V + DW_V;
    g.img = plait_scratch(DW_SCRATCH_SLOT, (size_t)(g.KR * g.WP * g.CP));
    if (!g.img) {
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    const int plain = d->KH == d->KW && d->SH == d->SW && d->DH == 1 && d->DW == 1;
    const int64_t K = d->KH, S = d->SH;
    for (int64_t job = lo; job < hi; ++job) {
        const int64_t part = job % parts, b = (job / parts) % bands, n = job / parts / bands;
        g.c0 = part * per;
        g.n = n;
        g.nc = g.c0 + per < d->C ? per : d->C - g.c0;
        const int64_t oh_lo = b * band, oh_hi = oh_lo + band < d->OH ? oh_lo + band : d->OH;
        DW_EACH_WINDOW(DW_NHWC, dw_nhwc_any(t, &g, n, oh_lo, oh_hi));
    }
}
#undef DW_NHWC

/* the call with channels last: parts of at most DW_NHWC_PART channels (whole vectors),
 * each image's rows in bands so that there are about 4 jobs per thread */
static int dw_nhwc(dw_call* t, int nt) {
    const plait_dwconv2d_desc* d = t->d;
    if (d->G != d->C || d->O != d->C) return 2;   /* depthwise only */
    const int64_t blocks = (d->C + DW_V - 1) / DW_V;
    int64_t parts = (d->C + DW_NHWC_PART - 1) / DW_NHWC_PART;
    t->HP = (blocks + parts - 1) / parts * DW_V;   /* channels of a part */
    parts = (d->C + t->HP - 1) / t->HP;
    int64_t bands = (4 * nt + d->N * parts - 1) / (d->N * parts);
    if (bands > d->OH) bands = d->OH;
    if (bands < 1) bands = 1;
    t->part_rows = (d->OH + bands - 1) / bands;    /* rows of a band */
    t->WP = (d->OH + t->part_rows - 1) / t->part_rows;
    t->R = parts;
    plait_parallel_range(dw_nhwc_jobs, t, d->N * t->WP * parts, nt);
    return __atomic_load_n(&t->failed, __ATOMIC_RELAXED);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_dwconv2d)(const plait_dwconv2d_desc* d, const float* x, const float* w,
                             const float* bias, const float* res, int relu, float* out) {
    dw_call t;
    t.d = d; t.x = x; t.w = w; t.bias = bias; t.res = res; t.relu = relu; t.out = out;
    t.CG = d->C / d->G;
    t.OG = d->O / d->G;
    t.failed = 0;
    /* GELU runs over the stored planes (dw_epilogue), not on the tile */
    t.tile_act = !res && !(relu && d->act == PLAIT_DW_ACT_SILU) && d->act != PLAIT_DW_ACT_GELU &&
                 d->act != PLAIT_DW_ACT_GELU_TANH;
    const int64_t work = d->N * d->O * d->OH * d->OW * d->KH * d->KW * t.CG;
    int nt = work >= 131072 ? plait_max_threads() : 1;
    if (d->max_threads > 0 && nt > d->max_threads) nt = (int)d->max_threads;
    if (d->nhwc) return dw_nhwc(&t, nt);
    if (dw_rows_in_place(d)) {
        /* On several threads a plane larger than DW_BAND_BYTES has its output rows cut in
         * one part per thread, jobs part by part from both ends (as the planes filled in
         * bands below: each thread reads the rows its products wrote); smaller planes are
         * jobs whole: a large plane in parts keeps each thread on the rows it wrote (a few
         * per cent faster on MobileNetV2's 112 x 112 inputs), while cutting planes of
         * 56 x 56 and smaller costs more in job overhead and lost locality across rows
         * than it gains (those layers ran a third to two thirds slower in parts). */
        int64_t parts = nt > 1 && (size_t)(d->H * d->W) * sizeof(float) > DW_BAND_BYTES ? nt : 1;
        t.part_rows = (d->OH + parts - 1) / parts;
        parts = (d->OH + t.part_rows - 1) / t.part_rows;
        t.ring = dw_rows_on_ring(d);
        plait_parallel_range(dw_rows_jobs, &t, d->N * d->C * parts, nt);
        return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
    }
    if (t.CG == 1 && t.OG == 1 && dw_channels_in_lanes(d)) {
        t.R = (d->C + DW_V - 1) / DW_V;   /* channel blocks per image */
        const int64_t owa = (d->OW + DW_CL_J - 1) / DW_CL_J * DW_CL_J;
        t.HP = (d->OH - 1) * d->SH + (d->KH - 1) * d->DH + 1;
        t.WP = (owa - 1) * d->SW + (d->KW - 1) * d->DW + 1;
        plait_parallel_range(dw_cl_jobs, &t, d->N * t.R, nt);
        return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
    }
    const int64_t nvec = (d->OW + DW_V - 1) / DW_V;
    t.NB = nvec >= 2 ? 2 : 1;
    t.R = DW_ACC / t.NB;
    t.OWA = (nvec + t.NB - 1) / t.NB * t.NB * DW_V;
    const int64_t oha = (d->OH + t.R - 1) / t.R * t.R;
    /* the rows the tile reads (those past the image's are zero) */
    t.HA = (oha - 1) * d->SH + (d->KH - 1) * d->DH + 1;
    const int64_t cols = (d->PL + d->W + d->SW - 1) / d->SW + 1;
    t.RL = t.OWA + (d->KW - 1) * d->DW / d->SW;
    if (t.RL < cols) t.RL = cols;
    t.plane = t.HA * d->SW * t.RL;
    t.bands = (size_t)(t.CG * t.plane) * sizeof(float) > DW_BAND_BYTES;
    /* On several threads each large plane (filled in bands) is cut into as many parts of
     * rows, and the jobs go part by part (every plane's top part first): the threads
     * take jobs from both ends (plait_take_job), so with two the caller computes the top
     * halves and the worker the bottom halves: the rows that the same threads' products
     * (their column blocks, taken the same way) wrote in the layer before and read in
     * the layer after.  That pays on large planes only (about 10% on a 32 x 112 x 112
     * input); smaller planes, and the channels-in-lanes layout on 14 x 14 and 7 x 7,
     * lose more to the extra jobs than they gain (a third to two thirds slower in parts),
     * so they stay whole. */
    const int64_t bands_of_plane = oha / t.R;
    int64_t parts = nt > 1 && t.bands && bands_of_plane >= 4 ? nt : 1;
    if (parts > bands_of_plane / 2) parts = bands_of_plane / 2 > 1 ? bands_of_plane / 2 : 1;
    t.part_rows = (bands_of_plane + parts - 1) / parts * t.R;
    parts = (d->OH + t.part_rows - 1) / t.part_rows;
    const int64_t jobs = d->N * d->G * parts;
    plait_parallel_range(dw_jobs, &t, jobs, nt);
    return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------- squeeze-and-excite */

typedef struct {
    const plait_se_desc* d;
    const float* x;
    float* out;
    float* v;   /* the planes' means, then their gates */
} se_call;

/* the means of planes lo .. hi-1 */
static void se_means(void* ctx, int64_t lo, int64_t hi) {
    const se_call* t = (const se_call*)ctx;
    plait_plane_means(t->x, t->d->HW, lo, hi, t->v);
}

/* out = x * gate over planes lo .. hi-1 */
static void se_scale(void* ctx, int64_t lo, int64_t hi) {
    const se_call* t = (const se_call*)ctx;
    const int64_t HW = t->d->HW;
    for (int64_t p = lo; p < hi; ++p) {
        const float* restrict s = t->x + p * HW;
        float* restrict o = t->out + p * HW;
        const float g = t->v[p];
        for (int64_t j = 0; j < HW; ++j) o[j] = s[j] * g;
    }
}

/* sum_k a[k] b[k] on two vectors of partial sums (a scalar chain of multiply-adds, one
 * per 4 cycles, made the gate's two small products most of its time: RegNet's 512 -> 128
 * -> 512 gate on 14 x 14 took about 100 us, the mean and the scaling a fifth of it) */
static float se_dot(const float* restrict a, const float* restrict b, int64_t n) {
    dw_v s0 = {0}, s1 = {0};
    int64_t k = 0;
    for (; k + 2 * DW_V <= n; k += 2 * DW_V) {
        s0 += DW_LOAD(a + k) * DW_LOAD(b + k);
        s1 += DW_LOAD(a + k + DW_V) * DW_LOAD(b + k + DW_V);
    }
    if (k + DW_V <= n) {
        s0 += DW_LOAD(a + k) * DW_LOAD(b + k);
        k += DW_V;
    }
    if (k < n) {
        dw_v va, vb;
        dw_load_n(&va, a + k, n - k);
        dw_load_n(&vb, b + k, n - k);
        s1 += va * vb;
    }
    s0 += s1;
    float sum = 0.0f;
    for (int i = 0; i < DW_V; ++i) sum += s0[i];
    return sum;
}

/* v[0:n] in place: SiLU v / (1 + exp(-v)) (silu set) or the sigmoid 1 / (1 + exp(-v)),
 * DW_V values a step (plait_exp_sv, a true division: the scalar formula's results; GCC
 * left the scalar loop over plait_exp_f32 unvectorized in the AVX2 and baseline copies,
 * 3.3 against 0.75 ns a value) */
static void se_gate_act(float* restrict v, int64_t n, int silu) {
    for (int64_t k = 0; k < n; k += DW_V) {
        const int64_t left = n - k;
        dw_v a;
        if (left >= DW_V) a = DW_LOAD(v + k);
        else dw_load_n(&a, v + k, left);
        dw_v e = -a;
        plait_exp_sv(&e);
        const dw_v r = (silu ? a : (dw_v){0} + 1.0f) / (e + 1.0f);
        if (left >= DW_V) *(dw_vu*)(v + k) = r;
        else dw_store_n(v + k, &r, left);
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_se_scale)(const plait_se_desc* d, const float* x, const float* w1,
                             const float* b1, const float* w2, const float* b2, float* out) {
    float* v = (float*)malloc(sizeof(float) * (size_t)(d->N * d->C + d->CR));
    if (!v) return 1;
    float* h = v + d->N * d->C;
    se_call t = {d, x, out, v};
    const int64_t planes = d->N * d->C;
    const int nt = planes * d->HW >= 65536 ? plait_max_threads() : 1;
    plait_parallel_range(se_means, &t, planes, nt);
    for (int64_t n = 0; n < d->N; ++n) {
        float* m = v + n * d->C;
        for (int64_t j = 0; j < d->CR; ++j) {
            float a = (b1 ? b1[j] : 0.0f) + se_dot(w1 + j * d->C, m, d->C);
            if (d->act == PLAIT_DW_SE_RELU) a = (a > 0.0f || a != a) ? a : 0.0f;
            h[j] = a;
        }
        if (d->act != PLAIT_DW_SE_RELU) se_gate_act(h, d->CR, 1);
        /* the gates replace the means of image n (all read above) */
        for (int64_t c = 0; c < d->C; ++c)
            m[c] = (b2 ? b2[c] : 0.0f) + se_dot(w2 + c * d->CR, h, d->CR);
        se_gate_act(m, d->C, 0);
    }
    plait_parallel_range(se_scale, &t, planes, nt);
    free(v);
    return 0;
}

PLAIT_ISA_FAMILY("dwconv")
PLAIT_ISA_DISPATCH(int, plait_dwconv2d,
                   (const plait_dwconv2d_desc* d, const float* x, const float* w,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, w, bias, res, relu, out))
PLAIT_ISA_DISPATCH(int, plait_se_scale,
                   (const plait_se_desc* d, const float* x, const float* w1, const float* b1,
                    const float* w2, const float* b2, float* out),
                   (d, x, w1, b1, w2, b2, out))
