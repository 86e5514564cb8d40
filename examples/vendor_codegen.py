"""A vendor's external codegen, written outside the plait package: ``mydnn``.

Everything a vendor writes to plug a subgraph compiler into plait:

* **what it supports, as rules** (:data:`RULES`): a convolution block
  ``conv2d(_, _) -> add(const)? -> relu?`` and a residual ``add(_, _) -> relu?`` of
  float32 rank-4 tensors; ``plait.partition(mod, "mydnn")`` outlines the matches and
  merges adjacent ones into one function per region (``compiler="mydnn"``);
* **its compiler** (:func:`compile_mydnn`): gets those functions together, as one
  IRModule, emits C of its own (:func:`emit_c`: its own loops, not plait's kernels —
  a direct NHWC convolution whose innermost loop runs over contiguous output channels),
  compiles it with the system C compiler into a shared library following plait's native
  ABI (``plait_manifest`` + ``int32_t f(void* const* args, const int64_t* sizes)``,
  docs/kernels.md) and returns it as an :class:`~plait.runtime.ExternalModule` of format
  ``"native"``; the executable stores the library as data, the VM calls it;
* **its registration** (:func:`register`): ``register_codegen("mydnn", patterns=...,
  compile=...)``.

Its convolution takes NHWC data and HWIO kernels only, so the user (or the vendor, with
``passes=``) runs ``ConvertLayout`` then ``FoldConstant`` on exactly its functions::

    mod = plait.partition(mod, "mydnn")
    with PassContext(config={"codegen.mydnn.passes":
                             "ConvertLayout(desired={'conv2d': 'NHWC'}),FoldConstant,"
                             "DeadCodeElimination"}):
        exe = plait.build(mod, "c")

An NCHW convolution reaching :func:`compile_mydnn` is refused with that fix named.

Run it: ``python examples/vendor_codegen.py`` builds a small ResNet-style model whose
convolution blocks go to ``mydnn`` and whose classifier's matmul goes to onnxruntime
(scenario S3 of docs/offload.md), prints the ``mydnn`` function before and after its
passes, and checks the result against onnxruntime (needs onnx, onnxruntime and a C
compiler).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.ir import Call, Constant, Function, IRModule, Op, SeqExpr, TensorType, Tuple, Var
from plait.ir.expr import VarBinding
from plait.runtime import ExternalFunction, ExternalModule, TensorSig
from plait.transform import is_const, is_op, register_codegen, wildcard

NAME = "mydnn"

CONV_BLOCK = (is_op("conv2d", groups=1)(wildcard(), wildcard()).has_dtype("float32")
              .optional(lambda y: is_op("add")(y, is_const()))
              .optional(is_op("relu")))
"""``conv2d -> add(const)? -> relu?`` (float32, one group)."""

RESIDUAL = (is_op("add")(wildcard(), wildcard()).has_dtype("float32").has_rank(4)
            .optional(is_op("relu")))
"""``add(_, _) -> relu?`` of rank-4 float32 tensors."""

RULES = [("mydnn.conv_block", CONV_BLOCK), ("mydnn.residual", RESIDUAL)]
"""What mydnn supports (tried in order at each root)."""


class MyDnnError(ValueError):
    """A function mydnn cannot compile; the message names the function, the binding
    and the fix."""


# ----------------------------------------------------------------------------- C emitter

PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* y[i] = x[offset(i)]: a strided gather over `rank` dimensions (transposes, copies) */
static void md_gather(const float* x, float* y, int rank, const int64_t* shape,
                      const int64_t* xstride) {
    int64_t idx[8] = {0}, n = 1, off = 0;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    for (int64_t i = 0; i < n; ++i) {
        y[i] = x[off];
        for (int d = rank - 1; d >= 0; --d) {          /* odometer */
            off += xstride[d];
            if (++idx[d] < shape[d]) break;
            off -= xstride[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* y = a (op) b with broadcasting: a stride of 0 repeats an operand along that axis */
static void md_binary(int op, const float* a, const int64_t* as, const float* b,
                      const int64_t* bs, float* y, int rank, const int64_t* shape) {
    int64_t idx[8] = {0}, n = 1, ao = 0, bo = 0;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    for (int64_t i = 0; i < n; ++i) {
        const float u = a[ao], v = b[bo];
        y[i] = op == 0 ? u + v : op == 1 ? u - v : u * v;
        for (int d = rank - 1; d >= 0; --d) {
            ao += as[d]; bo += bs[d];
            if (++idx[d] < shape[d]) break;
            ao -= as[d] * shape[d]; bo -= bs[d] * shape[d];
            idx[d] = 0;
        }
    }
}

static void md_relu(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* NHWC data, HWIO kernel: each output pixel's O channels are contiguous, so the
   innermost loop is a contiguous multiply-add over them */
static void md_conv_nhwc(const float* x, const float* w, float* y, int64_t N, int64_t H,
                         int64_t W, int64_t C, int64_t KH, int64_t KW, int64_t O, int64_t OH,
                         int64_t OW, int64_t sh, int64_t sw, int64_t pt, int64_t pl,
                         int64_t dh, int64_t dw) {
    for (int64_t n = 0; n < N; ++n)
        for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
                float* out = y + ((n * OH + oh) * OW + ow) * O;
                for (int64_t o = 0; o < O; ++o) out[o] = 0.0f;
                for (int64_t kh = 0; kh < KH; ++kh) {
                    const int64_t ih = oh * sh - pt + kh * dh;
                    if (ih < 0 || ih >= H) continue;
                    for (int64_t kw = 0; kw < KW; ++kw) {
                        const int64_t iw = ow * sw - pl + kw * dw;
                        if (iw < 0 || iw >= W) continue;
                        const float* in = x + ((n * H + ih) * W + iw) * C;
                        const float* k = w + (kh * KW + kw) * C * O;
                        for (int64_t c = 0; c < C; ++c) {
                            const float v = in[c];
                            const float* kc = k + c * O;
                            for (int64_t o = 0; o < O; ++o) out[o] += v * kc[o];
                        }
                    }
                }
            }
}
"""

