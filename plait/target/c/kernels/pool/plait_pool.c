/* plait_pool.c: the c target's 2-D max and average pooling and global average pooling
 * (float32, NCHW), a kernel family of plait_isa.h.  Max pooling:
 *
 * Separable: a window's maximum is the maximum over its columns of each column's maximum
 * over the window's rows.  Per output row of a plane:
 *  1. the maximum of the window's valid input rows (rows outside the input are skipped,
 *     as in the op's definition, where padded taps are skipped), column by column, on
 *     vectors across the row (up to three rows in one pass), into a row padded with
 *     -inf on both sides (padding never wins a maximum; it is written once per thread);
 *  2. each output column the maximum over the KW taps of that row, MP_V output columns
 *     per vector: at stride 1 one unaligned load per tap, at stride 2 the even lanes of
 *     two loads (a shuffle), the last partial vector stored lane by lane; a stride above
 *     2 splits the row into column phases (phase p holds columns p, p + SW, ...), so
 *     every tap is a contiguous loop over a phase.
 * Rows first: the column step runs once per output row, not once per input row (half as
 * often for a 3x3 stride-2 window), and the rows' loops are as wide as the input
 * (ResNet's 112 columns: 7 vectors of 16).  Each input row is read from memory once
 * (the rows windows share come from L1).  Windows first took twice as long on ResNet's
 * 3x3 stride-2 pool: the column step's many short loops, each with its set-up and
 * tail, were the cost, not memory.
 * NaN propagates (a NaN compared wins, and a NaN kept stays).  The planes (N * C) are
 * split over the library's threads (plait_threads.h); each thread's scratch is one
 * allocation (none possible: status 1, out of memory, as the other families).
 *
 * Average pooling runs the same two steps with sums instead of maxima (the padding
 * holds 0), then divides each output by its window's count of taps (inside the input,
 * or with count_pad inside the input and its padding: the count of a row times the
 * count of a column).  PoolFormer's 3x3 token mixer as a generated kernel (the window
 * loops innermost, a bounds test per tap) took 580 us on 64 planes of 56 x 56.
 */
#include "plait_isa.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "plait_means.h"
#include "plait_pool.h"
#include "plait_threads.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("no-trapping-math")
#endif

/* MP_V lanes per vector: 16 in the AVX-512 copies, 8 elsewhere */
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#define MP_V 16
#define MP_EVEN 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30
#else
#define MP_V 8
#define MP_EVEN 0, 2, 4, 6, 8, 10, 12, 14
#endif
/* plait_sv_load_n / plait_sv_store_n: a row's last, partial vector */
#define PLAIT_SL MP_V
#include "plait_vexp.h"
typedef float mp_v __attribute__((vector_size(MP_V * 4)));
typedef float mp_vu __attribute__((vector_size(MP_V * 4), aligned(4)));
typedef int32_t mp_vi __attribute__((vector_size(MP_V * 4)));
#define MP_LOAD(p) ((mp_v)(*(const mp_vu*)(p)))
#define MP_STORE(p, v) (*(mp_vu*)(p) = (v))
#if defined(__clang__)
#define MP_EVENS(a, b) __builtin_shufflevector(a, b, MP_EVEN)
#else
#define MP_EVENS(a, b) __builtin_shuffle(a, b, (mp_vi){MP_EVEN})
#endif

/* max(acc, v) lane by lane: a NaN read wins, a NaN kept stays (as vmax_into) */
static inline __attribute__((always_inline)) mp_v mp_max(mp_v acc, mp_v v) {
    const mp_vi take = (v > acc) | (v != v);
    return (mp_v)((take & (mp_vi)v) | (~take & (mp_vi)acc));
}

static inline float mp_max1(float acc, float v) { return (v > acc || v != v) ? v : acc; }

/* the pooling's combination: the sum (avg) or the maximum */
static inline __attribute__((always_inline)) mp_v mp_op(mp_v acc, mp_v v, int avg) {
    return avg ? acc + v : mp_max(acc, v);
}

static inline __attribute__((always_inline)) float mp_op1(float acc, float v, int avg) {
    return avg ? acc + v : mp_max1(acc, v);
}

