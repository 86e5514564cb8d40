/* npy.h: a small reader and writer of NumPy's .npy files (format versions 1.0-3.0,
 * C order, little-endian or single-byte dtypes), for examples/c_api/main.c.
 *
 * The format: the magic "\x93NUMPY", two version bytes, the header's length (2 bytes in
 * version 1, 4 in versions 2 and 3, little-endian), the header (a Python dict literal:
 * 'descr', 'fortran_order', 'shape', padded with spaces and a newline so the data starts
 * at a multiple of 64 bytes), then the data. */
#ifndef PLAIT_EXAMPLE_NPY_H
#define PLAIT_EXAMPLE_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

#define NPY_MAX_DIMS 32

typedef struct npy_array {
    DLDataType dtype;
    int32_t ndim;
    int64_t shape[NPY_MAX_DIMS];
    void* data;      /* 64-byte aligned; free with npy_free */
    size_t nbytes;
} npy_array;

/* Read path into a; returns 0, or -1 with a message in err (err_size bytes). */
int npy_read(const char* path, npy_array* a, char* err, size_t err_size);

/* Write a tensor (compact, C order) to path; returns 0, or -1 with a message in err. */
int npy_write(const char* path, const DLTensor* t, char* err, size_t err_size);

void npy_free(npy_array* a);

/* The .npy 'descr' of a DLPack dtype ("<f4"), or NULL when .npy has none. */
const char* npy_descr(DLDataType dtype);

#endif
