/* plait_qrows.c: the c target's int8 row kernels — QLinearSoftmax and a layer
 * normalization between quantized tensors — a kernel family of plait_isa.h compiled
 * for AVX512-VNNI, AVX512, AVX-VNNI, AVX2 and the baseline (loops the compiler
 * vectorizes).  Each works on rows of d contiguous elements (the op's axis the last
 * one); rows are spread over the threads.  Float arithmetic is one rounding per
 * operation (no contraction).
 *
 * plait_qsoftmax computes exactly what the qnn reference computes (its exponent table
 * is given, its row sums are float32 sums in order); plait_qlayer_norm computes the
 * statistics of the dequantized row in double, so its float result is the float32
 * rounding of the exact normalization (the reference's float32 one may differ in the
 * last bit, which moves an output one step only on a rounding boundary). */
#include "plait_isa.h"
#include <math.h>
#include <stdlib.h>
#include "plait_int8.h"
#include "plait_threads.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* rows processed together by the softmax: their float32 sums run in the lanes of one
 * vector (each lane a sequential sum of its row, as the reference's) */
#define QS_ROWS 8

/* work below this many elements runs on the calling thread */
#define Q_ROWS_PARALLEL 32768

static inline int32_t qr_load8(const void* p, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)p)[i] : (int32_t)((const uint8_t*)p)[i];
}

/* the value rounded half to even (|v| < 2^22 after the clamp) */
static inline float qr_rint(float v) {
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    return (v + magic) - magic;
}

typedef struct {
    const plait_qsoftmax_desc* d;
    const float* table;
    const void* x;
    void* y;
} qs_task;

/* the offset added to a code to index the table (the index wraps modulo 256): entry
 * 255 (uint8) / uint8(127 - 128) (int8, stored there by the table's layout) is the
 * row's maximum */
static int32_t qs_base(const void* x, int is_signed, int64_t d) {
    int32_t mx = is_signed ? -128 : 0;
    if (is_signed) {
        const int8_t* restrict r = (const int8_t*)x;
        for (int64_t j = 0; j < d; ++j) mx = r[j] > mx ? r[j] : mx;
        return 127 - mx;
    }
    const uint8_t* restrict r = (const uint8_t*)x;
    for (int64_t j = 0; j < d; ++j) mx = r[j] > mx ? r[j] : mx;
    return 255 - mx;
}

/* the entry of code byte c of a row with offset base */
#define QS_ENTRY(table, base, c) ((table)[(uint8_t)((base) + (int32_t)(c))])

/* QLinearSoftmax of the row blocks [lo, hi) (QS_ROWS rows each; codes handled as
 * their bytes: the offset makes the index of either type) */
