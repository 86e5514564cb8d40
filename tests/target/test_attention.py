"""c.DispatchAttention: softmax(scale * Q @ K^T) @ V as one plait_attention call.

Results are checked against numpy in float64 (a max-subtracted softmax) at rtol 2e-5 /
atol 2e-5: the outputs are convex combinations of values in [-1, 1], the scores float32
sums of up to 64 products, the exponential within 1 ulp.  Shapes are chosen to hit the
kernel's edges: query rows that are not a multiple of the 6-row tile, key lengths and
head sizes that are not multiples of the 16-column panel, one head, batches, keys
shared by all heads (a broadcast: stride 0), and queries and keys of different lengths.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from graph_helpers import build_graph, const, emit  # tests/target

import plait
from plait.ir.expr import Call, ExternFunc
from plait.ir.visitor import post_order
from plait.runtime import VirtualMachine
from plait.target.c import DispatchAttention

RTOL = ATOL = 2e-5
RNG = np.random.default_rng(11)


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


_build_graph, _call = build_graph, emit


def _scalar(v: float):  # type: ignore[no-untyped-def]
    return const(np.array([v], np.float32))


def _dispatched(mod: plait.IRModule) -> tuple[list[str], list[str]]:
    """(extern symbols, other ops) of main after c.DispatchAttention."""
    out = DispatchAttention()(mod.with_attrs(phase="optimization"))
    nodes = [n for n in post_order(out["main"].body) if isinstance(n, Call)]
    externs = [n.args[0].symbol for n in nodes if isinstance(n.args[0], ExternFunc)
               and getattr(n.op, "name", "") == "call_extern"]
    ops = [n.op.name for n in nodes if getattr(n.op, "name", "") != "call_extern"]
    return externs, ops


def _run(mod: plait.IRModule, *args: np.ndarray, target: str | plait.Target = "c") -> np.ndarray:
    return VirtualMachine(plait.build(mod, target))["main"](*args)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ref_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """softmax(scale * q @ k^T) @ v in float64 (q: (..., SQ, D), k and v: (..., SK, *))."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    return _softmax(scale * (q @ np.swapaxes(k, -1, -2))) @ v


def _fused_qkv(s: int, h: int, d: int):  # type: ignore[no-untyped-def]
    """The graph PyTorch's MultiheadAttention exports (batch first, batch 1): one QKV
    projection output (s, 3*h*d) split by slicing, heads by reshape and transpose, the
    scale as sqrt on both Q and K^T, and the heads merged back by a transpose."""
    e = h * d
    c = float(d) ** -0.25

    def body(bb, p):  # type: ignore[no-untyped-def]
        x = _call(bb, "reshape", p[0], shape=(s, 3, e))
        x = _call(bb, "permute_dims", x, axes=(1, 0, 2))        # (3, s, e): a view
        heads = []
        for i in range(3):
            t = _call(bb, "strided_slice", x, axes=(0,), begin=(i,), end=(i + 1,))
            t = _call(bb, "squeeze", t, axis=0)
            t = _call(bb, "reshape", t, shape=(s, h, d))
            heads.append(_call(bb, "permute_dims", t, axes=(1, 0, 2)))   # (h, s, d)
        q = _call(bb, "multiply", heads[0], _scalar(c))
        kt = _call(bb, "permute_dims", heads[1], axes=(0, 2, 1))         # (h, d, s)
        kt = _call(bb, "multiply", kt, _scalar(c))
        scores = _call(bb, "matmul", q, kt)
        probs = _call(bb, "softmax", scores, axis=2)
        o = _call(bb, "matmul", probs, heads[2])                         # (h, s, d)
        o = _call(bb, "permute_dims", o, axes=(1, 0, 2))                 # (s, h, d)
        return _call(bb, "reshape", o, shape=(s, e))

    return body


def _fused_qkv_ref(qkv: np.ndarray, s: int, h: int, d: int) -> np.ndarray:
    heads = qkv.reshape(s, 3, h, d).transpose(1, 2, 0, 3)               # (3, h, s, d)
    o = _ref_attention(heads[0], heads[1], heads[2], 1.0 / np.sqrt(d))
    return o.transpose(1, 0, 2).reshape(s, h * d)


