/* plait_wquant.h: the interface of plait_wquant.c (products with weights quantized to 4
 * or 8 bits in blocks along K, onnxruntime's MatMulNBits layout), shared by the library
 * and the per-model call wrappers. */
#ifndef PLAIT_WQUANT_H
#define PLAIT_WQUANT_H
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PLAIT_WQ_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_WQ_HIDDEN
#endif

typedef struct {
    int64_t M, N, K;        /* out[M][N] = a[M][K] @ W^T (+ bias), W: N x K */
    int64_t bits;           /* 4 or 8 */
    int64_t block_size;     /* values along K per scale and zero point (even for 4 bits) */
    int64_t zero;           /* the zero point of every block (symmetric), or -1: zp's */
    int64_t act;            /* 8: a quantized to int8 per block (accuracy_level 4), 0: float */
} plait_wq_desc;

/* Several outputs of one call: the products of one activation by the weights of
 * count products concatenated along N (a layer's q, k and v: one quantization of the
 * activations and one dispatch instead of three).  Output j takes the columns
 * [end[j - 1], end[j]) (end[-1] = 0, end[count - 1] = N), out[j] its M rows of
 * end[j] - end[j - 1] floats. */
#define PLAIT_WQ_MAX_OUTS 4
typedef struct {
    int64_t count;
    int64_t end[PLAIT_WQ_MAX_OUTS];
    float* out[PLAIT_WQ_MAX_OUTS];
} plait_wq_outs;

/* W[n][k] = (float)(q[n][k] - z[n][k / bs]) * scales[n][k / bs], q and z unpacked from
 * b[N][k_blocks][bs * bits / 8] and zp[N][ceil(k_blocks * bits / 8)] (4 bits: low
 * nibble first); bias may be NULL.  With act == 8 each row of a is first quantized to
 * int8 per block (sa = amax / 127, qa = rint(a * 127 / amax)) and each block's sum
 * sum qa (q - z) is an exact integer, out = sum_b (sa * scale) * isum (float).  With
 * outs (not NULL) the product's columns go to outs' outputs and out is not read.  0 on
 * success, 1 out of memory. */
PLAIT_WQ_HIDDEN int plait_wq_matmul(const plait_wq_desc* d, const float* a, const uint8_t* b,
                                    const float* scales, const uint8_t* zp,
                                    const float* bias, float* out, const plait_wq_outs* outs);
#endif
