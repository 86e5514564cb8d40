/* plait_pool.h: the interface of plait_pool.c (2-D max pooling), shared by the library
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
} plait_pool2d_desc;

/* out[N][C][OH][OW] = the maximum of each window of x[N][C][H][W] (taps in the padding
 * skipped); 0 on success. */
PLAIT_POOL_HIDDEN int plait_max_pool2d(const plait_pool2d_desc* d, const float* x,
                                       float* out);
#endif
