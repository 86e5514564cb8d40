/* plait_gemm.h: the interface of the c target's float32 kernel families: the matrix
 * product (plait_gemm.c), direct convolutions (plait_conv.c), Winograd convolutions
 * (plait_winograd.c) and attention (plait_attention.c), shared by the families and the
 * per-model call wrappers.  Each entry point calls the copy of its family chosen for
 * the running CPU when the library was loaded (plait_isa.h). */
#ifndef PLAIT_GEMM_H
#define PLAIT_GEMM_H
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define PLAIT_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_HIDDEN
#endif

enum { PLAIT_A_PACKED = 0, PLAIT_A_STRIDED = 1 };
enum { PLAIT_B_PACKED = 0, PLAIT_B_STRIDED = 1, PLAIT_B_CONV = 2 };
enum { PLAIT_BIAS_NONE = 0, PLAIT_BIAS_ROW = 1, PLAIT_BIAS_COL = 2 };

typedef struct {
    /* the convolution whose im2col matrix is B: the zero-padded input [C][HP][RL], each
     * row's columns split into SW phases of WPP values (padded column q at
     * [q % SW][q / SW]; with SW == 1 a plain row, RL == WPP) */
    int64_t C, HP, RL, WPP, KH, KW, SH, SW, DH, DW, OH, OW;
    /* CS: the distance between neighbouring output pixels' columns in the image: 1 in
     * the phase-split layout; the stride when an unpadded input is read in place (then
     * SW is 1 and RL == WPP == W) */
    int64_t CS;
} plait_conv_geom;

/* A convolution's input read band by band (plait_gemm_problem.band): fill copies the
 * zero-padded, phase-split rows r0 .. r1 (of the HP rows of plait_conv_geom) of channels
 * c0 .. c1 of image bi into dst, [c - c0][r - r0][RL]. */
typedef struct plait_conv_band {
    void (*fill)(const struct plait_conv_band* band, int64_t bi, int64_t c0, int64_t c1,
                 int64_t r0, int64_t r1, float* dst);
    const void* desc;         /* the convolution's plait_conv2d_desc */
    const float* x;           /* its unpadded input, NCHW */
} plait_conv_band;

/* The activations of plait_gemm_problem.act */
#define PLAIT_ACT_NONE 0
#define PLAIT_ACT_CLIP 1
#define PLAIT_ACT_SILU 2
#define PLAIT_ACT_GELU 3
#define PLAIT_ACT_GELU_TANH 4

