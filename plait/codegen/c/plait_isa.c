/* plait_isa.c: which copy of each kernel family a library runs (plait_isa.h).
 *
 * Every library gets one copy of this file.  When the library is loaded, each family's
 * constructor registers it here, and it gets the best of its copies that
 *   - the running CPU supports (x86-64: __builtin_cpu_supports, which also checks that
 *     the operating system saves the AVX / AVX-512 registers; aarch64: the kernel's
 *     HWCAP_ASIMD), and
 *   - the environment allows: PLAIT_ISA=<isa> caps every family at that ISA (a family
 *     runs its best copy whose ISA needs nothing beyond it), for tests and comparisons.
 *     The older PLAIT_GEMM_ISA is read the same way when PLAIT_ISA is not set.
 * A PLAIT_ISA naming an unknown ISA, one of another architecture or one the CPU lacks
 * never runs anything the CPU cannot: the families take their best supported copy and
 * plait_isa_report() carries the error, which plait's loader raises
 * (plait.runtime.native).  plait_isa_force() re-chooses every family of the library
 * (tests run each variant in one process). */
#include "plait_isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1 << 1)
#endif
#endif

#if defined(_WIN32)
#define PLAIT_ISA_EXPORT __declspec(dllexport)
#else
#define PLAIT_ISA_EXPORT __attribute__((visibility("default")))
#endif

/* What the ISAs need from the CPU (bits of plait_isa_cpu()). */
enum {
    PLAIT_CPU_AVX2 = 1 << 0,        /* AVX2 and FMA */
    PLAIT_CPU_AVX512 = 1 << 1,      /* AVX-512 F, BW, DQ and VL */
    PLAIT_CPU_AVX512VNNI = 1 << 2,
    PLAIT_CPU_AVXVNNI = 1 << 3,
    PLAIT_CPU_NEON = 1 << 4
};

typedef struct {
    const char* name;
    int id;
    unsigned needs;      /* PLAIT_CPU_* bits */
    const char* arch;    /* the architecture it belongs to, NULL: every one */
    const char* what;    /* the CPU features it needs, for messages */
} plait_isa_info;

/* best first: a family runs the first of its copies that is allowed */
static const plait_isa_info plait_isas[PLAIT_ISA_COUNT] = {
    {"avx512vnni", PLAIT_ISA_ID_AVX512VNNI,
     PLAIT_CPU_AVX2 | PLAIT_CPU_AVX512 | PLAIT_CPU_AVX512VNNI, "x86_64",
     "avx2, fma, avx512f, avx512bw, avx512dq, avx512vl, avx512vnni"},
    {"avx512", PLAIT_ISA_ID_AVX512, PLAIT_CPU_AVX2 | PLAIT_CPU_AVX512, "x86_64",
     "avx2, fma, avx512f, avx512bw, avx512dq, avx512vl"},
    {"avxvnni", PLAIT_ISA_ID_AVXVNNI, PLAIT_CPU_AVX2 | PLAIT_CPU_AVXVNNI, "x86_64",
     "avx2, fma, avxvnni"},
    {"avx2", PLAIT_ISA_ID_AVX2, PLAIT_CPU_AVX2, "x86_64", "avx2, fma"},
    {"neon", PLAIT_ISA_ID_NEON, PLAIT_CPU_NEON, "aarch64", "asimd"},
    {"baseline", PLAIT_ISA_ID_BASELINE, 0, NULL, "nothing"},
};

#if defined(__x86_64__)
#define PLAIT_ISA_ARCH "x86_64"
#elif defined(__aarch64__)
#define PLAIT_ISA_ARCH "aarch64"
#else
#define PLAIT_ISA_ARCH "other"
#endif

/* The CPU's PLAIT_CPU_* features, probed once. */
static unsigned plait_isa_cpu(void) {
    static int probed = 0;
    static unsigned cpu = 0;
    if (__atomic_load_n(&probed, __ATOMIC_ACQUIRE)) return cpu;
    unsigned c = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) c |= PLAIT_CPU_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        c |= PLAIT_CPU_AVX512;
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8) || \
    (defined(__clang__) && __clang_major__ >= 8)
    if (__builtin_cpu_supports("avx512vnni")) c |= PLAIT_CPU_AVX512VNNI;
#endif
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || \
    (defined(__clang__) && __clang_major__ >= 12)
    if (__builtin_cpu_supports("avxvnni")) c |= PLAIT_CPU_AVXVNNI;
#endif
#elif defined(__aarch64__)
#if defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMD) c |= PLAIT_CPU_NEON;
#else
    c |= PLAIT_CPU_NEON;   /* Advanced SIMD is part of every aarch64 platform ABI */
#endif
#endif
    cpu = c;
    __atomic_store_n(&probed, 1, __ATOMIC_RELEASE);
    return cpu;
}