/* acc[j] = op(acc[j], r[j]) for j in [0, n); a NaN read wins, a NaN kept stays */
static inline __attribute__((always_inline)) void
vop_into(float* restrict acc, const float* restrict r, int64_t n, int avg) {
    for (int64_t j = 0; j < n; ++j) acc[j] = mp_op1(acc[j], r[j], avg);
}

typedef struct {
    const plait_pool2d_desc* d;
    const float* x;
    float* out;
    int64_t padded;   /* columns of a padded row: (OW - 1) * SW + (KW - 1) * DW + 1 */
    int64_t phase;    /* columns of one phase: ceil(padded / SW) */
    int64_t lead;     /* padded columns before the first input column read: min(PL, padded) */
    int64_t body;     /* input columns read: those of [lead - PL, padded - PL) inside [0, W) */
    const float* cw;  /* average pooling: each output column's count of taps (OW + MP_V) */
    const float* ch;  /* average pooling: each output row's count of taps (OH) */
    int failed;       /* a thread could not allocate its scratch */
} max_pool_task;

/* step 1: dst[c] = the maximum (avg: the sum) of rows[0..nr)[c] for c in [0, n), nr >= 1 */
static inline __attribute__((always_inline)) void
mp_rows(float* restrict dst, const float* const* rows, int64_t nr, int64_t n, int avg) {
    const int64_t full = n - n % MP_V;
    const float* r0 = rows[0];
    const int64_t left = n - full;   /* the last, partial vector: masked where the ISA can */
    if (nr <= 3 && (avg ? nr == 3 : 1)) {   /* the common windows: every row in one pass */
        const float* r1 = rows[nr > 1 ? 1 : 0];
        const float* r2 = rows[nr > 2 ? 2 : 0];   /* (max: a row again, max(x, x) = x) */
        for (int64_t c = 0; c < full; c += MP_V)
            MP_STORE(dst + c, mp_op(mp_op(MP_LOAD(r0 + c), MP_LOAD(r1 + c), avg),
                                    MP_LOAD(r2 + c), avg));
        if (left) {
            mp_v v0, v1, v2;
            plait_sv_load_n(&v0, r0 + full, left);
            plait_sv_load_n(&v1, r1 + full, left);
            plait_sv_load_n(&v2, r2 + full, left);
            v0 = mp_op(mp_op(v0, v1, avg), v2, avg);
            plait_sv_store_n(dst + full, &v0, left);
        }
        return;
    }
    for (int64_t c = 0; c < full; c += MP_V) {
        mp_v acc = MP_LOAD(r0 + c);
        for (int64_t r = 1; r < nr; ++r) acc = mp_op(acc, MP_LOAD(rows[r] + c), avg);
        MP_STORE(dst + c, acc);
    }
    if (left) {
        mp_v acc, v;
        plait_sv_load_n(&acc, r0 + full, left);
        for (int64_t r = 1; r < nr; ++r) {
            plait_sv_load_n(&v, rows[r] + full, left);
            acc = mp_op(acc, v, avg);
        }
        plait_sv_store_n(dst + full, &acc, left);
    }
}

/* step 2 at stride 1 or 2: o[j] = max (avg: the sum, divided by ch * cw[j]) over kw of
 * row[j * SW + kw * DW], j in [0, OW); the row holds MP_V * (SW + 1) + (KW - 1) * DW
 * columns past the last one read */
static inline __attribute__((always_inline)) void
mp_columns(float* restrict o, const float* row, int64_t OW, int64_t SW, int64_t KW,
           int64_t DW, int avg, float ch, const float* cw) {
    for (int64_t j = 0; j < OW; j += MP_V) {
        mp_v acc;
        const float* p = row + j * SW;
        if (SW == 1) {
            acc = MP_LOAD(p);
            for (int64_t kw = 1; kw < KW; ++kw) acc = mp_op(acc, MP_LOAD(p + kw * DW), avg);
        } else {
            acc = MP_EVENS(MP_LOAD(p), MP_LOAD(p + MP_V));
            for (int64_t kw = 1; kw < KW; ++kw) {
                const float* q = p + kw * DW;
                acc = mp_op(acc, MP_EVENS(MP_LOAD(q), MP_LOAD(q + MP_V)), avg);
            }
        }
        if (avg) acc = acc / (ch * MP_LOAD(cw + j));
        if (j + MP_V <= OW)
            MP_STORE(o + j, acc);
        else   /* the last, partial vector */
            plait_sv_store_n(o + j, &acc, OW - j);
    }
}

