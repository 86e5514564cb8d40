/* plait_int8.h: the interface of the c target's int8 kernel families: products
 * (plait_qgemm.c), convolutions (plait_qconv.c) and elementwise kernels
 * (plait_qelementwise.c): 8-bit products with int32 accumulation and a fused output
 * stage, shared by the library and the per-model call wrappers.
 *
 * A product is C[M,N] = out((A - za) @ (B - zb) + bias) with A the activations (uint8
 * or int8, a strided matrix) and B
 * (uint8 or int8) either packed at compile time with its column sums, or a strided
 * matrix packed by the call.  Every sum is exact modulo 2^32 (int32 wrap-around, as
 * the int64 sums of the reference cast to int32). */
#ifndef PLAIT_QGEMM_H
#define PLAIT_QGEMM_H
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define PLAIT_QGEMM_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_QGEMM_HIDDEN
#endif

/* the columns of a packed B panel: B' (int8: b, or b - 128 for uint8 b) as
 * [ceil(N/16)][Kp/4][16][4], Kp = K rounded up to 4, zero-padded */
#define PLAIT_Q_NR 16

enum { PLAIT_Q_OUT_I32 = 0, PLAIT_Q_OUT_U8 = 1, PLAIT_Q_OUT_S8 = 2, PLAIT_Q_OUT_F32 = 3 };

/* The output stage of an accumulator v (int32) of column n:
 *  I32: v + bias[n];
 *  U8/S8: saturate(round_half_even(clamp(float(v + bias[n]) * scale[n], lo - zo,
 *         hi - zo)) + zo) (the requantization of the reference);
 *  F32: relu?(float(v + bias[n]) * scale[n] + fbias[n]), two roundings (no FMA).
 * bias and fbias may be NULL; scale is one value unless scale_cols.
 * U8/S8 then, with add_kind != 0, a QLinearAdd of the 8-bit result q with a constant
 * per column (add_c one value, or one per column with add_cols), as MLAS computes it
 * (the output zero point is in add_fixed):
 *  add_kind 1 (q not folded first): v = fma(q, add_r, add_c[n]);
 *  add_kind 2 (q folded first):     v = fma(add_c[n], add_r2, fma(q, add_r, add_fixed));
 * rounded half to even (cvtps2dq: NaN and out-of-range values give INT_MIN) and
 * saturated; or add_kind 3, a float bias between a DequantizeLinear and a
 * QuantizeLinear (a QDQ model whose bias the quantizer left in float):
 * v = float32(q - fz1) * fs1 + add_c[n] (two roundings), then QuantizeLinear with fs2,
 * fz2 (v / fs2, clamped, NaN to the low end, rounded half to even, + fz2); then, with add2_kind != 0, a QLinearAdd with add2_t, an 8-bit tensor of
 * the output's shape and type read at the output's element index (a residual):
 *  add2_kind 1: v = fma(q, add2_r, fma(t, add2_rt, add2_fixed));
 *  add2_kind 2: v = fma(t, add2_rt, fma(q, add2_r, add2_fixed)). */
typedef struct {
    int kind;
    const int32_t* bias;
    const float* scale;
    int scale_cols;
    int32_t zo;
    const float* fbias;
    int relu;
    int add_kind;
    const float* add_c;
    int add_cols;
    float add_r, add_r2, add_fixed;
    int32_t fz1, fz2;
    float fs1, fs2;
    int add2_kind;
    const void* add2_t;
    float add2_r, add2_rt, add2_fixed;
} plait_q_out;