static void qs_range(void* ctx, int64_t lo, int64_t hi) {
    const qs_task* t = (const qs_task*)ctx;
    const plait_qsoftmax_desc* d = t->d;
    const int64_t n = d->d;
    const float* restrict table = t->table;
    const float lo_q = (float)((d->is_signed ? -128 : 0) - d->yz);
    const float hi_q = (float)((d->is_signed ? 127 : 255) - d->yz);
    for (int64_t b = lo; b < hi; ++b) {
        const int64_t r0 = b * QS_ROWS;
        const int64_t nr = d->rows - r0 < QS_ROWS ? d->rows - r0 : QS_ROWS;
        const uint8_t* x = (const uint8_t*)t->x + r0 * n;
        int32_t base[QS_ROWS];
        float s[QS_ROWS];
        for (int64_t r = 0; r < QS_ROWS; ++r) {
            base[r] = r < nr ? qs_base(x + r * n, d->is_signed, n) : 0;
            s[r] = 0.0f;
        }
        if (nr == QS_ROWS) {
            /* each lane a sequential float32 sum of its row */
            for (int64_t j = 0; j < n; ++j)
                for (int r = 0; r < QS_ROWS; ++r) s[r] += QS_ENTRY(table, base[r], x[r * n + j]);
        } else {
            for (int64_t r = 0; r < nr; ++r)
                for (int64_t j = 0; j < n; ++j) s[r] += QS_ENTRY(table, base[r], x[r * n + j]);
        }
        for (int64_t r = 0; r < nr; ++r) {
            const uint8_t* restrict xr = x + r * n;
            const float sum = s[r], ys = d->ys;
            const int32_t bs = base[r];
            uint8_t* restrict out = (uint8_t*)t->y + (r0 + r) * n;
            for (int64_t j = 0; j < n; ++j) {
                float v = (QS_ENTRY(table, bs, xr[j]) * ys) / sum;
                v = v > lo_q ? v : lo_q;
                v = v < hi_q ? v : hi_q;
                out[j] = (uint8_t)((int32_t)qr_rint(v) + d->yz);   /* int8: its bits */
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qsoftmax)(const plait_qsoftmax_desc* d, const float* table, const void* x,
                             void* y) {
    if (d->rows <= 0 || d->d <= 0) return 0;
    qs_task t = {d, table, x, y};
    const int64_t blocks = (d->rows + QS_ROWS - 1) / QS_ROWS;
    const int nthreads = d->rows * d->d < Q_ROWS_PARALLEL ? 1 : plait_max_threads();
    plait_parallel_range(qs_range, &t, blocks, nthreads);
    return 0;
}

typedef struct {
    const plait_qlayer_norm_desc* d;
    const void* x;
    const float* gamma;
    const float* beta;
    void* y;
} qln_task;

static void qln_range(void* ctx, int64_t lo, int64_t hi) {
    const qln_task* t = (const qln_task*)ctx;
    const plait_qlayer_norm_desc* d = t->d;
    const int64_t n = d->d;
    /* the dequantized value of each of the 256 codes: float32(q - zx) * sx, as
     * DequantizeLinear rounds it */
    double deq[256];
    for (int v = 0; v < 256; ++v) {
        const int32_t q = d->x_signed ? (int32_t)(int8_t)(uint8_t)v : v;
        deq[v] = (double)((float)(q - d->xz) * d->xs);
    }
    const float lo_q = (float)((d->y_signed ? -128 : 0) - d->yz);
    const float hi_q = (float)((d->y_signed ? 127 : 255) - d->yz);
    const double eps = (double)d->eps;
    const float* restrict g = t->gamma;
    const float* restrict bt = t->beta;
    for (int64_t r = lo; r < hi; ++r) {
        const uint8_t* restrict xr = (const uint8_t*)t->x + r * n;   /* codes as bytes */
        double s = 0.0;
        for (int64_t j = 0; j < n; ++j) s += deq[xr[j]];
        const double mean = s / (double)n;
        double ss = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const double c = deq[xr[j]] - mean;
            ss += c * c;
        }
        const double rstd = 1.0 / sqrt(ss / (double)n + eps);
        if (d->y_signed) {
            int8_t* restrict out = (int8_t*)t->y + r * n;
            for (int64_t j = 0; j < n; ++j) {
                const float f = (float)((deq[xr[j]] - mean) * rstd * (double)g[j]
                                        + (double)bt[j]);
                float v = f / d->ys;
                v = v > lo_q ? v : lo_q;          /* NaN: lo_q (maxps) */
                v = v < hi_q ? v : hi_q;
                out[j] = (int8_t)((int32_t)qr_rint(v) + d->yz);
            }
        } else {
            uint8_t* restrict out = (uint8_t*)t->y + r * n;
            for (int64_t j = 0; j < n; ++j) {
                const float f = (float)((deq[xr[j]] - mean) * rstd * (double)g[j]
                                        + (double)bt[j]);
                float v = f / d->ys;
                v = v > lo_q ? v : lo_q;
                v = v < hi_q ? v : hi_q;
                out[j] = (uint8_t)((int32_t)qr_rint(v) + d->yz);
            }
        }
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qlayer_norm)(const plait_qlayer_norm_desc* d, const void* x,
                                const float* gamma, const float* beta, void* y) {
    if (d->rows <= 0 || d->d <= 0) return 0;
    qln_task t = {d, x, gamma, beta, y};
    const int nthreads = d->rows * d->d < Q_ROWS_PARALLEL ? 1 : plait_max_threads();
    plait_parallel_range(qln_range, &t, d->rows, nthreads);
    return 0;
}

PLAIT_ISA_FAMILY("qrows")
PLAIT_ISA_DISPATCH(int, plait_qsoftmax,
                   (const plait_qsoftmax_desc* d, const float* table, const void* x,
                    void* y),
                   (d, table, x, y))
PLAIT_ISA_DISPATCH(int, plait_qlayer_norm,
                   (const plait_qlayer_norm_desc* d, const void* x, const float* gamma,
                    const float* beta, void* y),
                   (d, x, gamma, beta, y))
