"""Single-node ONNX models run by onnxruntime: the independent reference of the qnn
dialect's semantics.  Quantization parameters are initializers (as in the models the
quantization tools write), data are graph inputs."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

onnx = __import__("pytest").importorskip("onnx")
ort = __import__("pytest").importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import broad_check  # noqa: E402

MS = "com.microsoft"


def node_model(
    op_type: str,
    args: Sequence[np.ndarray | None],
    *,
    data: Sequence[int] = (0,),
    attrs: dict[str, Any] | None = None,
    domain: str = "",
    outputs: Sequence[tuple[int, Sequence[int] | None]] | None = None,
    opset: int = 21,
    out_dtype: Any = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """A model of one node ``op_type`` whose inputs are ``args`` (None: an omitted
    optional input); the positions in ``data`` are graph inputs, the rest initializers.
    ``outputs`` gives each output's ONNX element type and shape (None: unknown); by
    default one output of type ``out_dtype`` (default: the first input's).  Returns the
    model and its feeds."""
    names, inits, ins, feeds = [], [], [], {}
    for i, a in enumerate(args):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        a = np.asarray(a)
        if i in data:
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            ins.append(helper.make_tensor_value_info(name, elem, a.shape))
            feeds[name] = a
        else:
            inits.append(numpy_helper.from_array(a, name))
    if outputs is None:
        dt = np.dtype(out_dtype) if out_dtype is not None else np.asarray(args[0]).dtype
        outputs = [(helper.np_dtype_to_tensor_dtype(dt), None)]
    outs = [helper.make_tensor_value_info(f"out{i}", t, s) for i, (t, s) in enumerate(outputs)]
    node = helper.make_node(op_type, names, [o.name for o in outs], domain=domain,
                            **(attrs or {}))
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    graph = helper.make_graph([node], "g", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return model, feeds


def run_ort(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run by onnxruntime's CPU provider (default optimizations, one thread).
    On a CPU where onnxruntime saturates uint8 x int8 products (no VNNI: pairs of
    products summed into int16 by ``vpmaddubsw``), its int8 weight initializers are
    recoded as uint8 + 128 first (benchmarks/broad_check.py's ``exact_products``: the same
    values, multiplied by MLAS's exact uint8 x uint8 kernels), so the reference is the
    model's exact value on every CPU."""
    if broad_check.onnxruntime_saturates():
        model = broad_check.exact_products(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def ort_node(op_type: str, args: Sequence[np.ndarray | None], **kwargs: Any) -> np.ndarray:
    """The first output of :func:`node_model` run by onnxruntime."""
    model, feeds = node_model(op_type, args, **kwargs)
    return run_ort(model, feeds)[0]


def elem(dtype: Any) -> int:
    """The ONNX element type of a numpy dtype."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
