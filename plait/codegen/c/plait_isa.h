/* plait_isa.h: one kernel family, compiled for every instruction set, one copy picked
 * when the library is loaded.
 *
 * A family file (plait_gemm.c, the generated kernels, ...) is compiled once per
 * instruction set (ISA) its architecture may have.  plait.codegen.c.variants writes
 * each copy as this header, the family's text and a last line PLAIT_ISA_END, after
 *
 *     #define PLAIT_ISA_AVX2 1        the ISA of this copy (exactly one)
 *     #define PLAIT_BUILT_AVX512 1    one line for every copy the library holds
 *     #define PLAIT_BUILT_AVX2 1      (the baseline copy always)
 *     #define PLAIT_BUILT_BASELINE 1
 *
 * This header then turns the copy's ISA on for every function that follows (the C
 * compiler may use its instructions anywhere in the copy) and gives
 *
 *  - PLAIT_ISA_FN(name): the copy's own name of a function, name__<isa>;
 *  - PLAIT_ISA_FAMILY("name") (once per file) and PLAIT_ISA_DISPATCH(ret, name,
 *    (params), (args)) (per entry point): in the baseline copy, the family's record,
 *    registered when the library is loaded (plait_isa.c picks the copy its calls run:
 *    the best one the CPU supports, capped by PLAIT_ISA), and `ret name(params)`, which
 *    calls name__<chosen isa>(args); in the other copies nothing.
 *
 * A family file therefore defines its entry points as PLAIT_ISA_FN(name) and ends with
 * PLAIT_ISA_FAMILY and one PLAIT_ISA_DISPATCH per entry point (docs/kernels.md). */
#ifndef PLAIT_ISA_H
#define PLAIT_ISA_H

#if defined(__GNUC__) && !defined(_WIN32)
#define PLAIT_ISA_HIDDEN __attribute__((visibility("hidden")))
#else
#define PLAIT_ISA_HIDDEN
#endif

/* The ISAs (ids: bits of plait_isa_family.built).  What each needs from the CPU is in
 * plait_isa.c; the names are those of PLAIT_ISA. */
enum {
    PLAIT_ISA_ID_BASELINE = 0,   /* the architecture's base (x86-64: SSE2; aarch64 without
                                  * Advanced SIMD) */
    PLAIT_ISA_ID_AVX2 = 1,       /* x86-64: AVX2 + FMA (+ F16C, BMI1/2, LZCNT, MOVBE) */
    PLAIT_ISA_ID_AVXVNNI = 2,    /* x86-64: avx2 + AVX-VNNI (VEX-encoded int8 dot products) */
    PLAIT_ISA_ID_AVX512 = 3,     /* x86-64: avx2 + AVX-512 F, BW, DQ, VL */
    PLAIT_ISA_ID_AVX512VNNI = 4, /* x86-64: avx512 + AVX512-VNNI */
    PLAIT_ISA_ID_NEON = 5,       /* aarch64: Advanced SIMD */
    PLAIT_ISA_COUNT = 6
};

#if !defined(PLAIT_ISA_BASELINE) && !defined(PLAIT_ISA_AVX2) && \
    !defined(PLAIT_ISA_AVXVNNI) && !defined(PLAIT_ISA_AVX512) && \
    !defined(PLAIT_ISA_AVX512VNNI) && !defined(PLAIT_ISA_NEON)
#define PLAIT_ISA_BASELINE 1   /* a file compiled once (plait_isa.c, call wrappers) */
#endif

#if (defined(PLAIT_ISA_AVX2) || defined(PLAIT_ISA_AVXVNNI) || defined(PLAIT_ISA_AVX512) || \
     defined(PLAIT_ISA_AVX512VNNI)) && !defined(__x86_64__)
#error "plait: an x86-64 copy of a kernel family for a compiler that does not target x86-64"
#endif
#if defined(PLAIT_ISA_NEON) && !defined(__aarch64__)
#error "plait: a NEON copy of a kernel family for a compiler that does not target aarch64"
#endif

