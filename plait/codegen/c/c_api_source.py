"""The C file behind a model library's API (``<name>_api.c``; :mod:`.c_api` describes
the model and writes the headers).

:func:`emit_source` writes, for an :class:`~plait.codegen.c.c_api.ApiModel`: the
static descriptions of the inputs and outputs; the checks of a call's tensors (device,
dtype, rank, shape, layout, alignment; the symbolic sizes bound from the inputs'
shapes, checked against each other, their ranges and the size expressions); the output
shapes and the workspace size as C over those sizes; ``run`` (caller-provided outputs)
and ``run_alloc`` (``DLManagedTensor`` s the library allocates) around the one call of
the entry point; ``create`` (the weights embedded, or a side file mapped read-only and
checked against the model id) and ``destroy``.  An instance runs one call at a time
(an atomic flag; a second thread's call returns ``PLAIT_ERR_BUSY``).
"""

from __future__ import annotations

import json
from typing import Any

from .c_api import STATUS_CODES, WEIGHTS_HEADER, ApiModel, CApiError, dl_bounds, dl_dtype
from .sizes import C_PRELUDE, UnboundSize, c_dim


def _c_str(text: str) -> str:
    return json.dumps(text)


def _cmt(text: str) -> str:
    return text.replace("*/", "* /")


class _Sizes:
    """The C variables of the symbolic sizes: bound from the inputs' shapes."""

    def __init__(self, model: ApiModel) -> None:
        self.model = model
        names, exprs = model.program.size_vars()
        self.names = names
        self.exprs = exprs
        self.cnames = {d: f"s[{k}]" for k, d in enumerate(names)}
        bound: set[str] = set()
        for t in model.inputs:
            bound.update(d for d in t.shape if type(d) is str)
        self.bound = bound
        free = [d for d in names if d not in bound]
        if free:
            raise CApiError(f"model {model.name!r}: the size(s) {', '.join(free)} appear only "
                            "in outputs or the workspace, so no input determines them")

    def c(self, d: Any, what: str) -> str:
        try:
            return c_dim(d, self.cnames)
        except UnboundSize as e:
            raise CApiError(f"model {self.model.name!r}: {what} names the size {e}, which no "
                            "input binds") from None


def _info_tables(model: ApiModel) -> list[str]:
    n = model.name
    out: list[str] = []
    for kind, ts in (("input", model.inputs), ("output", model.outputs)):
        entries = []
        for i, t in enumerate(ts):
            code, bits = dl_dtype(t.dtype, f"{kind} {t.name!r}")
            dims = []
            for d in t.shape:
                if type(d) is int:
                    dims.append(f"{{{d}, NULL, {d}, {d}}}")
                else:
                    lo, hi = dl_bounds(d, model.ranges)
                    dims.append(f"{{-1, {_c_str(str(d))}, {lo}, {hi}}}")
            arr = f"{n}_{kind}{i}_dims"
            if dims:
                out.append(f"static const plait_dim_info {arr}[{len(dims)}] = "
                           f"{{{', '.join(dims)}}};")
            else:
                arr = "NULL"
            entries.append(f"{{{_c_str(t.name)}, {{{code}, {bits}, 1}}, {len(t.shape)}, {arr}}}")
        body = ", ".join(entries) or "{NULL, {0, 0, 0}, 0, NULL}"
        out.append(f"static const plait_tensor_info {n}_{kind}s[{max(len(ts), 1)}] = {{{body}}};")
    return out