_BINARY = {"add": 0, "subtract": 1, "multiply": 2}


def _shape(e: Any, where: str) -> tuple[int, ...]:
    ty = e.ty
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype != "float32" or \
            not all(isinstance(d, int) for d in ty.shape):
        raise MyDnnError(f"{where}: mydnn takes float32 tensors of static shape, got {ty}")
    return tuple(int(d) for d in ty.shape)


def _c_float(v: float) -> str:
    """``v`` as an exact C literal (hexadecimal floating point)."""
    v = float(v)
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return v.hex()


def _strides(shape: Sequence[int]) -> list[int]:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d], s = s, s * shape[d]
    return out


def _ints(values: Sequence[int]) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


class _FunctionEmitter:
    """The C function of one mydnn function: a buffer per binding, then the outputs."""

    def __init__(self, name: str, func: Function, symbol: str) -> None:
        self.name, self.func, self.symbol = name, func, symbol
        self.names: dict[Any, str] = {}
        self.consts: list[str] = []
        self.lines: list[str] = []
        self.buffers: list[str] = []

    def where(self, binding: str) -> str:
        return f"mydnn: function {self.name!r}, binding {binding!r}"

    def operand(self, e: Any, binding: str) -> str:
        if isinstance(e, Var) and e in self.names:
            return self.names[e]
        if isinstance(e, Constant):
            _shape(e, self.where(binding))
            name = f"k{len(self.consts)}"
            values = ", ".join(_c_float(v) for v in np.asarray(e.data, np.float32).ravel())
            self.consts.append(f"static const float {name}[] = {{{values}}};")
            return name
        raise MyDnnError(f"{self.where(binding)}: operand {e!r} is not a tensor value")

    def call(self, var: Var, call: Call) -> None:
        b = var.name_hint
        op = call.op.name if isinstance(call.op, Op) else None
        shape = _shape(var, self.where(b))
        size = int(np.prod(shape))
        out = f"t{len(self.buffers)}"
        self.buffers.append(out)
        self.lines.append(f"    {out} = (float*)malloc({max(size, 1)} * sizeof(float));"
                          f" if (!{out}) {{ status = 1; goto done; }}")
        args = [self.operand(a, b) for a in call.args]
        if op == "conv2d":
            self.conv(b, call, args, out, shape)
        elif op == "relu":
            self.lines.append(f"    md_relu({args[0]}, {out}, {size});")
        elif op in _BINARY:
            strides = [self.broadcast(a, shape, b) for a in call.args]
            self.lines.append(
                f"    {{ static const int64_t as[] = {_ints(strides[0])}, bs[] = "
                f"{_ints(strides[1])}, sh[] = {_ints(shape)};\n      md_binary({_BINARY[op]}, "
                f"{args[0]}, as, {args[1]}, bs, {out}, {len(shape)}, sh); }}")
        elif op == "permute_dims":
            src = _shape(call.args[0], self.where(b))
            axes = call.attrs.get("axes") or tuple(range(len(src)))[::-1]
            st = _strides(src)
            self.lines.append(
                f"    {{ static const int64_t sh[] = {_ints(shape)}, st[] = "
                f"{_ints([st[int(a)] for a in axes])};\n      md_gather({args[0]}, {out}, "
                f"{len(shape)}, sh, st); }}")
        elif op == "reshape":
            self.lines.append(f"    memcpy({out}, {args[0]}, {size} * sizeof(float));")
        else:
            raise MyDnnError(f"{self.where(b)}: op {op!r} is not one mydnn compiles (it "
                             "compiles conv2d, add, subtract, multiply, relu, permute_dims, "
                             "reshape); leave it out of mydnn's rules")
        self.names[var] = out

    def conv(self, b: str, call: Call, args: list[str], out: str, shape: tuple[int, ...]) -> None:
        a = call.attrs
        if a["data_layout"] != "NHWC" or a["kernel_layout"] != "HWIO":
            raise MyDnnError(
                f"{self.where(b)}: conv2d is {a['data_layout']}/{a['kernel_layout']}; mydnn "
                "compiles NHWC data with HWIO kernels only: run ConvertLayout(desired="
                "{'conv2d': 'NHWC'}) on its functions first (ForCodegen('mydnn', ...) or "
                "PassContext(config={'codegen.mydnn.passes': ...}))")
        if int(a["groups"]) != 1:
            raise MyDnnError(f"{self.where(b)}: mydnn compiles conv2d with groups=1 only")
        n, h, w, c = _shape(call.args[0], self.where(b))
        kh, kw, _, o = _shape(call.args[1], self.where(b))
        pt, pl = int(a["padding"][0]), int(a["padding"][1])
        sh, sw = (int(s) for s in a["strides"])
        dh, dw = (int(d) for d in a["dilation"])
        self.lines.append(f"    md_conv_nhwc({args[0]}, {args[1]}, {out}, {n}, {h}, {w}, {c}, "
                          f"{kh}, {kw}, {o}, {shape[1]}, {shape[2]}, {sh}, {sw}, {pt}, {pl}, "
                          f"{dh}, {dw});")

    def broadcast(self, e: Any, shape: tuple[int, ...], b: str) -> list[int]:
        src = _shape(e, self.where(b))
        full = (1,) * (len(shape) - len(src)) + src
        st = _strides(full)
        return [0 if d == 1 and o != 1 else s for d, o, s in zip(full, shape, st)]

    def emit(self) -> tuple[str, dict[str, Any], ExternalFunction]:
        f = self.func
        inputs = [_shape(p, f"mydnn: function {self.name!r}, parameter {p.name_hint!r}")
                  for p in f.params]
        for i, p in enumerate(f.params):
            self.names[p] = f"in{i}"
        body = f.body
        if not isinstance(body, SeqExpr):
            raise MyDnnError(f"mydnn: function {self.name!r} has no bindings to compile")
        for block in body.blocks:
            for bd in block.bindings:
                if not isinstance(bd, VarBinding) or not isinstance(bd.value, Call):
                    raise MyDnnError(f"{self.where(bd.var.name_hint)}: mydnn compiles op "
                                     "calls only")
                self.call(bd.var, bd.value)
        results = list(body.body.fields) if isinstance(body.body, Tuple) else [body.body]
        outputs = [_shape(r, f"mydnn: function {self.name!r}, result") for r in results]
        head = [f"int32_t {self.symbol}(void* const* args, const int64_t* sizes) {{",
                "    int32_t status = 0; (void)sizes;"]
        head += [f"    const float* in{i} = (const float*)args[{i}];" for i in range(len(inputs))]
        copies = [f"    memcpy(args[{len(inputs) + j}], {self.operand(r, 'result')}, "
                  f"{int(np.prod(s))} * sizeof(float));" for j, (r, s) in
                  enumerate(zip(results, outputs))]
        tail = ["done:"] + [f"    free({t});" for t in reversed(self.buffers)] + \
            ["    return status;", "}"]
        # buffers are declared before the first goto can skip them
        decls = [f"    float* {t} = NULL;" for t in self.buffers]
        source = "\n".join([*self.consts, *head, *decls, *self.lines, *copies, *tail])
        params = [{"name": f"in{i}", "shape": list(s), "dtype": "float32"}
                  for i, s in enumerate(inputs)]
        params += [{"name": f"out{j}", "shape": list(s), "dtype": "float32"}
                   for j, s in enumerate(outputs)]
        spec = {"name": f.attrs["global_symbol"], "symbol": self.symbol, "params": params,
                "num_outputs": len(outputs), "size_vars": []}
        sig = ExternalFunction(f.attrs["global_symbol"],
                               tuple(TensorSig(s, "float32") for s in inputs),
                               tuple(TensorSig(s, "float32") for s in outputs))
        return source, spec, sig


