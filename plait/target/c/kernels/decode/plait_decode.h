/* plait_decode.h: the interface of the c target's decode family (plait_decode.c):
 * products of a few rows by a weight matrix kept as it is stored, (N, K) row-major
 * (batch-1 decoding: a matrix-vector product that streams the weights once). */
#ifndef PLAIT_DECODE_H
#define PLAIT_DECODE_H
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && !defined(_WIN32)
#define PLAIT_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_HIDDEN
#endif

/* The most rows plait_gemv takes; more are a matrix product (plait_gemm). */
#define PLAIT_GEMV_MAX_ROWS 4

/* y[m][n] = sum_k x[m*ldx + k] * w[n*K + k] (+ bias[n]) (+ res[m*N + n]) for m < M,
 * n < N; bias and res may be NULL.  The weights are read once (the rows of x, at most
 * PLAIT_GEMV_MAX_ROWS, are taken in turn for each block of 4 weight rows, which stays in
 * the L1/L2 cache), blocks of weight rows split over the pool's threads. */
typedef struct {
    int64_t M, N, K;
    const float* x;
    int64_t ldx;
    const float* w;
    const float* bias;
    const float* res;
    float* y;
} plait_gemv_problem;

/* 0 on success, 2 when M exceeds PLAIT_GEMV_MAX_ROWS. */
PLAIT_HIDDEN int plait_gemv(const plait_gemv_problem* p);

/* out[m][n] = sum_k x[m*K + k] * w[n*K + k] (+ bias[n]) (+ res[m*N + n]): a linear
 * layer of M rows (run-time) by the weights as stored, (N, K) row-major, read in place;
 * bias and res may be NULL.  At most PLAIT_GEMV_MAX_ROWS rows (a decode step) run
 * plait_gemv, more (a prefill) plait_gemm reading the same weights strided, so the
 * weights are stored once for both. */
typedef struct {
    int64_t M, N, K;
    const float* x;
    const float* w;
    const float* bias;
    const float* res;
    float* out;
} plait_dlinear_desc;

/* 0 on success, else plait_gemm's or plait_gemv's status. */
PLAIT_HIDDEN int plait_dlinear(const plait_dlinear_desc* d);
#endif

/* Attention of new tokens over the key/value cache, in the layout plait.llm keeps it
 * (docs/llm.md): for batch b, key/value head kv and the G query heads h = kv*G + g that
 * share it, query row i (< S, the new tokens) attends the P cached rows and the new rows
 * j <= i (causal), and of those only the last W (a sliding window, W > 0: query row i at
 * position P + i sees keys at positions k with P + i - k < W; W = 0: no window):
 *
 *     out[b][kv][g][i] = sum_j softmax_j(scale * q . k_j) v_j
 *
 * q (B, KV*G, S, D); the cache kp, vp (P, B, KV, D), sequence-major, read in place; the
 * new keys and values kn, vn (B, KV, S, D); out (B, KV, G, S, D).  Decode is S = 1
 * (one query row per head), prefill P = 0 and S the prompt.  Each job (b, kv, a block
 * of query rows) reads each key and value row once for all G heads of its group. */
typedef struct {
    int64_t B, KV, G, S, P, D;
    int64_t W;            /* sliding window (keys seen per query row); 0: none */
    const float* q;
    const float* kp;
    const float* vp;
    const float* kn;
    const float* vn;
    float scale;
    float* out;
} plait_kv_attention_desc;

/* 0 on success, 1 out of memory, 2 an empty head dimension. */
PLAIT_HIDDEN int plait_kv_attention(const plait_kv_attention_desc* d);