def _bind_inputs(model: ApiModel, sizes: _Sizes) -> list[str]:
    """The C of ``check_inputs``: each input's device, dtype, rank, shape and layout;
    binds the sizes into s[] and checks their ranges and the expressions."""
    lines: list[str] = []
    first: dict[str, tuple[int, int]] = {}
    exprs: list[tuple[int, int, Any]] = []
    for i, t in enumerate(model.inputs):
        code, bits = dl_dtype(t.dtype, f"input {t.name!r}")
        lines.append(f"    st = check_tensor(m, &inputs[{i}], \"input\", {_c_str(t.name)}, "
                     f"{code}, {bits}, {len(t.shape)}, need_data);")
        lines.append("    if (st) return st;")
        for axis, d in enumerate(t.shape):
            got = f"inputs[{i}].shape[{axis}]"
            if type(d) is int:
                lines.append(f"    if ({got} != {d}) return fail(m, PLAIT_ERR_SHAPE, \"input "
                             f"'%s' dimension {axis} is %lld, the model takes {d}\", "
                             f"{_c_str(t.name)}, (long long){got});")
            elif type(d) is str and d not in first:
                first[d] = (i, axis)
                lines.append(f"    {sizes.cnames[d]} = {got};")
            elif type(d) is str:
                j, a = first[d]
                lines.append(
                    f"    if ({got} != {sizes.cnames[d]}) return fail(m, PLAIT_ERR_SHAPE, "
                    f"\"input '%s' dimension {axis} is %lld but the symbolic size "
                    f"'%s' is %lld (input '%s' dimension {a})\", {_c_str(t.name)}, "
                    f"(long long){got}, {_c_str(d)}, (long long){sizes.cnames[d]}, "
                    f"{_c_str(model.inputs[j].name)});")
            else:
                exprs.append((i, axis, d))
    for name, (i, axis) in first.items():
        lo, hi = model.ranges.get(name, (0, None))
        lo = max(int(lo), 0)
        cond = f"{sizes.cnames[name]} < {lo}"
        if hi is not None:
            cond += f" || {sizes.cnames[name]} > {int(hi)}"
        rng = f"[{lo}, {'inf' if hi is None else hi}]"
        lines.append(f"    if ({cond}) return fail(m, PLAIT_ERR_SIZE_RANGE, \"input '%s' "
                     f"dimension {axis} is %lld, outside the range {rng} of the symbolic "
                     f"size '%s'\", {_c_str(model.inputs[i].name)}, "
                     f"(long long){sizes.cnames[name]}, {_c_str(name)});")
    for i, axis, d in exprs:
        t = model.inputs[i]
        want = sizes.c(d, f"input {t.name!r}")
        got = f"inputs[{i}].shape[{axis}]"
        lines.append(f"    if ({got} != {want}) return fail(m, PLAIT_ERR_SHAPE, \"input '%s' "
                     f"dimension {axis} is %lld but its size {_cmt(str(d))} is %lld\", "
                     f"{_c_str(t.name)}, (long long){got}, (long long)({want}));")
    return lines


_SOURCE_HEAD = r"""/* Generated by plait (plait.codegen.c.c_api): the C API of the model __N__. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE   /* dladdr */
#endif
#include "__N__.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NUM_INPUTS __NI__
#define NUM_OUTPUTS __NO__
#define NUM_PARAMS __NP__
#define NUM_SIZES __NS__
#define WEIGHTS_SIZE ((size_t)__WS__)
#define WEIGHTS_HEADER __WH__

extern int32_t __ENTRY__(void* const* plait_args, const int64_t* plait_sizes);
extern int plait_set_thread_cap(int n);
__WEIGHTS_DECL__
struct __N___model {
    const unsigned char* weights;   /* the constants (embedded, or in the mapping) */
    void* mapping;                  /* the mapped weights file (NULL: embedded) */
    size_t mapping_size;
    unsigned char* workspace;       /* grown to the largest call's need, 64-byte aligned */
    size_t workspace_size;
    int num_threads;
    int busy;                       /* a call runs (atomic) */
    char error[512];
};

static int32_t fail(__N___model* m, int32_t status, const char* fmt, ...) {
    if (m != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->error, sizeof m->error, fmt, ap);
        va_end(ap);
    }
    return status;
}

static const char* const status_names[] = {__STATUS_NAMES__};

const char* __N___status_name(int32_t status) {
    if (status < 0 || status >= (int32_t)(sizeof status_names / sizeof status_names[0]))
        return "unknown status";
    return status_names[status];
}

static size_t dtype_bytes(int bits) { return (size_t)(bits / 8); }

/* The elements of a shape, or -1 when a size is negative or the count overflows. */
static int64_t numel(const int64_t* shape, int ndim) {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* A tensor's device, dtype, rank, shape pointer, layout and alignment (not its sizes). */
static int32_t check_tensor(__N___model* m, const DLTensor* t, const char* kind,
                            const char* name, int code, int bits, int ndim, int need_data) {
    if (t->device.device_type != kDLCPU)
        return fail(m, PLAIT_ERR_DEVICE, "%s '%s' is on device type %d, the library runs on "
                    "the CPU (kDLCPU = 1)", kind, name, (int)t->device.device_type);
    if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1)
        return fail(m, PLAIT_ERR_DTYPE, "%s '%s' has DLPack dtype (code %d, bits %d, lanes "
                    "%d), the model takes (code %d, bits %d, lanes 1)", kind, name,
                    (int)t->dtype.code, (int)t->dtype.bits, (int)t->dtype.lanes, code, bits);
    if (t->ndim != ndim)
        return fail(m, PLAIT_ERR_RANK, "%s '%s' has %d dimension(s), the model takes %d",
                    kind, name, (int)t->ndim, ndim);
    if (ndim > 0 && t->shape == NULL)
        return fail(m, PLAIT_ERR_NULL_POINTER, "%s '%s': its shape is NULL", kind, name);
    const int64_t count = ndim > 0 ? numel(t->shape, ndim) : 1;
    if (count < 0)
        return fail(m, PLAIT_ERR_SHAPE, "%s '%s': a size is negative or the element count "
                    "overflows", kind, name);
    if (need_data && count > 0 && t->data == NULL)
        return fail(m, PLAIT_ERR_NULL_POINTER, "%s '%s': its data is NULL", kind, name);
    if (t->strides != NULL && count > 0) {
        int64_t want = 1;
        for (int i = ndim - 1; i >= 0; --i) {
            if (t->shape[i] != 1 && t->strides[i] != want)
                return fail(m, PLAIT_ERR_LAYOUT, "%s '%s': stride %lld of dimension %d is "
                            "not compact row-major (%lld); pass a contiguous copy", kind,
                            name, (long long)t->strides[i], i, (long long)want);
            want *= t->shape[i];
        }
    }
    if (need_data && ((uintptr_t)t->data + (uintptr_t)t->byte_offset) % dtype_bytes(bits) != 0)
        return fail(m, PLAIT_ERR_LAYOUT, "%s '%s': its data (plus byte_offset) is not aligned "
                    "to its %d-byte elements", kind, name, bits / 8);
    return PLAIT_OK;
}

static void* tensor_data(const DLTensor* t) {
    return (void*)((char*)t->data + t->byte_offset);
}
"""