/* the count of taps k < K of an output at o (stride S, dilation D, padding P before)
 * whose input position lies in [lo, hi) */
static int64_t tap_count(int64_t o, int64_t K, int64_t S, int64_t D, int64_t P, int64_t lo,
                         int64_t hi) {
    int64_t n = 0;
    for (int64_t k = 0; k < K; ++k) {
        const int64_t i = o * S + k * D - P;
        n += i >= lo && i < hi;
    }
    return n;
}

/* the planes lo .. hi-1 (avg: average pooling) */
static inline __attribute__((always_inline)) void
pool_planes(void* ctx, int64_t lo, int64_t hi, int avg) {
    max_pool_task* t = (max_pool_task*)ctx;
    const plait_pool2d_desc* d = t->d;
    const int64_t W = d->W, OW = d->OW, SW = d->SW, KH = d->KH;
    /* scratch: the rows of a window, the padded row (and the vectors read past its
     * end), for a stride above 2 its SW phases */
    const int64_t tail = MP_V * (SW + 1) + 1;
    const int64_t phases_n = SW > 2 ? SW * t->phase : 0;
    const size_t need = (size_t)KH * sizeof(const float*)
                        + (size_t)(t->padded + tail + phases_n) * sizeof(float);
    void* scratch = malloc(need);
    if (!scratch) {   /* status 1 (out of memory), as every family's scratch */
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    const float** rows = (const float**)scratch;
    float* row = (float*)(rows + KH);
    float* phases = row + t->padded + tail;
    /* the padding of the row stays -inf (avg: 0): only [lead, lead + body) is written */
    const float pad = avg ? 0.0f : -INFINITY;
    for (int64_t i = 0; i < t->padded + tail + phases_n; ++i) row[i] = pad;
    float* const body = row + t->lead;
    const int64_t from = t->body > 0 ? t->lead - d->PL : 0;   /* the first input column read */
    for (int64_t pl = lo; pl < hi; ++pl) {
        const float* in = t->x + pl * d->H * W + from;
        float* o = t->out + pl * d->OH * OW;
        for (int64_t oh = 0; oh < d->OH; ++oh, o += OW) {
            int64_t nr = 0;
            for (int64_t kh = 0; kh < KH; ++kh) {
                const int64_t ih = oh * d->SH + kh * d->DH - d->PT;
                if (ih >= 0 && ih < d->H) rows[nr++] = in + ih * W;
            }
            const float ch = avg ? t->ch[oh] : 1.0f;   /* avg: the window's count of rows */
            if (nr == 0) {   /* a window wholly in the padding (no tap is read) */
                for (int64_t j = 0; j < OW; ++j)
                    o[j] = avg ? 0.0f / (ch * t->cw[j]) : -INFINITY;
                continue;
            }
            mp_rows(body, rows, nr, t->body, avg);
            if (SW <= 2) {
                mp_columns(o, row, OW, SW, d->KW, d->DW, avg, ch, t->cw);
                continue;
            }
            for (int64_t p = 0; p < SW; ++p) {   /* a stride above 2: column phases */
                float* ph = phases + p * t->phase;
                const int64_t n = (t->padded - p + SW - 1) / SW;
                for (int64_t m = 0; m < n; ++m) ph[m] = row[m * SW + p];
            }
            for (int64_t kw = 0; kw < d->KW; ++kw) {
                /* tap kw of output column j reads padded column j * SW + q */
                const int64_t q = kw * d->DW;
                const float* tap = phases + (q % SW) * t->phase + q / SW;
                if (kw == 0)
                    for (int64_t j = 0; j < OW; ++j) o[j] = tap[j];
                else
                    vop_into(o, tap, OW, avg);
            }
            if (avg)
                for (int64_t j = 0; j < OW; ++j) o[j] = o[j] / (ch * t->cw[j]);
        }
    }
    free(scratch);
}

static void max_pool_planes(void* ctx, int64_t lo, int64_t hi) { pool_planes(ctx, lo, hi, 0); }

static void avg_pool_planes(void* ctx, int64_t lo, int64_t hi) { pool_planes(ctx, lo, hi, 1); }

/* max (avg 0) or average pooling (avg 1) */
static int pool2d(const plait_pool2d_desc* d, const float* x, float* out, int avg) {
    const int64_t planes = d->N * d->C;
    const int64_t work = planes * d->H * d->W * (d->KW + 2);
    max_pool_task t = {d, x, out, 0, 0, 0, 0, NULL, NULL, 0};
    t.padded = (d->OW - 1) * d->SW + (d->KW - 1) * d->DW + 1;
    t.phase = (t.padded + d->SW - 1) / d->SW;
    /* padded column c reads input column c - PL: [lead, lead + body) are the ones inside */
    t.lead = d->PL < t.padded ? d->PL : t.padded;
    {
        int64_t end = t.padded - d->PL;          /* one past the last input column read */
        end = end < d->W ? end : d->W;
        const int64_t first = t.lead - d->PL;    /* >= 0 */
        t.body = end > first ? end - first : 0;
    }
    if (d->OH <= 0 || d->OW <= 0 || planes <= 0) return 0;
    float* cw = NULL;
    if (avg) {   /* each output column's count of taps (then 1s read past the last),
                  * each output row's */
        cw = (float*)malloc(sizeof(float) * (size_t)(d->OW + MP_V + d->OH));
        if (!cw) return 1;
        float* ch = cw + d->OW + MP_V;
        for (int64_t j = 0; j < d->OW; ++j)
            cw[j] = (float)tap_count(j, d->KW, d->SW, d->DW, d->PL, d->count_pad ? -d->PL : 0,
                                     d->count_pad ? d->W + d->PR : d->W);
        for (int64_t j = d->OW; j < d->OW + MP_V; ++j) cw[j] = 1.0f;
        for (int64_t i = 0; i < d->OH; ++i)
            ch[i] = (float)tap_count(i, d->KH, d->SH, d->DH, d->PT, d->count_pad ? -d->PT : 0,
                                     d->count_pad ? d->H + d->PB : d->H);
        t.cw = cw;
        t.ch = ch;
    }
    plait_parallel_range(avg ? avg_pool_planes : max_pool_planes, &t, planes,
                         work >= 262144 ? plait_max_threads() : 1);
    free(cw);
    return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_max_pool2d)(const plait_pool2d_desc* d, const float* x, float* out) {
    return pool2d(d, x, out, 0);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_avg_pool2d)(const plait_pool2d_desc* d, const float* x, float* out) {
    return pool2d(d, x, out, 1);
}

/* ------------------------------------------------------ global average pooling */

/* The generated kernel of global_avg_pool2d (and of mean over H, W) summed each plane
 * with one scalar chain (no reassociation there: every copy computes the same bits), 40
 * us for MobileNetV2's 1280 planes of 7 x 7 against onnxruntime's 15; here each plane's
 * sum runs on vector lanes (plait_means.h), planes split over the threads when there
 * are at least 65536 floats. */
typedef struct {
    const plait_mean_desc* d;
    const float* x;
    float* out;
} mean_task;

static void mean_planes(void* ctx, int64_t lo, int64_t hi) {
    const mean_task* t = (const mean_task*)ctx;
    plait_plane_means(t->x, t->d->HW, lo, hi, t->out);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_global_avg_pool2d)(const plait_mean_desc* d, const float* x, float* out) {
    if (d->planes <= 0) return 0;
    mean_task t = {d, x, out};
    plait_parallel_range(mean_planes, &t, d->planes,
                         d->planes * d->HW >= 65536 ? plait_max_threads() : 1);
    return 0;
}

PLAIT_ISA_FAMILY("pool")
PLAIT_ISA_DISPATCH(int, plait_max_pool2d,
                   (const plait_pool2d_desc* d, const float* x, float* out), (d, x, out))
PLAIT_ISA_DISPATCH(int, plait_avg_pool2d,
                   (const plait_pool2d_desc* d, const float* x, float* out), (d, x, out))
PLAIT_ISA_DISPATCH(int, plait_global_avg_pool2d,
                   (const plait_mean_desc* d, const float* x, float* out), (d, x, out))