def emit_c(mod: IRModule) -> tuple[str, list[ExternalFunction]]:
    """The C source of every function of ``mod`` with a ``global_symbol`` (one library),
    with its ``plait_manifest``, and the functions' signatures."""
    parts, specs, sigs = [PRELUDE], [], []
    for i, (name, f) in enumerate(mod.graph_functions()):
        if not isinstance(f, Function) or "global_symbol" not in f.attrs:
            continue
        source, spec, sig = _FunctionEmitter(name, f, f"mydnn_fn{i}").emit()
        parts.append(source)
        specs.append(spec)
        sigs.append(sig)
    manifest = json.dumps({"abi": 1, "functions": specs})
    parts.append(f"const char* plait_manifest(void) {{ return {json.dumps(manifest)}; }}")
    return "\n\n".join(parts) + "\n", sigs


def build_library(source: str) -> bytes:
    """``source`` compiled into a shared library with the system C compiler (``$CC`` or
    ``cc``), as bytes."""
    cc = shlex.split(os.environ.get("CC", "cc"))
    with tempfile.TemporaryDirectory(prefix="mydnn-") as d:
        src, lib = os.path.join(d, "mydnn.c"), os.path.join(d, "libmydnn.so")
        with open(src, "w") as fh:
            fh.write(source)
        r = subprocess.run([*cc, "-O2", "-fPIC", "-shared", "-o", lib, src],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise MyDnnError(f"mydnn: the C compiler failed:\n{r.stderr[-2000:]}")
        with open(lib, "rb") as fh:
            return fh.read()


def compile_mydnn(mod: IRModule, *, codegen: str = NAME) -> ExternalModule:
    """mydnn's compiler: every function of ``mod`` into one native library."""
    source, sigs = emit_c(mod)
    return ExternalModule(codegen, "native", tuple(sigs), {"lib": build_library(source)},
                          {"emitter": "mydnn 1.0"})


def register(*, override: bool = False) -> Any:
    """Register the ``mydnn`` codegen (what importing a vendor's plug-in would do)."""
    return register_codegen(NAME, patterns=RULES, compile=compile_mydnn, override=override,
                            doc="conv blocks compiled to mydnn's own NHWC C loops")


# ------------------------------------------------------------------ scenario S3 (main)

MATMUL = "mm"
"""The second codegen of the scenario: onnxruntime, given the matmuls only."""

MATMUL_RULES = [("mm.dense", ((is_op("matmul")(wildcard(), is_const())
                               | is_op("linear")(wildcard(), is_const(), is_const()))
                              .has_dtype("float32")
                              .optional(lambda y: is_op("add")(y, is_const()))))]
"""``matmul(_, const) | linear(_, const, const) -> add(const)?``."""

USER_PASSES = ("ConvertLayout(desired={'conv2d': 'NHWC'}),FoldConstant,"
               "DeadCodeElimination")
"""What the user runs on exactly mydnn's functions."""


def register_matmuls_to_onnxruntime(*, override: bool = False) -> Any:
    """Register ``mm``: plait's onnxruntime exporter, given only the matmuls."""
    from functools import partial

    from plait.codegen.onnxruntime import compile_onnxruntime

    return register_codegen(MATMUL, patterns=MATMUL_RULES,
                            compile=partial(compile_onnxruntime, codegen=MATMUL),
                            override=override, doc="matmuls exported to onnxruntime")


def resnet_onnx(channels: int = 8, size: int = 16, classes: int = 10, seed: int = 0) -> Any:
    """A small ResNet-style ONNX model: a conv + relu stem, a basic block, a
    downsampling block with a 1x1 shortcut, global average pooling and a Gemm."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name: str, shape: tuple[int, ...], scale: float) -> str:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv(x: str, cin: int, cout: int, k: int, stride: int, relu: bool, name: str) -> str:
        w = const(f"{name}.w", (cout, cin, k, k), (2.0 / (cin * k * k)) ** 0.5)
        b = const(f"{name}.b", (cout,), 0.1)
        nodes.append(helper.make_node("Conv", [x, w, b], [name], pads=[k // 2] * 4,
                                      strides=[stride, stride]))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [f"{name}.r"]))
        return f"{name}.r"

    c, c2 = channels, 2 * channels
    s = conv("input", 3, c, 3, 1, True, "stem")
    a = conv(conv(s, c, c, 3, 1, True, "b1c1"), c, c, 3, 1, False, "b1c2")
    nodes += [helper.make_node("Add", [a, s], ["b1"]), helper.make_node("Relu", ["b1"], ["b1r"])]
    a = conv(conv("b1r", c, c2, 3, 2, True, "b2c1"), c2, c2, 3, 1, False, "b2c2")
    sc = conv("b1r", c, c2, 1, 2, False, "b2sc")
    nodes += [helper.make_node("Add", [a, sc], ["b2"]), helper.make_node("Relu", ["b2"], ["b2r"]),
              helper.make_node("GlobalAveragePool", ["b2r"], ["pool"]),
              helper.make_node("Flatten", ["pool"], ["flat"]),
              helper.make_node("Gemm", ["flat", const("fc.w", (classes, c2), 0.3),
                                        const("fc.b", (classes,), 0.1)], ["output"], transB=1)]
    graph = helper.make_graph(
        nodes, "resnet_s3",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, classes])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _elided(text: str) -> str:
    import re

    return re.sub(r"const\((base64=\"[^\"]*\"|\[[^\"]*\])", "const(...", text)


def main(target: str = "c", verbose: bool = True) -> float:
    """Scenario S3 on :func:`resnet_onnx`: partition (conv blocks to mydnn, the
    classifier's matmul to onnxruntime), the user's passes on mydnn's functions only,
    build, run; returns the largest difference from onnxruntime."""
    import onnxruntime as ort

    import plait
    from plait.frontend.onnx.importer import from_onnx
    from plait.runtime import VirtualMachine
    from plait.transform import ForCodegen, PassContext, get_codegen

    for name, reg in ((NAME, register), (MATMUL, register_matmuls_to_onnxruntime)):
        try:
            get_codegen(name)
        except ValueError:
            reg()
    model = resnet_onnx()
    pipe = plait.default_pipeline(target)
    mod = pipe["optimization"](pipe["ingestion"](from_onnx(model)))
    part = plait.partition(mod, NAME, MATMUL)
    mine = [n for n, f in part.graph_functions() if f.attrs.get("compiler") == NAME]
    assert mine and any(f.attrs.get("compiler") == MATMUL for _, f in part.graph_functions())
    if verbose:
        print("# partitioned (constants elided)\n" + _elided(part.script()))
        print(f"# after ForCodegen({NAME!r}, {USER_PASSES!r}): {', '.join(mine)}\n" +
              _elided(ForCodegen(NAME, USER_PASSES)(part).script()))
    with PassContext(config={f"codegen.{NAME}.passes": USER_PASSES}):
        exe = plait.build(part, target)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    got = VirtualMachine(exe)["main"](x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    diff = float(np.abs(got - ref).max())
    if verbose:
        print(f"external modules: {[(m.codegen, m.format) for m in exe.external]}; "
              f"largest difference from onnxruntime: {diff:.2e}")
    return diff


if __name__ == "__main__":
    main()
