/* plait_qelementwise.c: the c target's int8 elementwise kernels — QLinearAdd and
 * QLinearMul as MLAS computes them, QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear and a 256-entry table lookup — a kernel family of plait_isa.h compiled for AVX512-VNNI,
 * AVX512, AVX-VNNI, AVX2 and the baseline (loops the compiler vectorizes).  Float
 * arithmetic is one rounding per operation, as the reference's (no contraction). */
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

/* ------------------------------------------------------------------ elementwise */

/* r[i] = f[i] rounded as cvtps2dq (half to even; NaN and |f| >= 2^31 give INT_MIN)
 * and saturated to [qlo, qhi], in float arithmetic the compiler vectorizes: INT_MIN
 * saturates to qlo, and clamping to integer bounds before rounding equals after */
static inline void q_round_sat(const float* restrict f, int32_t* restrict r, int64_t n,
                               float qlo, float qhi) {
    const float big = 2147483648.0f, magic = 12582912.0f;   /* 1.5 * 2^23 */
    for (int64_t i = 0; i < n; ++i) {
        const float v = f[i];
        float c = v > qlo ? v : qlo;
        c = c < qhi ? c : qhi;
        c = fabsf(v) < big ? c : qlo;
        r[i] = (int32_t)((c + magic) - magic);
    }
}

/* QLinearAdd of cnt elements: x runs along the output, y is one value (ylen 1: ys[0])
 * or runs too; xr, yr their ratios; y_first: y is folded into the fixed part first
 * (fma(x, xr, fma(y, yr, fixed))), else x.  Three simple loops (the fused
 * multiply-adds, q_round_sat, the narrowing) over chunks of 64, which the compiler
 * vectorizes. */
#define Q_ADD_LOOP(T)                                                                   \
    static void q_add_##T(const T* restrict xs, const T* restrict ys, int y_one,        \
                          float xr, float yr, float fixed, int y_first, float qlo,     \
                          float qhi, T* restrict cs, int64_t cnt) {                     \
        float f[64];                                                                    \
        int32_t r[64];                                                                  \
        const float fy = fmaf((float)ys[0], yr, fixed);                                 \
        for (int64_t j0 = 0; j0 < cnt; j0 += 64) {                                      \
            const int64_t n = cnt - j0 < 64 ? cnt - j0 : 64;                            \
            const T* restrict x = xs + j0;                                              \
            const T* restrict y = ys + j0;                                              \
            if (y_one && y_first)                                                       \
                for (int64_t i = 0; i < n; ++i) f[i] = fmaf((float)x[i], xr, fy);       \
            else if (y_one)                                                             \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)ys[0], yr, fmaf((float)x[i], xr, fixed));        \
            else if (y_first)                                                           \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)x[i], xr, fmaf((float)y[i], yr, fixed));         \
            else                                                                        \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = fmaf((float)y[i], yr, fmaf((float)x[i], xr, fixed));         \
            q_round_sat(f, r, n, qlo, qhi);                                             \
            for (int64_t i = 0; i < n; ++i) cs[j0 + i] = (T)r[i];                       \
        }                                                                               \
    }
Q_ADD_LOOP(uint8_t)
Q_ADD_LOOP(int8_t)

typedef struct {
    const plait_qadd_desc* d;
    const void *a, *b;
    void* c;
} q_add_task;