static int plait_isa_here(const plait_isa_info* i) {
    return !i->arch || strcmp(i->arch, PLAIT_ISA_ARCH) == 0;
}

static const plait_isa_info* plait_isa_named(const char* name) {
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k)
        if (strcmp(plait_isas[k].name, name) == 0) return &plait_isas[k];
    return NULL;
}

/* The state every family's choice follows (one per library). */
static plait_isa_family* plait_isa_families = NULL;
static char plait_isa_cap[32];       /* the cap in force ("" none) */
static const char* plait_isa_source = NULL;   /* where it came from */
static char plait_isa_error[512];    /* why the environment's cap was refused */

/* The ISAs of this machine's architecture, "a, b, c" (for messages). */
static void plait_isa_list(char* out, size_t n) {
    out[0] = 0;
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k) {
        if (!plait_isa_here(&plait_isas[k])) continue;
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s", len ? ", " : "", plait_isas[k].name);
    }
}

/* The PLAIT_CPU_* bits a cap allows (those of the ISA named), or sets err and returns
 * the CPU's when the name is unknown, of another architecture or not supported. */
static unsigned plait_isa_cap_mask(const char* cap, const char* source, char* err,
                                   size_t errlen) {
    unsigned cpu = plait_isa_cpu();
    err[0] = 0;
    if (!cap || !*cap) return cpu;
    char names[128];
    plait_isa_list(names, sizeof names);
    const plait_isa_info* i = plait_isa_named(cap);
    if (!i) {
        snprintf(err, errlen, "%s=%s names no instruction set; use one of %s", source, cap,
                 names);
        return cpu;
    }
    if (!plait_isa_here(i)) {
        snprintf(err, errlen, "%s=%s is an instruction set of %s, not of this %s machine; "
                 "use one of %s", source, cap, i->arch, PLAIT_ISA_ARCH, names);
        return cpu;
    }
    if ((i->needs & cpu) != i->needs) {
        char have[128];
        have[0] = 0;
        for (int k = 0; k < PLAIT_ISA_COUNT; ++k) {
            if (!plait_isa_here(&plait_isas[k]) ||
                (plait_isas[k].needs & cpu) != plait_isas[k].needs)
                continue;
            size_t len = strlen(have);
            snprintf(have + len, sizeof have - len, "%s%s", len ? ", " : "", plait_isas[k].name);
        }
        snprintf(err, errlen, "%s=%s forces %s, which this CPU lacks (it needs %s); this CPU "
                 "runs %s; unset %s or choose one of those", source, cap, cap, i->what, have,
                 source);
        return cpu;
    }
    return i->needs;
}

/* The cap of the environment: PLAIT_ISA, else the older PLAIT_GEMM_ISA. */
static void plait_isa_from_env(void) {
    const char* v = getenv("PLAIT_ISA");
    plait_isa_source = "PLAIT_ISA";
    if (!v || !*v) {
        v = getenv("PLAIT_GEMM_ISA");
        plait_isa_source = "PLAIT_GEMM_ISA";
    }
    if (!v || !*v) {
        plait_isa_cap[0] = 0;
        plait_isa_source = NULL;
        plait_isa_error[0] = 0;
        return;
    }
    snprintf(plait_isa_cap, sizeof plait_isa_cap, "%s", v);
    plait_isa_cap_mask(plait_isa_cap, plait_isa_source, plait_isa_error,
                       sizeof plait_isa_error);
}

/* The ISA id a family runs: its best copy whose needs the CPU and the cap allow. */
static int plait_isa_choose(const plait_isa_family* f, unsigned allowed) {
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k) {
        const plait_isa_info* i = &plait_isas[k];
        if ((f->built >> i->id) & 1u && (i->needs & allowed) == i->needs &&
            plait_isa_here(i))
            return i->id;
    }
    return PLAIT_ISA_ID_BASELINE;
}

static unsigned plait_isa_allowed(void) {
    char err[512];
    unsigned cpu = plait_isa_cpu();
    return plait_isa_cap_mask(plait_isa_cap, plait_isa_source, err, sizeof err) & cpu;
}

/* The environment is read once, by the first family registered or the first report. */
static void plait_isa_init(void) {
    static int done = 0;
    if (done) return;
    done = 1;
    plait_isa_from_env();
}

void plait_isa_register(plait_isa_family* f) {
    plait_isa_init();
    f->next = plait_isa_families;
    plait_isa_families = f;
    __atomic_store_n(&f->chosen, plait_isa_choose(f, plait_isa_allowed()), __ATOMIC_RELAXED);
}

/* Re-choose every family of this library as PLAIT_ISA=isa would (NULL or "": as the
 * environment says now).  NULL on success, else why not (nothing changes then).  Not
 * while a call of the library runs on another thread. */
