/* plait_pool.c: the c target's 2-D max pooling and global average pooling (float32,
 * NCHW), a kernel family of plait_isa.h.  Max pooling:
 *
 * Separable: a window's maximum is the maximum over its rows of each row's maximum over
 * the window's columns.  Per plane:
 *  1. each input row is copied into a row padded with -inf on both sides (padding never
 *     wins a maximum, as in the op's definition, where padded taps are skipped) and, for
 *     a stride SW > 1, split into SW column phases (phase p holds columns p, p + SW, ...),
 *     so every tap of every output column is a contiguous read;
 *  2. the row's horizontal maxima, one per output column (max over the KW taps, each
 *     one contiguous loop over a phase), go to a per-thread plane of H x OW;
 *  3. each output row is the maximum of its KH valid horizontal rows (rows outside the
 *     input are skipped), one contiguous loop each.
 * Each input row is read and split once however many windows overlap it (a 3x3 stride-2
 * window reads each row 1.5 times, each element 2.25 times, in the direct form); all
 * loops are contiguous so the compiler vectorizes them with each copy's instruction set.
 * NaN propagates (a NaN compared wins, and a NaN kept stays).  The planes (N * C) are
 * split over the library's threads (plait_threads.h); each thread's scratch is one
 * allocation (none possible: status 1, out of memory, as the other families).
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

/* acc[j] = max(acc[j], r[j]) for j in [0, n); a NaN read wins, a NaN kept stays */
static inline void vmax_into(float* restrict acc, const float* restrict r, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        const float v = r[j], a = acc[j];
        acc[j] = (v > a || v != v) ? v : a;
    }
}

typedef struct {
    const plait_pool2d_desc* d;
    const float* x;
    float* out;
    int64_t padded;   /* columns of a padded row: (OW - 1) * SW + (KW - 1) * DW + 1 */
    int64_t phase;    /* columns of one phase: ceil(padded / SW) */
    int64_t lead;     /* padded columns before the first input column read: min(PL, padded) */
    int64_t body;     /* input columns read: those of [lead - PL, padded - PL) inside [0, W) */
    int failed;       /* a thread could not allocate its scratch */
} max_pool_task;

/* the planes lo .. hi-1 */
static void max_pool_planes(void* ctx, int64_t lo, int64_t hi) {
    max_pool_task* t = (max_pool_task*)ctx;
    const plait_pool2d_desc* d = t->d;
    const int64_t W = d->W, OW = d->OW, SW = d->SW;
    /* scratch: the padded row, its SW phases, the plane's H horizontal rows */
    const int64_t need = t->padded + SW * t->phase + d->H * OW;
    float* scratch = (float*)malloc((size_t)need * sizeof(float));
    if (!scratch) {   /* status 1 (out of memory), as every family's scratch */
        __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float* row = scratch;
    float* phases = row + t->padded;
    float* hrows = phases + SW * t->phase;
    for (int64_t i = 0; i < SW * t->phase; ++i) phases[i] = -INFINITY;
    for (int64_t pl = lo; pl < hi; ++pl) {
        const float* in = t->x + pl * d->H * W;
        float* o = t->out + pl * d->OH * OW;
        /* 1-2: the horizontal maxima of every input row some window reads */
        for (int64_t ih = 0; ih < d->H; ++ih) {
            const float* r = in + ih * W;
            float* h = hrows + ih * OW;
            /* the padded row: column c of it is input column c - PL */
            for (int64_t c = 0; c < t->lead; ++c) row[c] = -INFINITY;
            if (t->body > 0)
                memcpy(row + t->lead, r + (t->lead - d->PL), (size_t)t->body * sizeof(float));
            for (int64_t c = t->lead + t->body; c < t->padded; ++c) row[c] = -INFINITY;
            const float* src = row;
            if (SW == 2) {
                /* both phases in one pass (an interleaved load the compiler vectorizes) */
                float* restrict ev = phases;
                float* restrict od = phases + t->phase;
                const int64_t n = t->padded / 2;
                for (int64_t m = 0; m < n; ++m) {
                    ev[m] = row[2 * m];
                    od[m] = row[2 * m + 1];
                }
                if (t->padded & 1) ev[n] = row[2 * n];
                src = phases;
            } else if (SW > 2) {
                for (int64_t p = 0; p < SW; ++p) {
                    float* ph = phases + p * t->phase;
                    const int64_t n = (t->padded - p + SW - 1) / SW;
                    for (int64_t m = 0; m < n; ++m) ph[m] = row[m * SW + p];
                }
                src = phases;
            }
            for (int64_t kw = 0; kw < d->KW; ++kw) {
                /* tap kw of output column j reads padded column j * SW + q */
                const int64_t q = kw * d->DW;
                const float* tap = SW > 1 ? src + (q % SW) * t->phase + q / SW : src + q;
                if (kw == 0)
                    for (int64_t j = 0; j < OW; ++j) h[j] = tap[j];
                else
                    vmax_into(h, tap, OW);
            }
        }
        /* 3: each output row from its valid horizontal rows */
        for (int64_t oh = 0; oh < d->OH; ++oh) {
            float* acc = o + oh * OW;
            int first = 1;
            for (int64_t kh = 0; kh < d->KH; ++kh) {
                const int64_t ih = oh * d->SH + kh * d->DH - d->PT;
                if (ih < 0 || ih >= d->H) continue;
                if (first)
                    for (int64_t j = 0; j < OW; ++j) acc[j] = hrows[ih * OW + j];
                else
                    vmax_into(acc, hrows + ih * OW, OW);
                first = 0;
            }
            if (first)   /* a window wholly in the padding (no tap is read) */
                for (int64_t j = 0; j < OW; ++j) acc[j] = -INFINITY;
        }
    }
    free(scratch);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_max_pool2d)(const plait_pool2d_desc* d, const float* x, float* out) {
    const int64_t planes = d->N * d->C;
    const int64_t work = planes * d->H * d->W * (d->KW + 2);
    max_pool_task t = {d, x, out, 0, 0, 0, 0, 0};
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
    plait_parallel_range(max_pool_planes, &t, planes, work >= 262144 ? plait_max_threads() : 1);
    return __atomic_load_n(&t.failed, __ATOMIC_RELAXED);
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
PLAIT_ISA_DISPATCH(int, plait_global_avg_pool2d,
                   (const plait_mean_desc* d, const float* x, float* out), (d, x, out))
