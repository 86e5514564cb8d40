"""Random well-typed modules round-trip through the text format: print -> parse gives
a structurally equal module with the same structural hash, and printing the parsed
module gives the same text again.

The modules are built with the BlockBuilder from random steps: ops drawn from the
registry (every elementwise/broadcast op whose arguments can be guessed, plus matmul,
reshape, permute_dims, concat, sum), tuples and their items, if/else, match_cast,
constants of every dtype with arbitrary bit patterns, scalars, shapes, strings,
calls of module functions, of nested functions and of extern functions, dataflow
blocks with random outputs, declared binding types, and clashing variable names.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.ir import (
    DTYPES,
    BindingBlock,
    BlockBuilder,
    Call,
    Constant,
    ExternFunc,
    GlobalVar,
    If,
    IRModule,
    IRTypeError,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    assert_structural_equal,
    structural_hash,
)
from plait.ir.expr import Op
from plait.ir.parser import parse
from plait.op import list_ops, make_call
from plait.op.registry import REQUIRED

DIMS = (1, 2, 3, "n", "m")
WORK_DTYPES = ("float32", "float16", "float64", "int32", "int8", "uint8")
NAMES = ("lv", "x", "out", "relu", "class", "a b", "lv1", "shape", "t")


def _guessable_ops() -> list[str]:
    """Registered elementwise/broadcast ops of one or two tensor inputs and no
    required attribute: random tensors of one dtype are plausible arguments."""
    out = []
    for d in list_ops():
        if d.pattern not in ("elemwise", "broadcast") or d.min_inputs != d.max_inputs:
            continue
        if d.min_inputs not in (1, 2) or any(s.default is REQUIRED for s in d.attrs.values()):
            continue
        out.append(d.name)
    return out


GUESSABLE = _guessable_ops()


class _Gen:
    """Draws and emits random bindings into a BlockBuilder."""

    def __init__(self, data: st.DataObject, bb: BlockBuilder, dtype: str) -> None:
        self.draw = data.draw
        self.bb = bb
        self.dtype = dtype

    def name(self) -> str:
        return self.draw(st.sampled_from(NAMES))

    def shape(self, max_rank: int = 3) -> tuple:
        rank = self.draw(st.integers(0, max_rank))
        return tuple(self.draw(st.sampled_from(DIMS)) for _ in range(rank))

    def tensor_type(self) -> TensorType:
        return TensorType(self.shape(), self.dtype)

    def pick(self, pool: list[Var]) -> Var:
        return pool[self.draw(st.integers(0, len(pool) - 1))]

    def try_emit(self, make, pool: list[Var], out: bool = False, **kw) -> Var | None:
        """Emit the call ``make()`` builds; a type error (a bad guess) emits nothing."""
        try:
            var = self.bb.emit(make(), self.name(), is_output=out, **kw)
        except (IRTypeError, TypeError, ValueError):
            return None
        if isinstance(var.ty, TensorType):
            pool.append(var)
        return var

    def constant(self) -> Constant:
        dtype = self.draw(st.sampled_from(DTYPES))
        shape = tuple(self.draw(st.integers(0, 3)) for _ in range(self.draw(st.integers(0, 2))))
        n = int(np.prod(shape, dtype=np.int64))
        if dtype == "bool":
            data = np.array(self.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
        elif self.draw(st.booleans()):
            size = n * np.dtype(dtype).itemsize
            raw = self.draw(st.binary(min_size=size, max_size=size))  # any bits: nan payloads...
            data = np.frombuffer(raw, dtype=dtype).copy()
        else:
            specials = [0, 1, -0.0, 0.5, float("nan"), float("inf"), -float("inf"), 1e-3]
            vals = self.draw(st.lists(st.sampled_from(specials), min_size=n, max_size=n))
            with np.errstate(invalid="ignore"):
                data = np.array(vals, dtype="float64").astype(dtype)
        return Constant(data.reshape(shape))

    def step(self, pool: list[Var], dataflow: bool, out: bool) -> None:
        """One random binding (or a failed guess, which emits nothing)."""
        draw, bb = self.draw, self.bb
        kind = draw(
            st.sampled_from(
                [
                    "guess",
                    "matmul",
                    "reshape",
                    "permute",
                    "concat",
                    "sum",
                    "tuple",
                    "if",
                    "match_cast",
                    "const",
                    "scalar",
                    "declared",
                    "nested",
                    "extern",
                    "helper",
                ]
            )
        )
        a = self.pick(pool)
        if kind == "guess" and GUESSABLE:
            op = draw(st.sampled_from(GUESSABLE))
            nargs = Op.get(op).definition.min_inputs
            args = [a] + [self.pick(pool) for _ in range(nargs - 1)]
            self.try_emit(lambda: make_call(op, *args), pool, out)
        elif kind == "matmul":
            b = self.pick(pool)
            self.try_emit(lambda: make_call("matmul", a, b), pool, out)
        elif kind == "reshape" and a.ty.shape is not None:
            shape = draw(
                st.sampled_from([(-1,), tuple(reversed(a.ty.shape)), (1, *a.ty.shape), a.ty.shape])
            )
            self.try_emit(lambda: make_call("reshape", a, shape=shape), pool, out)
        elif kind == "permute" and a.ty.shape is not None:
            axes = tuple(draw(st.permutations(range(len(a.ty.shape)))))
            self.try_emit(lambda: make_call("permute_dims", a, axes=axes), pool, out)
        elif kind == "concat":
            axis = draw(st.integers(-2, 2))
            self.try_emit(lambda: make_call("concat", Tuple((a, a)), axis=axis), pool, out)
        elif kind == "sum":
            axis = draw(st.one_of(st.none(), st.lists(st.integers(-2, 2), max_size=2, unique=True)))
            keep = draw(st.booleans())
            axis_attr = None if axis is None else tuple(axis)
            self.try_emit(lambda: make_call("sum", a, axis=axis_attr, keepdims=keep), pool, out)
        elif kind == "tuple":
            t = bb.emit(Tuple((a, self.pick(pool), Tuple((a,)))), self.name())
            i = draw(st.sampled_from([0, 1, -3]))
            self.try_emit(lambda: TupleGetItem(t, i), pool, out)
        elif kind == "if" and not dataflow:
            cond = self.cond
            branches = []
            for _ in range(2):
                bb.begin_scope(False)
                local = list(pool)
                for _ in range(draw(st.integers(0, 2))):
                    self.step(local, False, False)
                body = local[-1] if draw(st.booleans()) else self.pick(pool)
                bindings = bb.end_scope()
                blocks = (BindingBlock(tuple(bindings)),) if bindings else ()
                branches.append(SeqExpr(blocks, body))
            self.try_emit(lambda: If(cond, branches[0], branches[1]), pool, out)
        elif kind == "match_cast":
            ty = a.ty
            if ty.shape is not None and draw(st.booleans()):
                ty = TensorType(tuple("k" if isinstance(d, int) else d for d in ty.shape), ty.dtype)
            var = bb.emit_match_cast(a, ty, self.name(), is_output=out)
            pool.append(var)
        elif kind == "const":
            c = self.constant()
            var = bb.emit(c, self.name(), is_output=out)
            if c.data.dtype.name == self.dtype:
                pool.append(var)
            elif draw(st.booleans()):
                self.try_emit(lambda: make_call("add", var, var), pool, out)
        elif kind == "scalar":
            value = draw(
                st.sampled_from(
                    [
                        PrimValue(3, "int64"),
                        PrimValue(-1.5, "float32"),
                        PrimValue(True, "bool"),
                        ShapeExpr((1, "n")),
                        StringImm("s'\"x"),
                        PrimValue(float("nan"), "float64"),
                    ]
                )
            )
            bb.emit(value, self.name(), is_output=out)
        elif kind == "declared":
            declared = TensorType(None, a.ty.dtype) if draw(st.booleans()) else a.ty
            self.try_emit(lambda: make_call("relu", a), pool, out, ty=declared)
        elif kind == "nested":
            sub = BlockBuilder()
            sub.global_types = bb.global_types
            p = Var(self.name(), a.ty)
            with sub.function("inner", [p]):
                q = sub.emit(make_call("add", p, p))
                sub.emit_func_output(q)
            fvar = bb.emit(sub.get()["inner"], self.name(), is_output=out)
            self.try_emit(lambda: Call(fvar, (a,)), pool, out)
        elif kind == "extern":
            if draw(st.booleans()):
                self.try_emit(lambda: Call(ExternFunc("ext.fn"), (a,), ty=a.ty), pool, out)
            else:
                self.try_emit(
                    lambda: make_call("call_extern", ExternFunc("ext.gemm"), Tuple((a,)), out=a.ty),
                    pool,
                    out,
                )
        elif kind == "helper" and a.ty == self.helper_ty:
            self.try_emit(lambda: Call(GlobalVar("helper"), (a,)), pool, out)

    def function_body(self, params: list[Var]) -> Var:
        draw, bb = self.draw, self.bb
        pool = list(params)
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                with bb.dataflow():
                    local = list(pool)
                    outputs = []
                    for _ in range(draw(st.integers(1, 5))):
                        out = draw(st.booleans())
                        before = len(local)
                        self.step(local, True, out)
                        if out and len(local) > before:
                            outputs.append(local[-1])
                    pool.extend(v for v in outputs if type(v) is Var)
            else:
                for _ in range(draw(st.integers(1, 5))):
                    self.step(pool, False, False)
        return pool[-1] if draw(st.booleans()) else self.pick(pool)


def build_module(data: st.DataObject) -> IRModule:
    draw = data.draw
    dtype = draw(st.sampled_from(WORK_DTYPES))
    bb = BlockBuilder()
    gen = _Gen(data, bb, dtype)
    gen.helper_ty = gen.tensor_type()
    h = Var("h", gen.helper_ty)
    with bb.function("helper", [h], attrs={"kind": "helper", "scale": 0.5}):
        bb.emit_func_output(bb.emit(make_call("add", h, h)))
    params = [Var(gen.name(), gen.tensor_type()) for _ in range(draw(st.integers(1, 3)))]
    gen.cond = Var("c", TensorType((), "bool"))
    pure = draw(st.booleans())
    with bb.function("main", [*params, gen.cond], pure=pure):
        bb.emit_func_output(gen.function_body(params))
    attrs = draw(st.sampled_from([{}, {"target": "c"}, {"phase": "ingestion", "x": (1, 2.5)}]))
    return bb.get().with_attrs(**attrs) if attrs else bb.get()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_modules_round_trip(data: st.DataObject) -> None:
    mod = build_module(data)
    text = mod.script()
    parsed = parse(text)
    assert_structural_equal(mod, parsed)
    assert structural_hash(mod) == structural_hash(parsed)
    assert parsed.script() == text


def test_the_generator_reaches_the_registry_ops():
    assert {"add", "subtract", "multiply", "divide", "relu"} <= set(GUESSABLE)
