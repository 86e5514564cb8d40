"""ONNX ops whose sizes or counts come from shape subgraphs or tensors in dynamic
exports: ``Tile`` (repeats from ``Shape``), ``Trilu`` (``k`` from a tensor),
``EyeLike``, ``DepthToSpace``/``SpaceToDepth``, ``ScatterND``, ``GatherND`` with
``batch_dims`` and backward ``Slice``s, all on symbolic sizes.  Each model imports with
its sizes open, is built ONCE per target (numpy and c) and runs at two sizes, matching
onnxruntime on the same model (exact: these ops move or select data, and the one
``ScatterND`` reduction adds two float32 values in the order onnxruntime does)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx_helpers import I64, init, model, vi  # noqa: E402

import plait  # noqa: E402
from plait.frontend import from_onnx  # noqa: E402
from plait.frontend.onnx import OnnxImportError  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402
from plait.runtime.vm import VMError  # noqa: E402

TARGETS = ["numpy", "c"]
RNG = np.random.default_rng(0)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _i(name: str, values: object) -> object:
    return init(name, np.array(values, np.int64))


def _check(m: object, feeds_at: list[dict[str, np.ndarray]], target: str, want_type: str | None
           ) -> None:  # fmt: skip
    """Import, build once for ``target``, run at every size against onnxruntime."""
    mod = from_onnx(m)
    if want_type is not None:
        assert str(mod["main"].body.ty) == want_type
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
    for feeds in feeds_at:
        (ref,) = sess.run(None, feeds)
        got = np.asarray(vm["main"](*feeds.values()))
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("target", TARGETS)
def test_tile_repeats_from_a_shape_subgraph(target: str) -> None:
    """``x.repeat(batch, 1, 2)``: the repeats are ``Concat(Shape(y)[:1], [1, 2])``."""
    nodes = [helper.make_node("Shape", ["y"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "rest"], ["reps"], axis=0),
             helper.make_node("Tile", ["x", "reps"], ["out"])]  # fmt: skip
    m = model(nodes, [vi("x", [1, "n", 3]), vi("y", ["b", 2])], [vi("out", None)],
              [_i("rest", [1, 2])], opset=17)  # fmt: skip
    feeds = [{"x": _f(1, 2, 3), "y": _f(3, 2)}, {"x": _f(1, 5, 3), "y": _f(2, 2)}]
    _check(m, feeds, target, 'Tensor((b, n, 6), "float32")')


def test_tile_repeats_from_tensor_data_name_the_node_and_the_fix() -> None:
    """Repeats read from a tensor decide the result's size: no size can describe it."""
    nodes = [helper.make_node("Tile", ["x", "reps"], ["out"], name="tile_it")]
    m = model(nodes, [vi("x", [2, 3]), vi("reps", [2], I64)], [vi("out", None)])
    with pytest.raises(OnnxImportError, match=r"'tile_it' \(Tile.*'reps'.*constants="):
        from_onnx(m)
    mod = from_onnx(m, constants={"reps": np.array([2, 1])})
    assert str(mod["main"].body.ty) == 'Tensor((4, 3), "float32")'


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_k_from_a_tensor_on_symbolic_sizes(target: str, upper: int) -> None:
    nodes = [helper.make_node("Trilu", ["x", "k"], ["out"], upper=upper)]
    m = model(nodes, [vi("x", ["b", "n", "m"]), vi("k", [], I64)], [vi("out", None)])
    feeds = [{"x": _f(2, 4, 5), "k": np.array(1)}, {"x": _f(1, 6, 3), "k": np.array(-2)}]
    _check(m, feeds, target, 'Tensor((b, n, m), "float32")')


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", [1, -2])
def test_eye_like_on_a_symbolic_shape(target: str, k: int) -> None:
    nodes = [helper.make_node("EyeLike", ["x"], ["out"], k=k, dtype=TensorProto.INT64)]
    m = model(nodes, [vi("x", ["n", "m"])], [vi("out", None, I64)])
    _check(m, [{"x": _f(4, 5)}, {"x": _f(6, 3)}], target, 'Tensor((n, m), "int64")')


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_on_symbolic_batch_and_image(target: str, mode: str) -> None:
    nodes = [helper.make_node("DepthToSpace", ["x"], ["out"], blocksize=2, mode=mode)]
    m = model(nodes, [vi("x", ["b", 8, "h", "w"])], [vi("out", None)])
    _check(m, [{"x": _f(1, 8, 2, 3)}, {"x": _f(2, 8, 3, 5)}], target,
           'Tensor((b, 2, h * 2, w * 2), "float32")')  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_space_to_depth_on_symbolic_batch_and_image(target: str) -> None:
    """The number of blocks is a fresh size bound when the model runs; a height that is
    no multiple of the blocksize is refused then (onnxruntime refuses it too)."""
    nodes = [helper.make_node("SpaceToDepth", ["x"], ["out"], blocksize=2)]
    m = model(nodes, [vi("x", ["b", 3, "h", "w"])], [vi("out", None)])
    _check(m, [{"x": _f(1, 3, 2, 4)}, {"x": _f(2, 3, 6, 8)}], target, None)
    vm = VirtualMachine(plait.build(from_onnx(m), target))
    with pytest.raises(VMError, match="reshape"):
        vm["main"](_f(1, 3, 5, 4))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_nd_with_symbolic_data_and_indices(target: str, reduction: str) -> None:
    """Pairs of indices into the first two axes of an ``(n, m, 3)`` tensor (negative
    ones count from the end), ``u`` updates of 3 values."""
    nodes = [helper.make_node("ScatterND", ["x", "idx", "upd"], ["out"], reduction=reduction)]
    m = model(nodes, [vi("x", ["n", "m", 3]), vi("idx", ["u", 2], I64), vi("upd", ["u", 3])],
              [vi("out", None)], opset=18)  # fmt: skip
    feeds = [
        {"x": _f(4, 5, 3), "idx": np.array([[1, 2], [3, -1]]), "upd": _f(2, 3)},
        {"x": _f(6, 2, 3), "idx": np.array([[5, 0], [0, 1], [-2, 1]]), "upd": _f(3, 3)},
    ]
    _check(m, feeds, target, 'Tensor((n, m, 3), "float32")')