@pytest.mark.parametrize("s,h,d", [(128, 4, 64), (13, 3, 20), (7, 1, 5), (40, 2, 16)])
def test_fused_qkv_heads_are_read_in_place(s: int, h: int, d: int) -> None:
    """The heads are views of the QKV tensor and the output is written head-merged: one
    call, no slicing, transposing, scaling or softmax left."""
    qkv = _rand(s, 3 * h * d)
    mod = _build_graph({"qkv": qkv.shape}, _fused_qkv(s, h, d))
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and externs[0].startswith("plait_attention_")
    assert ops == ["reshape"]                      # only the final (free) reshape remains
    np.testing.assert_allclose(_run(mod, qkv), _fused_qkv_ref(qkv, s, h, d),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("b,h,sq,sk,d,dv", [(2, 3, 9, 21, 8, 24), (1, 1, 1, 1, 1, 1),
                                             (1, 2, 50, 33, 64, 17)])
def test_separate_q_k_v_with_a_divided_score(b: int, h: int, sq: int, sk: int, d: int,
                                             dv: int) -> None:
    """Queries and keys of different lengths, V of another width, the scale as a
    division of the scores (the common hand-written form), batch and head axes."""
    q, k, v = _rand(b, h, sq, d), _rand(b, h, sk, d), _rand(b, h, sk, dv)

    def body(bb, p):  # type: ignore[no-untyped-def]
        kt = _call(bb, "permute_dims", p[1], axes=(0, 1, 3, 2))
        scores = _call(bb, "divide", _call(bb, "matmul", p[0], kt), _scalar(np.sqrt(d)))
        return _call(bb, "matmul", _call(bb, "softmax", scores, axis=-1), p[2])

    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape}, body)
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and ops == []
    np.testing.assert_allclose(_run(mod, q, k, v), _ref_attention(q, k, v, 1 / np.sqrt(d)),
                               rtol=RTOL, atol=ATOL)


def test_keys_shared_by_all_heads_broadcast() -> None:
    """Multi-query attention: K and V have one head, Q has four; the batch dimension
    broadcasts (stride 0), as in matmul."""
    q, k, v = _rand(4, 30, 16), _rand(1, 16, 30), _rand(1, 30, 16)

    def body(bb, p):  # type: ignore[no-untyped-def]
        probs = _call(bb, "softmax", _call(bb, "matmul", p[0], p[1]), axis=2)
        return _call(bb, "matmul", probs, p[2])

    mod = _build_graph({"q": q.shape, "kt": k.shape, "v": v.shape}, body)
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and ops == []
    ref = _ref_attention(q, np.swapaxes(k, -1, -2), v, 1.0)
    np.testing.assert_allclose(_run(mod, q, k, v), ref, rtol=RTOL, atol=ATOL)


def test_large_scores_and_nan_behave_like_numpy() -> None:
    """Scores far beyond exp's range (up to 512: exp overflows float32 past 88.7) are
    made safe by subtracting the row's maximum; a NaN in a query row makes that row's
    output NaN (numpy's softmax does the same).  Q and K are small integers, so the
    float32 scores are exact and the float64 reference is comparable at 2e-5."""
    q = RNG.integers(-8, 9, (2, 12, 8)).astype(np.float32)
    k = RNG.integers(-8, 9, (2, 12, 8)).astype(np.float32)
    v = _rand(2, 12, 8)
    q[1, 5, 3] = np.nan

    def body(bb, p):  # type: ignore[no-untyped-def]
        kt = _call(bb, "permute_dims", p[1], axes=(0, 2, 1))
        probs = _call(bb, "softmax", _call(bb, "matmul", p[0], kt), axis=-1)
        return _call(bb, "matmul", probs, p[2])

    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape}, body)
    assert len(_dispatched(mod)[0]) == 1
    got = _run(mod, q, k, v)
    ref = _ref_attention(q, k, v, 1.0)
    assert np.isnan(got[1, 5]).all() and not np.isnan(np.delete(got[1], 5, axis=0)).any()
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def _plain(bb, p, axis: int = -1, extra: bool = False, mask: bool = False):  # type: ignore[no-untyped-def]
    kt = _call(bb, "permute_dims", p[1], axes=(0, 2, 1))
    scores = _call(bb, "matmul", p[0], kt)
    if mask:   # two masks: one is taken, not two
        scores = _call(bb, "add", _call(bb, "add", scores, p[3]), p[3])
    probs = _call(bb, "softmax", scores, axis=axis)
    out = _call(bb, "matmul", probs, p[2])
    return _call(bb, "add", out, _call(bb, "sum", scores, axis=(2,), keepdims=True)) \
        if extra else out


