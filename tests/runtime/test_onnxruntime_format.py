"""An ``onnxruntime`` external module runs ONNX (protobuf) models only.

The policy reads a module's ONNX model before onnxruntime gets it (no tensor may keep
its data in another file).  onnxruntime also takes its own format (flatbuffers, the
identifier ``ORTM`` at byte 4) from the same bytes, and bytes can be both: a valid
protobuf message with nothing in it for the check to see, and an onnxruntime-format
model that onnxruntime runs.  Such bytes are made here; the loader refuses them."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from test_trust_paths import _ort_exe  # same directory: main(x) calls the module's f

from plait.runtime import Executable, ExternalModuleError, VirtualMachine
from plait.runtime.onnx_wire import external_data_tensors

W = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def _add_w() -> onnx.ModelProto:
    """The ONNX model ``y = x + W``."""
    w = helper.make_tensor("w", TensorProto.FLOAT, (4,), W)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4,))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4,))], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ort_format(tmp_path: Path) -> bytes:
    """``y = x + W`` saved by onnxruntime in its own format."""
    m = _add_w()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.optimized_model_filepath = str(tmp_path / "m.ort")
    opts.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return (tmp_path / "m.ort").read_bytes()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _polyglot(ort_model: bytes) -> bytes:
    """Bytes that are a protobuf message of three unknown fields and an onnxruntime-
    format model: the flatbuffer's root offset (bytes 0-3) reads as field 1 (varint 0)
    and the key of a fixed32 field 1 whose payload holds ``ORTM`` but for its last
    byte, which reads as a fixed32 field 9; a length-delimited field 3 hides the
    original buffer, moved whole (its offsets are relative) so its root table is at
    the offset bytes 0-3 name."""
    root = struct.unpack("<I", ort_model[:4])[0]
    offset = 0x08 | (0x0D << 16)  # bytes 08 00 0D 00: the new root offset
    start = offset - root  # where the old buffer goes
    assert start % 8 == 0  # flatbuffers alignment kept
    head = bytes([0x08, 0x00, 0x0D, 0x00]) + b"ORTM" + bytes(4)
    size = start + len(ort_model)
    n = next(n for n in range(1, 6) if len(_varint(size - len(head) - 1 - n)) == n)
    head += b"\x1a" + _varint(size - len(head) - 1 - n)
    data = head + bytes(start - len(head)) + ort_model
    assert struct.unpack("<I", data[:4])[0] == start + root and data[4:8] == b"ORTM"
    return data


def test_bytes_that_are_also_onnxruntimes_format_are_refused(tmp_path: Path) -> None:
    data = _polyglot(_ort_format(tmp_path))
    # what makes them an attack: the check sees no tensor at all, and onnxruntime runs them
    assert external_data_tensors(data) == []
    x = np.zeros(4, np.float32)
    ran = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(ran[0], W)  # 0 + W
    exe = Executable.from_bytes(_ort_exe(data).to_bytes(), allow_native=True)
    with pytest.raises(ExternalModuleError, match=r"loading the external module of codegen "
                       r"'onnxruntime' \(format 'onnxruntime'\) failed: .*No graph was found"):
        VirtualMachine(exe)["main"](x)


def test_onnx_models_still_run(tmp_path: Path) -> None:
    """The same model as ONNX runs through the module (numpy: 1 + W)."""
    exe = Executable.from_bytes(_ort_exe(_add_w().SerializeToString()).to_bytes())
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](np.ones(4, np.float32)), 1 + W)