@pytest.mark.parametrize("target", TARGETS)
def test_gather_nd_with_batch_dims_on_symbolic_sizes(target: str) -> None:
    """``batch_dims=1``: a batch ``b`` of ``(n, m, 4)`` blocks, ``k`` index pairs each."""
    nodes = [helper.make_node("GatherND", ["x", "idx"], ["out"], batch_dims=1)]
    m = model(nodes, [vi("x", ["b", "n", "m", 4]), vi("idx", ["b", "k", 2], I64)],
              [vi("out", None)])  # fmt: skip
    feeds = [
        {"x": _f(2, 3, 5, 4), "idx": np.array([[[1, 2], [2, -1]], [[0, 0], [-1, 4]]])},
        {"x": _f(3, 4, 2, 4), "idx": RNG.integers(-2, 2, (3, 1, 2))},
    ]
    _check(m, feeds, target, 'Tensor((b, k, 4), "float32")')


@pytest.mark.parametrize("target", TARGETS)
def test_gather_nd_with_two_batch_axes_and_static_indexed_axes(target: str) -> None:
    nodes = [helper.make_node("GatherND", ["x", "idx"], ["out"], batch_dims=2)]
    m = model(nodes, [vi("x", ["b", "t", 6]), vi("idx", ["b", "t", 1], I64)], [vi("out", None)])
    feeds = [{"x": _f(2, 3, 6), "idx": RNG.integers(-6, 6, (2, 3, 1))},
             {"x": _f(1, 5, 6), "idx": RNG.integers(-6, 6, (1, 5, 1))}]  # fmt: skip
    _check(m, feeds, target, 'Tensor((b, t), "float32")')