def emit_source(model: ApiModel) -> str:
    """The C file ``<name>_api.c`` implementing the header."""
    n = model.name
    prog = model.program
    sizes = _Sizes(model)
    n_in, n_out = len(model.inputs), len(model.outputs)
    ws = prog.workspace
    if model.embedded:
        wdecl = f"extern const unsigned char {n}_weights_data[];"
    else:
        wdecl = (f"static const unsigned char model_id[8] = {{"
                 f"{', '.join(f'0x{model.model_id[k:k + 2]}' for k in range(0, 16, 2))}}};")
    head = (_SOURCE_HEAD.replace("__N__", n).replace("__NI__", str(n_in))
            .replace("__NO__", str(n_out)).replace("__NP__", str(len(prog.params)))
            .replace("__NS__", str(max(len(sizes.names) + len(sizes.exprs), 1)))
            .replace("__WS__", str(model.weights_size))
            .replace("__WH__", str(WEIGHTS_HEADER)).replace("__ENTRY__", model.entry_symbol)
            .replace("__WEIGHTS_DECL__", wdecl)
            .replace("__STATUS_NAMES__", ", ".join(_c_str(c) for c, _ in STATUS_CODES)))
    lines = [head]
    if sizes.names or sizes.exprs:
        lines.append(C_PRELUDE)
    lines += _info_tables(model)
    lines.append(f"""
int32_t {n}_num_inputs(void) {{ return NUM_INPUTS; }}
int32_t {n}_num_outputs(void) {{ return NUM_OUTPUTS; }}
const plait_tensor_info* {n}_input_info(int32_t i) {{
    return i >= 0 && i < NUM_INPUTS ? &{n}_inputs[i] : NULL;
}}
const plait_tensor_info* {n}_output_info(int32_t i) {{
    return i >= 0 && i < NUM_OUTPUTS ? &{n}_outputs[i] : NULL;
}}
const char* {n}_last_error(const {n}_model* m) {{ return m != NULL ? m->error : ""; }}
""")
    # ---- binding the sizes and checking the inputs
    lines.append(f"/* Check the inputs; bind the sizes into s[] (the entry point's order). */\n"
                 f"static int32_t check_inputs({n}_model* m, const DLTensor* inputs, "
                 "int32_t num_inputs, int64_t* s, int need_data) {\n"
                 "    int32_t st;\n    (void)s;\n"
                 "    if (num_inputs != NUM_INPUTS) return fail(m, PLAIT_ERR_ARGUMENT_COUNT, "
                 "\"%d input(s) given, the model takes %d\", (int)num_inputs, NUM_INPUTS);\n"
                 "    if (NUM_INPUTS > 0 && inputs == NULL) return fail(m, "
                 "PLAIT_ERR_NULL_POINTER, \"inputs is NULL\");")
    lines += _bind_inputs(model, sizes)
    for d, var in sizes.exprs.items():
        k = len(sizes.names) + int(var.removeprefix("plait_ex"))
        lines.append(f"    s[{k}] = {sizes.c(d, 'a parameter of the entry point')};")
    lines += ["    return PLAIT_OK;", "}", ""]
    # ---- the output shapes and the workspace size
    lines.append("/* Output i's size along each axis (the sizes bound in s[]). */\n"
                 "static void output_shape(const int64_t* s, int i, int64_t* shape) {\n"
                 "    (void)s; (void)shape;\n    switch (i) {")
    for i, t in enumerate(model.outputs):
        dims = "; ".join(f"shape[{a}] = {sizes.c(d, f'output {t.name!r}')}"
                         for a, d in enumerate(t.shape))
        lines.append(f"    case {i}: {dims + ';' if dims else ''} break;")
    lines += ["    default: break;", "    }", "}", ""]
    ws_bytes = sizes.c(prog.params[ws][1][0], "the workspace") if ws is not None else "0"
    lines.append(f"static size_t workspace_bytes(const int64_t* s) {{ (void)s; "
                 f"return (size_t)({ws_bytes}); }}\n")
    out_dtypes = [dl_dtype(t.dtype, t.name) for t in model.outputs]
    const_args = "\n".join(
        f"    args[{n_in + k}] = (void*)(m->weights + {off});"
        for k, off in enumerate(model.constants))
    out_args = "\n".join(f"    args[{p}] = out[{i}];" for i, p in enumerate(model.output_params))
    ws_arg = f"    args[{ws}] = m->workspace;" if ws is not None else ""
    bits_list = ", ".join(str(b) for _, b in out_dtypes) or "0"
    codes_list = ", ".join(str(c) for c, _ in out_dtypes) or "0"
    ranks = ", ".join(str(len(t.shape)) for t in model.outputs) or "0"
    lines.append(_RUN_TEMPLATE.replace("__N__", n).replace("__ENTRY__", model.entry_symbol)
                 .replace("__IN_ARGS__", "\n".join(
                     f"    args[{i}] = tensor_data(&inputs[{i}]);" for i in range(n_in)))
                 .replace("__CONST_ARGS__", const_args).replace("__WS_ARG__", ws_arg)
                 .replace("__OUT_ARGS__", out_args).replace("__OUT_BITS__", bits_list)
                 .replace("__OUT_CODES__", codes_list).replace("__OUT_RANKS__", ranks))
    lines.append(_create_source(model))
    return "\n".join(lines) + "\n"


