"""Rules that recognize activations spelled out elementwise, as exporters write them.

SiLU (``x * sigmoid(x)``), GELU of the erf form (``x * (1 + erf(x / sqrt 2)) * 0.5``)
and GELU of the tanh form (GPT-2's ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``)
become the ``silu`` and ``gelu`` ops.  They depend on no target: the pass
:class:`RecognizeActivations` applies them (the ``c`` target runs it first in its
dispatch hook, so that its product rules fuse the single op into an epilogue); a rule
set of one's own may take :data:`ACTIVATION_RULES` or one of the rules.
"""

from __future__ import annotations

import math

from ..ir.expr import Expr
from ..op.registry import make_call
from .pattern import Match, Pattern, is_const, is_op, wildcard
from .pattern_rewrite import Rule, rewrite_pass


def either(op: str, a: Pattern, b: Pattern) -> Pattern:
    """``op(a, b)`` or ``op(b, a)``: a commutative op's operands in either order (one
    :meth:`~plait.transform.pattern.CallPattern.commutative` pattern)."""
    return is_op(op)(a, b).commutative()


_SILU_X = wildcard()
_SILU_SIGMOID = is_op("sigmoid")(_SILU_X).single_use()


def _silu(m: Match) -> Expr | None:
    """``multiply(x, sigmoid(x))`` (either order) as ``silu(x)``: one step of a
    product's epilogue (x is read twice, so the chain would stop at it)."""
    xs = m.all(_SILU_X)
    if len(xs) != 2 or xs[0] is not xs[1]:
        return None
    return make_call("silu", xs[0])


_SILU_ROOT = is_op("multiply")(_SILU_X, _SILU_SIGMOID).commutative().has_dtype("float32")
SILU_RULE = Rule("silu", _SILU_ROOT, _silu)
"""EfficientNet's SiLU (``x * sigmoid(x)``, as exported) as the ``silu`` op, so that it
fuses into the product before it."""


def scalar_near(value: float) -> Pattern:
    """A float constant of one element within 1e-6 relative of ``value``."""
    return is_const(lambda d: d.dtype.kind == "f" and math.isclose(float(d.reshape(-1)[0]),
                                                                  value, rel_tol=1e-6),
                    scalar=True)


_GELU_X = wildcard()
_GELU_ARG = (is_op("divide")(_GELU_X, scalar_near(math.sqrt(2.0)))
             | either("multiply", _GELU_X, scalar_near(math.sqrt(0.5)))).single_use()
_GELU_ERF = is_op("erf")(_GELU_ARG).single_use()
_GELU_ONE = either("add", _GELU_ERF, scalar_near(1.0)).single_use()
_GELU_PROD = either("multiply", _GELU_X, _GELU_ONE).single_use()
_GELU_ROOT = either("multiply", _GELU_PROD, scalar_near(0.5)).has_dtype("float32")


def _gelu(m: Match) -> Expr | None:
    """``x * (1 + erf(x / sqrt 2)) * 0.5`` (as torch.onnx exports GELU; the division may
    be a multiplication by 1 / sqrt 2, each step in either order) as ``gelu(x)``."""
    xs = m.all(_GELU_X)
    if len(xs) != 2 or xs[0] is not xs[1] or m.root.ty != xs[0].ty:
        return None   # not x's twice, or a constant of another rank broadcasts the result
    return make_call("gelu", xs[0], approximate="none")


GELU_RULE = Rule("gelu", _GELU_ROOT, _gelu)
"""GELU of the erf form as exported (ViT, DeiT, BERT, ConvNeXt, Whisper: five elementwise
ops reading x twice) as the ``gelu`` op, so that it fuses into the product before it
(plait_gelu_sv: a rational erf on vectors, with fused multiply-adds)."""


_GELU_T_X = wildcard()
_GELU_T_CUBE = (is_op("power")(_GELU_T_X, scalar_near(3.0))
                | either("multiply", _GELU_T_X,
                          is_op("multiply")(_GELU_T_X, _GELU_T_X).single_use())).single_use()
_GELU_T_SUM = either("add", _GELU_T_X, either("multiply", _GELU_T_CUBE,
                                                scalar_near(0.044715)).single_use())
_GELU_T_TANH = is_op("tanh")(
    either("multiply", _GELU_T_SUM.single_use(),
            scalar_near(math.sqrt(2.0 / math.pi))).single_use()).single_use()
_GELU_T_ONE = either("add", _GELU_T_TANH, scalar_near(1.0)).single_use()
_GELU_T_ROOT = (either("multiply", either("multiply", _GELU_T_X,
                                            scalar_near(0.5)).single_use(), _GELU_T_ONE)
                | either("multiply", either("multiply", _GELU_T_X, _GELU_T_ONE).single_use(),
                          scalar_near(0.5))).has_dtype("float32")


def _gelu_tanh(m: Match) -> Expr | None:
    """``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` as exported (GPT-2's
    ``gelu_new`` with ``pow(x, 3)``, torch.onnx's tanh-approximate GELU with ``x * (x *
    x)``; each step's operands in either order, the 0.5 on x or on the product) as
    ``gelu(x, approximate="tanh")``."""
    xs = m.all(_GELU_T_X)
    if len(xs) < 3 or any(x is not xs[0] for x in xs) or m.root.ty != xs[0].ty:
        return None   # not one x throughout, or a constant of another rank broadcasts
    return make_call("gelu", xs[0], approximate="tanh")


GELU_TANH_RULE = Rule("gelu_tanh", _GELU_T_ROOT, _gelu_tanh)
"""GELU of the tanh form as exported (GPT-2: eight elementwise ops reading x three
times) as the ``gelu`` op with ``approximate="tanh"``, so that it fuses into the product
before it (plait_gelu_tanh_sv: x sigmoid(2u), SiLU's quotient)."""


ACTIVATION_RULES: tuple[Rule, ...] = (SILU_RULE, GELU_RULE, GELU_TANH_RULE)
"""The three rules, in the order the ``c`` target applies them."""


RecognizeActivations = rewrite_pass(
    "RecognizeActivations", ACTIVATION_RULES,
    doc="Make SiLU and GELU (erf and tanh forms) spelled out elementwise the silu and "
        "gelu ops.")
"""The function pass of :data:`ACTIVATION_RULES` (``RecognizeActivations``): the ``c``
target's dispatch hook runs it first; run it by hand before ``c.DispatchGemm`` when
composing the dispatch passes yourself."""


__all__ = ["ACTIVATION_RULES", "GELU_RULE", "GELU_TANH_RULE", "SILU_RULE",
           "RecognizeActivations", "either", "scalar_near"]