@pytest.mark.parametrize("case", ["softmax_axis", "scores_used_twice", "mask"])
def test_what_it_does_not_take_stays_correct(case: str) -> None:
    """A softmax over another axis, scores used elsewhere and two additive masks are not
    taken (they stay separate ops) and still compute the right thing."""
    q, k, v, m = _rand(2, 6, 6), _rand(2, 6, 6), _rand(2, 6, 6), _rand(2, 6, 6)
    kw = {"softmax_axis": dict(axis=1), "scores_used_twice": dict(extra=True),
          "mask": dict(mask=True)}[case]
    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape, "m": m.shape},
                       lambda bb, p: _plain(bb, p, **kw))
    externs, ops = _dispatched(mod)
    assert externs == [] and "softmax" in ops
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    if case == "mask":
        s = s + 2 * m
    axis = 1 if case == "softmax_axis" else -1
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    ref = (e / e.sum(axis=axis, keepdims=True)) @ v
    if case == "scores_used_twice":
        ref = ref + s.sum(axis=2, keepdims=True)
    np.testing.assert_allclose(_run(mod, q, k, v, m), ref, rtol=1e-4, atol=1e-4)


def test_padding_mask_of_a_bert_style_model() -> None:
    """The additive padding mask of BERT-style models: (batch, keys), made (batch, 1, 1,
    keys) by expand_dims (read in place: strides of 0 over heads and query rows), added
    to the scaled scores."""
    b, h, s, d = 2, 3, 20, 16
    q, k, v = _rand(b, h, s, d), _rand(b, h, s, d), _rand(b, h, s, d)
    mask = np.where(RNG.uniform(size=(b, s)) < 0.3, -10000.0, 0.0).astype(np.float32)

    def body(bb, p):  # type: ignore[no-untyped-def]
        kt = _call(bb, "permute_dims", p[1], axes=(0, 1, 3, 2))
        scores = _call(bb, "divide", _call(bb, "matmul", p[0], kt), _scalar(np.sqrt(d)))
        m = _call(bb, "expand_dims", p[3], axis=(1, 2))
        scores = _call(bb, "add", scores, m)
        return _call(bb, "matmul", _call(bb, "softmax", scores, axis=3), p[2])

    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape, "m": mask.shape}, body)
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and ops == []
    s64 = (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) / np.sqrt(d) + mask[:, None, None]
    np.testing.assert_allclose(_run(mod, q, k, v, mask), _softmax(s64) @ v,
                               rtol=RTOL, atol=ATOL)


def test_causal_mask_before_the_scale_and_a_fully_masked_row() -> None:
    """A constant causal mask (-inf above the diagonal, a bias below it) added before the
    scale, so the scale applies to it too; a row masked entirely gives NaN, as numpy's
    softmax does."""
    h, s, d = 2, 14, 8
    q, k, v = _rand(h, s, d), _rand(h, s, d), _rand(h, s, d)
    mask = np.triu(np.full((s, s), -np.inf, np.float32), 1) + _rand(s, s) * 3   # a bias too
    mask[5] = -np.inf

    def body(bb, p):  # type: ignore[no-untyped-def]
        kt = _call(bb, "permute_dims", p[1], axes=(0, 2, 1))
        scores = _call(bb, "add", const(mask), _call(bb, "matmul", p[0], kt))
        scores = _call(bb, "multiply", scores, _scalar(0.5))
        return _call(bb, "matmul", _call(bb, "softmax", scores, axis=-1), p[2])

    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape}, body)
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and ops == []
    got = _run(mod, q, k, v)
    s64 = 0.5 * (q.astype(np.float64) @ np.swapaxes(k, -1, -2) + mask)
    with np.errstate(invalid="ignore"):
        ref = _softmax(s64) @ v
    assert np.isnan(got[:, 5]).all() and np.isnan(ref[:, 5]).all()
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)   # NaN where ref is NaN