/* The copy's ISA, turned on for the rest of the file (GCC: #pragma GCC target; clang:
 * an attribute on every function, popped by PLAIT_ISA_END). */
#if defined(PLAIT_ISA_AVX512VNNI)
#define PLAIT_ISA_SUFFIX avx512vnni
#define PLAIT_ISA_ID PLAIT_ISA_ID_AVX512VNNI
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe"))), apply_to = function)
#define PLAIT_ISA_PUSHED 1
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe")
#endif
#elif defined(PLAIT_ISA_AVX512)
#define PLAIT_ISA_SUFFIX avx512
#define PLAIT_ISA_ID PLAIT_ISA_ID_AVX512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe"))), apply_to = function)
#define PLAIT_ISA_PUSHED 1
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe")
#endif
#elif defined(PLAIT_ISA_AVXVNNI)
#define PLAIT_ISA_SUFFIX avxvnni
#define PLAIT_ISA_ID PLAIT_ISA_ID_AVXVNNI
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avxvnni,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe"))), apply_to = function)
#define PLAIT_ISA_PUSHED 1
#elif defined(__GNUC__)
#pragma GCC target("avxvnni,avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe")
#endif
#elif defined(PLAIT_ISA_AVX2)
#define PLAIT_ISA_SUFFIX avx2
#define PLAIT_ISA_ID PLAIT_ISA_ID_AVX2
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe"))), apply_to = function)
#define PLAIT_ISA_PUSHED 1
#elif defined(__GNUC__)
#pragma GCC target("avx2,fma,f16c,bmi,bmi2,lzcnt,popcnt,movbe")
#endif
#elif defined(PLAIT_ISA_NEON)
#define PLAIT_ISA_SUFFIX neon
#define PLAIT_ISA_ID PLAIT_ISA_ID_NEON
/* Advanced SIMD is part of the aarch64 base the compiler targets: nothing to turn on */
#else
#define PLAIT_ISA_SUFFIX baseline
#define PLAIT_ISA_ID PLAIT_ISA_ID_BASELINE
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(PLAIT_ISA_KEEP_SIMD)
/* the aarch64 baseline is the portable code without Advanced SIMD (the neon copy has
 * it), so that it is a variant of its own; plait_isa.c is compiled with it too */
#pragma GCC target("+nosimd")
#endif
#endif

#if defined(PLAIT_ISA_PUSHED)
#define PLAIT_ISA_END _Pragma("clang attribute pop")
#else
#define PLAIT_ISA_END
#endif

#define PLAIT_ISA_CAT2_(a, b) a##__##b
#define PLAIT_ISA_CAT2(a, b) PLAIT_ISA_CAT2_(a, b)
/* name__<isa>: this copy's own name of the function `name` */
#define PLAIT_ISA_FN(name) PLAIT_ISA_CAT2(name, PLAIT_ISA_SUFFIX)
#define PLAIT_ISA_STR_(x) #x
#define PLAIT_ISA_STR(x) PLAIT_ISA_STR_(x)
/* "avx2": this copy's ISA */
#define PLAIT_ISA_NAME PLAIT_ISA_STR(PLAIT_ISA_SUFFIX)

/* A family of the library: its copies (bit i: the copy of ISA id i is linked in) and
 * the ISA id its calls run (set when the library is loaded, and by plait_isa_force). */
typedef struct plait_isa_family {
    const char* name;
    unsigned built;
    int chosen;
    struct plait_isa_family* next;
} plait_isa_family;

/* Record the family and choose its copy (plait_isa.c). */
PLAIT_ISA_HIDDEN void plait_isa_register(plait_isa_family* f);