static void q_add_range(void* ctx, int64_t lo, int64_t hi) {
    const q_add_task* t = (const q_add_task*)ctx;
    const plait_qadd_desc* d = t->d;
    /* x: an operand of the output's size (A when both are); the reference's order:
     * a_first: fma(b, rb, fma(a, ra, fixed)), else fma(a, ra, fma(b, rb, fixed)) */
    const int a_runs = d->a_len == d->n;
    const void* x = a_runs ? t->a : t->b;
    const void* y = a_runs ? t->b : t->a;
    const int64_t ylen = a_runs ? d->b_len : d->a_len;
    const float xr = a_runs ? d->ra : d->rb, yr = a_runs ? d->rb : d->ra;
    const int y_first = a_runs ? !d->a_first : d->a_first;
    for (int64_t i0 = lo; i0 < hi;) {
        /* a run of y: to the end of its period (one value: to hi) */
        const int64_t j0 = ylen == 1 ? 0 : i0 % ylen;
        const int64_t cnt = ylen == 1 || hi - i0 < ylen - j0 ? hi - i0 : ylen - j0;
        if (d->is_signed)
            q_add_int8_t((const int8_t*)x + i0, (const int8_t*)y + j0, ylen == 1, xr, yr,
                         d->fixed, y_first, -128.0f, 127.0f, (int8_t*)t->c + i0, cnt);
        else
            q_add_uint8_t((const uint8_t*)x + i0, (const uint8_t*)y + j0, ylen == 1, xr, yr,
                          d->fixed, y_first, 0.0f, 255.0f, (uint8_t*)t->c + i0, cnt);
        i0 += cnt;
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qadd)(const plait_qadd_desc* d, const void* a, const void* b, void* c) {
    q_add_task t = {d, a, b, c};
    int nthreads = d->n < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_add_range, &t, d->n, nthreads);
    return 0;
}

/* QLinearMul of cnt elements: x runs along the output, y is one value (y_one) or runs
 * too; float32((x - zx) * (y - zy)) * ratio + zc, two roundings (the file has no FMA
 * contraction), then as QLinearAdd */
#define Q_MUL_LOOP(T)                                                                   \
    static void q_mul_##T(const T* restrict xs, const T* restrict ys, int y_one,        \
                          int32_t zx, int32_t zy, float ratio, float zc, float qlo,     \
                          float qhi, T* restrict cs, int64_t cnt) {                     \
        float f[64];                                                                    \
        int32_t r[64];                                                                  \
        const int32_t y0 = (int32_t)ys[0] - zy;                                         \
        for (int64_t j0 = 0; j0 < cnt; j0 += 64) {                                      \
            const int64_t n = cnt - j0 < 64 ? cnt - j0 : 64;                            \
            const T* restrict x = xs + j0;                                              \
            const T* restrict y = ys + j0;                                              \
            if (y_one)                                                                  \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = (float)(((int32_t)x[i] - zx) * y0) * ratio + zc;             \
            else                                                                        \
                for (int64_t i = 0; i < n; ++i)                                         \
                    f[i] = (float)(((int32_t)x[i] - zx) * ((int32_t)y[i] - zy)) * ratio \
                           + zc;                                                        \
            q_round_sat(f, r, n, qlo, qhi);                                             \
            for (int64_t i = 0; i < n; ++i) cs[j0 + i] = (T)r[i];                       \
        }                                                                               \
    }
Q_MUL_LOOP(uint8_t)
Q_MUL_LOOP(int8_t)

typedef struct {
    const plait_qmul_desc* d;
    const void *a, *b;
    void* c;
} q_mul_task;

static void q_mul_range(void* ctx, int64_t lo, int64_t hi) {
    const q_mul_task* t = (const q_mul_task*)ctx;
    const plait_qmul_desc* d = t->d;
    const int a_runs = d->a_len == d->n;   /* the product commutes: x runs, y repeats */
    const void* x = a_runs ? t->a : t->b;
    const void* y = a_runs ? t->b : t->a;
    const int64_t ylen = a_runs ? d->b_len : d->a_len;
    const int32_t zx = a_runs ? d->za : d->zb, zy = a_runs ? d->zb : d->za;
    const int64_t inner = d->rep_inner > 1 ? d->rep_inner : 1;
    for (int64_t i0 = lo; i0 < hi;) {
        int64_t j0, cnt;
        int one = ylen == 1;
        if (inner > 1) {   /* a run of one value of y: to the end of its block */
            const int64_t blk = i0 / inner, end = (blk + 1) * inner;
            j0 = blk % ylen;
            cnt = (end < hi ? end : hi) - i0;
            one = 1;
        } else {
            j0 = ylen == 1 ? 0 : i0 % ylen;
            cnt = ylen == 1 || hi - i0 < ylen - j0 ? hi - i0 : ylen - j0;
        }
        if (d->is_signed)
            q_mul_int8_t((const int8_t*)x + i0, (const int8_t*)y + j0, one, zx, zy,
                         d->ratio, (float)d->zc, -128.0f, 127.0f, (int8_t*)t->c + i0, cnt);
        else
            q_mul_uint8_t((const uint8_t*)x + i0, (const uint8_t*)y + j0, one, zx, zy,
                          d->ratio, (float)d->zc, 0.0f, 255.0f, (uint8_t*)t->c + i0, cnt);
        i0 += cnt;
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qmul)(const plait_qmul_desc* d, const void* a, const void* b, void* c) {
    q_mul_task t = {d, a, b, c};
    int nthreads = d->n < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_mul_range, &t, d->n, nthreads);
    return 0;
}

