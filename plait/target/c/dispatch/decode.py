"""The ``c`` target's decode rules (issue 31, item 3; docs/llm.md): which graph patterns
become calls of the ``decode`` kernel family (:mod:`plait.target.c.kernels.decode`).

:class:`DispatchDecode` (``c.DispatchDecode``, before ``c.DispatchGemm``) takes a float32
product by a constant weight of at least ``decode_min_weights`` (:data:`MIN_WEIGHTS`)
elements whose rows are few — static and at most
:data:`~plait.target.c.kernels.decode.GEMV_MAX_ROWS`, or, with the target's
``decode=True`` (what :func:`plait.llm.build_causal_lm` sets), symbolic (a language
model's ``batch * seq``: one row per decoded token) —

    y = matmul(x, permute_dims(W))     # W constant (N, K): torch's linear, not folded
    y = matmul(x, Wt)                  # Wt constant (K, N): the transpose folded
    y = linear(x, W[, b])              # W constant (N, K)
    y = reshape(y, ...)                # optional, the last axis kept
    y = add(y, r)                      # optional: a residual of y's shape, or a bias (N,)

and rewrites it into one call of a wrapper (:func:`~plait.target.c.kernels.decode.linear_call`)
that runs ``plait_gemv`` (the weights streamed once on all threads) for a few rows and
``plait_gemm`` for more, both reading the weight ``(N, K)`` where it lies: the weights
are stored once, as the model has them (a folded ``(K, N)`` transpose is transposed back
at compile time).  Products of many static rows are left to ``c.DispatchGemm``, which
packs its weights at compile time, and smaller weights (they come from the caches, where
the packed product is as fast and fuses its activation); so are products of symbolic
rows unless asked for: a
model exported with an open batch (most ONNX files) would otherwise trade its packed
weights and fused epilogues for a product made for one row.

It also makes the attention over the cache that :mod:`plait.llm` exports one call of
``plait_kv_attention`` (:mod:`.decode_attention`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import Call, Constant, Expr, ExternFunc, Function, Op, Tuple, Var
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.dead_code import dead_code_elimination
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, Pattern, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, functions_to_rewrite, rewrite_function

from ..kernels.decode import GEMV_MAX_ROWS, kv_attention_call, linear_call
from ..kernels.registry import record_calls
from ..shapes import float_shape
from .common import constant_data, fused_span, transposed_weight
from .decode_attention import kv_attention_pattern, trace_kv_attention


def _op(value: Any, *names: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in names


def _weight(call: Call, m: Match) -> tuple[np.ndarray, Expr | None] | None:
    """The product's weight as stored ``(N, K)`` float32 and its bias (linear's third
    argument), or None when the weight is not a constant of that form."""
    w = constant_data(call.args[1], m)
    if _op(call, "linear"):
        if w is None or w.ndim != 2:
            return None
        return np.asarray(w, np.float32), (call.args[2] if len(call.args) == 3 else None)
    if w is not None:
        return (np.ascontiguousarray(np.asarray(w, np.float32).T), None) if w.ndim == 2 else None
    wt = transposed_weight(call.args[1], m)
    return None if wt is None else (np.asarray(wt, np.float32), None)


MIN_WEIGHTS = 1 << 16
"""The fewest weights (N * K) of a product of symbolic rows that :class:`DispatchDecode`
takes (256 KB of float32): smaller weights come from the caches, where the product
with weights packed at compile time (``c.DispatchGemm``) is as fast at one row and
faster at many."""


def _few_rows(x_shape: tuple[Any, ...], weights: int, min_weights: int,
              symbolic_rows: bool) -> bool:
    """Whether a product of rows ``x_shape[:-1]`` by ``weights`` weights is the decode
    family's: at least ``min_weights`` weights, and at most GEMV_MAX_ROWS static rows or
    (``symbolic_rows``) symbolic ones."""
    if weights < min_weights:
        return False
    rows = x_shape[:-1]
    if all(type(d) is int for d in rows):
        return int(np.prod(rows, dtype=np.int64)) <= GEMV_MAX_ROWS
    return symbolic_rows


def linear_pattern() -> Pattern:
    """``matmul|linear >> reshape? >> add(^, _)|add(_, ^)?`` (each step's input used
    only by it)."""
    prod = is_op("matmul", "linear").has_dtype("float32")
    viewed = prod | is_op("reshape")(prod.single_use())
    return (is_op("add")(viewed.single_use(), wildcard())
            | is_op("add")(wildcard(), viewed.single_use()) | viewed)


def decode_rule(wrappers: dict[str, tuple[str, CFunction]],
                min_weights: int = MIN_WEIGHTS, symbolic_rows: bool = True) -> Rule:
    """The rule of :class:`DispatchDecode`; records each call's wrapper in ``wrappers``."""

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = sorted(m.bindings)
        calls = [g.bindings[i].value for i in members]
        prod = calls[0]
        assert isinstance(prod, Call)
        x = prod.args[0]
        xs, ys = float_shape(x), float_shape(prod)
        found = _weight(prod, m)
        if xs is None or ys is None or found is None or len(xs) < 2 or 0 in xs:
            return None
        w, bias = found
        n, k = w.shape
        if (xs[-1] != k or tuple(ys) != tuple(xs[:-1]) + (n,)
                or not _few_rows(xs, n * k, min_weights, symbolic_rows)):
            return None
        if bias is not None and float_shape(bias) != (n,):
            return None
        res = None
        out_shape = ys
        if len(calls) > 1 and _op(calls[1], "reshape"):
            out_shape = float_shape(calls[1])
            if out_shape is None or out_shape[-1] != n:
                return None
        if _op(calls[-1], "add"):
            y = g.bindings[members[-2]].var
            add = calls[-1]
            other = add.args[1] if add.args[0] is y else add.args[0]
            if add.ty != y.ty:
                return None
            if other.ty == add.ty:
                res = other                  # a residual
            elif bias is None and float_shape(other) == (n,):
                bias = other                 # a bias (GPT-2's addmm)
            else:
                return None
        try:
            call = linear_call(xs, n, k, bias=bias is not None,
                               res_shape=float_shape(res) if res is not None else None,
                               out_shape=out_shape)
        except UnboundSize:
            return None
        wrappers.setdefault(call.symbol, (call.code, call.function))
        args = [x, Constant(np.ascontiguousarray(w))]
        args += [e for e in (bias, res) if e is not None]
        root = g.bindings[members[-1]]
        return make_call("call_extern", ExternFunc(call.symbol), Tuple(tuple(args)),
                         out=root.var.ty, span=fused_span(g, members, root))

    return Rule("c.decode_linear", linear_pattern(), rewrite)


