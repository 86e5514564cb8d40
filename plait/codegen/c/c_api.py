"""The C API of a model exported as a library: its header and the C file behind it.

:class:`ApiModel` describes what a library exported with :func:`plait.export_library`
exposes: the model's inputs and outputs (names, dtypes, shapes whose dimensions may be
symbolic, with their ranges), the entry point that runs it (:mod:`.entry`) and where
its weights are (embedded in the library, or in a side file mapped at load time).
:func:`emit_api` writes ``<name>.h`` and ``<name>_api.c`` for it; the header documents
the API (docs/c_api.md is the guide).  Every function is prefixed with the model's name,
so that several models link into one program; the types they share (``plait_options``,
``plait_tensor_info``, the status codes) are defined once under an include guard.

The generated C checks every argument (NULL pointers, device, dtype, rank, shape, the
ranges of symbolic sizes, strides, the size of a caller's output) before it calls the
entry point, and returns a status code with a message; nothing in it calls Python.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from plait.errors import PlaitError
from plait.ir import symbolic as sym

from .entry import EntryProgram

WEIGHTS_MAGIC = b"PLAITWTS"
"""The first 8 bytes of a weights side file."""

WEIGHTS_HEADER = 64
"""The bytes of a weights file's header (magic, version, data size, model id, zeros)."""

WEIGHTS_ALIGN = 64
"""The alignment of each constant inside the weights."""

# dtype -> (DLDataTypeCode, bits)
_DL_DTYPES = {
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64),
    "float16": (2, 16), "float32": (2, 32), "float64": (2, 64),
    "bfloat16": (4, 16), "bool": (6, 8),
}

STATUS_CODES: tuple[tuple[str, str], ...] = (
    ("PLAIT_OK", "success"),
    ("PLAIT_ERR_NULL_POINTER", "a pointer argument (or a tensor's data or shape) is NULL"),
    ("PLAIT_ERR_ARGUMENT_COUNT", "the number of input or output tensors is wrong"),
    ("PLAIT_ERR_DEVICE", "a tensor is not on the CPU (kDLCPU)"),
    ("PLAIT_ERR_DTYPE", "a tensor's dtype is not the model's"),
    ("PLAIT_ERR_RANK", "a tensor's number of dimensions is not the model's"),
    ("PLAIT_ERR_SHAPE", "a tensor's shape does not match the model's"),
    ("PLAIT_ERR_SIZE_RANGE", "a symbolic size is outside its range"),
    ("PLAIT_ERR_LAYOUT", "a tensor is not compact row-major or not aligned to its dtype"),
    ("PLAIT_ERR_OUTPUT_TOO_SMALL", "a caller-provided output holds fewer elements than the "
                                   "result"),
    ("PLAIT_ERR_WEIGHTS", "the weights file is missing, unreadable or not this model's"),
    ("PLAIT_ERR_OUT_OF_MEMORY", "memory could not be allocated"),
    ("PLAIT_ERR_BUSY", "the instance is running a call on another thread"),
    ("PLAIT_ERR_KERNEL", "a kernel failed (e.g. an index out of range)"),
    ("PLAIT_ERR_OPTIONS", "an option is invalid"),
)
"""The status codes of the C API, in order (their values are the indices)."""


class CApiError(PlaitError, ValueError):
    """A model whose C API cannot be written (a size the inputs do not determine, an
    unsupported dtype); the message names the tensor and the reason."""


@dataclass(frozen=True)
class ApiTensor:
    """An input or output of the API: ``name``, ``shape`` (ints, names, size
    expressions) and ``dtype``."""

    name: str
    shape: tuple[Any, ...]
    dtype: str


@dataclass(frozen=True)
class ApiModel:
    """What an exported library exposes.

    ``program`` is the entry point, ``entry_symbol`` its C symbol; ``inputs`` are its
    first parameters in order; ``outputs[i]`` is the entry parameter
    ``output_params[i]``; ``constants`` are the byte offsets (in the weights) of the
    entry's constant parameters, in order; ``ranges`` the symbolic sizes' inclusive
    ``(min, max or None)``; ``embedded``: the weights are in the library (else in a
    side file); ``model_id`` (16 hex digits) identifies the weights."""

    name: str
    program: EntryProgram
    entry_symbol: str
    inputs: tuple[ApiTensor, ...]
    outputs: tuple[ApiTensor, ...]
    output_params: tuple[int, ...]
    constants: tuple[int, ...]
    weights_size: int
    embedded: bool
    model_id: str
    ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)


