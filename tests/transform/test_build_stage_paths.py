"""The build stage's fast paths against their general paths: ExplicitMemory's lowering
of a call with a tensor result (from what it keeps per pair of types) against its
general lowering, on the module each real model's pipeline hands it (numpy and c) and
on the scaling benchmark's chain; ExplicitMemory, which leaves no dataflow block,
against ToNonDataflow then ExplicitMemory (the pipeline's two walks before they were
one); PlanMemory's placement against a brute-force first fit on random lifetimes."""

from __future__ import annotations

import random

import pytest
from transform_testlib import onnx_model

import plait
from plait.ir import (
    BindingBlock,
    BlockBuilder,
    DataflowBlock,
    DataflowVar,
    ExternFunc,
    Function,
    If,
    SeqExpr,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    VarBinding,
)
from plait.ir.structural import structural_equal
from plait.ir.visitor import post_order
from plait.op import make_call
from plait.transform import PassContext, PassInstrument
from plait.transform import explicit_memory as em
from plait.transform.plan_memory import ALIGNMENT, place
from plait.transform.to_non_dataflow import to_non_dataflow


class _Before(PassInstrument):
    def __init__(self, pass_name: str) -> None:
        self.pass_name = pass_name
        self.mods: list[plait.IRModule] = []

    def run_before_pass(self, mod, info) -> None:  # type: ignore[no-untyped-def]
        if info.name == self.pass_name:
            self.mods.append(mod)


def _module_before(name: str, model: str, target: str,
                   request: pytest.FixtureRequest) -> plait.IRModule:
    if model == "chain":
        from test_graph_passes import _chain

        mod = _chain(200)
    else:
        mod = onnx_model(model, request)
    grab = _Before(name)
    with PassContext(instruments=[grab]):
        plait.build(mod, target)
    (before,) = grab.mods
    return before


@pytest.mark.parametrize(("model", "target"), [
    ("chain", "numpy"), ("tiny_mlp", "numpy"), ("tiny_mlp", "c"), ("cnn", "numpy"),
    ("cnn", "c"), ("mlp", "numpy"), ("mlp", "c")])