def _guarded(mask: np.ndarray | None, *, torch_style: bool = True):  # type: ignore[no-untyped-def]
    """PyTorch's scaled_dot_product_attention after its decomposition: bmm over
    (heads, rows, d), the scores viewed as (1, heads, rows, keys), the mask added, the
    softmax guarded against fully masked rows (``where(not(any(s != -inf)), 0,
    softmax(s))``, the any as a max over a cast to uint8), the probabilities viewed back
    as (heads, rows, keys) for the second bmm.  ``torch_style=False`` writes the guard
    with not_equal and a zero constant, the mask before the view."""

    def body(bb, p):  # type: ignore[no-untyped-def]
        h, s, _ = p[0].ty.shape
        kt = _call(bb, "permute_dims", p[1], axes=(0, 2, 1))
        scores = _call(bb, "matmul", _call(bb, "multiply", p[0], _scalar(1.0)), kt)
        scores = _call(bb, "multiply", scores, _scalar(0.25))
        if mask is not None and not torch_style:
            scores = _call(bb, "add", scores, const(mask))
        scores = _call(bb, "reshape", scores, shape=(1, h, s, s))
        if mask is not None and torch_style:
            scores = _call(bb, "add", scores, const(mask))
        probs = _call(bb, "softmax", scores, axis=-1)
        if torch_style:
            ne = _call(bb, "logical_not", _call(bb, "equal", scores,
                                                const(np.float32(-np.inf))))
            anyv = _call(bb, "cast", _call(bb, "max", _call(bb, "cast", ne, dtype="uint8"),
                                           axis=(3,), keepdims=True), dtype="bool")
            fill = _call(bb, "full_like", probs, fill_value=0, dtype="float32")
        else:
            ne = _call(bb, "not_equal", scores, const(np.float32(-np.inf)))
            anyv = _call(bb, "cast", _call(bb, "max", _call(bb, "cast", ne, dtype="int32"),
                                           axis=-1, keepdims=True), dtype="bool")
            fill = const(np.float32(0))
        probs = _call(bb, "where", _call(bb, "logical_not", anyv), fill, probs)
        probs = _call(bb, "reshape", probs, shape=(h, s, s))
        return _call(bb, "matmul", probs, p[2])

    return body


@pytest.mark.parametrize("torch_style", [True, False])
def test_guarded_softmax_of_torch_sdpa_zeroes_fully_masked_rows(torch_style: bool) -> None:
    """The guard of torch's scaled_dot_product_attention decomposition (and the batch
    views around its bmm) is taken into the fused call: a fully masked row gives zeros
    (not NaN), every other row the softmax, as the guarded graph on numpy does."""
    h, s, d = 3, 13, 8
    q, k, v = _rand(h, s, d), _rand(h, s, d), _rand(h, s, d)
    mask = np.triu(np.full((s, s), -np.inf, np.float32), 1)
    mask[4] = -np.inf
    mask = mask if torch_style else mask[None].repeat(h, 0)
    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape},
                       _guarded(mask, torch_style=torch_style))
    externs, ops = _dispatched(mod)
    assert len(externs) == 1 and ops == [], ops
    got = _run(mod, q, k, v)
    s64 = 0.25 * (q.astype(np.float64) @ np.swapaxes(k, -1, -2)) + mask.reshape(-1, s, s)
    with np.errstate(invalid="ignore"):
        ref = np.nan_to_num(_softmax(s64), nan=0.0) @ v
    assert (got[:, 4] == 0).all()
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, _run(mod, q, k, v, target="numpy"), rtol=RTOL, atol=ATOL)