_RUN_TEMPLATE = r"""
static const int out_bits[] = {__OUT_BITS__};
static const int out_codes[] = {__OUT_CODES__};
static const int out_ranks[] = {__OUT_RANKS__};

static int take(__N___model* m) {
    int idle = 0;
    return __atomic_compare_exchange_n(&m->busy, &idle, 1, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static void release(__N___model* m) { __atomic_store_n(&m->busy, 0, __ATOMIC_RELEASE); }

/* The workspace grown to at least n bytes. */
static int32_t reserve(__N___model* m, size_t n) {
    if (n <= m->workspace_size) return PLAIT_OK;
    void* p = NULL;
    if (posix_memalign(&p, 64, n) != 0 || p == NULL)
        return fail(m, PLAIT_ERR_OUT_OF_MEMORY, "cannot allocate a workspace of %zu bytes", n);
    free(m->workspace);
    m->workspace = (unsigned char*)p;
    m->workspace_size = n;
    return PLAIT_OK;
}

/* Call the entry point on checked inputs, the sizes s and the output pointers. */
static int32_t call_entry(__N___model* m, const DLTensor* inputs, int64_t* s, void** out) {
    int32_t st = reserve(m, workspace_bytes(s));
    if (st) return st;
    void* args[NUM_PARAMS > 0 ? NUM_PARAMS : 1];
    (void)inputs;
__IN_ARGS__
__CONST_ARGS__
__WS_ARG__
__OUT_ARGS__
    const int old = plait_set_thread_cap(m->num_threads);
    const int32_t status = __ENTRY__(args, s);
    plait_set_thread_cap(old);
    if (status != 0)
        return fail(m, PLAIT_ERR_KERNEL, "the model's kernels failed with status %d (2: an "
                    "index out of range in a gather or take)", (int)status);
    return PLAIT_OK;
}

int32_t __N___output_shapes(__N___model* m, const DLTensor* inputs, int32_t num_inputs,
                            int64_t* const* shapes, int32_t num_outputs) {
    if (m == NULL) return PLAIT_ERR_NULL_POINTER;
    if (!take(m)) return PLAIT_ERR_BUSY;
    int64_t s[NUM_SIZES] = {0};
    int32_t st = check_inputs(m, inputs, num_inputs, s, 0);
    if (st == PLAIT_OK && num_outputs != NUM_OUTPUTS)
        st = fail(m, PLAIT_ERR_ARGUMENT_COUNT, "room for %d output shape(s) given, the model "
                  "has %d outputs", (int)num_outputs, NUM_OUTPUTS);
    if (st == PLAIT_OK && NUM_OUTPUTS > 0 && shapes == NULL)
        st = fail(m, PLAIT_ERR_NULL_POINTER, "shapes is NULL");
    for (int i = 0; st == PLAIT_OK && i < NUM_OUTPUTS; ++i) {
        if (shapes[i] == NULL && out_ranks[i] > 0)
            st = fail(m, PLAIT_ERR_NULL_POINTER, "shapes[%d] is NULL", i);
        else
            output_shape(s, i, shapes[i]);
    }
    if (st == PLAIT_OK) m->error[0] = 0;
    release(m);
    return st;
}

int32_t __N___run(__N___model* m, const DLTensor* inputs, int32_t num_inputs,
                  DLTensor* outputs, int32_t num_outputs) {
    if (m == NULL) return PLAIT_ERR_NULL_POINTER;
    if (!take(m)) return PLAIT_ERR_BUSY;
    int64_t s[NUM_SIZES] = {0};
    void* out[NUM_OUTPUTS > 0 ? NUM_OUTPUTS : 1];
    int32_t st = check_inputs(m, inputs, num_inputs, s, 1);
    if (st == PLAIT_OK && num_outputs != NUM_OUTPUTS)
        st = fail(m, PLAIT_ERR_ARGUMENT_COUNT, "%d output(s) given, the model has %d",
                  (int)num_outputs, NUM_OUTPUTS);
    if (st == PLAIT_OK && NUM_OUTPUTS > 0 && outputs == NULL)
        st = fail(m, PLAIT_ERR_NULL_POINTER, "outputs is NULL");
    for (int i = 0; st == PLAIT_OK && i < NUM_OUTPUTS; ++i) {
        const plait_tensor_info* info = &__N___outputs[i];
        int64_t want[16];
        int64_t* shape = out_ranks[i] <= 16 ? want : (int64_t*)malloc(sizeof(int64_t)
                                                                        * out_ranks[i]);
        if (shape == NULL) {
            st = fail(m, PLAIT_ERR_OUT_OF_MEMORY, "cannot allocate a shape");
            break;
        }
        output_shape(s, i, shape);
        st = check_tensor(m, &outputs[i], "output", info->name, out_codes[i], out_bits[i],
                          out_ranks[i], 1);
        if (st == PLAIT_OK) {
            const int64_t need = numel(shape, out_ranks[i]);
            const int64_t have = numel(outputs[i].shape, out_ranks[i]);
            for (int a = 0; a < out_ranks[i]; ++a) {
                if (outputs[i].shape[a] == shape[a]) continue;
                st = have < need
                    ? fail(m, PLAIT_ERR_OUTPUT_TOO_SMALL, "output '%s' holds %lld element(s), "
                           "the result has %lld (dimension %d is %lld, the result's %lld)",
                           info->name, (long long)have, (long long)need, a,
                           (long long)outputs[i].shape[a], (long long)shape[a])
                    : fail(m, PLAIT_ERR_SHAPE, "output '%s' dimension %d is %lld, the result's "
                           "is %lld", info->name, a, (long long)outputs[i].shape[a],
                           (long long)shape[a]);
                break;
            }
            if (st == PLAIT_OK && need > 0 && outputs[i].data == NULL)
                st = fail(m, PLAIT_ERR_NULL_POINTER, "output '%s': its data is NULL",
                          info->name);
        }
        if (shape != want) free(shape);
        out[i] = st == PLAIT_OK ? tensor_data(&outputs[i]) : NULL;
    }
    if (st == PLAIT_OK) st = call_entry(m, inputs, s, out);
    if (st == PLAIT_OK) m->error[0] = 0;
    release(m);
    return st;
}

typedef struct {
    DLManagedTensor managed;
    int64_t shape[];
} owned_tensor;

static void owned_delete(DLManagedTensor* t) {
    if (t == NULL) return;
    free(t->dl_tensor.data);
    free(t);
}

int32_t __N___run_alloc(__N___model* m, const DLTensor* inputs, int32_t num_inputs,
                        DLManagedTensor** outputs, int32_t num_outputs) {
    if (outputs != NULL && num_outputs == NUM_OUTPUTS)
        for (int i = 0; i < NUM_OUTPUTS; ++i) outputs[i] = NULL;
    if (m == NULL) return PLAIT_ERR_NULL_POINTER;
    if (!take(m)) return PLAIT_ERR_BUSY;
    int64_t s[NUM_SIZES] = {0};
    void* out[NUM_OUTPUTS > 0 ? NUM_OUTPUTS : 1];
    owned_tensor* made[NUM_OUTPUTS > 0 ? NUM_OUTPUTS : 1] = {0};
    int32_t st = check_inputs(m, inputs, num_inputs, s, 1);
    if (st == PLAIT_OK && num_outputs != NUM_OUTPUTS)
        st = fail(m, PLAIT_ERR_ARGUMENT_COUNT, "room for %d output(s) given, the model has %d",
                  (int)num_outputs, NUM_OUTPUTS);
    if (st == PLAIT_OK && NUM_OUTPUTS > 0 && outputs == NULL)
        st = fail(m, PLAIT_ERR_NULL_POINTER, "outputs is NULL");
    for (int i = 0; st == PLAIT_OK && i < NUM_OUTPUTS; ++i) {
        owned_tensor* t = (owned_tensor*)calloc(1, sizeof(owned_tensor)
                                                   + sizeof(int64_t) * (size_t)out_ranks[i]);
        if (t == NULL) {
            st = fail(m, PLAIT_ERR_OUT_OF_MEMORY, "cannot allocate output %d", i);
            break;
        }
        made[i] = t;
        output_shape(s, i, t->shape);
        const int64_t count = numel(t->shape, out_ranks[i]);
        const size_t nbytes = (size_t)count * dtype_bytes(out_bits[i]);
        void* data = NULL;
        if (count < 0 || posix_memalign(&data, 64, nbytes > 0 ? nbytes : 64) != 0) {
            st = fail(m, PLAIT_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for output %d",
                      nbytes, i);
            break;
        }
        DLTensor* d = &t->managed.dl_tensor;
        d->data = data;
        d->device.device_type = kDLCPU;
        d->device.device_id = 0;
        d->ndim = out_ranks[i];
        d->dtype.code = (uint8_t)out_codes[i];
        d->dtype.bits = (uint8_t)out_bits[i];
        d->dtype.lanes = 1;
        d->shape = t->shape;
        d->strides = NULL;
        d->byte_offset = 0;
        t->managed.manager_ctx = NULL;
        t->managed.deleter = owned_delete;
        out[i] = data;
    }
    if (st == PLAIT_OK) st = call_entry(m, inputs, s, out);
    for (int i = 0; i < NUM_OUTPUTS; ++i) {
        if (made[i] == NULL) continue;
        if (st == PLAIT_OK) outputs[i] = &made[i]->managed;
        else owned_delete(&made[i]->managed);
    }
    if (st == PLAIT_OK) m->error[0] = 0;
    release(m);
    return st;
}

void __N___default_options(plait_options* o) {
    if (o == NULL) return;
    memset(o, 0, sizeof *o);
    o->struct_size = (uint32_t)sizeof *o;
}

void __N___destroy(__N___model* m) {
    if (m == NULL) return;
    if (m->mapping != NULL) munmap(m->mapping, m->mapping_size);
    free(m->workspace);
    free(m);
}

static int32_t create_fail(char* error, size_t error_size, int32_t status, const char* fmt,
                           ...) {
    if (error != NULL && error_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(error, error_size, fmt, ap);
        va_end(ap);
    }
    return status;
}
"""


