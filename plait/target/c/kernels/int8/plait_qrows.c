/* plait_qrows.c: the c target's int8 row kernels — QLinearSoftmax and a layer
 * normalization between quantized tensors — a kernel family of plait_isa.h compiled
 * for AVX512-VNNI, AVX512, AVX-VNNI, AVX2 and the baseline (loops the compiler
 * vectorizes).  Each works on rows of d contiguous elements (the op's axis the last
 * one); rows are spread over the threads.  Float arithmetic is one rounding per
 * operation (no contraction).
 *
 * plait_qsoftmax computes exactly what onnxruntime's portable QLinearSoftmax computes
 * (its exponent table is given, its row sums are float32 sums in order); plait_qlayer_norm takes the
 * statistics of a row from exact integer sums and normalizes in double, so its float
 * result is the float32 rounding of the exact normalization of the dequantized row
 * (the reference's float32 arithmetic may differ in the last bit, which moves an
 * output one step only on a rounding boundary). */
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

/* the integer sums of c = x - xz and c * c over a row (exact: int32 partial sums of
 * QLN_CHUNK elements, |c| <= 383, added in int64) */
#define QLN_CHUNK 4096
#define QLN_SUMS(T)                                                                     \
    static void qln_sums_##T(const T* restrict x, int64_t n, int32_t xz, int64_t* s1,   \
                             int64_t* s2) {                                             \
        int64_t a = 0, b = 0;                                                           \
        for (int64_t j0 = 0; j0 < n; j0 += QLN_CHUNK) {                                 \
            const int64_t m = n - j0 < QLN_CHUNK ? n - j0 : QLN_CHUNK;                  \
            int32_t pa = 0, pb = 0;                                                     \
            for (int64_t j = 0; j < m; ++j) {                                           \
                const int32_t c = (int32_t)x[j0 + j] - xz;                              \
                pa += c;                                                                \
                pb += c * c;                                                            \
            }                                                                           \
            a += pa;                                                                    \
            b += pb;                                                                    \
        }                                                                               \
        *s1 = a;                                                                        \
        *s2 = b;                                                                        \
    }
QLN_SUMS(uint8_t)
QLN_SUMS(int8_t)

/* y = float32(((double)x - off) * k * gamma[j] + beta[j]), then QuantizeLinear (y / ys
 * in float32, clamped to [lo_q, hi_q] with NaN to lo_q, rounded half to even, + yz) */
#define QLN_OUT(TI, TO)                                                                 \
    static void qln_out_##TI##_##TO(const TI* restrict x, int64_t n, double off,        \
                                    double k, const float* restrict g,                  \
                                    const float* restrict bt, float ys, float lo_q,     \
                                    float hi_q, int32_t yz, TO* restrict out) {         \
        for (int64_t j = 0; j < n; ++j) {                                               \
            const float f = (float)(((double)x[j] - off) * k * (double)g[j]             \
                                    + (double)bt[j]);                                   \
            float v = f / ys;                                                           \
            v = v > lo_q ? v : lo_q;                                                    \
            v = v < hi_q ? v : hi_q;                                                    \
            out[j] = (TO)((int32_t)qr_rint(v) + yz);                                    \
        }                                                                               \
    }
QLN_OUT(uint8_t, uint8_t)
QLN_OUT(uint8_t, int8_t)
QLN_OUT(int8_t, uint8_t)
QLN_OUT(int8_t, int8_t)

/* rows [lo, hi): the row's statistics from the exact integer sums: with c = x - xz,
 * mean mc = s1 / n and variance vc = (n * s2 - s1^2) / n^2 (the numerator exact in
 * int64), the normalization of x's dequantized values c * xs is
 * (c - mc) * k with k = xs / sqrt(xs^2 * vc + eps) (double) */
static void qln_range(void* ctx, int64_t lo, int64_t hi) {
    const qln_task* t = (const qln_task*)ctx;
    const plait_qlayer_norm_desc* d = t->d;
    const int64_t n = d->d;
    const float lo_q = (float)((d->y_signed ? -128 : 0) - d->yz);
    const float hi_q = (float)((d->y_signed ? 127 : 255) - d->yz);
    const double xs = (double)d->xs, eps = (double)d->eps;
    for (int64_t r = lo; r < hi; ++r) {
        int64_t s1, s2;
        if (d->x_signed)
            qln_sums_int8_t((const int8_t*)t->x + r * n, n, d->xz, &s1, &s2);
        else
            qln_sums_uint8_t((const uint8_t*)t->x + r * n, n, d->xz, &s1, &s2);
        const double mc = (double)s1 / (double)n;
        const double vc = (double)(n * s2 - s1 * s1) / ((double)n * (double)n);
        const double k = xs / sqrt(xs * xs * vc + eps);
        const double off = (double)d->xz + mc;
        void* out = d->y_signed ? (void*)((int8_t*)t->y + r * n)
                                : (void*)((uint8_t*)t->y + r * n);
        if (d->x_signed && d->y_signed)
            qln_out_int8_t_int8_t((const int8_t*)t->x + r * n, n, off, k, t->gamma, t->beta,
                                  d->ys, lo_q, hi_q, d->yz, (int8_t*)out);
        else if (d->x_signed)
            qln_out_int8_t_uint8_t((const int8_t*)t->x + r * n, n, off, k, t->gamma, t->beta,
                                   d->ys, lo_q, hi_q, d->yz, (uint8_t*)out);
        else if (d->y_signed)
            qln_out_uint8_t_int8_t((const uint8_t*)t->x + r * n, n, off, k, t->gamma, t->beta,
                                   d->ys, lo_q, hi_q, d->yz, (int8_t*)out);
        else
            qln_out_uint8_t_uint8_t((const uint8_t*)t->x + r * n, n, off, k, t->gamma,
                                    t->beta, d->ys, lo_q, hi_q, d->yz, (uint8_t*)out);
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
