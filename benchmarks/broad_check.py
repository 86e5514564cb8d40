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


# ------------------------------------------------- onnxruntime's saturating u8 x s8 products

PRODUCT_WEIGHTS = {
    "QLinearConv": (3, 5, 2), "QLinearMatMul": (3, 5, 2), "QGemm": (3, 5, 2),
    "MatMulInteger": (1, 3, 2), "ConvInteger": (1, 3, 2), "MatMulIntegerToFloat": (1, 5, 4),
    "DynamicQuantizeMatMul": (1, 3, -1), "DequantizeLinear": (0, 2, -1),
}
"""Op -> input indices of (its int8 weight, the weight's zero point, the other operand's
zero point; -1: the other operand is uint8 by definition, or for DequantizeLinear, a QDQ
model's weight, of the activations' type) for the products whose int8 weights
:func:`exact_products` recodes."""


_SATURATES: list[bool] = []


def onnxruntime_saturates() -> bool:
    """Whether this machine's onnxruntime saturates uint8 x int8 products: on x86 CPUs
    without VNNI, MLAS multiplies them with ``vpmaddubsw``, which sums each two adjacent
    products into an int16 with saturation (onnxruntime issues 6004 and 16105; its
    PR 24220 adds a checker for it).  Probed once per process: ``255 * 127 + 255 * 127``
    as one MatMulInteger."""
    if not _SATURATES:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        b = numpy_helper.from_array(np.full((2, 1), 127, np.int8), "b")
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
            [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], [b])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        y = sess.run(None, {"a": np.full((1, 2), 255, np.uint8)})[0]
        _SATURATES.append(int(y.reshape(())) != 2 * 255 * 127)
    return _SATURATES[0]


def exact_products(model: Any) -> Any:
    """A copy of ONNX ``model`` in which every int8 weight initializer of an integer
    product (:data:`PRODUCT_WEIGHTS`) is recoded as uint8 ``w + 128`` with zero point
    ``zp + 128``: the same values, so the same model, but onnxruntime multiplies uint8 x
    uint8 with MLAS's exact kernels (widened to int16, ``vpmaddwd``) where its uint8 x
    int8 kernels saturate (:func:`onnxruntime_saturates`)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    made: dict[str, str] = {}

    def recoded(name: str | None, shape: tuple[int, ...] = ()) -> str:
        key = name or f"zero{shape}"
        if key not in made:
            value = (numpy_helper.to_array(inits[name]) if name else np.zeros(shape, np.int8))
            new = f"{key}__u8"
            graph.initializer.append(numpy_helper.from_array(
                (value.astype(np.int16) + 128).astype(np.uint8), new))
            made[key] = new
        return made[key]

    u8 = onnx.TensorProto.UINT8
    elem = {v.name: v.type.tensor_type.elem_type
            for v in (*graph.input, *graph.value_info, *graph.output)}
    elem.update({i.name: i.data_type for i in graph.initializer})
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear":   # its values and zero point
            elem[node.output[0]] = elem[node.output[-1]] = u8
        elif node.op_type == "QuantizeLinear" and len(node.input) > 2:
            elem[node.output[0]] = elem.get(node.input[2], 0)
    # a QDQ model's activations: the type its QuantizeLinears make
    activations = {elem.get(n.output[0]) for n in graph.node if n.op_type == "QuantizeLinear"}

    def uint8_side(node: Any) -> bool:
        """Whether the other operand of ``node``'s product is uint8 (an int8 one would
        make the recoded product int8 x uint8, which MLAS runs as it runs int8 x int8)."""
        if node.op_type == "DequantizeLinear":
            return activations == {u8}
        k = PRODUCT_WEIGHTS[node.op_type][2]
        if k < 0:
            return True
        a_zp = node.input[k] if len(node.input) > k else ""
        return elem.get(a_zp or node.input[0]) == u8

    for node in graph.node:
        where = PRODUCT_WEIGHTS.get(node.op_type)
        if where is None or node.domain not in ("", "com.microsoft") or not uint8_side(node):
            continue
        w, z, _ = where
        if len(node.input) <= w or node.input[w] not in inits:
            continue
        if inits[node.input[w]].data_type != onnx.TensorProto.INT8:
            continue
        zp = node.input[z] if len(node.input) > z and node.input[z] else None
        if zp is not None and zp not in inits:
            continue   # a computed zero point: left as it is
        node.input[w] = recoded(node.input[w])
        while len(node.input) <= z:
            node.input.append("")
        node.input[z] = recoded(zp)
    return out


SATURATION_NOTE = ("checked against onnxruntime's exact uint8 x uint8 run of the same "
                   "weights: this CPU's onnxruntime saturates uint8 x int8 products "
                   "(no VNNI, vpmaddubsw)")
"""What a check against :func:`exact_reference` says of itself."""


def exact_reference(path: str, x: Any) -> Any | None:
    """The output of int8 model ``path`` on input ``x`` (its input ``input``) as
    onnxruntime computes it exactly: run on :func:`exact_products` of the model when
    this machine's onnxruntime saturates uint8 x int8 products; None when it does not
    (its own output is the reference) or the model has no int8 weight to recode."""
    if not onnxruntime_saturates():
        return None
    import onnx
    import onnxruntime as ort

    model = onnx.load(path)
    exact = exact_products(model)
    if len(exact.graph.initializer) == len(model.graph.initializer):
        return None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(exact.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})[0]