def kv_attention_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The attention rule of :class:`DispatchDecode` (:mod:`.decode_attention`)."""

    def rewrite(m: Match) -> Expr | None:
        root = m.root
        value = m.definition(root) if isinstance(root, Var) else root
        if not isinstance(value, Call):
            return None
        found = trace_kv_attention(m, value)
        if found is None:
            return None
        sh = found["shapes"]
        try:
            call = kv_attention_call(sh["q"], sh["kp"], sh["kn"], sh["out"], found["scale"],
                                     found["window"])
        except UnboundSize:
            return None
        wrappers.setdefault(call.symbol, (call.code, call.function))
        g = m.graph
        members = sorted(m.bindings)
        last = g.bindings[members[-1]]
        args = tuple(found[k] for k in ("q", "kp", "vp", "kn", "vn"))
        return make_call("call_extern", ExternFunc(call.symbol), Tuple(args),
                         out=last.var.ty, span=fused_span(g, members, last))

    return Rule("c.decode_kv_attention", kv_attention_pattern(), rewrite)


def dispatch_decode(mod: IRModule, skip: Any = None, min_weights: int = MIN_WEIGHTS,
                    symbolic_rows: bool = True) -> IRModule:
    """``mod`` with the products of few rows by constant weights rewritten into calls of
    the decode family (see the module docstring)."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    rules = [kv_attention_rule(wrappers), decode_rule(wrappers, min_weights, symbolic_rows)]
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = rewrite_function(f, rules[:1], mod, name=name)
        if nf is not f:
            nf = dead_code_elimination(nf)
        nf = rewrite_function(nf, rules[1:], mod, name=name)
        if nf is not mod[name]:
            funcs[name] = nf
    return record_calls(mod, wrappers, "plait_decode_calls", funcs)


@module_pass(name="c.DispatchDecode", phases=("optimization",))
class DispatchDecode:
    """Send float32 products of few rows by constant weights of at least
    ``min_weights`` elements (:data:`MIN_WEIGHTS`), and attention over a language
    model's key/value cache, to the decode family; products of symbolic rows too when
    ``symbolic_rows`` (the ``c`` target's ``decode=True``, which
    :func:`plait.llm.build_causal_lm` asks for)."""

    def __init__(self, min_weights: int = MIN_WEIGHTS, symbolic_rows: bool = False, *,
                 codegens: Any = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]
        self.min_weights = int(min_weights)
        self.symbolic_rows = bool(symbolic_rows)

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_decode(mod, skip=skips_external(self, ctx),  # type: ignore[arg-type]
                               min_weights=self.min_weights,
                               symbolic_rows=self.symbolic_rows)


__all__ = ["MIN_WEIGHTS", "DispatchDecode", "decode_rule", "dispatch_decode",
           "kv_attention_rule", "linear_pattern"]
