"""An executable's constants are mapped from its file on load, not copied (issue 31,
item 5; plait/runtime/mapped_members.py): views of a private
(copy-on-write) mapping, 64-byte aligned,
still checked against the manifest's SHA-256; ``PLAIT_MAP_CONSTANTS=0`` reads them
into memory.  Values are compared exactly with the arrays that were saved."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

import plait
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Constant
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.runtime.executable import Executable, ExecutableFormatError
from plait.runtime.mapped_members import ALIGN, is_mapped

W = np.random.default_rng(5).standard_normal((300, 77)).astype(np.float32)


def _saved(tmp_path: Path) -> Path:
    x = Var("x", TensorType((3, 300), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(make_call("matmul", x, Constant(W))))
        bb.emit_func_output(y)
    exe = plait.build(bb.get(), "numpy")
    path = tmp_path / "m.plx"
    exe.save(path)
    return path


def _weight(exe: Executable) -> np.ndarray:
    return next(c for c in exe.constants if c.shape == W.shape)


def test_constants_are_aligned_views_of_the_file(tmp_path: Path) -> None:
    exe = Executable.load(_saved(tmp_path))
    w = _weight(exe)
    assert is_mapped(w) and w.flags.writeable      # copy-on-write: the file never changes
    assert w.ctypes.data % ALIGN == 0
    np.testing.assert_array_equal(w, W)
    x = np.ones((3, 300), np.float32)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](x), x @ W, rtol=1e-5, atol=1e-4)
    w[0, 0] += 1.0                      # this process's page only
    np.testing.assert_array_equal(_weight(Executable.load(tmp_path / "m.plx")), W)


def test_mapping_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAIT_MAP_CONSTANTS", "0")
    w = _weight(Executable.load(_saved(tmp_path)))
    assert not is_mapped(w)
    np.testing.assert_array_equal(w, W)


def test_an_altered_mapped_constant_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("constants/")
                    and i.file_size >= W.nbytes)
    data = bytearray(path.read_bytes())
    data[info.header_offset + 200 + (info.file_size - W.nbytes)] ^= 0xFF   # a weight byte
    path.write_bytes(bytes(data))
    with pytest.raises(ExecutableFormatError, match="was altered"):
        Executable.load(path)
