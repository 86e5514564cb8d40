"""Shape subgraphs evaluated with size expressions at import time (values.py): products
and quotients of symbolic sizes, comparisons proved from sizes being >= 0, ``Where``
on them, slices ending at a symbolic size.  Each model's type is checked, and its
results against onnxruntime at two sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx_helpers import I64, init, model, run, vi

from plait.frontend.onnx import from_onnx
from plait.ir.symbolic import evaluate

ort = pytest.importorskip("onnxruntime")


def _c(name: str, values: list[int]) -> object:
    return init(name, np.array(values, np.int64))


def _check(m, feeds_at) -> None:  # type: ignore[no-untyped-def]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    mod = from_onnx(m)
    for feeds in feeds_at:
        want = sess.run(None, feeds)
        got = run(mod, *feeds.values())
        got = list(got) if isinstance(got, tuple) else [got]
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_product_of_sizes_is_an_expression() -> None:
    """``Reshape(x, [b * s, 4])`` from ``Shape``: typed ``(b * s, 4)``, no run-time shape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"]),
             helper.make_node("Gather", ["s", "i1"], ["t"]),
             helper.make_node("Mul", ["b", "t"], ["bt"]),
             helper.make_node("Unsqueeze", ["bt", "ax"], ["bt1"]),
             helper.make_node("Concat", ["bt1", "four"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = model(nodes, [vi("x", ["b", "t", 4])], [vi("y", None)],
              [_c("i0", 0), _c("i1", 1), _c("ax", [0]), _c("four", [4])])
    m.graph.initializer[0].CopyFrom(init("i0", np.array(0, np.int64)))
    m.graph.initializer[1].CopyFrom(init("i1", np.array(1, np.int64)))
    mod = from_onnx(m)
    assert str(mod["main"].body.ty) == 'Tensor((b * t, 4), "float32")'
    assert "shape_of" not in mod.script()
    rng = np.random.default_rng(0)
    _check(m, [{"x": rng.standard_normal((b, t, 4)).astype(np.float32)}
               for b, t in ((1, 3), (2, 5))])


def test_where_of_a_proved_comparison_feeds_expand() -> None:
    """The exporters' ``Where(Equal(shape, -1), ones, shape)`` before ``Expand``: the
    comparison is false for a size, so the shape is the size itself."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Equal", ["s", "minus1"], ["eq"]),
             helper.make_node("Where", ["eq", "ones", "s"], ["shape"]),
             helper.make_node("Expand", ["row", "shape"], ["y"])]
    m = model(nodes, [vi("x", ["n", 3])], [vi("y", None)],
              [_c("minus1", [-1, -1]), _c("ones", [1, 1]),
               init("row", np.arange(3, dtype=np.float32))])
    mod = from_onnx(m)
    assert str(mod["main"].body.ty) == 'Tensor((n, 3), "float32")'
    _check(m, [{"x": np.zeros((k, 3), np.float32)} for k in (1, 4)])


def test_a_slice_ends_at_a_symbolic_size_and_a_quotient_floors() -> None:
    """``table[:seq]`` (BERT's position ids) and ``x[:, : seq // 2]``."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "one", "two"], ["seq"]),
             helper.make_node("Slice", ["table", "zero", "seq", "zero"], ["pos"]),
             helper.make_node("Div", ["seq", "two"], ["half"]),
             helper.make_node("Slice", ["x", "zero", "half", "one"], ["y"])]
    m = model(nodes, [vi("x", [2, "seq"])], [vi("pos", None, I64), vi("y", None)],
              [_c("zero", [0]), _c("one", [1]), _c("two", [2]),
               init("table", np.arange(64, dtype=np.int64))])
    mod = from_onnx(m)
    pos_ty, y_ty = mod["main"].body.ty.fields
    assert str(pos_ty) == 'Tensor((min(64, seq),), "int64")'
    for k in (0, 3, 8, 1001):  # an exact size expression (interval bounds cannot drop
        assert evaluate(y_ty.shape[1], {"seq": k}) == k // 2  # its min(seq, ...))
    _check(m, [{"x": np.arange(2 * k, dtype=np.float32).reshape(2, k)} for k in (3, 8)])


def test_a_comparison_that_depends_on_the_sizes_stays_at_run_time() -> None:
    """``n < 4`` is neither proved nor refuted: computed when the model runs."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Less", ["s", "four"], ["lt"]),
             helper.make_node("Cast", ["lt"], ["y"], to=I64)]
    m = model(nodes, [vi("x", ["n"])], [vi("y", None, I64)], [_c("four", [4])])
    _check(m, [{"x": np.zeros(k, np.float32)} for k in (2, 6)])


def test_integer_div_of_a_size_that_may_be_negative_truncates() -> None:
    """``Div(n - c, k)`` is ONNX's truncating division even where ``n - c < 0``:
    ``max(n - c, 0) // k - max(c - n, 0) // k``, against numpy's truncation."""
    from plait.frontend.onnx.values import SYM_BINOPS
    from plait.ir import symbolic

    for c in (1, 3, 7):
        for k in (2, 3):
            d = SYM_BINOPS["div"](symbolic.sub("n", c), k)
            for n in range(12):
                want = int(np.trunc((n - c) / k))
                assert evaluate(d, {"n": n}) == want, (c, k, n, str(d))
    assert SYM_BINOPS["div"](symbolic.sub("n", 1), "m") is None   # the divisor may be 0