typedef struct {
    int64_t M, N, K, batch;
    /* A: a[bi*a_bs + m*lda_r + k*lda_c] */
    const void* a;
    int a_signed;
    int64_t lda_r, lda_c, a_bs;
    const void* za;         /* A's zero point (A's dtype): one, or one per row (za_rows) */
    int za_rows;
    /* B packed at compile time (bp != NULL): the panels, then their tail (int32: the
     * mode, 1 when every pair of a column's K values, bytes 2i and 2i+1 of a group of
     * 4, sums to at most 128 in its positive and negative values (safe for
     * vpmaddubsw), else 0; the count of corrections; the corrections (column, k,
     * residual) by column: mode 1's clamped weights, whose residual times A's byte the
     * kernel adds to the sums); zb' per column (int32, after the shift of uint8) and
     * corr[n] = colsum(B'[:, n]) - K * zb'[n] */
    const int8_t* bp;
    const int32_t* b_zp;
    const int32_t* b_corr;
    /* or B strided: b[bi*b_bs + k*ldb_r + n*ldb_c], its zero point one or per column */
    const void* b;
    int b_signed;
    int64_t ldb_r, ldb_c, b_bs;
    const void* zb;
    int zb_cols;
    plait_q_out out;
    /* C[m][n] at c + (bi*c_bs + m*ldc_r + n*ldc_c) elements of the output's type; the
     * columns of a row are contiguous: ldc_c must be 1 */
    void* c;
    int64_t ldc_r, ldc_c, c_bs;
} plait_qgemm_problem;

/* The product; 0 on success, 1 out of memory. */
PLAIT_QGEMM_HIDDEN int plait_qgemm(const plait_qgemm_problem* p);

/* A convolution (NCHW/OIHW) as the product of the weights and the image: x uint8 or
 * int8 (x_signed) with zero point zx; the weights packed at compile time as int8 rows
 * of Kp bytes (w, or w - 128 for uint8 w), K running over (j, kh, kw, 4 channels: 4j
 * to 4j + 3 of the group's C/GR, the missing ones 0), Kp = ceil(C/GR / 4) * 4 * KH *
 * KW; each group's O/GR rows padded to a multiple of 12 with rows of 0, the rows in
 * blocks of 12 interleaved by 4 bytes ([rows / 12][Kp / 4][12][4]); zw'[o] and corr[o]
 * = rowsum(W'[o]) - K * zw'[o], K = C/GR * KH * KW; the output stage's column is the
 * output channel.  After the rows, int32 values: the mode (1: every pair of channels of
 * a tap, bytes 2i and 2i+1 of a row, sums to at most 128 in its positive and negative
 * weights, safe for vpmaddubsw; 0: the rows as they are), the count of corrections and
 * the corrections (packed row, k, residual; by row): mode 1's clamped weights, whose
 * residual times the image's byte the kernel adds to the sums. */
typedef struct {
    int64_t N, C, H, W, O, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW, K;
    /* GR > 1: a grouped convolution, output channels [g*O/GR, (g+1)*O/GR) reading input
     * channels [g*C/GR, (g+1)*C/GR); C, O the full counts, K per group's channels;
     * 0 or 1: not grouped */
    int64_t GR;
    const void* x;
    int x_signed;
    const void* zx;
    const int8_t* w;
    const int32_t* w_zp;
    const int32_t* w_corr;
    plait_q_out out;
    void* c;
} plait_qconv_problem;

PLAIT_QGEMM_HIDDEN int plait_qconv2d(const plait_qconv_problem* p);

/* A depthwise convolution: out[n][c][oh][ow] = out(sum over the window of (x - zx) *
 * w[c][kh][kw]) with w the weights minus their zero point (int32, [C][KH][KW]) and the
 * output stage's column the channel c.  x: uint8 or int8 (x_signed), NCHW. */
typedef struct {
    int64_t N, C, H, W, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW;
} plait_qdw_desc;

PLAIT_QGEMM_HIDDEN int plait_qconv2d_depthwise(const plait_qdw_desc* d, const void* x,
                                               int x_signed, const void* zx,
                                               const int32_t* w, const plait_q_out* out,
                                               void* c);

/* QLinearAdd of two 8-bit tensors of one dtype (is_signed) with per-tensor parameters,
 * as MLAS computes it: with ra = sa / sc, rb = sb / sc and fixed = zc - fma(ra, za,
 * rb * zb) (float32, given), v = fma(a, ra, fma(b, rb, fixed)), or with a_first
 * fma(b, rb, fma(a, ra, fixed)) (A one value per span); rounded half to even
 * (cvtps2dq: NaN and out-of-range values give INT_MIN), saturated.  The output has n
 * elements; an operand of len elements (len divides n) repeats: element i reads
 * operand[i % len] (a scalar, or the output's trailing dimensions). */