def dl_dtype(dtype: str, where: str) -> tuple[int, int]:
    """The DLPack ``(code, bits)`` of a dtype; :class:`CApiError` when DLPack has none."""
    got = _DL_DTYPES.get(dtype)
    if got is None:
        raise CApiError(f"{where}: dtype {dtype} has no DLPack type code")
    return got


def _c_str(text: str) -> str:
    return json.dumps(text)


def _cmt(text: str) -> str:
    return text.replace("*/", "* /")


def dl_bounds(d: Any, ranges: dict[str, tuple[int, int | None]]) -> tuple[int, int]:
    """The range of a size (a name or an expression) as the API gives it: ``(min, max)``,
    ``max`` -1 when unbounded."""
    lo, hi = sym.bounds(d, ranges)
    lo_i = int(lo) if lo != float("-inf") else 0
    hi_i = int(hi) if hi != float("inf") else -1
    return max(lo_i, 0), hi_i


def emit_common_header() -> str:
    """``plait_c_api.h``: the types every exported library shares (status codes, options,
    tensor descriptions) and :c:type:`plait_api`, the table of a library's functions
    that ``plait_api_load`` fills from a ``dlopen`` ed library (any model's)."""
    codes = "\n".join(f"    {name} = {i},{' ' * max(1, 28 - len(name))}/* {_cmt(doc)} */"
                      for i, (name, doc) in enumerate(STATUS_CODES))
    fields = "\n".join(f"    {ret} (*{fn})({args});" for fn, ret, args in _API_SIGNATURES)
    loads = "\n".join(
        f"    if ((*(void**)&api->{fn} = dlsym(handle, plait_api_symbol(sym, sizeof sym, "
        f"name, \"{fn}\"))) == NULL) return -1;" for fn, _, _ in _API_SIGNATURES)
    return f"""\
/* plait_c_api.h: the types shared by every C library plait exports
 * (plait.export_library), and the table of a library's functions for callers that
 * dlopen any model's library.  Generated by plait (plait.codegen.c.c_api). */
#ifndef PLAIT_C_API_H
#define PLAIT_C_API_H

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"

#ifdef __cplusplus
extern "C" {{
#endif

/* Status codes: every function that can fail returns one; 0 is success. */
typedef enum plait_status {{
{codes}
}} plait_status;

/* Options of <name>_create: fill with <name>_default_options, then set fields. */
typedef struct plait_options {{
    uint32_t struct_size;      /* sizeof(plait_options): set by <name>_default_options */
    int32_t num_threads;       /* threads of this instance's calls: 0 = the library's
                                  default (PLAIT_NUM_THREADS, else OMP_NUM_THREADS, else
                                  the CPUs); n > 0 caps them at n */
    const char* weights_path;  /* a library whose weights are in a side file: its path
                                  (NULL: <name>.weights next to the library); ignored when
                                  the weights are embedded */
}} plait_options;

/* One dimension of an input or output.  size >= 0: a static size (name NULL).
 * size == -1: symbolic; name is the size's name or expression ("batch", "2*seq"),
 * min..max its range (max == -1: unbounded). */
typedef struct plait_dim_info {{
    int64_t size;
    const char* name;
    int64_t min;
    int64_t max;
}} plait_dim_info;

/* An input or output: its name, DLPack dtype, rank and dimensions. */
typedef struct plait_tensor_info {{
    const char* name;
    DLDataType dtype;
    int32_t ndim;
    const plait_dim_info* dims;
}} plait_tensor_info;

/* A library's functions by pointer (the instance as void*): what a caller that
 * dlopens any model's library uses.  The library's own header (<name>.h) declares
 * them as <name>_<function>, documented there. */
typedef struct plait_api {{
{fields}
}} plait_api;

#ifdef PLAIT_API_LOADER
#include <dlfcn.h>
#include <stdio.h>

static inline const char* plait_api_symbol(char* buf, size_t size, const char* name,
                                           const char* fn) {{
    snprintf(buf, size, "%s_%s", name, fn);
    return buf;
}}

/* Fill api from a dlopen handle of lib<name>.so (its model's name is what the library's
 * plait_library_name() returns); 0, or -1 when a function is missing. */
static inline int plait_api_load(void* handle, plait_api* api, const char** model_name) {{
    char sym[256];
    const char* (*library_name)(void);
    *(void**)&library_name = dlsym(handle, "plait_library_name");
    if (library_name == NULL) return -1;
    const char* name = library_name();
    if (model_name != NULL) *model_name = name;
{loads}
    return 0;
}}
#endif /* PLAIT_API_LOADER */

#ifdef __cplusplus
}}
#endif
#endif /* PLAIT_C_API_H */
"""


