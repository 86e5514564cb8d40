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


def _mapping_rss_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:     # a mapping's first line
            inside = len(head) >= 6 and head[-1] == str(path)
        elif inside and head[:1] == ["Rss:"]:
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux's smaps")
def test_loading_leaves_the_constants_pages_out_of_memory(tmp_path: Path) -> None:
    """The members are hashed from the file, not through the mapping: after loading, an
    8 MiB constant is not resident in this process (its pages are, once read)."""
    big = np.random.default_rng(6).standard_normal((1024, 2048)).astype(np.float32)
    x = Var("x", TensorType((1, 1024), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(make_call("matmul", x, Constant(big))))
        bb.emit_func_output(y)
    path = tmp_path / "big.plx"
    plait.build(bb.get(), "numpy").save(path)
    exe = Executable.load(path)
    w = next(c for c in exe.constants if c.shape == big.shape)
    assert is_mapped(w)
    assert _mapping_rss_kib(path.resolve()) < 1024      # hashing through the map: 8192
    np.testing.assert_array_equal(w, big)               # checked (and now read)
    assert _mapping_rss_kib(path.resolve()) >= big.nbytes // 1024
