"""Weights read once from the model's file (plait/frontend/onnx/weights.py): large
initializers, inside the protobuf or in external data, go straight from the file into
the arrays the importer keeps; the results equal onnx's own reading of the file."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import plait
from plait.frontend.onnx import OnnxImportError, from_onnx
from plait.frontend.onnx.loader import load_model
from plait.frontend.onnx.weights import MIN_READ_BYTES
from plait.runtime import VirtualMachine
from plait.runtime.onnx_wire import externalize_initializers

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(7)


def _affine(k: int = 256, n: int = 1024) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """``y = x @ W + b``: ``W`` large (read by plait), ``b`` small (stays in the model)."""
    w = RNG.standard_normal((k, n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, b


def _run_both(path: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    exe = plait.build(from_onnx(path), "numpy")
    got = VirtualMachine(exe)["main"](x)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return np.asarray(got), want


def test_large_initializers_are_read_from_the_file_and_the_model_runs(tmp_path) -> None:
    m, w, b = _affine()
    path = str(tmp_path / "m.onnx")
    onnx.save_model(m, path)
    loaded = load_model(path)
    assert set(loaded.arrays) == {"W"}  # b (4 KiB) is below MIN_READ_BYTES
    np.testing.assert_array_equal(loaded.arrays["W"], w)
    assert loaded.arrays["W"].flags.writeable and loaded.arrays["W"].flags.aligned
    (t,) = [i for i in loaded.model.graph.initializer if i.name == "W"]
    assert not t.raw_data and list(t.dims) == [256, 1024]  # the protobuf holds no copy
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    got, want = _run_both(path, x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # float32 sums of 256


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "int16",
                                   "uint16", "int32", "uint32", "int64", "uint64", "bool"])
@pytest.mark.parametrize("external", [False, True])
def test_every_plain_element_type_reads_as_onnx_reads_it(tmp_path, dtype: str,
                                                         external: bool) -> None:
    n = MIN_READ_BYTES  # at least MIN_READ_BYTES bytes for every element type
    if dtype == "bool":
        arr = RNG.integers(0, 2, n).astype(bool)
    elif dtype.startswith("float"):
        arr = RNG.standard_normal(n).astype(dtype)
    else:
        arr = RNG.integers(0, 100, n).astype(dtype)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(arr.dtype), [n])],
        [numpy_helper.from_array(arr, "c")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp_path / "m.onnx")
    if external:
        onnx.save_model(m, path, save_as_external_data=True, location="data.bin",
                        size_threshold=0)
    else:
        onnx.save_model(m, path)
    loaded = load_model(path)
    want = numpy_helper.to_array(onnx.load(path).graph.initializer[0])
    assert loaded.arrays["c"].dtype == want.dtype
    np.testing.assert_array_equal(loaded.arrays["c"], want)


def test_types_onnx_converts_stay_with_onnx(tmp_path) -> None:
    """bfloat16 is not a plain numpy type: onnx reads it (and plait refuses the type
    with its usual message, not a garbled array)."""
    t = helper.make_tensor("c", TensorProto.BFLOAT16, [MIN_READ_BYTES],
                           np.zeros(MIN_READ_BYTES, np.uint16).tobytes(), raw=True)
    graph = helper.make_graph([helper.make_node("Identity", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)],
                              [t])
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert load_model(path).arrays == {}
    with pytest.raises(OnnxImportError, match="initializer 'c' has element type BFLOAT16"):
        from_onnx(path)


def test_the_rewrite_points_at_the_bytes_in_place() -> None:
    m, w, _ = _affine(64, 128)
    data = m.SerializeToString()
    out = externalize_initializers(data, "m.onnx", 1024)
    assert out is not None and len(out) < len(data) - w.nbytes + 512
    parsed = onnx.ModelProto()
    parsed.ParseFromString(out)
    (t,) = [i for i in parsed.graph.initializer if i.name == "W"]
    entries = {e.key: e.value for e in t.external_data}
    assert entries["location"] == "m.onnx" and t.data_location == TensorProto.EXTERNAL
    start, length = int(entries["offset"]), int(entries["length"])
    assert data[start:start + length] == w.tobytes()
    # every other field is the original's: the same model once the data is back
    t.raw_data = data[start:start + length]
    t.ClearField("data_location")
    del t.external_data[:]
    assert parsed == m
    assert externalize_initializers(data, "m.onnx", 10**9) is None  # nothing that large


def test_importing_from_a_path_holds_the_weights_once(tmp_path) -> None:
    """tracemalloc sees numpy's buffers and the bytes Python reads: importing a model of
    16 MiB of weights from its path peaks near the weights, not at twice them."""
    m, w, _ = _affine(1024, 4096)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(m, path)
    del m
    tracemalloc.start()
    try:
        mod = from_onnx(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert mod is not None
    assert peak < 1.25 * w.nbytes, (peak / 2**20, w.nbytes / 2**20)


def _external_model(tmp_path, location: str) -> str:
    t = numpy_helper.from_array(np.arange(MIN_READ_BYTES, dtype=np.float32), "c")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"),
                       ("length", str(4 * MIN_READ_BYTES))):
        e = t.external_data.add()
        e.key, e.value = key, value
    graph = helper.make_graph([helper.make_node("Identity", ["c"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [t])
    (tmp_path / "models").mkdir(exist_ok=True)
    path = str(tmp_path / "models" / "m.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("where", ["absolute", "parent", "link"])
def test_data_outside_the_model_s_folder_is_refused(tmp_path, where: str) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(MIN_READ_BYTES, dtype=np.float32).tobytes())
    if where == "absolute":
        path = _external_model(tmp_path, str(secret))
    elif where == "parent":
        path = _external_model(tmp_path, "../secret.bin")
    else:
        path = _external_model(tmp_path, "inside.bin")
        os.symlink(secret, tmp_path / "models" / "inside.bin")
    with pytest.raises(OnnxImportError, match="initializer 'c' keeps its data at") as e:
        from_onnx(path)
    assert "model's folder" in str(e.value)


def test_truncated_or_mis_sized_external_data_is_refused(tmp_path) -> None:
    path = _external_model(tmp_path, "d.bin")
    (tmp_path / "models" / "d.bin").write_bytes(b"\0" * (4 * MIN_READ_BYTES - 4))
    with pytest.raises(OnnxImportError, match="the file is truncated"):
        from_onnx(path)
    m = onnx.load(path, load_external_data=False)
    m.graph.initializer[0].external_data[2].value = "12"
    onnx.save_model(m, path)
    with pytest.raises(OnnxImportError, match="needs 65536 bytes, but its external data is 12"):
        from_onnx(path)


def test_an_old_opset_is_upgraded_with_the_weights_read_by_plait(tmp_path) -> None:
    """The version converter runs on the protobuf whose large initializers have no data
    (plait holds them): the model still imports and computes ``x @ W + b`` (numpy is the
    reference: onnxruntime does not run opset 6)."""
    m, w, b = _affine(64, 256)
    m.opset_import[0].version = 6
    path = str(tmp_path / "m.onnx")
    onnx.save_model(m, path)
    assert set(load_model(path).arrays) == {"W"}
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    got = VirtualMachine(plait.build(from_onnx(path), "numpy"))["main"](x)
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-5)


def _mapping_of(a: np.ndarray):  # type: ignore[no-untyped-def]
    """The mmap object ``a`` views (through numpy bases and memoryviews), or None."""
    import mmap

    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return base


def test_external_data_is_mapped_until_packed(tmp_path) -> None:
    """Large aligned weights in external data are views of a private mapping of their
    own bytes (no copy on import; a write stays in this process); ``mmap=False`` reads
    them; building for c transforms the weight (for its kernel) and the mapping goes once
    nothing holds the original (no graph kept here: a kept graph may hold the
    original, mapped as it was).  Results against
    onnxruntime (rtol 1e-4: float32 sums of 256 products)."""
    import gc
    import weakref

    from plait.ir import Constant
    from plait.ir.visitor import post_order

    m, w, b = _affine(256, 1024)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(m, path, save_as_external_data=True, location="m.bin", size_threshold=0)
    data_file = tmp_path / "m.bin"
    before = data_file.read_bytes()

    def weight(mod: plait.IRModule) -> np.ndarray:
        (c,) = [n.data for f in mod.functions.values() for n in post_order(f)
                if isinstance(n, Constant) and n.data.shape == w.shape]
        return c

    mapped = weight(from_onnx(path))
    mapping = _mapping_of(mapped)
    assert mapping is not None and len(mapping) < w.nbytes + 2 * 65536  # its own pages
    np.testing.assert_array_equal(mapped, w)
    writable = np.frombuffer(mapping, np.uint8)
    writable[:] = 0                                   # copy-on-write: this process only
    assert data_file.read_bytes() == before
    del mapped, mapping, writable
    read = weight(from_onnx(path, mmap=False))
    assert _mapping_of(read) is None
    np.testing.assert_array_equal(read, w)
    mods = [from_onnx(path)]
    ref = weakref.ref(_mapping_of(weight(mods[0])))
    exe = plait.build(mods.pop(), "c", keep_graph=False)
    gc.collect()
    assert ref() is None and not any(_mapping_of(c) is not None for c in exe.constants)
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), want, rtol=1e-4, atol=1e-4)


def test_unaligned_and_small_weights_are_read(tmp_path) -> None:
    """A float32 weight at an odd offset of its file, and one of MIN_MAP_BYTES or less,
    are read into aligned arrays of their own (native code reads aligned elements)."""
    from plait.frontend.onnx.weights import MIN_MAP_BYTES

    big = RNG.standard_normal(MIN_MAP_BYTES).astype(np.float32)   # 4x MIN_MAP_BYTES bytes
    small = RNG.standard_normal(MIN_MAP_BYTES // 4).astype(np.float32)
    tensors = []
    for name, arr, offset in (("big", big, 2), ("small", small, 2 + big.nbytes)):
        t = numpy_helper.from_array(arr, name)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "d.bin"), ("offset", str(offset)),
                           ("length", str(arr.nbytes))):
            e = t.external_data.add()
            e.key, e.value = key, value
        tensors.append(t)
    (tmp_path / "d.bin").write_bytes(b"\0\0" + big.tobytes() + small.tobytes())
    graph = helper.make_graph(
        [helper.make_node("Identity", ["big"], ["y"]),
         helper.make_node("Identity", ["small"], ["z"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], tensors)
    path = str(tmp_path / "m.onnx")
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    arrays = load_model(path).arrays
    for name, want in (("big", big), ("small", small)):
        assert _mapping_of(arrays[name]) is None and arrays[name].flags.aligned
        np.testing.assert_array_equal(arrays[name], want)
