/* plait_dwconv.h: the interface of plait_dwconv.c (grouped and depthwise 2-D
 * convolutions), shared by the library and the per-model call wrappers. */
#ifndef PLAIT_DWCONV_H
#define PLAIT_DWCONV_H
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PLAIT_DWCONV_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_DWCONV_HIDDEN
#endif

/* the activation after the bias, residual and relu (the values of plait_gemm.h's
 * PLAIT_ACT_*, as c.DispatchGemm's epilogue) */
#define PLAIT_DW_ACT_NONE 0
#define PLAIT_DW_ACT_CLIP 1
#define PLAIT_DW_ACT_SILU 2
#define PLAIT_DW_ACT_GELU 3        /* x (1 + erf(x / sqrt 2)) / 2 */
#define PLAIT_DW_ACT_GELU_TANH 4   /* x sigmoid(2 sqrt(2 / pi) (x + 0.044715 x^3)) */

/* x[N][C][H][W] convolved with w[O][C / G][KH][KW] in G groups (G = C = O: depthwise),
 * strides SH, SW, dilations DH, DW, padding PT (top) and PL (left) — the bottom and
 * right padding follow from OH and OW — into out[N][O][OH][OW]. */
typedef struct {
    int64_t N, C, H, W, O, G, KH, KW, SH, SW, DH, DW, PT, PL, OH, OW;
    int64_t act;            /* PLAIT_DW_ACT_*: clip to [act_lo, act_hi], SiLU or GELU */
    float act_lo, act_hi;
    /* a tuned point (plait/target/c/tuning): the layout (PLAIT_DW_LAYOUT_*; 0, AUTO: the
     * kernel's own rule) and at most max_threads threads (0: the pool's count) */
    int64_t layout;
    int64_t max_threads;
    /* 1: channels last: x[N][H][W][C], out (and res) [N][OH][OW][O], w[KH][KW][C]
     * (depthwise only: G = C = O; the layout field is then not read) */
    int64_t nhwc;
} plait_dwconv2d_desc;

#define PLAIT_DW_LAYOUT_AUTO 0
#define PLAIT_DW_LAYOUT_PLANES 1   /* each output plane on the register tile */
#define PLAIT_DW_LAYOUT_LANES 2    /* channels in the lanes (depthwise only) */
#define PLAIT_DW_LAYOUT_ROWS 3     /* rows read in place (depthwise 3x3/5x5, stride 1, 2) */

/* out = act(relu?(conv(x, w) + bias[o] + res)); bias and res may be NULL; 0 on success,
 * 1 when out of memory, 2 when nhwc is set on a call that is not depthwise. */
PLAIT_DWCONV_HIDDEN int plait_dwconv2d(const plait_dwconv2d_desc* d, const float* x,
                                       const float* w, const float* bias, const float* res,
                                       int relu, float* out);

/* Squeeze-and-excite: out[n][c] = x[n][c] * sigmoid(b2[c] + sum_j w2[c][j] *
 * act(b1[j] + sum_k w1[j][k] * mean(x[n][k]))) over planes of HW floats, act SiLU
 * (PLAIT_DW_ACT_SILU) or relu (PLAIT_DW_SE_RELU); w1 is CR x C, w2 C x CR; b1, b2 may
 * be NULL; 0 on success, 1 when out of memory. */
#define PLAIT_DW_SE_RELU 3
typedef struct {
    int64_t N, C, HW, CR, act;
} plait_se_desc;

PLAIT_DWCONV_HIDDEN int plait_se_scale(const plait_se_desc* d, const float* x,
                                       const float* w1, const float* b1, const float* w2,
                                       const float* b2, float* out);
#endif
