"""The broad suite's output checks (issue 30), shared by ``benchmarks/run.py --suite broad
--check`` and tests/test_broad_suite.py.

* Float models: plait's output is within ``1e-4`` of the largest magnitude of
  onnxruntime's output, everywhere (:func:`float_disagree`).
* int8 models (:func:`int8_disagree`): where the output is a ``DequantizeLinear`` of a
  constant scale (the static forms' CNNs and their QDQ encoders), the integer tensor
  behind it is equal or within one quantization step: ``|out - ref| <= scale``; where
  the last operator is a float one after the last dequantization (a QOperator encoder
  ends with a float LayerNorm), the float bound; where activations are quantized at run
  time (``-dyn``), ``1e-2`` of the largest magnitude: their scales come from float
  values, so a last-bit difference before a quantization (a layer norm, a softmax) can
  move a scale and so a whole tensor by up to one step (tests/dialects/qnn states the
  same bound).
"""

from __future__ import annotations

from typing import Any

FLOAT_RTOL = 1e-4
"""Float outputs: within this fraction of the reference's largest magnitude."""
DYNAMIC_RTOL = 1e-2
"""Dynamically quantized outputs: within this fraction of the largest magnitude."""
STEP_SLACK = 1e-3
"""Dequantized outputs one step apart differ by the step plus the float rounding of
``scale * (q - zero_point)`` (a few ulps of the value: ConvNeXt's QDQ form, one step of
0.0114 on values near 2, measured 1.00000x steps + 2e-5): one step is ``step * (1 +
STEP_SLACK)``."""


def _shape_problem(out: Any, ref: Any) -> str | None:
    if out.shape != ref.shape:
        return f"outputs disagree with onnxruntime: shape {out.shape}, expected {ref.shape}"
    return None


def float_disagree(out: Any, ref: Any, rtol: float = FLOAT_RTOL) -> str | None:
    """Why ``out`` is not within ``rtol`` of the largest magnitude of onnxruntime's
    ``ref`` everywhere (NaN fails), or None when it is."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    problem = _shape_problem(out, ref)
    if problem or not ref.size:
        return problem
    scale = float(np.max(np.abs(ref)))
    err = np.abs(out.astype(np.float64) - ref)
    if bool(np.all(err <= rtol * scale)):
        return None
    worst = float(np.nanmax(err)) if not np.all(np.isnan(err)) else float("nan")
    return (f"outputs disagree with onnxruntime: max abs error {worst:.2e}, more than "
            f"{rtol:g} of the largest magnitude {scale:.2e}")


def output_step(path: str) -> float | None:
    """The quantization step of model ``path``'s first output when a
    ``DequantizeLinear`` with a constant scalar scale makes it, else None."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(path, load_external_data=False).graph
    out = graph.output[0].name
    node = next((n for n in graph.node if out in n.output), None)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    init = {i.name: i for i in graph.initializer}
    consts = {n.output[0]: n.attribute[0].t for n in graph.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    scale = init.get(node.input[1]) or consts.get(node.input[1])
    if scale is None:
        return None
    value = numpy_helper.to_array(scale)
    return float(value) if value.size == 1 else None


def int8_disagree(out: Any, ref: Any, path: str, form: str) -> str | None:
    """Why the output of int8 model ``path`` (quantized in ``form``: qop, qdq or dyn)
    does not match onnxruntime's ``ref`` by the bounds of the module docstring, or
    None when it does."""
    import numpy as np

    out, ref = np.asarray(out), np.asarray(ref)
    problem = _shape_problem(out, ref)
    if problem or not ref.size:
        return problem
    if form == "dyn":
        return float_disagree(out, ref, DYNAMIC_RTOL)
    step = output_step(path)
    if step is None:
        return float_disagree(out, ref)
    err = np.abs(out.astype(np.float64) - ref)
    steps = float(np.nanmax(err)) / step if not np.any(np.isnan(err)) else float("nan")
    if steps <= 1.0 + STEP_SLACK:
        return None
    return (f"outputs disagree with onnxruntime: {steps:.2f} quantization steps of "
            f"{step:.3g} apart (at most 1)")