_API_SIGNATURES: tuple[tuple[str, str, str], ...] = (
    ("num_inputs", "int32_t", "void"),
    ("num_outputs", "int32_t", "void"),
    ("input_info", "const plait_tensor_info*", "int32_t index"),
    ("output_info", "const plait_tensor_info*", "int32_t index"),
    ("default_options", "void", "plait_options* options"),
    ("create", "int32_t", "const plait_options* options, void** model, char* error, "
                          "size_t error_size"),
    ("destroy", "void", "void* model"),
    ("output_shapes", "int32_t", "void* model, const DLTensor* inputs, int32_t num_inputs, "
                                 "int64_t* const* shapes, int32_t num_outputs"),
    ("run", "int32_t", "void* model, const DLTensor* inputs, int32_t num_inputs, "
                       "DLTensor* outputs, int32_t num_outputs"),
    ("run_alloc", "int32_t", "void* model, const DLTensor* inputs, int32_t num_inputs, "
                             "DLManagedTensor** outputs, int32_t num_outputs"),
    ("last_error", "const char*", "const void* model"),
    ("status_name", "const char*", "int32_t status"),
)
"""The API's functions: name (after ``<name>_``), return type, parameters (the
instance as ``void*``)."""


def emit_header(model: ApiModel) -> str:
    """The public header ``<name>.h``."""
    n = model.name
    guard = f"PLAIT_MODEL_{n.upper()}_H"

    def describe(ts: tuple[ApiTensor, ...]) -> str:
        return "\n".join(
            f" *   {i}: {t.name}: {t.dtype}[{', '.join(str(d) for d in t.shape)}]"
            for i, t in enumerate(ts)) or " *   (none)"

    ranges = ", ".join(f"{k} in [{lo}, {'inf' if hi is None else hi}]"
                       for k, (lo, hi) in sorted(model.ranges.items())) or "none"
    where = ("embedded in the library" if model.embedded else
             f"in the side file {n}.weights (mapped at create)")
    return f"""\
/* {n}.h: the C API of the model {n!r}, exported by plait (plait.export_library).
 *
 * Inputs:
{_cmt(describe(model.inputs))}
 * Outputs:
{_cmt(describe(model.outputs))}
 * Ranges of the symbolic sizes: {_cmt(ranges)}.  Weights: {where}.
 *
 * Use (docs/c_api.md in plait's repository is the guide):
 *
 *     plait_options opt;
 *     {n}_default_options(&opt);
 *     opt.num_threads = 2;
 *     {n}_model* m = NULL;
 *     char err[256];
 *     if ({n}_create(&opt, &m, err, sizeof err) != PLAIT_OK) {{ puts(err); return 1; }}
 *     DLTensor in[{len(model.inputs)}] = {{...}};        (CPU, compact row-major)
 *     DLManagedTensor* out[{len(model.outputs)}];
 *     if ({n}_run_alloc(m, in, {len(model.inputs)}, out, {len(model.outputs)}) != PLAIT_OK)
 *         puts({n}_last_error(m));
 *     ... out[i]->dl_tensor ...; out[i]->deleter(out[i]);
 *     {n}_destroy(m);
 *
 * Threads: an instance runs one call at a time; a call made while another thread's
 * call on the same instance runs returns PLAIT_ERR_BUSY (its message is not written).
 * Use one instance per thread: instances share nothing but the library's thread pool
 * and read-only weights.  Any number of instances may exist in one process.
 *
 * Link: -l{n} -lm -lpthread -ldl (the static library needs the same).  The shared
 * library stays loaded after dlclose (-z nodelete): its thread pool's idle workers
 * exit on their own, never inside unmapped code. */
#ifndef {guard}
#define {guard}

#include <stddef.h>
#include <stdint.h>

#include "plait_c_api.h"

#ifdef __cplusplus
extern "C" {{
#endif

/* An instance of the model: its workspace, weights mapping, thread count and last
 * error message. */
typedef struct {n}_model {n}_model;

/* The number of inputs and outputs, and each one's description (NULL when index is out
 * of range).  Static data: no instance needed. */
int32_t {n}_num_inputs(void);
int32_t {n}_num_outputs(void);
const plait_tensor_info* {n}_input_info(int32_t index);
const plait_tensor_info* {n}_output_info(int32_t index);

/* Fill options with the defaults (struct_size set, num_threads 0, weights_path NULL). */
void {n}_default_options(plait_options* options);

/* Create an instance (options NULL: the defaults).  On failure *model is NULL and, when
 * error is not NULL, the message is written there (at most error_size bytes, ending
 * in 0).  Errors: PLAIT_ERR_NULL_POINTER (model), PLAIT_ERR_OPTIONS, PLAIT_ERR_WEIGHTS,
 * PLAIT_ERR_OUT_OF_MEMORY. */
int32_t {n}_create(const plait_options* options, {n}_model** model, char* error,
                   size_t error_size);

/* Destroy an instance (NULL: nothing).  Output tensors made by {n}_run_alloc stay valid
 * until their deleters are called. */
void {n}_destroy({n}_model* model);

/* The output shapes of a call on these inputs (shapes[i] receives output i's
 * {n}_output_info(i)->ndim sizes), checking the inputs as {n}_run does; their data is
 * not read and may be NULL. */
int32_t {n}_output_shapes({n}_model* model, const DLTensor* inputs, int32_t num_inputs,
                          int64_t* const* shapes, int32_t num_outputs);

/* Run the model on inputs (num_inputs tensors, in the order of {n}_input_info) into
 * caller-provided outputs: each outputs[i] has data, the output's dtype and exactly
 * its shape ({n}_output_shapes), compact row-major (strides NULL or compact), on kDLCPU.
 * Returns PLAIT_OK or an error code, with the message in {n}_last_error(model). */
int32_t {n}_run({n}_model* model, const DLTensor* inputs, int32_t num_inputs,
                DLTensor* outputs, int32_t num_outputs);

/* Run the model into outputs the library allocates: outputs[i] receives a
 * DLManagedTensor (64-byte aligned data) that the caller frees with
 * outputs[i]->deleter(outputs[i]).  On failure every outputs[i] is NULL. */
int32_t {n}_run_alloc({n}_model* model, const DLTensor* inputs, int32_t num_inputs,
                      DLManagedTensor** outputs, int32_t num_outputs);

/* The message of the instance's last failed call ("" after a success). */
const char* {n}_last_error(const {n}_model* model);

/* The name of a status code ("PLAIT_ERR_SHAPE"), or "unknown status". */
const char* {n}_status_name(int32_t status);

#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""


def weights_header(size: int, model_id: str) -> bytes:
    """The 64-byte header of a weights side file: magic, format version 1, the data's
    size and the model id (little-endian), zeros."""
    head = (WEIGHTS_MAGIC + (1).to_bytes(8, "little") + size.to_bytes(8, "little")
            + bytes.fromhex(model_id))
    return head + bytes(WEIGHTS_HEADER - len(head))


def weights_asm(name: str, file_name: str) -> str:
    """An assembler file embedding ``file_name`` as the hidden symbol
    ``<name>_weights_data`` (64-byte aligned, read-only)."""
    sym_name = f"{name}_weights_data"
    return (f"\t.section .rodata.{sym_name},\"a\"\n"
            f"\t.balign {WEIGHTS_ALIGN}\n"
            f"\t.globl {sym_name}\n"
            f"\t.hidden {sym_name}\n"
            f"\t.type {sym_name}, %object\n"
            f"{sym_name}:\n"
            f"\t.incbin \"{file_name}\"\n"
            f"\t.size {sym_name}, .-{sym_name}\n"
            f"\t.byte 0\n"
            "\t.section .note.GNU-stack,\"\",%progbits\n")


__all__ = ["ApiModel", "ApiTensor", "CApiError", "STATUS_CODES", "WEIGHTS_ALIGN",
           "WEIGHTS_HEADER", "WEIGHTS_MAGIC", "dl_bounds", "dl_dtype", "emit_common_header",
           "emit_header", "weights_asm", "weights_header"]