typedef struct {
    const plait_qparam_desc* d;
    const void* x;
    const float* scale;
    const void* zp;
    void* y;
} q_param_task;

static inline int32_t q_load8(const void* p, int is_signed, int64_t i) {
    return is_signed ? (int32_t)((const int8_t*)p)[i] : (int32_t)((const uint8_t*)p)[i];
}

/* QuantizeLinear of n elements: x / s, clamped with maxps/minps to [qmin - z, qmax - z]
 * (NaN: qmin - z), rounded half to even, + z */
#define Q_QUANT_LOOP(T, QLO, QHI)                                                       \
    static void q_quant_##T(const float* restrict x, float s, int32_t z,                \
                            T* restrict y, int64_t n) {                                 \
        const float flo = (float)(QLO - z), fhi = (float)(QHI - z);                     \
        const float magic = 12582912.0f;                                                \
        for (int64_t i = 0; i < n; ++i) {                                               \
            float v = x[i] / s;                                                         \
            v = v > flo ? v : flo;                                                      \
            v = v < fhi ? v : fhi;                                                      \
            y[i] = (T)((int32_t)((v + magic) - magic) + z);                             \
        }                                                                               \
    }
Q_QUANT_LOOP(uint8_t, 0, 255)
Q_QUANT_LOOP(int8_t, -128, 127)

#define Q_DEQUANT_LOOP(T)                                                               \
    static void q_dequant_##T(const T* restrict x, float s, int32_t z,                  \
                              float* restrict y, int64_t n) {                           \
        for (int64_t i = 0; i < n; ++i) y[i] = (float)((int32_t)x[i] - z) * s;         \
    }
Q_DEQUANT_LOOP(uint8_t)
Q_DEQUANT_LOOP(int8_t)

/* blocks [lo, hi) of outer * ch blocks of inner elements */
static void q_quantize_range(void* ctx, int64_t lo, int64_t hi) {
    const q_param_task* t = (const q_param_task*)ctx;
    const plait_qparam_desc* d = t->d;
    for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t ch = d->per_channel ? blk % d->ch : 0;
        const float* x = (const float*)t->x + blk * d->inner;
        const int32_t z = q_load8(t->zp, d->q_signed, ch);
        if (d->q_signed)
            q_quant_int8_t(x, t->scale[ch], z, (int8_t*)t->y + blk * d->inner, d->inner);
        else
            q_quant_uint8_t(x, t->scale[ch], z, (uint8_t*)t->y + blk * d->inner, d->inner);
    }
}

/* DequantizeLinear: float32(x - z) * s */
static void q_dequantize_range(void* ctx, int64_t lo, int64_t hi) {
    const q_param_task* t = (const q_param_task*)ctx;
    const plait_qparam_desc* d = t->d;
    for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t ch = d->per_channel ? blk % d->ch : 0;
        float* y = (float*)t->y + blk * d->inner;
        const int32_t z = q_load8(t->zp, d->q_signed, ch);
        if (d->q_signed)
            q_dequant_int8_t((const int8_t*)t->x + blk * d->inner, t->scale[ch], z, y,
                             d->inner);
        else
            q_dequant_uint8_t((const uint8_t*)t->x + blk * d->inner, t->scale[ch], z, y,
                              d->inner);
    }
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_quantize)(const plait_qparam_desc* d, const float* x, const float* scale,
                             const void* zp, void* y) {
    q_param_task t = {d, x, scale, zp, y};
    const int64_t blocks = d->outer * d->ch;
    int nthreads = blocks * d->inner < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_quantize_range, &t, blocks, nthreads);
    return 0;
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_dequantize)(const plait_qparam_desc* d, const void* x, const float* scale,
                               const void* zp, float* y) {
    q_param_task t = {d, x, scale, zp, y};
    const int64_t blocks = d->outer * d->ch;
    int nthreads = blocks * d->inner < (1 << 18) ? 1 : plait_max_threads();
    plait_parallel_range(q_dequantize_range, &t, blocks, nthreads);
    return 0;
}

