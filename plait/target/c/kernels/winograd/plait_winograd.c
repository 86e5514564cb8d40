/* plait_winograd.c: the c target's 3x3 stride-1 convolutions by Winograd F(2x2, 3x3)
 * and F(4x4, 3x3) (float32, NCHW), a kernel family of plait_isa.h.  The products of the
 * transformed tiles run on the register tile of plait_tile.h.  A grouped convolution
 * (plait_conv2d_desc.G) runs as one ungrouped convolution per image and group
 * (plait_conv2d_groups): the jobs of image-group n read group n % G's transformed
 * weights (wino_u) and bias (wino_bias). */
#include "plait_isa.h"
#include "plait_tile.h"

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

/* Tiles per block, at least the wide tile's columns (the AVX-512 copy's 6 x 32: blocks
 * of 16 tiles would leave half of it empty, and the products run 1.2-1.4x slower) while
 * the block's buffers, per_tile floats a tile, stay within 1.25 MB (so they stay in a
 * 2 MB L2 next to the weights' panels). */
static inline int64_t wino_wide_blocks(int64_t tb, int64_t per_tile) {
    if (tb < PLAIT_TILE_N && per_tile * PLAIT_TILE_N * 4 <= 1280 * 1024) tb = PLAIT_TILE_N;
    return tb;
}

typedef struct {
    const plait_conv2d_desc* d;
    int64_t TH, TWp, T, HP, RL, tb;
    int64_t blocks, nfull, tpart;   /* an image's tile blocks (wino_plan_blocks) */
    const float* img;    /* F(2x2): the de-interleaved padded input [N][C][HP][RL];
                          * F(4x4): the input itself [N][C][H][W] */
    const float* u;      /* packed transformed weights (group 0's) */
    int64_t G, ug;       /* groups (1: none) and the floats of a group's weights */
    const float* bias;
    const float* res;
    int relu;
    float* out;
} plait_wino;

/* An image's tile blocks: nfull blocks of tb tiles, then blocks of tpart (<= tb) up to
 * T (the last one shorter), blocks in all.  With one thread (or when the full blocks
 * come in whole rounds of nthreads) that is ceil(T / tb) blocks of tb.  Otherwise the
 * tiles past the last whole round are cut into nthreads parts of whole 16-tile panels:
 * ResNet's 56 x 56 F(4x4) layers have 224 tiles, 7 blocks of 32, which 2 threads took
 * 4 and 3; now 6 blocks of 32 and 2 of 16, 112 tiles each.  (56 tiles, 32 + 24, stay as
 * they are: the products of both run the 32-column tile; only the transforms of one
 * group of 8 tiles differ.) */