#if defined(PLAIT_BUILT_AVX512VNNI)
#define PLAIT_ISA_IF_AVX512VNNI(...) __VA_ARGS__
#else
#define PLAIT_ISA_IF_AVX512VNNI(...)
#endif
#if defined(PLAIT_BUILT_AVX512)
#define PLAIT_ISA_IF_AVX512(...) __VA_ARGS__
#else
#define PLAIT_ISA_IF_AVX512(...)
#endif
#if defined(PLAIT_BUILT_AVXVNNI)
#define PLAIT_ISA_IF_AVXVNNI(...) __VA_ARGS__
#else
#define PLAIT_ISA_IF_AVXVNNI(...)
#endif
#if defined(PLAIT_BUILT_AVX2)
#define PLAIT_ISA_IF_AVX2(...) __VA_ARGS__
#else
#define PLAIT_ISA_IF_AVX2(...)
#endif
#if defined(PLAIT_BUILT_NEON)
#define PLAIT_ISA_IF_NEON(...) __VA_ARGS__
#else
#define PLAIT_ISA_IF_NEON(...)
#endif

#define PLAIT_ISA_BUILT_MASK                                                       \
    (PLAIT_ISA_IF_AVX512VNNI((1u << PLAIT_ISA_ID_AVX512VNNI) |)                    \
     PLAIT_ISA_IF_AVX512((1u << PLAIT_ISA_ID_AVX512) |)                            \
     PLAIT_ISA_IF_AVXVNNI((1u << PLAIT_ISA_ID_AVXVNNI) |)                          \
     PLAIT_ISA_IF_AVX2((1u << PLAIT_ISA_ID_AVX2) |)                                \
     PLAIT_ISA_IF_NEON((1u << PLAIT_ISA_ID_NEON) |)(1u << PLAIT_ISA_ID_BASELINE))

#if defined(PLAIT_ISA_BASELINE)
/* the baseline copy holds the family's record and its entry points */
#define PLAIT_ISA_DISPATCHER 1
#define PLAIT_ISA_FAMILY(fname)                                                    \
    static plait_isa_family plait_isa_family_ = {fname, PLAIT_ISA_BUILT_MASK,        \
                                                 PLAIT_ISA_ID_BASELINE, 0};         \
    __attribute__((constructor)) static void plait_isa_family_init_(void) {         \
        plait_isa_register(&plait_isa_family_);                                     \
    }
#define PLAIT_ISA_DISPATCH(ret, name, params, args)                                \
    PLAIT_ISA_IF_AVX512VNNI(PLAIT_ISA_HIDDEN ret name##__avx512vnni params;)        \
    PLAIT_ISA_IF_AVX512(PLAIT_ISA_HIDDEN ret name##__avx512 params;)                \
    PLAIT_ISA_IF_AVXVNNI(PLAIT_ISA_HIDDEN ret name##__avxvnni params;)              \
    PLAIT_ISA_IF_AVX2(PLAIT_ISA_HIDDEN ret name##__avx2 params;)                    \
    PLAIT_ISA_IF_NEON(PLAIT_ISA_HIDDEN ret name##__neon params;)                    \
    PLAIT_ISA_HIDDEN ret name##__baseline params;                                   \
    ret name params {                                                              \
        switch (__atomic_load_n(&plait_isa_family_.chosen, __ATOMIC_RELAXED)) {    \
        PLAIT_ISA_IF_AVX512VNNI(case PLAIT_ISA_ID_AVX512VNNI:                      \
                                return name##__avx512vnni args;)                   \
        PLAIT_ISA_IF_AVX512(case PLAIT_ISA_ID_AVX512: return name##__avx512 args;) \
        PLAIT_ISA_IF_AVXVNNI(case PLAIT_ISA_ID_AVXVNNI: return name##__avxvnni args;) \
        PLAIT_ISA_IF_AVX2(case PLAIT_ISA_ID_AVX2: return name##__avx2 args;)       \
        PLAIT_ISA_IF_NEON(case PLAIT_ISA_ID_NEON: return name##__neon args;)       \
        default: return name##__baseline args;                                    \
        }                                                                          \
    }
#else
#define PLAIT_ISA_FAMILY(fname)
#define PLAIT_ISA_DISPATCH(ret, name, params, args)
#endif
#endif