def test_explicit_memory_fast_path_makes_the_general_paths_module(
        model: str, target: str, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module_before("ExplicitMemory", model, target, request)
    fast = {n: em.explicit_memory(f) for n, f in mod.graph_functions()}

    def general_only(self, out_ty, var_ty):  # type: ignore[no-untyped-def]
        return (out_ty, var_ty, None)

    monkeypatch.setattr(em._ExplicitMemory, "_tensor_plan", general_only)
    for name, func in mod.graph_functions():
        assert structural_equal(fast[name], em.explicit_memory(func)), name


def _no_dataflow(func: Function) -> bool:
    return not any(isinstance(n, DataflowBlock | DataflowVar) for n in post_order(func))


@pytest.mark.parametrize(("model", "target"), [
    ("chain", "numpy"), ("tiny_mlp", "numpy"), ("tiny_mlp", "c"), ("cnn", "numpy"),
    ("cnn", "c"), ("mlp", "numpy"), ("mlp", "c")])
@pytest.mark.parametrize("general", [False, True])
def test_explicit_memory_makes_the_module_of_to_non_dataflow_then_explicit_memory(
        model: str, target: str, general: bool, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _module_before("ExplicitMemory", model, target, request)
    if general:  # every call through the general lowering
        monkeypatch.setattr(em._ExplicitMemory, "_tensor_plan",
                            lambda self, out_ty, var_ty: (out_ty, var_ty, None))
    for name, func in mod.graph_functions():
        if func.attrs.get("compiler"):
            continue
        one = em.explicit_memory(func)
        assert _no_dataflow(one), name
        assert structural_equal(one, em.explicit_memory(to_non_dataflow(func))), name


def _ext(name: str, *args: object, out: object, attrs: object = None) -> object:
    return make_call("call_extern", ExternFunc(name), Tuple(tuple(args)), out=out,
                     attrs=attrs)


def _every_kind_of_binding() -> Function:
    """Dataflow blocks between ordinary blocks holding every kind of binding
    ExplicitMemory meets: tensor results (a variable typed as its result, one typed
    less precisely), a tuple result, a result of unknown rank (call_alloc), a tuple,
    an item, an alias, a match_cast, and an If whose branches hold dataflow blocks."""
    t23, t6 = TensorType((2, 3), "float32"), TensorType((6,), "float32")
    x = Var("x", t23)
    c = Var("c", TensorType((), "bool"))
    bb = BlockBuilder()
    with bb.function("main", [x, c]):
        a0 = bb.emit(_ext("numpy.relu", x, out=t23), "a0")
        with bb.dataflow():
            a = bb.emit(_ext("numpy.relu", a0, out=t23), "a")
            w = bb.emit(_ext("numpy.exp", a, out=t23), "w", ty=TensorType(None, "float32"))
            t = bb.emit(Tuple((a, w)), "t")
            i = bb.emit(TupleGetItem(t, 1), "i")
            al = bb.emit(i, "al")
            s = bb.emit(_ext("numpy.split", al, out=TupleType((t23, t23)),
                             attrs={"indices_or_sections": 2}), "s")
            s0 = bb.emit(TupleGetItem(s, 0), "s0")
            u = bb.emit(_ext("numpy.unique", s0, out=TensorType(None, "float32")), "u")
            m = bb.emit_match_cast(u, t6, "m")
            o = bb.emit_output(_ext("numpy.exp", m, out=t6), "o")
        bb.emit_func_output(o)
    func = bb.get()["main"]
    branches = []
    for k in range(2):
        d, g = DataflowVar(f"d{k}", t6), Var(f"g{k}", t6)
        block = DataflowBlock((VarBinding(d, _ext("numpy.relu", o, out=t6)),
                               VarBinding(g, _ext("numpy.exp", d, out=t6))))
        branches.append(SeqExpr((block,), g, ty=t6))
    f, r = Var("f", t6), Var("r", t6)
    last = BindingBlock((VarBinding(f, If(c, branches[0], branches[1], ty=t6)),
                         VarBinding(r, _ext("numpy.exp", f, out=t6))))
    return Function(func.params, SeqExpr((*func.body.blocks, last), r, ty=t6), t6)


def test_explicit_memory_leaves_no_dataflow_block_on_every_kind_of_binding() -> None:
    func = _every_kind_of_binding()
    assert any(isinstance(b, DataflowBlock) for b in func.body.blocks)
    one = em.explicit_memory(func)
    assert _no_dataflow(one)
    assert len(one.body.blocks) == 1 and type(one.body.blocks[0]) is BindingBlock
    assert structural_equal(one, em.explicit_memory(to_non_dataflow(func)))
    names = [b.var.name_hint for b in one.body.blocks[0].bindings]
    assert names[:3] == ["a0", "_", "a"]  # the call's own variable holds its allocation
    ops = [b.value.op.name for b in one.body.blocks[0].bindings
           if hasattr(b.value, "op") and hasattr(b.value.op, "name")]
    assert "builtin.call_alloc" in ops and "builtin.alloc_tensor" in ops


def _first_fit(tensors: list[tuple[int, int, int]]) -> tuple[list[int], int]:
    """Each tensor at the lowest aligned offset where its bytes overlap no tensor placed
    before it whose lifetime overlaps its own: every candidate (0 and the end of each
    such tensor) tried in turn."""
    done: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets = []
    for nbytes, first, last in tensors:
        size = -(-nbytes // ALIGNMENT) * ALIGNMENT
        near = [(o, sz) for o, sz, f, la in done if f <= last and first <= la]
        candidates = sorted({0, *(o + sz for o, sz in near)})
        offset = next(c for c in candidates
                      if all(c + size <= o or o + sz <= c for o, sz in near))
        offsets.append(offset)
        done.append((offset, size, first, last))
    return offsets, max((o + sz for o, sz, _, _ in done), default=0)


@pytest.mark.parametrize("seed", range(20))
def test_placement_is_the_first_fit(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([5, 20, 60])
    tensors = []
    for first in rng.sample(range(n), k=rng.randint(1, n)):
        last = min(n - 1, first + rng.choice([0, 1, 2, 5, n]))
        tensors.append((rng.choice([1, 64, 100, 256, 4096, 5000]), first, last))
    tensors.sort(key=lambda t: (-t[0], t[1]))
    assert place(tensors, n) == _first_fit(tensors)
    assert place(tensors, n, sorted(t[1] for t in tensors)) == _first_fit(tensors)


def test_thousands_of_tensors_alive_at_once_are_placed_in_linear_time() -> None:
    """A Split into 20,000 parts keeps 20,000 tensors alive together: past
    FIRST_FIT_LIMIT each goes above the others (sorting them all for every tensor took
    minutes at 65,535).  The plan stays valid: no two bytes shared by tensors alive at
    the same time; empty tensors take none."""
    import time

    from plait.transform.plan_memory import FIRST_FIT_LIMIT

    rng = random.Random(5)
    n = 20_000
    tensors = [(rng.choice([0, 4, 64, 300]), rng.randint(0, 3), rng.randint(4, 9))
               for _ in range(n)]
    tensors.sort(key=lambda t: (-t[0], t[1]))
    t0 = time.perf_counter()
    offsets, arena = place(tensors, 10)
    assert time.perf_counter() - t0 < 20  # (quadratic: minutes)
    spans = sorted((o, o + -(-nb // ALIGNMENT) * ALIGNMENT) for o, (nb, _, _) in
                   zip(offsets, tensors) if nb)
    # every tensor here is alive at binding 4: none may share a byte with another
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert arena == spans[-1][1] and len(spans) > FIRST_FIT_LIMIT