@pytest.mark.parametrize("target", TARGETS)
def test_a_backward_slice_to_a_symbolic_bound_keeps_its_rank(target: str) -> None:
    """``x[:n // 2:-1]`` (the end from ``Shape`` and ``Div``), then a ``Transpose``,
    which needs the rank: the slice's length is a size expression."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Div", ["s", "two"], ["half"]),
             helper.make_node("Slice", ["x", "start", "half", "ax", "step"], ["y"]),
             helper.make_node("Transpose", ["y"], ["out"], perm=[1, 0])]  # fmt: skip
    inits = [_i("two", [2]), _i("start", [-1]), _i("ax", [0]), _i("step", [-1])]
    m = model(nodes, [vi("x", ["n", 3])], [vi("out", None)], inits)
    _check(m, [{"x": _f(4, 3)}, {"x": _f(7, 3)}], target,
           'Tensor((3, max(0, n - min(n - 1, n // 2) - 1)), "float32")')  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("start,end,step", [(-1, -(2**63), -1), (-2, 0, -2), (2**62, 1, -3)])
def test_backward_slices_of_a_symbolic_axis(target: str, start: int, end: int, step: int) -> None:
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"]),
             helper.make_node("Flatten", ["y"], ["out"], axis=1)]  # fmt: skip
    inits = [_i("st", [start]), _i("en", [end]), _i("ax", [1]), _i("sp", [step])]
    m = model(nodes, [vi("x", [2, "n"])], [vi("out", None)], inits)
    mod = from_onnx(m)
    assert mod["main"].body.ty.shape is not None  # type: ignore[union-attr]
    _check(m, [{"x": _f(2, 1)}, {"x": _f(2, 7)}], target, None)


@pytest.mark.parametrize("target", TARGETS)
def test_a_symbolic_slice_start_counting_backward(target: str) -> None:
    """The start ``n - 2`` may count from either end (``n`` may be 1): the length is
    left to run time, the values still match."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Sub", ["s", "two"], ["st"]),
             helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["out"])]  # fmt: skip
    inits = [_i("two", [2]), _i("en", [0]), _i("ax", [0]), _i("sp", [-1])]
    m = model(nodes, [vi("x", ["n", 3])], [vi("out", None)], inits)
    _check(m, [{"x": _f(4, 3)}, {"x": _f(7, 3)}], target, None)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_resize_of_a_dynamic_batch(target: str, mode: str, by: str) -> None:
    """The batch is symbolic and kept (a scale of 1, or the size ``Shape(x)[0]`` as the
    TorchScript exporter writes ``F.interpolate(x, size=(8, 10))``); the image is
    resized.  Linear interpolation: float32 within 1e-6 of onnxruntime."""
    if by == "scales":
        nodes = [helper.make_node("Resize", ["x", "", "sc"], ["out"], mode=mode)]
        inits = [init("sc", np.array([1, 1, 2, 2], np.float32))]
    else:
        nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=2),
                 helper.make_node("Concat", ["s", "hw"], ["sz"], axis=0),
                 helper.make_node("Resize", ["x", "", "", "sz"], ["out"], mode=mode)]  # fmt: skip
        inits = [_i("hw", [8, 10])]
    m = model(nodes, [vi("x", ["b", 3, 4, 5])], [vi("out", None)], inits, opset=18)
    mod = from_onnx(m)
    assert str(mod["main"].body.ty) == 'Tensor((b, 3, 8, 10), "float32")'
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in (1, 3):
        x = _f(b, 3, 4, 5)
        np.testing.assert_allclose(vm["main"](x), sess.run(None, {"x": x})[0], rtol=1e-6,
                                   atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode,coord", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                        ("linear", "align_corners"), ("cubic", "half_pixel")])
def test_resize_of_a_dynamic_image(target: str, mode: str, coord: str) -> None:
    """Upsampling a symbolic height by an integer scale (``h * 2``), and resizing to the
    symbolic size of another input (``F.interpolate(x, size=skip.shape[2:])`` in a
    U-Net): ``resize2d`` takes the sizes at run time.  Float32 interpolation: within
    rtol 1e-5, atol 3e-6 of onnxruntime (the largest difference seen is 1.5e-6, as for
    static sizes)."""
    up = [helper.make_node("Resize", ["x", "", "sc"], ["out"], mode=mode,
                           coordinate_transformation_mode=coord)]  # fmt: skip
    m_up = model(up, [vi("x", ["b", 3, "h", 5])], [vi("out", None)],
                 [init("sc", np.array([1, 1, 2, 3], np.float32))], opset=18)  # fmt: skip
    to = [helper.make_node("Shape", ["y"], ["s"], start=2, end=4),
          helper.make_node("Concat", ["bc", "s"], ["sz"], axis=0),
          helper.make_node("Resize", ["x", "", "", "sz"], ["out"], mode=mode,
                           coordinate_transformation_mode=coord)]  # fmt: skip
    m_to = model(to, [vi("x", [1, 3, "h", "w"]), vi("y", [1, 2, "h2", "w2"])],
                 [vi("out", None)], [_i("bc", [1, 3])], opset=18)  # fmt: skip
    cases = [(m_up, 'Tensor((b, 3, h * 2, 15), "float32")',
              [{"x": _f(1, 3, 4, 5)}, {"x": _f(2, 3, 1, 5)}]),
             (m_to, 'Tensor((1, 3, h2, w2), "float32")',
              [{"x": _f(1, 3, 4, 5), "y": _f(1, 2, 8, 10)},
               {"x": _f(1, 3, 3, 7), "y": _f(1, 2, 7, 1)}])]  # fmt: skip
    for m, want, feeds_at in cases:
        mod = from_onnx(m)
        assert str(mod["main"].body.ty) == want
        vm = VirtualMachine(plait.build(mod, target))
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for feeds in feeds_at:
            got, (ref,) = vm["main"](*feeds.values()), sess.run(None, feeds)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=3e-6)


