/* plait_pool.c: the c target's 2-D max pooling (float32, NCHW), a kernel family of
 * plait_isa.h.
 *
 * Pooling computed row by row: for every output row, each kernel tap (kh, kw) updates
 * the whole row of running maxima with one loop over the output columns, whose input
 * reads are contiguous (stride 1) or evenly strided — a loop the compiler vectorizes
 * (with each copy's instruction set).  Taps outside the input (padding) are skipped,
 * never compared: padding never wins, as in the op's definition.  NaN propagates.  The
 * planes (N * C) are split over the library's threads (plait_threads.h).
 */
#include "plait_isa.h"
#include <math.h>
#include <stdint.h>
#include "plait_pool.h"
#include "plait_threads.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("no-trapping-math")
#endif

/* acc[j] = max(acc[j], r[j * s]) for j in [0, n); a NaN read wins */
static void row_max(float* restrict acc, const float* restrict r, int64_t n, int64_t s) {
    if (s == 1) {
        for (int64_t j = 0; j < n; ++j) {
            float v = r[j], a = acc[j];
            acc[j] = (v > a || v != v) ? v : a;
        }
    } else if (s == 2) {
        for (int64_t j = 0; j < n; ++j) {
            float v = r[2 * j], a = acc[j];
            acc[j] = (v > a || v != v) ? v : a;
        }
    } else {
        for (int64_t j = 0; j < n; ++j) {
            float v = r[j * s], a = acc[j];
            acc[j] = (v > a || v != v) ? v : a;
        }
    }
}

typedef struct {
    const plait_pool2d_desc* d;
    const float* x;
    float* out;
} max_pool_task;

/* the planes lo .. hi-1 */
static void max_pool_planes(void* ctx, int64_t lo, int64_t hi) {
    const max_pool_task* t = (const max_pool_task*)ctx;
    const plait_pool2d_desc* d = t->d;
    const float* x = t->x;
    float* out = t->out;
    for (int64_t pl = lo; pl < hi; ++pl) {
        const float* in = x + pl * d->H * d->W;
        float* o = out + pl * d->OH * d->OW;
        for (int64_t oh = 0; oh < d->OH; ++oh) {
            float* acc = o + oh * d->OW;
            for (int64_t j = 0; j < d->OW; ++j) acc[j] = -INFINITY;
            for (int64_t kh = 0; kh < d->KH; ++kh) {
                int64_t ih = oh * d->SH + kh * d->DH - d->PT;
                if (ih < 0 || ih >= d->H) continue;
                const float* row = in + ih * d->W;
                for (int64_t kw = 0; kw < d->KW; ++kw) {
                    /* the output columns whose tap kw lands inside the row:
                     * 0 <= j * SW + kw * DW - PL < W */
                    int64_t off = kw * d->DW - d->PL;
                    int64_t j0 = off >= 0 ? 0 : (-off + d->SW - 1) / d->SW;
                    int64_t j1 = d->W - off <= 0 ? 0 : (d->W - off - 1) / d->SW + 1;
                    if (j1 > d->OW) j1 = d->OW;
                    if (j0 >= j1) continue;
                    row_max(acc + j0, row + j0 * d->SW + off, j1 - j0, d->SW);
                }
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_max_pool2d)(const plait_pool2d_desc* d, const float* x, float* out) {
    const int64_t planes = d->N * d->C;
    const int64_t work = planes * d->OH * d->OW * d->KH * d->KW;
    max_pool_task t = {d, x, out};
    plait_parallel_range(max_pool_planes, &t, planes, work >= 262144 ? plait_max_threads() : 1);
    return 0;
}

PLAIT_ISA_FAMILY("pool")
PLAIT_ISA_DISPATCH(int, plait_max_pool2d,
                   (const plait_pool2d_desc* d, const float* x, float* out), (d, x, out))
