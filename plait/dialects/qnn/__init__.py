"""The qnn dialect: quantized ops with explicit scales and zero points (docs/dialects.md).

It joins the default pipeline through :func:`~plait.dialects.register_dialect` only:
``qnn.Canonicalize`` at ingestion, ``qnn.DispatchInt8`` at dispatch for the ``c``
target (its int8 kernels), ``qnn.Legalize`` at legalization for everything left, and
its ONNX converters with the ONNX frontend; ``qnn.QuantizeWeights`` (weight-only int8/int4)
at optimization when the target asks for it (``Target("c", weight_quant="int4-g32")``) and
``qnn.DispatchWeightQuant`` at dispatch for ``c`` (its weight-only kernels)."""
from plait.dialects import register_dialect

from . import legalize_nbits, ops  # noqa: F401
from .canonicalize import Canonicalize
from .dispatch import DispatchInt8, dispatch_hook
from .dispatch_nbits import DispatchWeightQuant, weight_quant_dispatch_hook
from .legalize import Legalize
from .quantize_weights import QuantizeWeights, WeightQuantError, weight_quant_hook

register_dialect("qnn", ingestion=lambda target: [Canonicalize()],
                 optimization=weight_quant_hook,
                 dispatch=lambda target: [*dispatch_hook(target),
                                          *weight_quant_dispatch_hook(target)],
                 legalize=lambda target: [Legalize()],
                 frontends={"onnx": "plait.dialects.qnn.onnx_import"},
                 model_attrs=("weight_quant",))

__all__ = ["Canonicalize", "DispatchInt8", "DispatchWeightQuant", "Legalize", "QuantizeWeights",
           "WeightQuantError"]
