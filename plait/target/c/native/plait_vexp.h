/* plait_vexp.h: plait_exp_f32 and SiLU on vectors of PLAIT_SL floats (GCC vector
 * extensions), for the kernel families of plait_isa.h (attention's softmax, the
 * depthwise convolutions' SiLU).  Define PLAIT_SL (16 in AVX-512 copies, 8 elsewhere)
 * and include plait_isa.h first. */
#ifndef PLAIT_VEXP_H
#define PLAIT_VEXP_H
#include <stdint.h>
#if defined(PLAIT_ISA_AVX512) || defined(PLAIT_ISA_AVX2)
#include <immintrin.h>
#endif

typedef float plait_sv __attribute__((vector_size(PLAIT_SL * 4)));
typedef float plait_svu __attribute__((vector_size(PLAIT_SL * 4), aligned(4)));
typedef int32_t plait_svi __attribute__((vector_size(PLAIT_SL * 4)));
typedef uint32_t plait_svui __attribute__((vector_size(PLAIT_SL * 4)));
#define PLAIT_SSPLAT(x) ((plait_sv){0} + (x))
#define PLAIT_SELECT(mask, a, b) \
    ((plait_sv)(((plait_svi)(a) & (mask)) | ((plait_svi)(b) & ~(mask))))

/* *v = plait_exp_f32 of its lanes (the same operations, so the same results; a pointer,
 * not a vector argument, so the baseline variant keeps the default ABI) */
static inline __attribute__((always_inline)) void plait_exp_sv(plait_sv* v) {
    plait_sv x = *v;
    plait_sv xc = PLAIT_SELECT(x > PLAIT_SSPLAT(88.8f), PLAIT_SSPLAT(88.8f), x);
    xc = PLAIT_SELECT(xc < PLAIT_SSPLAT(-104.0f), PLAIT_SSPLAT(-104.0f), xc);
    plait_sv m = xc * 1.44269504088896341f + 12582912.0f;
    plait_sv kf = m - 12582912.0f;
    plait_svi k = (plait_svi)m - 0x4B400000;
    plait_sv r = xc - kf * 0.693359375f;
    r = r - kf * (-2.12194440e-4f);
    plait_sv z = r * r;
    plait_sv p = PLAIT_SSPLAT(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    plait_svi k1 = (k + (plait_svi)((plait_svui)k >> 31)) >> 1;
    plait_sv s1 = (plait_sv)((k1 + 127) << 23);
    plait_sv s2 = (plait_sv)((k - k1 + 127) << 23);
    *v = p * s1 * s2;
}

/* *v = SiLU of its lanes, v / (1 + exp(-v)): the exp above (its input clamped to 88 so
 * that 1 + exp stays finite), the division as a reciprocal estimate refined by one Newton
 * step where the ISA has one (AVX-512 rcp14, AVX2 rcp: within 4e-7 relative of the
 * quotient; a vdivps held GCC's vectorized scalar loop to ~2.5 cycles per element).
 * NaN stays NaN, +inf gives inf, v < -88 gives v * 0 (-0; NaN for -inf, as -inf / inf:
 * the quotient is below 4e-37 there). */
static inline __attribute__((always_inline)) void plait_silu_sv(plait_sv* v) {
    const plait_sv x = *v;
    plait_sv e = -x;
    e = PLAIT_SELECT(e > PLAIT_SSPLAT(88.0f), PLAIT_SSPLAT(88.0f), e);
    plait_exp_sv(&e);
    const plait_sv den = e + 1.0f;
#if defined(PLAIT_ISA_AVX512) && PLAIT_SL == 16
    plait_sv inv = (plait_sv)_mm512_rcp14_ps((__m512)den);
    inv = inv * (2.0f - den * inv);
    const plait_sv q = x * inv;
#elif defined(PLAIT_ISA_AVX2) && PLAIT_SL == 8
    plait_sv inv = (plait_sv)_mm256_rcp_ps((__m256)den);
    inv = inv * (2.0f - den * inv);
    const plait_sv q = x * inv;
#else
    const plait_sv q = x / den;
#endif
    *v = PLAIT_SELECT(-x > PLAIT_SSPLAT(88.0f), x * 0.0f, q);
}
#endif
