"""The well-formedness check's one-walk acceptance of the common function
(``_accepts_common``) against the general checks alone: the same violations on the
modules every pass of real models' pipelines makes (numpy and c), and on those modules
broken binding by binding (use before definition, a second definition, a wrong type,
an unregistered or unlowered op, a dataflow variable out of place, ...): a function
it accepts is one the general checks find nothing wrong with."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from transform_testlib import onnx_model

import plait
from plait.ir import (
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    Function,
    IRModule,
    Op,
    TensorType,
    Tuple,
    TupleType,
    Var,
    VarBinding,
)
from plait.ir import well_formed as wf
from plait.ir.module import PHASES
from plait.transform import PassContext, PassInstrument


def _violations(mod: IRModule, fast: bool) -> list[wf.Violation]:
    old = wf._FAST_ACCEPT
    wf._FAST_ACCEPT = fast
    try:
        return wf.well_formed(mod)
    finally:
        wf._FAST_ACCEPT = old


def _accepted(mod: IRModule) -> list[str]:
    """The functions of ``mod`` the one walk accepts."""
    level = PHASES.index(mod.phase)
    if level < 1:
        return []
    gtypes = {n: f.ty for n, f in mod.items() if f.ty is not None}
    allowed = wf._allowed_ops(level)
    return [name for name, f in mod.graph_functions()
            if f.attrs.get("compiler") is None
            and wf._accepts_common(f, mod, gtypes, level, allowed)]


class _Collect(PassInstrument):
    """Every module a pass returns."""

    def __init__(self) -> None:
        self.mods: list[tuple[str, IRModule]] = []

    def run_after_pass(self, mod, result, info) -> None:  # type: ignore[no-untyped-def]
        if info.kind != "sequential":
            self.mods.append((info.name, result))


def _pipeline_modules(request: pytest.FixtureRequest, model: str,
                      target: str) -> list[tuple[str, IRModule]]:
    collect = _Collect()
    with PassContext(instruments=[collect]):
        plait.build(onnx_model(model, request), target)
    return collect.mods


def _chain_modules() -> list[tuple[str, IRModule]]:
    from test_graph_passes import _chain

    collect = _Collect()
    with PassContext(instruments=[collect]):
        plait.build(_chain(40), "numpy")
    return collect.mods


MODELS = [("tiny_mlp", "numpy"), ("tiny_mlp", "c"), ("cnn", "numpy"), ("cnn", "c"),
          ("mlp", "numpy"), ("mlp", "c")]


@pytest.mark.parametrize(("model", "target"), MODELS)
def test_the_same_violations_after_every_pass(
        model: str, target: str, request: pytest.FixtureRequest) -> None:
    mods = _pipeline_modules(request, model, target)
    accepted = 0
    for name, mod in mods:
        assert _violations(mod, True) == _violations(mod, False) == [], name
        accepted += len(_accepted(mod))
    # the one walk takes the graph functions of most modules (a function of tuples of
    # tuples or of control flow goes to the general checks)
    assert accepted >= len([m for _, m in mods if m.phase != "ingestion"]) // 2


def test_the_chain_is_accepted_at_every_phase() -> None:
    for name, mod in _chain_modules():
        if mod.phase != "ingestion":
            assert _accepted(mod) == ["main"], name


# ---------------------------------------------------------------- broken modules


def _positions(func: Function) -> list[tuple[int, int]]:
    return [(i, j) for i, block in enumerate(func.body.blocks)  # type: ignore[attr-defined]
            for j in range(len(block.bindings))]


def _with_bindings(func: Function, blocks: list[list]) -> Function:
    old = func.body.blocks  # type: ignore[attr-defined]
    new = tuple(type(b)(tuple(bs)) for b, bs in zip(old, blocks))
    return replace(func, body=replace(func.body, blocks=new))


def _mutations(func: Function, rng: random.Random) -> list[tuple[str, Function]]:
    """``func`` broken in one place, each way."""
    blocks = [list(b.bindings) for b in func.body.blocks]  # type: ignore[attr-defined]
    pos = _positions(func)
    out: list[tuple[str, Function]] = []
    i, j = rng.choice(pos)
    b = blocks[i][j]
    var, value = b.var, b.value

    def put(what: str, new_binding: object, at: tuple[int, int] = (i, j)) -> None:
        bs = [list(x) for x in blocks]
        bs[at[0]][at[1]] = new_binding
        out.append((what, _with_bindings(func, bs)))

    if j + 1 < len(blocks[i]):
        bs = [list(x) for x in blocks]
        bs[i][j], bs[i][j + 1] = bs[i][j + 1], bs[i][j]
        out.append(("swap", _with_bindings(func, bs)))
    bs = [list(x) for x in blocks]
    del bs[i][j]
    out.append(("drop", _with_bindings(func, bs)))
    bs = [list(x) for x in blocks]
    bs[i].insert(j + 1, b)
    out.append(("defined twice", _with_bindings(func, bs)))
    put("untyped", VarBinding(replace(var, ty=None), value))
    put("wrong shape", VarBinding(replace(var, ty=TensorType((7, 5, 3), "float32")), value))
    put("wrong dtype", VarBinding(replace(var, ty=TensorType(
        getattr(var.ty, "shape", None), "int8")), value))
    other = DataflowVar if type(var) is Var else Var
    put("other kind of variable", VarBinding(other(var.name_hint, var.ty), value))
    if isinstance(value, Call):
        put("unregistered op", VarBinding(var, replace(value, op=Op.get("reluu"))))
        put("relu", VarBinding(var, replace(value, op=Op.get("relu"))))
        put("an undefined argument", VarBinding(var, replace(
            value, args=tuple(Var("ghost", a.ty) if isinstance(a, Var) else a
                              for a in value.args))))
        put("impure", VarBinding(var, replace(value, op=Op.get("builtin.call_dps"))))
        # (the types the one walk keeps per key of a call: the same key as earlier calls,
        # with a wrong annotation of the call or of its argument tuple)
        put("call annotated wrong", VarBinding(var, replace(
            value, ty=TensorType((7, 5, 3), "float32"))))
        tuples = [k for k, a in enumerate(value.args) if isinstance(a, Tuple) and a.fields]
        if tuples:
            k = tuples[-1]
            tup = value.args[k]
            wrong = replace(tup, ty=TupleType(tuple(
                TensorType((7, 5, 3), "int8") for _ in tup.fields)))
            put("tuple annotated wrong", VarBinding(var, replace(
                value, args=(*value.args[:k], wrong, *value.args[k + 1:]))))
    else:
        put("an undefined value", VarBinding(var, Var("ghost", var.ty)))
    kinds = {type(blk) for blk in func.body.blocks}  # type: ignore[attr-defined]
    flipped = tuple((BindingBlock if type(blk) is DataflowBlock else DataflowBlock)(
        blk.bindings) for blk in func.body.blocks)  # type: ignore[attr-defined]
    out.append((f"blocks {kinds} flipped",
                replace(func, body=replace(func.body, blocks=flipped))))
    out.append(("return type", replace(func, ret_ty=TensorType((9, 9, 9), "float32"))))
    out.append(("undefined result", replace(func, body=replace(
        func.body, body=Var("ghost", func.body.body.ty)))))  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize(("model", "target"), [*MODELS, ("chain", "numpy")])
def test_a_broken_function_is_never_accepted(
        model: str, target: str, request: pytest.FixtureRequest) -> None:
    rng = random.Random(f"{model}-{target}")
    mods = _chain_modules() if model == "chain" else _pipeline_modules(request, model, target)
    tried = broken = 0
    for name, mod in mods:
        for fname in _accepted(mod):
            func = mod[fname]
            if not _positions(func):
                continue
            for _ in range(3):
                for what, bad in _mutations(func, rng):
                    m = mod.with_functions({fname: bad})
                    slow = _violations(m, False)
                    assert _violations(m, True) == slow, (name, what)
                    tried += 1
                    if slow:
                        broken += 1
                        assert fname not in _accepted(m), (name, what)
    assert tried > 0 and broken > tried // 2


_NESTED = """
@module
class M:
    @function
    def main(c: Tensor((), "bool"), x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        a = relu(x)
        t = (a, x)
        u = t[0]
        if c:
            b = exp(u)
            r = b
        else:
            r = u
        def inner(z: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
            w = tanh(z)
            return w
        s = inner(r)
        return s
"""


@pytest.mark.parametrize("where", ["flat", "nested"])
def test_calls_any_finds_the_calls_iter_bindings_yields(where: str) -> None:
    """``calls_any``'s one loop over a function with nothing nested and its general
    walk (If branches, nested functions) agree with the bindings ``iter_bindings``
    yields, for every op name."""
    text = _NESTED if where == "nested" else """
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            a = relu(x)
            t = (a, x)
            u = t[0]
            b = exp(u)
            output(b)
        return b
"""
    func = plait.parse(text)["main"]
    called = {b.value.op.name for b, _ in wf.iter_bindings(func)
              if isinstance(b, VarBinding) and isinstance(b.value, Call)
              and isinstance(b.value.op, Op)}
    assert called >= {"relu", "exp"}
    for name in ["relu", "exp", "tanh", "add", "sigmoid"]:
        assert wf.calls_any(func, {name}) == (name in called), name
        assert wf._calls_any_nested(func, {name}) == (name in called), name
    assert not wf.calls_any(func, set())


def test_each_key_of_the_chain_is_inferred_once_at_every_phase(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The one walk infers a call's type once per key (op, attributes, argument types,
    the variable's and the call's type objects): at the build phase the chain's
    allocations (ExplicitMemory's), whose results are equal types of distinct objects
    (one per op of the chain), are inferred a few times, not once per binding."""
    inferred: list[str] = []
    real = wf._TypeCheck.binding

    def spy(self, b):  # type: ignore[no-untyped-def]
        inferred.append(b.var.name_hint)
        return real(self, b)

    mods: dict[str, IRModule] = {}
    for _, m in _chain_modules():  # what each transition check sees: a phase's first
        if m.phase != "ingestion":
            mods.setdefault(m.phase, m)
    assert set(mods) == {"optimization", "lowering", "build"}
    monkeypatch.setattr(wf._TypeCheck, "binding", spy)
    for phase, mod in mods.items():
        inferred.clear()
        assert wf.well_formed(mod) == []
        bindings = sum(len(b.bindings) for b in mod["main"].body.blocks)
        assert bindings >= 40 and len(inferred) <= 12, (phase, len(inferred))


def test_a_wrong_type_repeated_is_reported_at_each_binding() -> None:
    """Bindings of one key whose variables all have the same wrong type: the one walk
    reports every one of them (a key is kept only when its check found nothing), as
    the general checks do."""
    text = """
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        with dataflow():
            a = relu(x)
            b = relu(x)
            c = relu(x)
            output(c)
        return c
"""
    mod = plait.parse(text).with_phase("optimization")
    func = mod["main"]
    wrong = TensorType((7,), "float32")
    block = func.body.blocks[0]  # type: ignore[attr-defined]
    bad = [VarBinding(replace(b.var, ty=wrong), b.value) if b.var.name_hint in "ab" else b
           for b in block.bindings]
    m = mod.with_functions({"main": _with_bindings(func, [bad])})
    fast, slow = _violations(m, True), _violations(m, False)
    assert fast == slow
    assert sorted(v.binding for v in fast if "declared" in v.message) == ["a", "b"]