def test_guard_on_other_scores_is_not_taken() -> None:
    """A where whose condition tests something other than the softmax's own scores (or
    whose fill is not zero) is no masked-row guard: the graph is left to the unfused
    path and stays correct."""
    h, s, d = 2, 9, 4
    q, k, v = _rand(h, s, d), _rand(h, s, d), _rand(h, s, d)

    def body(bb, p):  # type: ignore[no-untyped-def]
        kt = _call(bb, "permute_dims", p[1], axes=(0, 2, 1))
        scores = _call(bb, "matmul", p[0], kt)
        other = _call(bb, "multiply", scores, _scalar(2.0))
        probs = _call(bb, "softmax", scores, axis=-1)
        ne = _call(bb, "not_equal", other, const(np.float32(-np.inf)))
        anyv = _call(bb, "cast", _call(bb, "max", _call(bb, "cast", ne, dtype="uint8"),
                                       axis=-1, keepdims=True), dtype="bool")
        probs = _call(bb, "where", _call(bb, "logical_not", anyv), const(np.float32(1)),
                      probs)
        return _call(bb, "matmul", probs, p[2])

    mod = _build_graph({"q": q.shape, "k": k.shape, "v": v.shape}, body)
    externs, _ = _dispatched(mod)
    assert externs == []
    np.testing.assert_allclose(_run(mod, q, k, v), _ref_attention(q, k, v, 1.0),
                               rtol=RTOL, atol=ATOL)


def test_torch_scaled_dot_product_attention_is_fused() -> None:
    """F.scaled_dot_product_attention through torch.export and from_exported_program
    becomes one plait_attention call on c, and matches eager PyTorch (rtol/atol 2e-5),
    with a boolean mask that masks one query row entirely (PyTorch gives zeros there)."""
    torch = pytest.importorskip("torch")
    from plait.frontend import from_exported_program

    class Sdpa(torch.nn.Module):
        def forward(self, q, k, v, m):  # type: ignore[no-untyped-def]
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)

    h, s, d = 2, 11, 16
    q, k, v = (torch.from_numpy(_rand(1, h, s, d)) for _ in range(3))
    m = torch.ones(s, s, dtype=torch.bool).tril()
    m[3] = False
    ref = Sdpa()(q, k, v, m).numpy()
    mod = from_exported_program(torch.export.export(Sdpa(), (q, k, v, m)))
    exe = plait.build(mod, "c")
    funcs = [i.func for fn in exe.functions.values() for i in fn.instructions
             if hasattr(i, "func")]
    assert any(f.startswith("plait_attention") for f in funcs), funcs
    got = VirtualMachine(exe)["main"](q.numpy(), k.numpy(), v.numpy(), m.numpy())
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert (np.asarray(got)[0, :, 3] == 0).all()
    np.testing.assert_allclose(np.asarray(got), ref, rtol=RTOL, atol=ATOL)


def test_target_attribute_turns_it_off() -> None:
    assert "c.DispatchAttention" in plait.default_pipeline("c").names()
    assert "c.DispatchAttention" not in plait.default_pipeline(
        plait.Target("c", attention=False)).names()


def test_exported_transformer_layer_matches_onnxruntime(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PyTorch's TransformerEncoderLayer through ONNX: its attention becomes one call
    (no softmax or head-splitting kernels left) and the layer matches onnxruntime."""
    pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    from export_models import export

    from plait.frontend import from_onnx

    path = export("transformer", str(tmp_path), dynamic_batch=False, shape=(1, 32, 256))
    x = np.random.default_rng(3).standard_normal((1, 32, 256)).astype(np.float32)
    exe = plait.build(from_onnx(path, shapes={"input": x.shape}), "c")
    text = exe.as_text()
    assert text.count("plait_attention_") == 1 and "softmax" not in text
    assert "strided_slice" not in text and "permute_dims" not in text
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), ref[0], rtol=1e-4, atol=1e-4)