typedef struct {
    int64_t n, a_len, b_len;
    int is_signed, a_first;
    float ra, rb, fixed;
} plait_qadd_desc;

PLAIT_QGEMM_HIDDEN int plait_qadd(const plait_qadd_desc* d, const void* a, const void* b,
                                  void* c);

/* QLinearMul (MLAS's SSE2 kernel): float32((a - za) * (b - zb)) * ratio + float32(zc),
 * two roundings, ratio = (sa * sb) / sc (float32, given), then rounded and saturated
 * as plait_qadd; the operands repeat as plait_qadd's, or, with rep_inner > 1, each
 * value of the repeating operand covers rep_inner consecutive elements (element i
 * reads operand[(i / rep_inner) % len]: a per-channel scale of NCHW). */
typedef struct {
    int64_t n, a_len, b_len;
    int is_signed;
    int32_t za, zb, zc;
    float ratio;
    int64_t rep_inner;
} plait_qmul_desc;

PLAIT_QGEMM_HIDDEN int plait_qmul(const plait_qmul_desc* d, const void* a, const void* b,
                                  void* c);

/* QuantizeLinear (float32 -> 8 bits of q_signed) and DequantizeLinear (8 bits ->
 * float32) of outer * ch * inner elements, the scale and zero point one value or
 * (per_channel) ch values, the channel axis in the middle. */
typedef struct {
    int64_t outer, ch, inner;
    int per_channel, q_signed;
} plait_qparam_desc;

PLAIT_QGEMM_HIDDEN int plait_quantize(const plait_qparam_desc* d, const float* x,
                                      const float* scale, const void* zp, void* y);
PLAIT_QGEMM_HIDDEN int plait_dequantize(const plait_qparam_desc* d, const void* x,
                                        const float* scale, const void* zp, float* y);

/* DynamicQuantizeLinear of n float32 values to uint8: y, its scale and zero point */
PLAIT_QGEMM_HIDDEN int plait_dynamic_quantize(int64_t n, const float* x, uint8_t* y,
                                              float* scale, uint8_t* zp);
/* QLinearSoftmax over rows of d contiguous 8-bit codes (is_signed: int8), the exponent
 * table given (256 float32 entries, indexed by the code plus an offset that makes the
 * row's maximum read entry 255, or 127 stored at uint8(-1) for int8): per row the
 * float32 sum of its entries in order, then each output
 * saturate(round_half_even((entry * ys) / sum) + yz), ys = floor(1 / y_scale)
 * (|ys| <= 2^24). */
typedef struct {
    int64_t rows, d;
    int is_signed;
    float ys;
    int32_t yz;
} plait_qsoftmax_desc;

PLAIT_QGEMM_HIDDEN int plait_qsoftmax(const plait_qsoftmax_desc* d, const float* table,
                                      const void* x, void* y);

/* A layer normalization between quantized tensors over rows of d contiguous codes:
 * the dequantized values (x - xz) * xs normalized, their mean and variance from exact
 * integer sums, y = float32((x - mean) / sqrt(var + eps) * gamma[j] + beta[j]) in
 * double arithmetic, then QuantizeLinear with ys, yz (y / ys in float32, clamped,
 * rounded half to even). */
typedef struct {
    int64_t rows, d;
    int x_signed, y_signed;
    float xs, ys, eps;
    int32_t xz, yz;
} plait_qlayer_norm_desc;

PLAIT_QGEMM_HIDDEN int plait_qlayer_norm(const plait_qlayer_norm_desc* d, const void* x,
                                         const float* gamma, const float* beta, void* y);
/* y[i] = table[x[i]] for n 8-bit codes (uint8 or int8, indexed by their bytes): a
 * chain of elementwise steps from one 8-bit tensor to another, tabulated */
PLAIT_QGEMM_HIDDEN int plait_qlookup(int64_t n, const uint8_t* table, const void* x, void* y);
#endif