def _create_source(model: ApiModel) -> str:
    n = model.name
    if model.embedded:
        weights = f"    m->weights = {n}_weights_data;\n"
        loader = ""
    else:
        weights = ("    st = map_weights(m, o.weights_path, error, error_size);\n"
                   "    if (st) {\n        " + n + "_destroy(m);\n        return st;\n    }\n")
        loader = _MAP_TEMPLATE.replace("__N__", n)
    return loader + f"""
int32_t {n}_create(const plait_options* options, {n}_model** model, char* error,
                   size_t error_size) {{
    int32_t st = PLAIT_OK;
    (void)st;
    if (error != NULL && error_size > 0) error[0] = 0;
    if (model == NULL)
        return create_fail(error, error_size, PLAIT_ERR_NULL_POINTER, "model is NULL");
    *model = NULL;
    plait_options o;
    {n}_default_options(&o);
    if (options != NULL) {{
        if (options->struct_size < sizeof o)
            return create_fail(error, error_size, PLAIT_ERR_OPTIONS, "options->struct_size "
                               "is %u, expected %zu: fill options with {n}_default_options",
                               (unsigned)options->struct_size, sizeof o);
        o = *options;
    }}
    if (o.num_threads < 0)
        return create_fail(error, error_size, PLAIT_ERR_OPTIONS, "options->num_threads is "
                           "%d: give 0 (the default) or a positive count", (int)o.num_threads);
    {n}_model* m = ({n}_model*)calloc(1, sizeof *m);
    if (m == NULL)
        return create_fail(error, error_size, PLAIT_ERR_OUT_OF_MEMORY, "cannot allocate "
                           "the instance");
    m->num_threads = o.num_threads;
{weights}    *model = m;
    return PLAIT_OK;
}}
"""