static void wino_plan_blocks(plait_wino* w, int nthreads) {
    const int64_t T = w->T, tb = w->tb;
    w->nfull = T / tb;
    w->tpart = tb;
    w->blocks = (T + tb - 1) / tb;
    if (nthreads < 2 || (w->nfull % nthreads == 0 && w->nfull * tb == T)) return;
    const int64_t keep = w->nfull - w->nfull % nthreads, tail = T - keep * tb;
    int64_t part = (tail + nthreads - 1) / nthreads;
    part = (part + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
    if (part > tb) part = tb;
    w->nfull = keep;
    w->tpart = part;
    w->blocks = keep + (tail + part - 1) / part;
}

/* The transformed weights and the bias (or NULL) of image-group n */
static inline const float* wino_u(const plait_wino* w, int64_t n) {
    return w->G > 1 ? w->u + n % w->G * w->ug : w->u;
}

static inline const float* wino_bias(const plait_wino* w, int64_t n) {
    return w->bias && w->G > 1 ? w->bias + n % w->G * w->d->O : w->bias;
}

/* Block b of an image: its first tile t0 and its tiles len (a multiple of 8) */
static inline void wino_block(const plait_wino* w, int64_t b, int64_t* t0, int64_t* len) {
    *t0 = b < w->nfull ? b * w->tb : w->nfull * w->tb + (b - w->nfull) * w->tpart;
    const int64_t n = b < w->nfull ? w->tb : w->tpart;
    *len = w->T - *t0 < n ? w->T - *t0 : n;
}

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
wino_input(const plait_wino* w, int64_t n, int64_t t0, int64_t len, float* v) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, half = w->TWp + 1;
    /* v: [16][panels][C][NR]; the lanes past the block's tiles in its last panel are
     * zeroed (the products read whole panels) */
    for (int64_t g = 0; g < (len + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR; g += 8) {
        int64_t t = t0 + g;
        int64_t panel = g / PLAIT_NR, lane = g % PLAIT_NR;
        if (g >= len) {
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

/* The output transform of channels [o0, o0 + ob) of a tile block: m holds their
 * products, [16][ob][tb] (stride ms between transform elements). */
static inline __attribute__((always_inline)) void
wino_output(const plait_wino* w, int64_t n, int64_t t0, int64_t len, int64_t o0, int64_t ob,
            int64_t ms, const float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t O = d->O, tb = w->tb, OH = d->OH, OW = d->OW;
    const float* bias = wino_bias(w, n);
    for (int64_t oo = 0; oo < ob; ++oo) {
        const int64_t o = o0 + oo;
        const float bo = bias ? bias[o] : 0.0f;
        float* outo = w->out + (n * O + o) * OH * OW;
        const float* reso = w->res ? w->res + (n * O + o) * OH * OW : NULL;
        for (int64_t g = 0; g < len; g += 8) {
            int64_t t = t0 + g;
            const float* mg = m + oo * tb + g;
            plait_v8 mm[16];
            for (int xi = 0; xi < 16; ++xi) mm[xi] = *(const plait_v8u*)(mg + xi * ms);
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

static void
wino_thread(const plait_wino* w, int64_t* next, float* v, float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, O = d->O, tb = w->tb;
    const int64_t blocks = w->blocks;
    const int64_t jobs = d->N * blocks;
    const int64_t apanels = (O + PLAIT_MR - 1) / PLAIT_MR;
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t n = job / blocks, t0, len;
        wino_block(w, job % blocks, &t0, &len);
        wino_input(w, n, t0, len, v);
        for (int64_t xi = 0; xi < 16; ++xi) {
            const float* uxi = wino_u(w, n) + xi * apanels * C * PLAIT_MR;
            const float* vxi = v + xi * PLAIT_WINO_VS(w);
            float* mxi = m + xi * PLAIT_WINO_MS(w);
            for (int64_t jr = 0; jr < len; jr += PLAIT_TILE_N) {   /* the wide tile */
                int64_t nr = len - jr < PLAIT_TILE_N ? len - jr : PLAIT_TILE_N;
                for (int64_t ir = 0; ir < O; ir += PLAIT_MR) {
                    int64_t mr = O - ir < PLAIT_MR ? O - ir : PLAIT_MR;
                    micro_kernel_wide(C, uxi + (ir / PLAIT_MR) * C * PLAIT_MR, 1, PLAIT_MR,
                                      vxi + (jr / PLAIT_NR) * C * PLAIT_NR, C * PLAIT_NR,
                                      mxi + ir * tb + jr, tb, mr, nr, 1, 0, NULL, 0, 0, NULL);
                }
            }
        }
        wino_output(w, n, t0, len, 0, O, PLAIT_WINO_MS(w), m);
    }
}

typedef void (*plait_wino_fn)(const plait_wino*, int64_t*, float*, float*);

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
                    plait_wino_fn run) {
    const plait_conv2d_desc* d = w->d;
    const int64_t blocks = d->N * w->blocks;
    if (blocks < nthreads) nthreads = (int)blocks;
    plait_wino_task task = {w, run, vfloats, mfloats, 0, 0};
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

/* the shared-V path of weight-heavy layers (below, after F(4x4)'s transforms) */
static int wino_shared_applies(const plait_wino* w, int nx);
static int wino_shared_run(plait_wino* w, int nx, int nthreads);

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_conv2d_winograd)(const plait_conv2d_desc* dg, const float* x,
                                    const float* u, const float* bias, const float* res,
                                    int relu, float* out) {
    if (dg->act) return 2;   /* no activation epilogue here (the planner never asks) */
    plait_conv2d_desc gd;
    const plait_conv2d_desc* d = plait_conv2d_groups(dg, &gd);
    plait_wino w;
    w.d = d;
    w.G = dg->G > 1 ? dg->G : 1;
    w.ug = 16 * ((d->O + PLAIT_MR - 1) / PLAIT_MR) * d->C * PLAIT_MR;
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
    tb = wino_wide_blocks(tb, 16 * (d->C + d->O));
    w.tb = tb;
    w.u = u;
    w.bias = bias;
    w.res = res;
    w.relu = relu;
    w.out = out;
    int nthreads = plait_max_threads();
    wino_plan_blocks(&w, nthreads);
    const int64_t planes = d->N * d->C, half = w.TWp + 1;
    size_t need = (size_t)(planes * w.HP * w.RL);
    float* img = plait_scratch(3, need);   /* the padded input, this thread's */
    if (!img) return 1;
    /* zero-pad and de-interleave: padded row r, column q (input row r - PT, column
     * q - PL) goes to [r][q / 2] (even q) or [r][half + q / 2] (odd q) */
    plait_wino_pad_task pad = {&w, x, img, half};
    plait_parallel_for(planes, plait_wino_pad_plane, &pad, need > 262144 ? nthreads : 1);
    w.img = img;
    if (wino_shared_applies(&w, 16)) return wino_shared_run(&w, 16, nthreads);
    return wino_run(&w, nthreads, 16 * (size_t)PLAIT_WINO_VS(&w),
                    16 * (size_t)PLAIT_WINO_MS(&w), wino_thread);
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
wino4_input(const plait_wino* w, int64_t n, int64_t t0, int64_t len, float* v) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C;
    const int64_t xs = PLAIT_W4_VS(w);
    for (int64_t g = 0; g < (len + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR; g += 8) {
        int64_t t = t0 + g;
        int64_t panel = g / PLAIT_NR, lane = g % PLAIT_NR;
        if (g >= len) {   /* past the block's tiles in its last panel */
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
 * products, [36][ob][tb] (stride ms between transform elements). */
static inline __attribute__((always_inline)) void
wino4_output(const plait_wino* w, int64_t n, int64_t t0, int64_t len, int64_t o0, int64_t ob,
             int64_t ms, const float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t O = d->O, tb = w->tb, OH = d->OH, OW = d->OW;
    const float* bias = wino_bias(w, n);
    for (int64_t oo = 0; oo < ob; ++oo) {
        const int64_t o = o0 + oo;
        const float bo = bias ? bias[o] : 0.0f;
        float* outo = w->out + (n * O + o) * OH * OW;
        const float* reso = w->res ? w->res + (n * O + o) * OH * OW : NULL;
        for (int64_t g = 0; g < len; g += 8) {
            int64_t t = t0 + g;
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

static void
wino4_thread(const plait_wino* w, int64_t* next, float* v, float* m) {
    const plait_conv2d_desc* d = w->d;
    const int64_t C = d->C, O = d->O, tb = w->tb;
    const int64_t blocks = w->blocks;
    const int64_t jobs = d->N * blocks;
    const int64_t apanels = (O + PLAIT_MR - 1) / PLAIT_MR;
    const int64_t vs = PLAIT_W4_VS(w), ms = PLAIT_W4_MS(w);
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t n = job / blocks, t0, len;
        wino_block(w, job % blocks, &t0, &len);
        wino4_input(w, n, t0, len, v);
        for (int64_t o0 = 0; o0 < O; o0 += PLAIT_W4_OB) {
            int64_t ob = O - o0 < PLAIT_W4_OB ? O - o0 : PLAIT_W4_OB;
            for (int64_t xi = 0; xi < 36; ++xi) {
                const float* uxi = wino_u(w, n) + xi * apanels * C * PLAIT_MR;
                const float* vxi = v + xi * vs;
                float* mxi = m + xi * ms;
                for (int64_t jr = 0; jr < len; jr += PLAIT_TILE_N) {   /* the wide tile */
                    int64_t nr = len - jr < PLAIT_TILE_N ? len - jr : PLAIT_TILE_N;
                    for (int64_t ir = 0; ir < ob; ir += PLAIT_MR) {
                        int64_t mr = ob - ir < PLAIT_MR ? ob - ir : PLAIT_MR;
                        micro_kernel_wide(C, uxi + ((o0 + ir) / PLAIT_MR) * C * PLAIT_MR, 1,
                                          PLAIT_MR, vxi + (jr / PLAIT_NR) * C * PLAIT_NR,
                                          C * PLAIT_NR, mxi + ir * tb + jr, tb, mr, nr, 1, 0,
                                          NULL, 0, 0, NULL);
                    }
                }
            }
            wino4_output(w, n, t0, len, o0, ob, ms, m);
        }
    }
}

/* ------------------------------ weight-heavy layers: one shared V, channels split */

/* When the transformed weights U (nx x O x C floats) outweigh an image's transformed
 * input V (nx x C x tiles) -- ResNet's 256 -> 256 F(2x2) on 14 x 14 (U 4.2 MB, V 1 MB),
 * 128 -> 128 F(4x4) on 28 x 28 (U 2.4 MB, V 1.2 MB) -- the tile blocks read all of U
 * once per block, and inside a model U comes from memory (the weights of a whole model
 * do not stay in the caches from one inference to the next): reading U from memory once
 * per block made such a layer about 40% slower than with U in the caches, and on two
 * threads each thread read all of U.  Such a layer computes the
 * whole image's V once, shared (the threads transform one 16-tile panel at a time), and
 * then splits the products and the output transform by output channels: each thread
 * reads its rows of U once, with every tile of the image as the product's columns. */
typedef struct {
    const plait_wino* w;
    int nx;              /* transform elements: 16 (F(2x2)) or 36 (F(4x4)) */
    int64_t n;           /* the image */
    float* v;            /* the image's V: [nx][panels][C][NR], vs floats between elements */
    int64_t vs, ms;      /* ms: the floats between transform elements of the products */
    int64_t apanels, chunks;   /* U's 6-row panels, split into chunks of channels */
    int64_t next;        /* the next chunk (see PLAIT_NEXT_JOB) */
    int status;          /* 1: a thread was out of memory */
} plait_wino_shared;

/* Whether a layer takes the shared-V path: U larger than V (more output channels than
 * padded tiles) and V within 1.5 MB (with a chunk's products, within this CPU's 2 MB L2). */
static int wino_shared_applies(const plait_wino* w, int nx) {
    const int64_t tp = (w->T + PLAIT_NR - 1) / PLAIT_NR * PLAIT_NR;
    const int64_t opad = (w->d->O + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
    return opad > tp && nx * w->d->C * tp <= 393216;
}

/* V's 16-tile panel p (every transform element) */
static void wino_shared_input(void* arg, int64_t p) {
    const plait_wino_shared* s = (const plait_wino_shared*)arg;
    const plait_wino* w = s->w;
    const int64_t t0 = p * PLAIT_NR, len = w->T - t0 < PLAIT_NR ? w->T - t0 : PLAIT_NR;
    float* v = s->v + p * w->d->C * PLAIT_NR;
    if (s->nx == 16) wino_input(w, s->n, t0, len, v);
    else wino4_input(w, s->n, t0, len, v);
}

/* The chunks of output channels a thread takes: their products over all tiles, then
 * their output transform (products in this thread's scratch slot 2) */
static void wino_shared_thread(void* arg) {
    plait_wino_shared* s = (plait_wino_shared*)arg;
    const plait_wino* w = s->w;
    const int64_t C = w->d->C, O = w->d->O, T = w->T, tb = w->tb;
    float* m = plait_scratch(2, (size_t)s->nx * (size_t)s->ms);
    if (!m) {
        __atomic_store_n(&s->status, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t c = PLAIT_NEXT_JOB(&s->next); c < s->chunks; c = PLAIT_NEXT_JOB(&s->next)) {
        const int64_t pa = c * s->apanels / s->chunks, pb = (c + 1) * s->apanels / s->chunks;
        const int64_t o0 = pa * PLAIT_MR, o1 = pb * PLAIT_MR < O ? pb * PLAIT_MR : O;
        for (int64_t xi = 0; xi < s->nx; ++xi) {
            const float* uxi = wino_u(w, s->n) + xi * s->apanels * C * PLAIT_MR;
            const float* vxi = s->v + xi * s->vs;
            float* mxi = m + xi * s->ms;
            /* each panel of U (from memory) for all the tiles in turn, from the caches
             * after the first: twice the work per byte of U that a 32-tile block does */
            for (int64_t ir = o0; ir < o1; ir += PLAIT_MR) {
                int64_t mr = o1 - ir < PLAIT_MR ? o1 - ir : PLAIT_MR;
                for (int64_t jr = 0; jr < T; jr += PLAIT_TILE_N) {   /* the wide tile */
                    int64_t nr = T - jr < PLAIT_TILE_N ? T - jr : PLAIT_TILE_N;
                    micro_kernel_wide(C, uxi + (ir / PLAIT_MR) * C * PLAIT_MR, 1, PLAIT_MR,
                                      vxi + (jr / PLAIT_NR) * C * PLAIT_NR, C * PLAIT_NR,
                                      mxi + (ir - o0) * tb + jr, tb, mr, nr, 1, 0, NULL, 0, 0,
                                      NULL);
                }
            }
        }
        if (s->nx == 16) wino_output(w, s->n, 0, T, o0, o1 - o0, s->ms, m);
        else wino4_output(w, s->n, 0, T, o0, o1 - o0, s->ms, m);
    }
}

/* The shared-V path (wino_shared_applies) on nthreads threads, image by image: V in
 * this thread's scratch slot 1, then chunks of about 8 panels of channels, as many as
 * makes a whole number per thread.  0, or 1 out of memory. */
static int wino_shared_run(plait_wino* w, int nx, int nthreads) {
    const plait_conv2d_desc* d = w->d;
    const int64_t panels = (w->T + PLAIT_NR - 1) / PLAIT_NR;
    w->tb = panels * PLAIT_NR;   /* one block of every tile */
    const int64_t vs = w->tb * d->C + 16;
    float* v = plait_scratch(1, (size_t)nx * (size_t)vs);
    if (!v) return 1;
    const int64_t apanels = (d->O + PLAIT_MR - 1) / PLAIT_MR;
    int64_t chunks = (apanels + 7) / 8;
    chunks = (chunks + nthreads - 1) / nthreads * nthreads;
    if (chunks > apanels) chunks = apanels;
    const int64_t most = (apanels + chunks - 1) / chunks * PLAIT_MR;   /* rows of a chunk */
    for (int64_t n = 0; n < d->N; ++n) {
        plait_wino_shared s = {w, nx, n, v, vs, most * w->tb + 16, apanels, chunks, 0, 0};
        plait_parallel_for(panels, wino_shared_input, &s, nthreads);
        plait_parallel(wino_shared_thread, &s, chunks < nthreads ? (int)chunks : nthreads);
        if (s.status) return 1;
    }
    return 0;
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_conv2d_winograd4)(const plait_conv2d_desc* dg, const float* x,
                                     const float* u, const float* bias, const float* res,
                                     int relu, float* out) {
    if (dg->act) return 2;   /* no activation epilogue here (the planner never asks) */
    plait_conv2d_desc gd;
    const plait_conv2d_desc* d = plait_conv2d_groups(dg, &gd);
    plait_wino w;
    w.d = d;
    w.G = dg->G > 1 ? dg->G : 1;
    w.ug = 36 * ((d->O + PLAIT_MR - 1) / PLAIT_MR) * d->C * PLAIT_MR;
    w.TH = (d->OH + 3) / 4;
    w.TWp = ((d->OW + 3) / 4 + 7) / 8 * 8;
    w.T = w.TH * w.TWp;
    w.HP = w.RL = 0;   /* the input is read in place (see wino4_row): no padded copy */
    /* tiles per block: the transformed input (36 x C x tb floats) near 200 KB */
    int64_t tb = 1408 / (d->C > 0 ? d->C : 1);
    tb = tb / PLAIT_NR * PLAIT_NR;
    tb = wino_wide_blocks(tb, 36 * d->C);
    if (tb < PLAIT_NR) tb = PLAIT_NR;
    w.tb = tb;
    w.u = u;
    w.bias = bias;
    w.res = res;
    w.relu = relu;
    w.out = out;
    w.img = x;
    const int nthreads = plait_max_threads();
    if (wino_shared_applies(&w, 36)) return wino_shared_run(&w, 36, nthreads);
    wino_plan_blocks(&w, nthreads);
    return wino_run(&w, nthreads, 36 * (size_t)PLAIT_W4_VS(&w),
                    36 * (size_t)PLAIT_W4_MS(&w), wino4_thread);
}

PLAIT_ISA_FAMILY("winograd")
PLAIT_ISA_DISPATCH(int, plait_conv2d_winograd,
                   (const plait_conv2d_desc* d, const float* x, const float* u,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, u, bias, res, relu, out))
PLAIT_ISA_DISPATCH(int, plait_conv2d_winograd4,
                   (const plait_conv2d_desc* d, const float* x, const float* u,
                    const float* bias, const float* res, int relu, float* out),
                   (d, x, u, bias, res, relu, out))