def test_resizing_a_symbolic_axis_by_a_fraction_names_the_node_and_the_fix() -> None:
    """``floor(h * 1.5)`` is no size plait can write."""
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["out"], name="up")]
    m = model(nodes, [vi("x", ["b", 3, "h", 5])], [vi("out", None)],
              [init("sc", np.array([1, 1, 1.5, 2], np.float32))], opset=18)  # fmt: skip
    with pytest.raises(OnnxImportError, match=r"'up' \(Resize.*axis 2 of size h.*shapes="):
        from_onnx(m)


def _pad_to_multiple(axis: int, window: int, tag: str) -> list:
    """``(window - size % window) % window`` of axis ``axis`` of ``x`` as Swin exports it
    (``Shape``, ``Gather``, ``Mod``, ``Sub``, ``Mod``), into ``pad_<tag>`` of shape [1]."""
    return [helper.make_node("Shape", ["x"], [f"s_{tag}"]),
            helper.make_node("Gather", [f"s_{tag}", f"ax_{tag}"], [f"d_{tag}"], axis=0),
            helper.make_node("Mod", [f"d_{tag}", f"win_{tag}"], [f"r_{tag}"]),
            helper.make_node("Sub", [f"win_{tag}", f"r_{tag}"], [f"q_{tag}"]),
            helper.make_node("Mod", [f"q_{tag}", f"win_{tag}"], [f"pad_{tag}"])]