typedef struct {
    int64_t M, N, K;
    int a_kind;               /* PLAIT_A_* */
    const float* a;           /* packed panels, or A[i*lda_r + k*lda_c] */
    int64_t lda_r, lda_c;
    int b_kind;               /* PLAIT_B_* */
    const float* b;           /* packed panels, B[k*ldb_r + j*ldb_c], or padded input */
    int64_t ldb_r, ldb_c;
    const plait_conv_geom* conv;
    float* c;                 /* C[i*ldc + j] */
    int64_t ldc;
    int bias_kind;            /* PLAIT_BIAS_* */
    const float* bias;
    const float* res;         /* residual, res[i*ldc + j], or NULL */
    int relu;
    /* act: then an activation (PLAIT_ACT_*, after the relu): clip to [act_lo, act_hi]
     * (ReLU6 is [0, 6]; a bound may be infinite), SiLU, x * sigmoid(x), GELU (the
     * erf form, x (1 + erf(x / sqrt 2)) / 2) or GELU's tanh form, x (1 + tanh(sqrt(2 /
     * pi) (x + 0.044715 x^3))) / 2 */
    int act;
    float act_lo, act_hi;
    /* pool: then a 2x2, stride-2 max pooling (a convolution's B only; one K block): the
     * N dimension runs over patches of 2 rows x 8 columns of the OH x OW output, and C
     * holds the pooled OH/2 x OW/2 planes (ldc: their size) */
    int pool;
    /* batch: matrix b of the batch is at a + b*a_bs, b + b*b_bs, c (and res) + b*c_bs */
    int64_t batch, a_bs, b_bs, c_bs;
    /* band (B_CONV only, not with pool): b is not the padded image; each job copies the
     * padded rows its block of pixels reads, the channels of one K block at a time, into
     * a band of its own (this thread's scratch slot 3) just before packing from it */
    const plait_conv_band* band;
    /* max_threads: at most this many threads (0: the pool's count); 1 from inside a
     * parallel call that gave each thread a product of its own */
    int max_threads;
    /* k_lo, k_hi: the sum over k_lo .. k_hi - 1 only (both 0: all of it), for a part of a
     * split sum (plait_gemm.c, gemm_split_k) */
    int64_t k_lo, k_hi;
    /* split: a tuned point's thread split (plait/target/c/tuning): PLAIT_SPLIT_AUTO (0,
     * the rule of plait_gemm), _COLUMNS (column blocks only), _ROWS (row blocks too, as
     * many as threads where the rows allow) */
    int split;
    /* groups (0 or 1: none): a grouped convolution, whose batch runs over images x
     * groups (matrix b of the batch is group b % groups of image b / groups): it reads
     * A at a + (b % groups) * a_bs and the bias from bias + (b % groups) * bias_bs */
    int64_t groups, bias_bs;
    /* kc, mc, nc: a tuned point's block sizes (plait/target/c/tuning; 0: the rules'):
     * the sum in equal blocks of at most kc values (at most PLAIT_KC; not with pool),
     * the rows in blocks of mc (a multiple of PLAIT_MR), the columns in blocks of nc (a
     * multiple of PLAIT_NR) */
    int64_t kc, mc, nc;
} plait_gemm_problem;

#define PLAIT_SPLIT_AUTO 0
#define PLAIT_SPLIT_COLUMNS 1
#define PLAIT_SPLIT_ROWS 2

typedef struct {
    int64_t N, C, H, W, O, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, OH, OW;
    /* the activation after the epilogue (plait_gemm_problem.act; not with pooling or
     * Winograd); an initializer that stops at OW leaves none */
    int act;
    float act_lo, act_hi;
    /* G: groups (0 or 1: none; not with pooling): C and O are G times the channels of a
     * group, and the weights are packed group by group (for plait_conv2d
     * [G][ceil(O/G/6)][C/G*KH*KW][6], for the pixel rows [G][ceil(O/G/16)][C/G*KH*KW][16],
     * for Winograd F(m) [G][(m+2)^2][ceil(O/G/6)][C/G][6]); max_threads: at most this
     * many threads (0: the pool's count; a tuned point; not Winograd's) */
    int64_t G, max_threads;
    /* split, kc, mc, nc: a tuned point's thread split and block sizes of the product
     * (those of plait_gemm_problem; 0: the rules'; plait_conv2d and plait_conv2d_pool) */
    int64_t split, kc, mc, nc;
} plait_conv2d_desc;

/* A grouped convolution (G > 1) as G * N ungrouped ones of C / G input and O / G output
 * channels: image n's group g is image n * G + g of *gd (the planes of NCHW lie that
 * way), whose weights and bias are group g's.  d itself otherwise. */
static inline const plait_conv2d_desc* plait_conv2d_groups(const plait_conv2d_desc* d,
                                                           plait_conv2d_desc* gd) {
    if (d->G <= 1) return d;
    *gd = *d;
    gd->N = d->N * d->G;
    gd->C = d->C / d->G;
    gd->O = d->O / d->G;
    return gd;
}

/* C = epilogue(A @ B) as described by p; 0 on success, 1 out of memory. */
PLAIT_HIDDEN int plait_gemm(const plait_gemm_problem* p);

/* out[N][O][OH][OW] = relu?(conv2d(x, w) + bias[O] + res), NCHW, the weights packed in
 * 6-row panels ([ceil(O/6)][C*KH*KW][6]); bias and res may be NULL.  0 on success, 1
 * out of memory. */
