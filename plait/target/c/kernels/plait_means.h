/* plait_means.h: the mean of each of a run of planes, on vectors: what pooling's global
 * average (plait_pool.c) and the squeeze of a squeeze-and-excite gate (plait_dwconv.c)
 * share.  Include plait_isa.h first (the vector width is the copy's). */
#ifndef PLAIT_MEANS_H
#define PLAIT_MEANS_H
#include <stdint.h>

#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX512VNNI)
#define PLAIT_MEANS_V 16
#else
#define PLAIT_MEANS_V 8
#endif
typedef float plait_means_v __attribute__((vector_size(PLAIT_MEANS_V * 4)));
typedef float plait_means_vu __attribute__((vector_size(PLAIT_MEANS_V * 4), aligned(4)));

/* out[p] = the mean of the hw floats x[p * hw ...] for p in [lo, hi): PLAIT_MEANS_V
 * partial sums over the plane's whole vectors, the scalar tail, then the lanes added to
 * the tail in order (the same order in every copy with the same width), divided by hw */
static inline void plait_plane_means(const float* x, int64_t hw, int64_t lo, int64_t hi,
                                     float* out) {
    for (int64_t p = lo; p < hi; ++p) {
        const float* s = x + p * hw;
        plait_means_v acc = {0};
        int64_t j = 0;
        for (; j + PLAIT_MEANS_V <= hw; j += PLAIT_MEANS_V) acc += *(const plait_means_vu*)(s + j);
        float tot = 0.0f;
        for (; j < hw; ++j) tot += s[j];
        for (int l = 0; l < PLAIT_MEANS_V; ++l) tot += acc[l];
        out[p] = tot / (float)hw;
    }
}
#endif