@pytest.mark.parametrize("target", TARGETS)
def test_pad_to_a_multiple_of_a_window_on_symbolic_sizes(target: str) -> None:
    """Swin/SegFormer's pad of (batch, height, width, channels) to multiples of the
    window (7 for the height, 4 for the width), the pads computed from the sizes; a
    second ``Pad`` pads the width to at least 6 (``Max(6 - w, 0)``) with a fill value
    read from a graph input.  Sizes that need no padding (14 x 8) add blocks of 0."""
    nodes = _pad_to_multiple(1, 7, "h") + _pad_to_multiple(2, 4, "w") + [
        helper.make_node("Concat", ["z4", "z1", "pad_h", "pad_w", "z1"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads", "half"], ["y"], name="pad_window"),
        helper.make_node("Shape", ["x"], ["sx"], start=2, end=3),
        helper.make_node("Sub", ["six", "sx"], ["short"]),
        helper.make_node("Max", ["short", "zero"], ["pad_min"]),
        helper.make_node("Concat", ["z2", "pad_min", "z1", "z2", "pad_min", "z1"], ["pads2"],
                         axis=0),
        helper.make_node("Pad", ["x", "pads2", "v"], ["y2"])]
    inits = [_i("ax_h", [1]), _i("win_h", [7]), _i("ax_w", [2]), _i("win_w", [4]),
             _i("z4", [0, 0, 0, 0]), _i("z2", [0, 0]), _i("z1", [0]), _i("six", [6]),
             _i("zero", [0]), init("half", np.array(0.5, np.float32))]
    m = model(nodes, [vi("x", ["b", "h", "w", 3]), vi("v", [])], [vi("y", None), vi("y2", None)],
              inits, opset=18)  # fmt: skip
    mod = from_onnx(m)
    out = mod["main"].body.ty
    assert str(out.fields[0]) == ('Tensor((b, h + ((h % 7) * 6) % 7, w + ((w % 4) * 3) % 4, 3), '
                                  '"float32")')
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(2, 10, 5, 3), (1, 14, 8, 3), (3, 3, 2, 3)]:
        feeds = {"x": _f(*shape), "v": np.array(-2.0, np.float32)}
        got, ref = vm["main"](*feeds.values()), sess.run(None, feeds)
        for g, r in zip(got, ref):
            assert g.shape == r.shape
            np.testing.assert_array_equal(g, r)


def test_a_reflect_pad_of_symbolic_sizes_names_the_node_and_the_fix() -> None:
    nodes = _pad_to_multiple(1, 7, "h") + [
        helper.make_node("Concat", ["z1", "pad_h", "z2", "pad_h"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["y"], name="pad_it", mode="reflect")]
    m = model(nodes, [vi("x", [2, "h"])], [vi("y", None)],
              [_i("ax_h", [1]), _i("win_h", [7]), _i("z1", [0]), _i("z2", [0])], opset=18)
    with pytest.raises(OnnxImportError, match=r"'pad_it' \(Pad.*mode 'reflect'.*shapes="):
        from_onnx(m)


@pytest.mark.parametrize("target", TARGETS)
def test_conv_transpose_of_a_symbolic_batch_and_image(target: str) -> None:
    """Explicit pads with output_padding, and SAME_UPPER (its pads do not depend on the
    input size), of an (n, 3, h, w) input: the output sizes are size expressions."""
    w = _f(3, 4, 3, 3)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                              pads=[1, 0, 0, 1], output_padding=[1, 0]),
             helper.make_node("ConvTranspose", ["x", "w"], ["y2"], strides=[2, 1],
                              auto_pad="SAME_UPPER")]  # fmt: skip
    m = model(nodes, [vi("x", ["n", 3, "h", "w"])], [vi("y", None), vi("y2", None)],
              [init("w", w), init("b", _f(4))], opset=17)  # fmt: skip
    mod = from_onnx(m)
    assert str(mod["main"].body.ty) == ('Tuple(Tensor((n, 4, h * 2 + 1, w * 2), "float32"), '
                                        'Tensor((n, 4, h * 2, w), "float32"))')
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 5, 6), (2, 3, 7, 4)]:
        x = _f(*shape)
        for got, ref in zip(vm["main"](x), sess.run(None, {"x": x})):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_conv_transpose_output_shape_of_a_symbolic_image_names_the_node() -> None:
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2],
                              output_shape=[9, 9])]  # fmt: skip
    m = model(nodes, [vi("x", [1, 3, "h", 4])], [vi("y", None)], [init("w", _f(3, 4, 3, 3))])
    with pytest.raises(OnnxImportError, match=r"'up' \(ConvTranspose.*output_shape.*shapes="):
        from_onnx(m)


