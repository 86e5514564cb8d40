/* npy.c: the .npy reader and writer of npy.h. */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char* err, size_t size, const char* fmt, ...) {
    if (err != NULL && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const struct {
    const char* descr;
    uint8_t code, bits;
} DTYPES[] = {
    {"<f4", kDLFloat, 32}, {"<f8", kDLFloat, 64}, {"<f2", kDLFloat, 16},
    {"|i1", kDLInt, 8},    {"<i2", kDLInt, 16},   {"<i4", kDLInt, 32},  {"<i8", kDLInt, 64},
    {"|u1", kDLUInt, 8},   {"<u2", kDLUInt, 16},  {"<u4", kDLUInt, 32}, {"<u8", kDLUInt, 64},
    {"|b1", kDLBool, 8},
};

const char* npy_descr(DLDataType dtype) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; ++i)
        if (DTYPES[i].code == dtype.code && DTYPES[i].bits == dtype.bits && dtype.lanes == 1)
            return DTYPES[i].descr;
    return NULL;
}

/* The value of 'key' in the header dict: a pointer just after "'key':" and spaces. */
static const char* field(const char* header, const char* key) {
    char pattern[32];
    snprintf(pattern, sizeof pattern, "'%s':", key);
    const char* p = strstr(header, pattern);
    if (p == NULL) return NULL;
    p += strlen(pattern);
    while (*p == ' ') ++p;
    return p;
}

int npy_read(const char* path, npy_array* a, char* err, size_t err_size) {
    memset(a, 0, sizeof *a);
    FILE* f = fopen(path, "rb");
    if (f == NULL) return fail(err, err_size, "%s: %s", path, strerror(errno));
    unsigned char pre[10];
    char* header = NULL;
    int rc = -1;
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        fail(err, err_size, "%s: not a .npy file (no \\x93NUMPY magic)", path);
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char l[4];
        if (fread(l, 1, 4, f) != 4) goto truncated;
        hlen = (size_t)l[0] | (size_t)l[1] << 8 | (size_t)l[2] << 16 | (size_t)l[3] << 24;
    } else {
        fail(err, err_size, "%s: .npy format version %d is not supported", path, pre[6]);
        goto done;
    }
    if (hlen > (1u << 20)) {
        fail(err, err_size, "%s: a header of %zu bytes is too long", path, hlen);
        goto done;
    }
    header = (char*)malloc(hlen + 1);
    if (header == NULL || fread(header, 1, hlen, f) != hlen) goto truncated;
    header[hlen] = 0;
    const char* descr = field(header, "descr");
    const char* order = field(header, "fortran_order");
    const char* shape = field(header, "shape");
    if (descr == NULL || order == NULL || shape == NULL || *descr != '\'' || *shape != '(') {
        fail(err, err_size, "%s: malformed header %s", path, header);
        goto done;
    }
    if (strncmp(order, "False", 5) != 0) {
        fail(err, err_size, "%s: Fortran order; save a C-order array", path);
        goto done;
    }
    int found = 0;
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; ++i) {
        size_t n = strlen(DTYPES[i].descr);
        int same = strncmp(descr + 1, DTYPES[i].descr, n) == 0 && descr[1 + n] == '\'';
        /* '<' and '|' are the same for one-byte types ("|i1" == "<i1") */
        if (!same && DTYPES[i].bits == 8 && strncmp(descr + 2, DTYPES[i].descr + 1, n - 1) == 0
                && (descr[1] == '<' || descr[1] == '|') && descr[n + 1] == '\'')
            same = 1;
        if (same) {
            a->dtype.code = DTYPES[i].code;
            a->dtype.bits = DTYPES[i].bits;
            a->dtype.lanes = 1;
            found = 1;
            break;
        }
    }
    if (!found) {
        fail(err, err_size, "%s: dtype %.8s is not supported (little-endian numbers and "
             "bool only)", path, descr);
        goto done;
    }
    size_t count = 1;
    const char* p = shape + 1;
    while (*p != ')') {
        while (*p == ' ' || *p == ',') ++p;
        if (*p == ')') break;
        char* end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || a->ndim == NPY_MAX_DIMS) {
            fail(err, err_size, "%s: malformed shape in %s", path, header);
            goto done;
        }
        a->shape[a->ndim++] = d;
        count *= (size_t)d;
        p = end;
    }
    a->nbytes = count * (a->dtype.bits / 8);
    if (posix_memalign(&a->data, 64, a->nbytes > 0 ? a->nbytes : 64) != 0) {
        a->data = NULL;
        fail(err, err_size, "%s: out of memory (%zu bytes)", path, a->nbytes);
        goto done;
    }
    if (fread(a->data, 1, a->nbytes, f) != a->nbytes) goto truncated;
    rc = 0;
    goto done;
truncated:
    fail(err, err_size, "%s: the file ends early", path);
done:
    free(header);
    fclose(f);
    if (rc != 0) npy_free(a);
    return rc;
}

int npy_write(const char* path, const DLTensor* t, char* err, size_t err_size) {
    const char* descr = npy_descr(t->dtype);
    if (descr == NULL) return fail(err, err_size, "%s: dtype (code %d, bits %d) has no .npy "
                                   "descr", path, t->dtype.code, t->dtype.bits);
    char shape[512] = "";
    size_t count = 1, used = 0;
    for (int i = 0; i < t->ndim; ++i) {
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%lld,%s",
                                 (long long)t->shape[i], i + 1 < t->ndim ? " " : "");
        if (used >= sizeof shape) return fail(err, err_size, "%s: shape too long", path);
        count *= (size_t)t->shape[i];
    }
    if (t->ndim > 1) shape[used - 1] = 0;   /* "(2, 3)": no trailing comma */
    char header[640];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, "
                     "'shape': (%s), }", descr, shape);
    int total = 10 + n + 1;                   /* magic, version, length, dict, newline */
    int pad = (64 - total % 64) % 64;
    if (n + pad + 1 >= (int)sizeof header) return fail(err, err_size, "%s: header too long",
                                                       path);
    memset(header + n, ' ', (size_t)pad);
    header[n + pad] = '\n';
    const int hlen = n + pad + 1;
    FILE* f = fopen(path, "wb");
    if (f == NULL) return fail(err, err_size, "%s: %s", path, strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                             (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    size_t nbytes = count * (t->dtype.bits / 8);
    const char* data = (const char*)t->data + t->byte_offset;
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)hlen, f) == (size_t)hlen
             && fwrite(data, 1, nbytes, f) == nbytes;
    if (fclose(f) != 0) ok = 0;
    return ok ? 0 : fail(err, err_size, "%s: write failed: %s", path, strerror(errno));
}

void npy_free(npy_array* a) {
    free(a->data);
    a->data = NULL;
}
