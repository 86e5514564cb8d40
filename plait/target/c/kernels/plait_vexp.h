/* plait_vexp.h: plait_exp_f32, SiLU, erf and GELU (both forms) on vectors of PLAIT_SL
 * floats (GCC vector extensions), for the kernel families of plait_isa.h (attention's softmax, the
 * depthwise convolutions' SiLU, the products' GELU epilogue, plait_tile.h).
 * Define PLAIT_SL (16 in AVX-512 copies, 8 elsewhere) and include plait_isa.h first.
 * Unlike the generated kernels, these may contract multiply-adds into fused ones (the
 * families are compiled without fp-contract=off): their results agree across ISA copies
 * within the stated tolerances, not bit for bit. */
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

/* the first n < PLAIT_SL lanes of a vector: masked loads and stores where the ISA has
 * them (nothing read or written past them; the other lanes load as 0), else lane by lane */
static inline __attribute__((always_inline)) void
plait_sv_load_n(plait_sv* v, const float* p, int64_t n) {
#if defined(PLAIT_ISA_AVX512) && PLAIT_SL == 16
    *v = (plait_sv)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#elif defined(PLAIT_ISA_AVX2) && PLAIT_SL == 8
    const plait_svi lane = {0, 1, 2, 3, 4, 5, 6, 7};
    *v = (plait_sv)_mm256_maskload_ps(p, (__m256i)(lane < (int32_t)n));
#else
    float tmp[PLAIT_SL] = {0};
    for (int64_t q = 0; q < n; ++q) tmp[q] = p[q];
    *v = *(const plait_svu*)tmp;
#endif
}

static inline __attribute__((always_inline)) void
plait_sv_store_n(float* p, const plait_sv* v, int64_t n) {
#if defined(PLAIT_ISA_AVX512) && PLAIT_SL == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), (__m512)*v);
#elif defined(PLAIT_ISA_AVX2) && PLAIT_SL == 8
    const plait_svi lane = {0, 1, 2, 3, 4, 5, 6, 7};
    _mm256_maskstore_ps(p, (__m256i)(lane < (int32_t)n), (__m256)*v);
#else
    float tmp[PLAIT_SL];
    *(plait_svu*)tmp = *v;
    for (int64_t q = 0; q < n; ++q) p[q] = tmp[q];
#endif
}
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

/* *q = *num / *den: a reciprocal estimate refined by one Newton step where the ISA has
 * one (AVX-512 rcp14, AVX2 rcp: within 4e-7 relative of the quotient for the finite,
 * normal denominators of SiLU and erf), else the division */
static inline __attribute__((always_inline)) void
plait_quot_sv(plait_sv* q, const plait_sv* num, const plait_sv* den) {
#if defined(PLAIT_ISA_AVX512) && PLAIT_SL == 16
    plait_sv inv = (plait_sv)_mm512_rcp14_ps((__m512)*den);
    inv = inv * (2.0f - *den * inv);
    *q = *num * inv;
#elif defined(PLAIT_ISA_AVX2) && PLAIT_SL == 8
    plait_sv inv = (plait_sv)_mm256_rcp_ps((__m256)*den);
    inv = inv * (2.0f - *den * inv);
    *q = *num * inv;
#else
    *q = *num / *den;
#endif
}

/* *v = SiLU of its lanes, v / (1 + exp(-v)): the exp above (its input clamped to 88 so
 * that 1 + exp stays finite), the division by plait_quot_sv (a vdivps held GCC's
 * vectorized scalar loop to ~2.5 cycles per element).
 * NaN stays NaN, +inf gives inf, v < -88 gives v * 0 (-0; NaN for -inf, as -inf / inf:
 * the quotient is below 4e-37 there). */
static inline __attribute__((always_inline)) void plait_silu_sv(plait_sv* v) {
    const plait_sv x = *v;
    plait_sv e = -x;
    e = PLAIT_SELECT(e > PLAIT_SSPLAT(88.0f), PLAIT_SSPLAT(88.0f), e);
    plait_exp_sv(&e);
    const plait_sv den = e + 1.0f;
    plait_sv q;
    plait_quot_sv(&q, &x, &den);
    *v = PLAIT_SELECT(-x > PLAIT_SSPLAT(88.0f), x * 0.0f, q);
}

/* *v = erf of its lanes: x clamped to [-4, 4], x P(x^2) / Q(x^2) with P of degree 6 and
 * Q of degree 4 (the rational approximation of Eigen's and XLA's float erf: within 7e-8
 * of erf in exact arithmetic, 5e-7 in float32, tests/target/test_gemm.py), the quotient
 * by plait_quot_sv; +-1 exactly from |x| >= 4 (1 - erf(4) = 1.5e-8), so that GELU of
 * -inf is NaN as -inf * 0; NaN stays NaN. */
static inline __attribute__((always_inline)) void plait_erf_sv(plait_sv* v) {
    plait_sv x = *v;
    x = PLAIT_SELECT(x > PLAIT_SSPLAT(4.0f), PLAIT_SSPLAT(4.0f), x);
    x = PLAIT_SELECT(x < PLAIT_SSPLAT(-4.0f), PLAIT_SSPLAT(-4.0f), x);
    const plait_sv x2 = x * x;
    plait_sv p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * x;
    plait_sv q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    plait_sv r;
    plait_quot_sv(&r, &p, &q);
    r = PLAIT_SELECT(x >= PLAIT_SSPLAT(4.0f), PLAIT_SSPLAT(1.0f), r);
    *v = PLAIT_SELECT(x <= PLAIT_SSPLAT(-4.0f), PLAIT_SSPLAT(-1.0f), r);
}

/* *v = GELU of its lanes, erf form: x (1 + erf(x / sqrt 2)) / 2 */
static inline __attribute__((always_inline)) void plait_gelu_sv(plait_sv* v) {
    const plait_sv x = *v;
    plait_sv e = x * 0.70710678118654752f;
    plait_erf_sv(&e);
    *v = (x * 0.5f) * (e + 1.0f);
}

/* *v = GELU of its lanes, tanh form: x (1 + tanh(u)) / 2 with u = sqrt(2 / pi) (x +
 * 0.044715 x^3), computed as the identical x sigmoid(2u) = x / (1 + exp(-2u)), SiLU's
 * quotient (no cancellation in 1 + tanh(u) for u near -inf, and one exp instead of
 * tanh's); exp(-2u) saturates as in plait_silu_sv (the result is -0 there, and NaN for
 * x = -inf as -inf * 0); NaN stays NaN. */
static inline __attribute__((always_inline)) void plait_gelu_tanh_sv(plait_sv* v) {
    const plait_sv x = *v;
    /* -2u = x (k1 + k3 x^2) */
    plait_sv e = x * ((x * x) * (-2.0f * 0.7978845608028654f * 0.044715f)
                      + (-2.0f * 0.7978845608028654f));
    const plait_sv big = e;
    e = PLAIT_SELECT(e > PLAIT_SSPLAT(88.0f), PLAIT_SSPLAT(88.0f), e);
    plait_exp_sv(&e);
    const plait_sv den = e + 1.0f;
    plait_sv q;
    plait_quot_sv(&q, &x, &den);
    *v = PLAIT_SELECT(big > PLAIT_SSPLAT(88.0f), x * 0.0f, q);
}
#endif