@pytest.mark.parametrize("target", TARGETS)
def test_attention_on_symbolic_batch_and_sequences(target: str) -> None:
    """ONNX Attention (opset 25) with open batch ``b``, query length ``s``, past length
    ``p`` and key/value length ``t``: a causal 4-D attention with a past cache and a
    float mask ``(s, p + s)``; 3-D grouped-query causal attention; a boolean mask
    shorter than the keys (the keys past it masked); a sliding window with
    ``nonpad_kv_seqlen``.  The masks are computed from row and column numbers when the
    model runs.  Two (b, s, p, t) from one build, against onnxruntime (rtol 1e-4)."""
    nodes = [helper.make_node("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y1", "ok", "ov"],
                              is_causal=1),
             helper.make_node("Attention", ["q3", "k3", "v3"], ["y2"], q_num_heads=4,
                              kv_num_heads=2, is_causal=1),
             helper.make_node("Attention", ["q", "kt", "vt", "mb"], ["y3"]),
             helper.make_node("Attention", ["q", "kt", "vt", "", "", "", "n"], ["y4"],
                              is_causal=1, left_window_size=1)]  # fmt: skip
    ins = [vi("q", ["b", 2, "s", 4]), vi("k", ["b", 2, "s", 4]), vi("v", ["b", 2, "s", 4]),
           vi("m", ["s", "ps"]), vi("pk", ["b", 2, "p", 4]), vi("pv", ["b", 2, "p", 4]),
           vi("q3", ["b", "s", 16]), vi("k3", ["b", "s", 8]), vi("v3", ["b", "s", 8]),
           vi("kt", ["b", 2, "t", 4]), vi("vt", ["b", 2, "t", 4]),
           vi("mb", ["s", "u"], TensorProto.BOOL), vi("n", ["b"], I64)]
    m = model(nodes, ins, [vi(o, None) for o in ("y1", "ok", "ov", "y2", "y3", "y4")],
              opset=25)
    vm = VirtualMachine(plait.build(from_onnx(m), target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, s, p, t in [(1, 3, 2, 4), (2, 5, 3, 6)]:
        feeds = {"q": _f(b, 2, s, 4), "k": _f(b, 2, s, 4), "v": _f(b, 2, s, 4),
                 "m": _f(s, p + s), "pk": _f(b, 2, p, 4), "pv": _f(b, 2, p, 4),
                 "q3": _f(b, s, 16), "k3": _f(b, s, 8), "v3": _f(b, s, 8),
                 "kt": _f(b, 2, t, 4), "vt": _f(b, 2, t, 4),
                 "mb": RNG.random((s, t - 1)) > 0.3, "n": np.full((b,), t - 1, np.int64)}
        for got, ref in zip(vm["main"](*feeds.values()), sess.run(None, feeds)):
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def _recurrent_model() -> object:
    """A bidirectional LSTM, a reverse GRU (linear_before_reset) and an RNN with
    sequence_lens over one input of open sequence length and batch."""
    h, i = 4, 3

    def w(*shape: int) -> np.ndarray:
        return _f(*shape) * np.float32(0.5)

    nodes = [helper.make_node("LSTM", ["x", "wl", "rl", "bl"], ["yl", "hl", "cl"], hidden_size=h,
                              direction="bidirectional"),
             helper.make_node("GRU", ["x", "wg", "rg", "bg"], ["yg", "hg"], hidden_size=h,
                              direction="reverse", linear_before_reset=1),
             helper.make_node("RNN", ["x", "wr", "rr", "", "lens"], ["yr", "hr"], hidden_size=h,
                              name="rnn")]  # fmt: skip
    inits = [init("wl", w(2, 4 * h, i)), init("rl", w(2, 4 * h, h)), init("bl", w(2, 8 * h)),
             init("wg", w(1, 3 * h, i)), init("rg", w(1, 3 * h, h)), init("bg", w(1, 6 * h)),
             init("wr", w(1, h, i)), init("rr", w(1, h, h))]
    return model(nodes, [vi("x", ["seq", "b", i]), vi("lens", ["b"], TensorProto.INT32)],
                 [vi(o, None) for o in ("yl", "hl", "cl", "yg", "hg", "yr", "hr")], inits)


@pytest.mark.parametrize("target", TARGETS)
def test_recurrent_layers_on_a_symbolic_sequence_with_a_range(target: str) -> None:
    """With the sequence's range given, LSTM/GRU/RNN are unrolled to its maximum and the
    steps past the length masked: three (batch, length) pairs from one build, lengths
    1 to the maximum, against onnxruntime (rtol 1e-4).  Y's length is the slice of the
    unrolled steps to the length, ``min(4, seq)`` (``seq`` itself within its range)."""
    m = _recurrent_model()
    mod = from_onnx(m, dim_ranges={"seq": (1, 4)})
    assert str(mod["main"].body.ty.fields[0]) == 'Tensor((min(4, seq), 2, b, 4), "float32")'
    vm = VirtualMachine(plait.build(mod, target))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, s in [(2, 3), (1, 4), (3, 1)]:
        feeds = {"x": _f(s, b, 3), "lens": RNG.integers(1, s + 1, b).astype(np.int32)}
        for got, ref in zip(vm["main"](*feeds.values()), sess.run(None, feeds)):
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_a_recurrent_layer_of_an_unbounded_sequence_names_the_node_and_the_fix() -> None:
    with pytest.raises(OnnxImportError, match=r"\(LSTM.*no maximum.*dim_ranges=\{'seq'"):
        from_onnx(_recurrent_model())