/* The range of DynamicQuantizeLinear: blocks of Q_RANGE_BLOCK elements, each reduced on
 * Q_RANGE_LANES independent lanes (one comparison per lane, so the compiler keeps them in
 * vector registers: min/max/NaN of a whole vector per instruction instead of one element
 * per 4-cycle dependency chain); the result is the same set minimum/maximum as one
 * sequential pass (min and max of a set do not depend on the order; a NaN is flagged
 * apart and overrides everything). */
#define Q_RANGE_LANES 64
#define Q_RANGE_BLOCKS_MAX 64

typedef struct {
    const float* x;
    int64_t n, block;
    float mn[Q_RANGE_BLOCKS_MAX], mx[Q_RANGE_BLOCKS_MAX];
    int nan[Q_RANGE_BLOCKS_MAX];
} q_range_task;

static void q_range_blocks(void* ctx, int64_t lo, int64_t hi) {
    q_range_task* t = (q_range_task*)ctx;
    for (int64_t b = lo; b < hi; ++b) {
        const int64_t start = b * t->block;
        const int64_t end = start + t->block < t->n ? start + t->block : t->n;
        const float* restrict x = t->x;
        float mn[Q_RANGE_LANES], mx[Q_RANGE_LANES];
        int32_t nan[Q_RANGE_LANES];
        for (int j = 0; j < Q_RANGE_LANES; ++j) {
            mn[j] = 0.0f;
            mx[j] = 0.0f;
            nan[j] = 0;
        }
        int64_t i = start;
        for (; i + Q_RANGE_LANES <= end; i += Q_RANGE_LANES)
            for (int j = 0; j < Q_RANGE_LANES; ++j) {
                const float v = x[i + j];
                mn[j] = v < mn[j] ? v : mn[j];
                mx[j] = v > mx[j] ? v : mx[j];
                nan[j] |= v != v;
            }
        for (int j = 0; i + j < end; ++j) {
            const float v = x[i + j];
            mn[j] = v < mn[j] ? v : mn[j];
            mx[j] = v > mx[j] ? v : mx[j];
            nan[j] |= v != v;
        }
        float bmn = 0.0f, bmx = 0.0f;
        int bnan = 0;
        for (int j = 0; j < Q_RANGE_LANES; ++j) {
            bmn = mn[j] < bmn ? mn[j] : bmn;
            bmx = mx[j] > bmx ? mx[j] : bmx;
            bnan |= nan[j];
        }
        t->mn[b] = bmn;
        t->mx[b] = bmx;
        t->nan[b] = bnan;
    }
}

/* DynamicQuantizeLinear (uint8): the range [min(x, 0), max(x, 0)] (NaN propagates),
 * scale = (max - min) / 255 (1 for an empty range), zero point = round_half_even(
 * clamp(0 - min / scale, 0, 255)) (0 for NaN), then QuantizeLinear */
PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_dynamic_quantize)(int64_t n, const float* x, uint8_t* y, float* scale,
                                     uint8_t* zp) {
    q_range_task r;
    r.x = x;
    r.n = n;
    /* blocks of >= 16K elements (a thread's share is worth its wake-up), at most
     * Q_RANGE_BLOCKS_MAX of them, a multiple of the lanes */
    int64_t blocks = n / 16384;
    blocks = blocks < 1 ? 1 : blocks > Q_RANGE_BLOCKS_MAX ? Q_RANGE_BLOCKS_MAX : blocks;
    r.block = (n + blocks - 1) / blocks;
    r.block = (r.block + Q_RANGE_LANES - 1) / Q_RANGE_LANES * Q_RANGE_LANES;
    if (r.block < Q_RANGE_LANES) r.block = Q_RANGE_LANES;
    blocks = (n + r.block - 1) / r.block;
    if (blocks < 1) blocks = 1;
    plait_parallel_range(q_range_blocks, &r, blocks, blocks > 1 ? plait_max_threads() : 1);
    float mn = 0.0f, mx = 0.0f;
    int nan = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        mn = r.mn[b] < mn ? r.mn[b] : mn;
        mx = r.mx[b] > mx ? r.mx[b] : mx;
        nan |= r.nan[b];
    }
    float s, z;
    if (nan) {
        s = mn = __builtin_nanf("");
        z = 0.0f;
    } else {
        s = mx == mn ? 1.0f : (mx - mn) / 255.0f;
        float init = 0.0f - mn / s;
        init = init > 0.0f ? init : 0.0f;
        init = init < 255.0f ? init : 255.0f;
        z = (init + 12582912.0f) - 12582912.0f;
    }
    *scale = s;
    *zp = (uint8_t)(int32_t)z;
    /* QuantizeLinear in as many pieces as the range had blocks when they divide n
     * (q_quantize_range's blocks are of d.inner elements) */
    plait_qparam_desc d = {1, 1, n, 0, 0};
    if (blocks > 1 && n % blocks == 0) {
        d.outer = blocks;
        d.inner = n / blocks;
    }
    const float sv[1] = {s};
    q_param_task t = {&d, x, sv, zp, y};
    plait_parallel_range(q_quantize_range, &t, d.outer, d.outer > 1 ? plait_max_threads() : 1);
    return 0;
}

/* a 256-entry table applied to n 8-bit codes (their bytes index it) */
typedef struct {
    const uint8_t* table;
    const uint8_t* x;
    uint8_t* y;
} q_lookup_task;

static void q_lookup_range(void* ctx, int64_t lo, int64_t hi) {
    const q_lookup_task* t = (const q_lookup_task*)ctx;
    const uint8_t* restrict table = t->table;
    const uint8_t* restrict x = t->x;
    uint8_t* restrict y = t->y;
    int64_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        const uint8_t a = table[x[i]], b = table[x[i + 1]];
        const uint8_t c = table[x[i + 2]], e = table[x[i + 3]];
        y[i] = a;
        y[i + 1] = b;
        y[i + 2] = c;
        y[i + 3] = e;
    }
    for (; i < hi; ++i) y[i] = table[x[i]];
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qlookup)(int64_t n, const uint8_t* table, const void* x, void* y) {
    q_lookup_task t = {table, (const uint8_t*)x, (uint8_t*)y};
    int nthreads = n < (1 << 16) ? 1 : plait_max_threads();
    plait_parallel_range(q_lookup_range, &t, n, nthreads);
    return 0;
}

PLAIT_ISA_FAMILY("qelementwise")
PLAIT_ISA_DISPATCH(int, plait_qadd,
                   (const plait_qadd_desc* d, const void* a, const void* b, void* c),
                   (d, a, b, c))
PLAIT_ISA_DISPATCH(int, plait_quantize,
                   (const plait_qparam_desc* d, const float* x, const float* scale,
                    const void* zp, void* y),
                   (d, x, scale, zp, y))
PLAIT_ISA_DISPATCH(int, plait_dequantize,
                   (const plait_qparam_desc* d, const void* x, const float* scale,
                    const void* zp, float* y),
                   (d, x, scale, zp, y))
PLAIT_ISA_DISPATCH(int, plait_dynamic_quantize,
                   (int64_t n, const float* x, uint8_t* y, float* scale, uint8_t* zp),
                   (n, x, y, scale, zp))
PLAIT_ISA_DISPATCH(int, plait_qmul,
                   (const plait_qmul_desc* d, const void* a, const void* b, void* c),
                   (d, a, b, c))
PLAIT_ISA_DISPATCH(int, plait_qlookup,
                   (int64_t n, const uint8_t* table, const void* x, void* y),
                   (n, table, x, y))
