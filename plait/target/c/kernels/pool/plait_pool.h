/* plait_pool.h: the interface of plait_pool.c (2-D max and average pooling, global average pooling), shared by the library
 * and the per-model call wrappers. */
#ifndef PLAIT_POOL_H
#define PLAIT_POOL_H
#include <stdint.h>

#if defined(__GNUC__)
#define PLAIT_POOL_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_POOL_HIDDEN
#endif

typedef struct {
    int64_t N, C, H, W, OH, OW, KH, KW, SH, SW, DH, DW, PT, PL;
    int64_t PB, PR, count_pad;   /* average pooling only (max pooling ignores them) */
} plait_pool2d_desc;

/* out[N][C][OH][OW] = the maximum of each window of x[N][C][H][W] (taps in the padding
 * skipped); 0 on success. */
PLAIT_POOL_HIDDEN int plait_max_pool2d(const plait_pool2d_desc* d, const float* x,
                                       float* out);

/* out[N][C][OH][OW] = the sum of each window's taps inside x[N][C][H][W] divided by
 * the count of its taps inside the input (count_pad: inside the input and its padding,
 * PT .. PB rows and PL .. PR columns); 0 on success. */
PLAIT_POOL_HIDDEN int plait_avg_pool2d(const plait_pool2d_desc* d, const float* x,
                                       float* out);

typedef struct {
    int64_t planes, HW;
} plait_mean_desc;

/* out[p] = the mean of plane p of x (HW floats each) for p < planes: global average
 * pooling of x[N][C][H][W] (planes N * C, HW = H * W); 0 on success. */
PLAIT_POOL_HIDDEN int plait_global_avg_pool2d(const plait_mean_desc* d, const float* x,
                                              float* out);
#endif