_MAP_TEMPLATE = r"""
/* <dir of this library>/__N__.weights */
static int default_weights_path(char* buf, size_t size) {
    Dl_info info;
    if (dladdr((void*)&__N___create, &info) == 0 || info.dli_fname == NULL) return -1;
    const char* slash = strrchr(info.dli_fname, '/');
    const int dir = slash != NULL ? (int)(slash - info.dli_fname) + 1 : 0;
    const int n = snprintf(buf, size, "%.*s__N__.weights", dir, info.dli_fname);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

static uint64_t read_u64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

static int32_t map_weights(__N___model* m, const char* given, char* error, size_t error_size) {
    char path[4096];
    if (given == NULL) {
        if (default_weights_path(path, sizeof path) != 0)
            return create_fail(error, error_size, PLAIT_ERR_WEIGHTS, "cannot find where the "
                               "library is to look for __N__.weights: set "
                               "options.weights_path");
        given = path;
    }
    const int fd = open(given, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return create_fail(error, error_size, PLAIT_ERR_WEIGHTS, "cannot open the weights "
                           "file %s: %s (set options.weights_path to the __N__.weights "
                           "written with the library)", given, strerror(errno));
    struct stat sb;
    const size_t want = WEIGHTS_HEADER + WEIGHTS_SIZE;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != (uint64_t)want) {
        close(fd);
        return create_fail(error, error_size, PLAIT_ERR_WEIGHTS, "the weights file %s has "
                           "%lld bytes, the model's has %zu", given, (long long)sb.st_size,
                           want);
    }
    void* p = mmap(NULL, want, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return create_fail(error, error_size, PLAIT_ERR_WEIGHTS, "cannot map the weights "
                           "file %s: %s", given, strerror(errno));
    const unsigned char* h = (const unsigned char*)p;
    if (memcmp(h, "PLAITWTS", 8) != 0 || read_u64(h + 16) != WEIGHTS_SIZE
            || memcmp(h + 24, model_id, 8) != 0) {
        munmap(p, want);
        return create_fail(error, error_size, PLAIT_ERR_WEIGHTS, "%s is not the weights "
                           "file of this model (its header does not match)", given);
    }
    m->mapping = p;
    m->mapping_size = want;
    m->weights = h + WEIGHTS_HEADER;
    return PLAIT_OK;
}
"""


__all__ = ["emit_source"]
