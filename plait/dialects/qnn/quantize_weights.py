"""qnn.QuantizeWeights: float products with constant weights to ``qnn.matmul_nbits``.

``mod = qnn.QuantizeWeights(bits=4, group=32)(mod)`` quantizes the constant weight of
every float32 ``matmul(x, W)`` (``W`` of ``K x N``) and ``linear(x, W, bias)`` (``W`` of
``N x K``) with onnxruntime's quantizer (:func:`.nbits.quantize_blockwise`): ``bits`` 8
or 4, ``group`` values along K per scale (a power of two >= 16, the block sizes of
onnxruntime's ``MatMulNBits``; ``None``: one scale per output channel), asymmetric with
zero points unless ``symmetric``; ``activations="int8"`` quantizes the activations to
int8 per block as well (the op's ``accuracy_level`` 4: integer dot products, onnxruntime's
"int8 compute"; :mod:`.nbits`), ``"float32"`` (the default) keeps them float.  Products
whose weight is computed (attention's ``Q @ K^T``) stay float; a module with no product
to quantize is refused, naming the products it saw.

``Target("c", weight_quant="int4-g32")`` asks ``build()`` for the same pass (the qnn
dialect's optimization hook, :func:`weight_quant_hook`): the spec is ``int8`` or
``int4``, then ``-g<group>`` (default: per channel), then ``-sym`` for symmetric, then
``-a8`` for int8 activations (the "W4A8"/"W8A8" naming of weight and activation bits).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from plait.errors import PlaitError
from plait.ir.deferred import deferred_constants
from plait.ir.expr import Call, Constant, Expr, Op, Var, VarBinding
from plait.ir.module import IRModule
from plait.ir.types import TensorType
from plait.ir.visitor import ExprMutator
from plait.op.registry import make_call
from plait.transform.dead_code import dead_code_elimination
from plait.transform.pass_base import module_pass

from . import nbits as NB


class WeightQuantError(PlaitError, ValueError):
    """A weight-only quantization that cannot be done as asked (bad bits, group or
    spec; nothing to quantize)."""


def check_params(bits: Any, group: Any, where: str = "qnn.QuantizeWeights") -> None:
    """Refuse ``bits`` other than 4 or 8 and a ``group`` that is not ``None`` or a power
    of two >= 16."""
    if bits not in NB.BITS or isinstance(bits, bool):
        raise WeightQuantError(f"{where}: bits={bits!r}; weight-only quantization takes "
                               "bits=8 (int8) or bits=4 (int4)")
    if group is None:
        return
    if (isinstance(group, bool) or not isinstance(group, (int, np.integer))
            or group < 16 or group & (group - 1)):
        raise WeightQuantError(
            f"{where}: group={group!r}; a group must be a power of two >= 16 (32 and 128 "
            "are usual; the block sizes onnxruntime's MatMulNBits takes), or None for one "
            "scale per output channel")


_SPEC = re.compile(r"^int(?P<bits>\d+)(?:-g(?P<group>\d+))?(?P<sym>-sym)?(?P<a8>-a8)?$")

ACTIVATIONS = {"float32": 0, "int8": NB.ACT_INT8_LEVEL}
"""``QuantizeWeights(activations=...)`` -> the op's ``accuracy_level``."""


def parse_spec(spec: str) -> dict[str, Any]:
    """``"int4-g32"`` -> ``{"bits": 4, "group": 32, "symmetric": False, "activations":
    "float32"}`` (the target attribute ``weight_quant``)."""
    m = _SPEC.match(spec) if isinstance(spec, str) else None
    if m is None:
        raise WeightQuantError(
            f"Target attribute weight_quant={spec!r}: expected 'int8' or 'int4', then "
            "optionally '-g<group>' (values per scale along K, e.g. 'int4-g32', "
            "'int4-g128'; default one scale per output channel), then optionally '-sym' "
            "(symmetric, no zero points), then optionally '-a8' (activations quantized "
            "to int8 per block: integer dot products)")
    params = {"bits": int(m["bits"]), "group": int(m["group"]) if m["group"] else None,
              "symmetric": bool(m["sym"]), "activations": "int8" if m["a8"] else "float32"}
    check_params(params["bits"], params["group"], f"weight_quant={spec!r}")
    return params


def _resolve(e: Expr, values: dict[Var, Expr]) -> Expr:
    while isinstance(e, Var) and e in values:
        e = values[e]
    return e


def _const_weight(e: Expr, values: dict[Var, Expr]) -> np.ndarray | None:
    """The constant behind ``e`` (a constant, a variable bound to one, or the transpose
    of a 2-D one: ``torch.export`` writes ``x @ W.T`` as ``mm(x, permute(W))``, and
    FoldConstant leaves the transposes of large weights), else None."""
    e = _resolve(e, values)
    if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "permute_dims":
        inner = _resolve(e.args[0], values)
        axes = e.attrs.get("axes")
        if (isinstance(inner, Constant) and inner.data.ndim == 2
                and (axes is None or tuple(axes) == (1, 0))):
            return inner.data.T
        return None
    return e.data if isinstance(e, Constant) else None