PLAIT_HIDDEN int plait_conv2d(const plait_conv2d_desc* d, const float* x,
                              const float* apacked, const float* bias, const float* res,
                              int relu, float* out);

/* The same computed as the transposed product out^T = im2col^T @ W^T: the output pixels
 * are the rows of the register tile and the output channels its columns (what a small
 * image wants: 7 x 7 = 49 pixels are 50 rows but 64 columns); the weights packed in
 * 16-column panels of W^T ([ceil(O/16)][C*KH*KW][16], as PLAIT_B_PACKED).  Any padding,
 * stride and dilation; the epilogue and activation of plait_conv2d.  0 on success, 1 out
 * of memory. */
PLAIT_HIDDEN int plait_conv2d_pixel_rows(const plait_conv2d_desc* d, const float* x,
                                         const float* bpacked, const float* bias,
                                         const float* res, int relu, float* out);

/* The same followed by a 2x2, stride-2 max pooling: out[N][O][OH/2][OW/2] (OH even, OW a
 * multiple of 8, C*KH*KW at most 384, no residual).  2 when those do not hold. */
PLAIT_HIDDEN int plait_conv2d_pool(const plait_conv2d_desc* d, const float* x,
                                   const float* apacked, const float* bias, int relu,
                                   float* out);

/* The same for 3x3, stride 1, dilation 1 by Winograd F(2x2, 3x3): the weights are
 * transformed (G g G^T) and packed as [16][ceil(O/6)][C][6]. */
PLAIT_HIDDEN int plait_conv2d_winograd(const plait_conv2d_desc* d, const float* x,
                                       const float* u, const float* bias, const float* res,
                                       int relu, float* out);

/* The same by Winograd F(4x4, 3x3): the weights transformed (G g G^T, 6x6) and packed as
 * [36][ceil(O/6)][C][6]. */
PLAIT_HIDDEN int plait_conv2d_winograd4(const plait_conv2d_desc* d, const float* x,
                                        const float* u, const float* bias, const float* res,
                                        int relu, float* out);
/* One (multi-head) attention: out = softmax(scale * Q @ K^T + mask_scale * M) @ V for
 * every batch b and head h.  Element (b, h, i, e) of Q is
 * q[q_off + b*q_sb + h*q_sh + i*q_ss + e*q_sd] (i < SQ, e < D); K (b, h, j, e) and
 * V (b, h, j, c) likewise (j < SK, c < DV); the additive mask M (b, h, i, j) is
 * m[m_off + b*m_sb + h*m_sh + i*m_si + j*m_sj] (strides of 0 broadcast); out
 * (b, h, i, c) is out[b*o_sb + h*o_sh + i*o_ss + c] (its last axis contiguous).  A query
 * row whose scores are all -inf gives NaN (0/0, as numpy's softmax), or zeros when
 * zero_masked_rows is set (PyTorch's scaled_dot_product_attention). */
typedef struct {
    int64_t B, H, SQ, SK, D, DV;
    int64_t q_off, q_sb, q_sh, q_ss, q_sd;
    int64_t k_off, k_sb, k_sh, k_ss, k_sd;
    int64_t v_off, v_sb, v_sh, v_ss, v_sd;
    int64_t o_sb, o_sh, o_ss;
    float scale;
    int64_t m_off, m_sb, m_sh, m_si, m_sj;
    float mask_scale;
    int64_t zero_masked_rows;   /* 1: a row of scores that are all -inf gives zeros, not NaN */
} plait_attention_desc;

/* m may be NULL (no mask).  0 on success, 1 out of memory, 2 an empty key sequence or
 * head dimension. */
PLAIT_HIDDEN int plait_attention(const plait_attention_desc* d, const float* q,
                                 const float* k, const float* v, const float* m, float* out);
#endif
