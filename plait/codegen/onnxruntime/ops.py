"""The ONNX converters of the exporter: one small function per op family (opset 17).

Layouts ONNX has no attribute for (NHWC data, HWIO kernels: what ``ConvertLayout``
makes) are exported with transposes around the node, constant weights transposed at
export time.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plait.ir.expr import Call, Constant
from plait.ir.types import TensorType

from .onnx_graph import Graph, OnnxExportError, converter, np_tensor_type

UNARY = {
    "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log",
    "sqrt": "Sqrt", "abs": "Abs", "neg": "Neg", "erf": "Erf", "floor": "Floor",
    "ceil": "Ceil", "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos", "tan": "Tan",
    "sign": "Sign", "round": "Round", "logical_not": "Not", "isnan": "IsNaN",
    "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh",
}
BINARY = {
    "add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "maximum": "Max",
    "minimum": "Min", "power": "Pow", "equal": "Equal", "greater": "Greater",
    "less": "Less", "greater_equal": "GreaterOrEqual", "less_equal": "LessOrEqual",
    "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
}
REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
          "prod": "ReduceProd"}


def _ty(e: Any) -> TensorType:
    return e.ty  # type: ignore[no-any-return]


def _dtype(e: Any) -> np.dtype:
    return np.dtype(_ty(e).dtype)


def _ints(v: Any, n: int) -> list[int]:
    return [int(v)] * n if isinstance(v, int) else [int(x) for x in v]


def _pads2d(v: Any) -> list[int]:
    """plait's 2-D padding (1, 2 or 4 entries: top, left, bottom, right) as ONNX pads
    (x1_begin, x2_begin, x1_end, x2_end)."""
    p = _ints(v, 4)
    if len(p) == 2:
        p = p * 2
    return p


def _float_only(call: Call) -> str | None:
    if _ty(call.args[0]).dtype not in ("float32", "float64", "float16"):
        return f"{call.op.name} of {_ty(call.args[0]).dtype} (float tensors only)"  # type: ignore[attr-defined]
    return None


@converter(*UNARY)
def _unary(g: Graph, call: Call, out: str) -> None:
    g.node(UNARY[call.op.name], [g.arg(call, 0)], [out])  # type: ignore[attr-defined]


def _check_binary(call: Call) -> str | None:
    name = call.op.name  # type: ignore[attr-defined]
    if name == "divide" and _ty(call.args[0]).dtype not in ("float32", "float64"):
        return "an integer divide (numpy's true division has no ONNX op)"
    return None


@converter(*BINARY, check=_check_binary)
def _binary(g: Graph, call: Call, out: str) -> None:
    g.node(BINARY[call.op.name], [g.arg(call, 0), g.arg(call, 1)], [out])  # type: ignore[attr-defined]


@converter("where")
def _where(g: Graph, call: Call, out: str) -> None:
    g.node("Where", [g.arg(call, i) for i in range(3)], [out])


@converter("matmul")
def _matmul(g: Graph, call: Call, out: str) -> None:
    g.node("MatMul", [g.arg(call, 0), g.arg(call, 1)], [out])


@converter("linear")
def _linear(g: Graph, call: Call, out: str) -> None:
    w = call.args[1]
    if isinstance(w, Constant):
        wt = g.const(np.ascontiguousarray(w.data.T), "weight_t")
    else:
        wt = g.node("Transpose", [g.arg(call, 1)], perm=[1, 0])
    if len(call.args) == 2:
        g.node("MatMul", [g.arg(call, 0), wt], [out])
        return
    y = g.node("MatMul", [g.arg(call, 0), wt])
    g.node("Add", [y, g.arg(call, 2)], [out])


def _to_nchw(g: Graph, x: str, layout: str) -> str:
    return x if layout == "NCHW" else g.node("Transpose", [x], perm=[0, 3, 1, 2])


def _from_nchw(g: Graph, y: str, layout: str, out: str) -> None:
    if layout == "NCHW":
        g.node("Identity", [y], [out])
    else:
        g.node("Transpose", [y], [out], perm=[0, 2, 3, 1])


def _check_conv(call: Call) -> str | None:
    a = call.attrs
    if a["kernel_layout"] not in ("OIHW", "HWIO"):
        return f"conv2d with kernel layout {a['kernel_layout']}"
    return _float_only(call)


@converter("conv2d", check=_check_conv)
def _conv2d(g: Graph, call: Call, out: str) -> None:
    a = call.attrs
    x = _to_nchw(g, g.arg(call, 0), a["data_layout"])
    w = call.args[1]
    if a["kernel_layout"] == "OIHW":
        wn = g.arg(call, 1)
    elif isinstance(w, Constant):
        wn = g.const(np.ascontiguousarray(w.data.transpose(3, 2, 0, 1)), "weight_oihw")
    else:
        wn = g.node("Transpose", [g.arg(call, 1)], perm=[3, 2, 0, 1])
    y = g.node("Conv", [x, wn], strides=_ints(a["strides"], 2), pads=_pads2d(a["padding"]),
               dilations=_ints(a["dilation"], 2), group=int(a["groups"]))
    _from_nchw(g, y, a["data_layout"], out)


def _check_pool(call: Call) -> str | None:
    if call.op.name == "avg_pool2d" and _ints(call.attrs["dilation"], 2) != [1, 1]:  # type: ignore[attr-defined]
        return "avg_pool2d with dilation (AveragePool has none before opset 19)"
    return _float_only(call)


@converter("max_pool2d", "avg_pool2d", check=_check_pool)
def _pool2d(g: Graph, call: Call, out: str) -> None:
    a = call.attrs
    x = _to_nchw(g, g.arg(call, 0), a["layout"])
    attrs: dict[str, Any] = dict(kernel_shape=_ints(a["pool_size"], 2),
                                 strides=_ints(a["strides"], 2), pads=_pads2d(a["padding"]),
                                 ceil_mode=int(bool(a["ceil_mode"])))
    if call.op.name == "max_pool2d":  # type: ignore[attr-defined]
        y = g.node("MaxPool", [x], dilations=_ints(a["dilation"], 2), **attrs)
    else:
        y = g.node("AveragePool", [x], count_include_pad=int(bool(a["count_include_pad"])),
                   **attrs)
    _from_nchw(g, y, a["layout"], out)


@converter("global_avg_pool2d", check=_float_only)
def _global_avg_pool(g: Graph, call: Call, out: str) -> None:
    layout = call.attrs["layout"]
    y = g.node("GlobalAveragePool", [_to_nchw(g, g.arg(call, 0), layout)])
    _from_nchw(g, y, layout, out)


@converter("softmax", "log_softmax")
def _softmax(g: Graph, call: Call, out: str) -> None:
    op = "Softmax" if call.op.name == "softmax" else "LogSoftmax"  # type: ignore[attr-defined]
    g.node(op, [g.arg(call, 0)], [out], axis=int(call.attrs["axis"]))


def _static_out(call: Call) -> str | None:
    shape = _ty(call).shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return f"{call.op.name} to a shape with symbolic sizes {shape}"  # type: ignore[attr-defined]
    return None


@converter("reshape", "flatten", "broadcast_to", check=_static_out)
def _reshape(g: Graph, call: Call, out: str) -> None:
    shape = g.const(np.asarray(_ty(call).shape, np.int64), "shape")
    op = "Expand" if call.op.name == "broadcast_to" else "Reshape"  # type: ignore[attr-defined]
    g.node(op, [g.arg(call, 0), shape], [out])


@converter("permute_dims")
def _transpose(g: Graph, call: Call, out: str) -> None:
    axes = call.attrs.get("axes")
    rank = len(_ty(call).shape)  # type: ignore[arg-type]
    perm = list(range(rank))[::-1] if axes is None else [int(x) % rank for x in axes]
    g.node("Transpose", [g.arg(call, 0)], [out], perm=perm)


def _axes(v: Any, rank: int) -> list[int]:
    return [int(x) % rank for x in ([v] if isinstance(v, int) else v)]


@converter("expand_dims")
def _unsqueeze(g: Graph, call: Call, out: str) -> None:
    axes = _axes(call.attrs["axis"], len(_ty(call).shape))  # type: ignore[arg-type]
    g.node("Unsqueeze", [g.arg(call, 0), g.const(np.asarray(axes, np.int64), "axes")], [out])


@converter("squeeze")
def _squeeze(g: Graph, call: Call, out: str) -> None:
    a = call.attrs.get("axis")
    ins = [g.arg(call, 0)]
    if a is not None:
        ins.append(g.const(np.asarray(_axes(a, len(_ty(call.args[0]).shape)), np.int64),  # type: ignore[arg-type]
                           "axes"))
    g.node("Squeeze", ins, [out])


@converter("concat")
def _concat(g: Graph, call: Call, out: str) -> None:
    parts = g.value(call.args[0])
    if not isinstance(parts, tuple):
        raise OnnxExportError("concat of a value that is not a literal tuple")
    g.node("Concat", list(parts), [out], axis=int(call.attrs["axis"]))


@converter(*REDUCE, check=_float_only)
def _reduce(g: Graph, call: Call, out: str) -> None:
    a = call.attrs
    rank = len(_ty(call.args[0]).shape)  # type: ignore[arg-type]
    axes = None if a.get("axis") is None else _axes(a["axis"], rank)
    op = REDUCE[call.op.name]  # type: ignore[attr-defined]
    keep = int(bool(a.get("keepdims")))
    if op == "ReduceSum":  # axes are an input since opset 13
        ins = [g.arg(call, 0)]
        if axes is not None:
            ins.append(g.const(np.asarray(axes, np.int64), "axes"))
        g.node(op, ins, [out], keepdims=keep)
    elif axes is None:
        g.node(op, [g.arg(call, 0)], [out], keepdims=keep)
    else:
        g.node(op, [g.arg(call, 0)], [out], keepdims=keep, axes=axes)


@converter("clip")
def _clip(g: Graph, call: Call, out: str) -> None:
    dt = _dtype(call.args[0])
    ins = [g.arg(call, 0)]
    for key in ("min", "max"):
        v = call.attrs.get(key)
        ins.append("" if v is None else g.const(np.asarray(v, dt), key))
    while ins[-1] == "":
        ins.pop()
    g.node("Clip", ins, [out])


@converter("gelu", check=_float_only)
def _gelu(g: Graph, call: Call, out: str) -> None:
    x = g.arg(call, 0)
    dt = _dtype(call.args[0])
    c = lambda v, n: g.const(np.asarray(v, dt), n)  # noqa: E731
    if call.attrs["approximate"] == "tanh":
        x3 = g.node("Mul", [g.node("Mul", [x, x]), x])
        inner = g.node("Mul", [c(math.sqrt(2 / math.pi), "k"),
                               g.node("Add", [x, g.node("Mul", [c(0.044715, "a"), x3])])])
        t = g.node("Tanh", [inner])
    else:
        t = g.node("Erf", [g.node("Mul", [x, c(1 / math.sqrt(2), "rsqrt2")])])
    half = g.node("Mul", [x, c(0.5, "half")])
    g.node("Mul", [half, g.node("Add", [t, c(1.0, "one")])], [out])


@converter("silu")
def _silu(g: Graph, call: Call, out: str) -> None:
    x = g.arg(call, 0)
    g.node("Mul", [x, g.node("Sigmoid", [x])], [out])


@converter("leaky_relu")
def _leaky_relu(g: Graph, call: Call, out: str) -> None:
    g.node("LeakyRelu", [g.arg(call, 0)], [out], alpha=float(call.attrs["alpha"]))


@converter("hard_sigmoid")
def _hard_sigmoid(g: Graph, call: Call, out: str) -> None:
    g.node("HardSigmoid", [g.arg(call, 0)], [out], alpha=float(call.attrs["alpha"]),
           beta=float(call.attrs["beta"]))


def _check_softplus(call: Call) -> str | None:
    if float(call.attrs["beta"]) != 1.0:
        return "softplus with beta != 1 (ONNX Softplus has no beta)"
    return None


@converter("softplus", check=_check_softplus)
def _softplus(g: Graph, call: Call, out: str) -> None:
    g.node("Softplus", [g.arg(call, 0)], [out])


@converter("cast")
def _cast(g: Graph, call: Call, out: str) -> None:
    g.node("Cast", [g.arg(call, 0)], [out], to=np_tensor_type(call.attrs["dtype"]))


def _check_layer_norm(call: Call) -> str | None:
    rank = len(_ty(call.args[0]).shape)  # type: ignore[arg-type]
    axes = sorted(_axes(call.attrs["axes"], rank))
    if axes != list(range(axes[0], rank)):
        return f"layer_norm over axes {tuple(call.attrs['axes'])}, not the trailing ones"
    return _float_only(call)


@converter("layer_norm", check=_check_layer_norm)
def _layer_norm(g: Graph, call: Call, out: str) -> None:
    rank = len(_ty(call.args[0]).shape)  # type: ignore[arg-type]
    first = min(_axes(call.attrs["axes"], rank))
    g.node("LayerNormalization", [g.arg(call, i) for i in range(3)], [out], axis=first,
           epsilon=float(call.attrs["epsilon"]))


def _check_batch_norm(call: Call) -> str | None:
    if int(call.attrs["axis"]) % len(_ty(call.args[0]).shape) != 1:  # type: ignore[arg-type]
        return "batch_norm along an axis other than 1"
    return _float_only(call)


@converter("batch_norm", check=_check_batch_norm)
def _batch_norm(g: Graph, call: Call, out: str) -> None:
    g.node("BatchNormalization", [g.arg(call, i) for i in range(5)], [out],
           epsilon=float(call.attrs["epsilon"]))


@converter("strided_slice")
def _slice(g: Graph, call: Call, out: str) -> None:
    a = call.attrs
    n = len(a["axes"])
    steps = a.get("strides") or (1,) * n
    ins = [g.arg(call, 0)] + [g.const(np.asarray(v, np.int64), k) for k, v in (
        ("starts", a["begin"]), ("ends", a["end"]), ("axes", a["axes"]), ("steps", steps))]
    g.node("Slice", ins, [out])


def _check_pad(call: Call) -> str | None:
    a = call.attrs
    if a["pad_mode"] not in ("constant", "reflect", "edge"):
        return f"pad mode {a['pad_mode']!r}"
    if any(int(p) < 0 for p in a["pad_width"]):
        return "pad with a negative width (a crop)"
    return None


@converter("pad", check=_check_pad)
def _pad(g: Graph, call: Call, out: str) -> None:
    a = call.attrs
    pw = [int(p) for p in a["pad_width"]]
    pads = pw[0::2] + pw[1::2]  # ONNX: all the begins, then all the ends
    ins = [g.arg(call, 0), g.const(np.asarray(pads, np.int64), "pads")]
    if a["pad_mode"] == "constant":
        ins.append(g.const(np.asarray(a["pad_value"], _dtype(call.args[0])), "value"))
    g.node("Pad", ins, [out], mode=a["pad_mode"])


def _check_take(call: Call) -> str | None:
    if call.attrs.get("axis") is None:
        return "take over the flattened tensor (axis None)"
    return None


@converter("take", check=_check_take)
def _take(g: Graph, call: Call, out: str) -> None:
    g.node("Gather", [g.arg(call, 0), g.arg(call, 1)], [out], axis=int(call.attrs["axis"]))