PLAIT_ISA_EXPORT const char* plait_isa_force(const char* isa) {
    static char err[512];
    plait_isa_init();
    if (!isa || !*isa) {
        plait_isa_from_env();
    } else {
        plait_isa_cap_mask(isa, "PLAIT_ISA", err, sizeof err);
        if (err[0]) return err;
        snprintf(plait_isa_cap, sizeof plait_isa_cap, "%s", isa);
        plait_isa_source = "plait_isa_force";
        plait_isa_error[0] = 0;
    }
    unsigned allowed = plait_isa_allowed();
    for (plait_isa_family* f = plait_isa_families; f; f = f->next)
        __atomic_store_n(&f->chosen, plait_isa_choose(f, allowed), __ATOMIC_RELAXED);
    return NULL;
}

static const char* plait_isa_id_name(int id) {
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k)
        if (plait_isas[k].id == id) return plait_isas[k].name;
    return "?";
}

/* s as a JSON string at buf + n ("" as null): quotes and backslashes escaped, control
 * characters dropped (the cap comes from the environment).  The new length. */
static size_t plait_isa_put_string(char* buf, size_t size, size_t n, const char* s) {
    if (!*s) {
        if (n < size) n += (size_t)snprintf(buf + n, size - n, "null");
        return n;
    }
    if (n + 1 < size) buf[n++] = '"';
    for (; *s && n + 3 < size; ++s) {
        if ((unsigned char)*s < 32) continue;
        if (*s == '"' || *s == '\\') buf[n++] = '\\';
        buf[n++] = *s;
    }
    if (n + 1 < size) buf[n++] = '"';
    if (n < size) buf[n] = 0;
    return n;
}

/* JSON: {"arch", "cpu": {feature: 0/1}, "supported": [ISAs the CPU runs, best first],
 * "allowed": [those the cap allows], "cap", "source", "error", "families": [{"name",
 * "built": [...], "chosen"}]}.  The text lives until the next call. */
PLAIT_ISA_EXPORT const char* plait_isa_report(void) {
    static char buf[8192];
    plait_isa_init();
    unsigned cpu = plait_isa_cpu(), allowed = plait_isa_allowed();
    size_t n = 0;
#define PLAIT_PUT(...)                                                           \
    do {                                                                         \
        if (n < sizeof buf) n += (size_t)snprintf(buf + n, sizeof buf - n, __VA_ARGS__); \
    } while (0)
    PLAIT_PUT("{\"arch\":\"%s\",\"cpu\":{\"avx2_fma\":%d,\"avx512\":%d,\"avx512vnni\":%d,"
              "\"avxvnni\":%d,\"neon\":%d},", PLAIT_ISA_ARCH, !!(cpu & PLAIT_CPU_AVX2),
              !!(cpu & PLAIT_CPU_AVX512), !!(cpu & PLAIT_CPU_AVX512VNNI),
              !!(cpu & PLAIT_CPU_AVXVNNI), !!(cpu & PLAIT_CPU_NEON));
    const char* sep = "";
    PLAIT_PUT("\"supported\":[");
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k)
        if (plait_isa_here(&plait_isas[k]) && (plait_isas[k].needs & cpu) == plait_isas[k].needs) {
            PLAIT_PUT("%s\"%s\"", sep, plait_isas[k].name);
            sep = ",";
        }
    sep = "";
    PLAIT_PUT("],\"allowed\":[");
    for (int k = 0; k < PLAIT_ISA_COUNT; ++k)
        if (plait_isa_here(&plait_isas[k]) &&
            (plait_isas[k].needs & allowed) == plait_isas[k].needs) {
            PLAIT_PUT("%s\"%s\"", sep, plait_isas[k].name);
            sep = ",";
        }
    PLAIT_PUT("],\"cap\":");
    n = plait_isa_put_string(buf, sizeof buf, n, plait_isa_cap);
    PLAIT_PUT(",\"source\":");
    if (plait_isa_source) PLAIT_PUT("\"%s\"", plait_isa_source);
    else PLAIT_PUT("null");
    PLAIT_PUT(",\"error\":");
    n = plait_isa_put_string(buf, sizeof buf, n, plait_isa_error);
    PLAIT_PUT(",\"families\":[");
    sep = "";
    for (const plait_isa_family* f = plait_isa_families; f; f = f->next) {
        PLAIT_PUT("%s{\"name\":\"%s\",\"built\":[", sep, f->name);
        const char* s2 = "";
        for (int k = 0; k < PLAIT_ISA_COUNT; ++k)
            if ((f->built >> plait_isas[k].id) & 1u) {
                PLAIT_PUT("%s\"%s\"", s2, plait_isas[k].name);
                s2 = ",";
            }
        PLAIT_PUT("],\"chosen\":\"%s\"}", plait_isa_id_name(f->chosen));
        sep = ",";
    }
    PLAIT_PUT("]}");
#undef PLAIT_PUT
    return buf;
}