class _Quantize(ExprMutator):
    def __init__(self, mod: IRModule, bits: int, group: int | None, symmetric: bool,
                 level: int) -> None:
        super().__init__(mod)
        self.bits, self.group, self.symmetric, self.level = bits, group, symmetric, level
        self.values: dict[Var, Expr] = {}
        self.done = 0
        self.skipped: list[str] = []

    def visit_binding(self, binding: Any) -> None:
        if isinstance(binding, VarBinding):
            self.values[binding.var] = binding.value
        super().visit_binding(binding)

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op) or op.name not in ("matmul", "linear") or len(call.args) < 2:
            return call
        x, w_expr = call.args[0], call.args[1]
        xt = x.ty
        if not isinstance(xt, TensorType) or xt.dtype != "float32":
            return call
        w = _const_weight(w_expr, self.values)
        if w is None:
            self.skipped.append(f"{op.name} whose weight is computed, not a constant")
            return call
        if w.ndim != 2 or w.dtype != np.float32:
            self.skipped.append(f"{op.name} with a {w.dtype} weight of shape {w.shape}")
            return call
        if op.name == "matmul" and (xt.shape is None or len(xt.shape) < 1):
            return call
        linear = op.name == "linear"
        n, k = (int(d) for d in (w.shape if linear else w.shape[::-1]))
        step = 8 // self.bits
        bs = self.group if self.group is not None else -(-k // step) * step
        b, s, z = _quantized_constants(w, linear, n, k, self.bits, bs, self.symmetric)
        self.done += 1
        return make_call("qnn.matmul_nbits", x, b, s, z, *call.args[2:3], K=k, N=n,
                         bits=self.bits, block_size=bs, accuracy_level=self.level,
                         span=call.span)


def _quantized_constants(w: np.ndarray, linear: bool, n: int, k: int, bits: int, bs: int,
                         symmetric: bool) -> tuple[Any, ...]:
    """The constants ``(b, scales, zero_points)`` of the weight ``w`` (``N x K`` for
    ``linear``, else ``K x N``), quantized when code generation (or anything else) first
    reads one of them (:func:`plait.ir.deferred.deferred_constants`): the pipeline holds
    the float weight only, and it goes once quantized if nothing else holds it (the
    graph an executable keeps does: quantizing loses what it would need)."""
    blocks = NB.k_blocks(k, bs)

    def make(src: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return NB.quantize_blockwise(src if linear else src.T, bits, bs, symmetric)

    return deferred_constants(w, make, [
        ((n, blocks, NB.blob_size(bs, bits)), np.uint8, None),
        ((n, blocks), np.float32, None),
        ((n, NB.zp_cols(blocks, bits)), np.uint8, None)])


@module_pass(name="qnn.QuantizeWeights", phases=("ingestion", "optimization"))
class QuantizeWeights:
    """Quantize the constant weights of float matmul/linear to ``qnn.matmul_nbits``
    (``bits`` 8 or 4; ``group`` a power of two >= 16, or None for per channel;
    ``activations`` "float32" or "int8")."""

    def __init__(self, bits: int = 8, group: int | None = None, symmetric: bool = False,
                 activations: str = "float32", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_params(bits, group)
        if activations not in ACTIVATIONS:
            raise WeightQuantError(
                f"qnn.QuantizeWeights: activations={activations!r}; expected 'float32' "
                "(float products) or 'int8' (activations quantized to int8 per block, "
                "integer dot products: MatMulNBits' accuracy_level 4)")
        self.bits, self.group, self.symmetric = int(bits), group, bool(symmetric)
        self.activations = activations

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        changed, done, skipped = {}, 0, []
        for name, func in mod.graph_functions():
            if func.attrs.get("compiler") is not None:
                continue
            q = _Quantize(mod, self.bits, self.group, self.symmetric,
                          ACTIVATIONS[self.activations])
            new = q.visit_function(func)
            done += q.done
            skipped += q.skipped
            if q.done:   # (the transposes the products read are dead now)
                changed[name] = dead_code_elimination(new)
        if not done:
            why = ("; it saw " + ", ".join(sorted(set(skipped)))) if skipped else (
                "; it has no float32 matmul or linear")
            raise WeightQuantError(
                f"qnn.QuantizeWeights(bits={self.bits}, group={self.group}): no product "
                f"with a constant float32 2-D weight to quantize{why}.  Import the model "
                "with its weights as constants (not inputs) and run FoldConstant first "
                "(build() does)")
        return mod.with_functions(changed)


def weight_quant_hook(target: Any) -> list[Any]:
    """The qnn dialect's optimization hook: ``[QuantizeWeights(...)]`` when the target
    has ``weight_quant`` (``"int4-g32"``, ...), else nothing."""
    spec = target.attrs.get("weight_quant")
    if not spec:
        return []
    return [QuantizeWeights(**parse_spec(spec))]


__all__ = ["ACTIVATIONS", "QuantizeWeights", "WeightQuantError", "check_params", "parse_spec",
           "weight_quant_hook"]
