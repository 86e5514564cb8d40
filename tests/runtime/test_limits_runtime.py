"""The runtime's limits: an executable whose members inflate past max_inflated_bytes
is refused while reading (before the bytes are inflated), and an argument whose copy or
a tensor whose allocation would exceed max_tensor_bytes is a clean error."""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile

import numpy as np
import pytest

import plait
from plait.runtime import Executable, ExecutableFormatError, VirtualMachine
from plait.runtime.limits import LimitExceeded
from plait.runtime.vm import VMError

ADD = '''
@module(attrs={"target": "numpy"})
class M:
    @function
    def main(x: Tensor(("n", 4), "float32")) -> Tensor(("n", 4), "float32"):
        c = const([1.0, 2.0, 3.0, 4.0], "float32")
        y = add(x, c)
        return y
'''


def built() -> Executable:
    return plait.build(plait.parse(ADD))


def with_big_constant(data: bytes, count: int) -> bytes:
    """``data`` (a saved executable) with constant 0 replaced by ``count`` float32 zeros,
    deflated (a few MB on disk for GBs inflated), digests recomputed, no signature: what
    anyone can write."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    parts.pop("signatures.json", None)
    manifest = json.loads(parts.pop("manifest.json"))
    member = manifest["constants"][0]
    del parts[member]
    out = io.BytesIO()
    digest = hashlib.sha256()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        info = zipfile.ZipInfo(member)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as f:
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                buf, {"descr": "<f4", "fortran_order": False, "shape": (count,)})
            head = buf.getvalue()
            f.write(head)
            digest.update(head)
            zeros = bytes(1 << 22)
            left = 4 * count
            while left:
                chunk = zeros[: min(left, len(zeros))]
                f.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        manifest["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in parts.items()}
        manifest["members"][member] = digest.hexdigest()
        for name, payload in parts.items():
            zf.writestr(name, payload)
        zf.writestr("manifest.json", json.dumps(manifest))
    return out.getvalue()


def test_a_deflated_bomb_is_refused_before_it_is_inflated():
    bomb = with_big_constant(built().to_bytes(), 64 << 20)   # 256 MiB inflated
    assert len(bomb) < 2 << 20
    with plait.use_limits(max_inflated_bytes=16 << 20):
        start = time.perf_counter()
        with pytest.raises(LimitExceeded) as info:
            Executable.from_bytes(bomb)
        took = time.perf_counter() - start
    assert info.value.limit == "max_inflated_bytes"
    assert "the executable's compressed members declare" in str(info.value)   # by the sizes
    assert took < 1.0, took
    # with room for it, the same file loads (and is only data: it runs on numpy)
    exe = Executable.from_bytes(bomb)
    assert exe.constants[0].nbytes == 256 << 20


def lie_about_size(data: bytes, member: str, size: int, compressed: int | None = None
                   ) -> bytes:
    """``data`` with the central directory's uncompressed size of ``member`` replaced by
    ``size`` (a header that lies: the member inflates to more than it declares), and
    its compressed size by ``compressed`` when given."""
    raw = bytearray(data)
    name = member.encode()
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        n = int.from_bytes(raw[at + 28: at + 30], "little")
        if raw[at + 46: at + 46 + n] == name:
            assert int.from_bytes(raw[at + 24: at + 28], "little") != 0xFFFFFFFF
            raw[at + 24: at + 28] = size.to_bytes(4, "little")
            if compressed is not None:
                raw[at + 20: at + 24] = compressed.to_bytes(4, "little")
            return bytes(raw)
        at = raw.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"no central directory entry for {member!r}")


def test_a_header_that_lies_about_the_size_is_not_believed():
    """A member declaring 1 KiB but inflating to 40 MiB: reading stops at the budget
    (or at the declared size), never inflating the whole member."""
    exe = built()
    data = exe.to_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        member = json.loads(zf.read("manifest.json"))["constants"][0]
    small = with_big_constant(data, 10 << 20)
    with zipfile.ZipFile(io.BytesIO(small)) as zf:   # (the big member is not zip64 here)
        info = zf.getinfo(member)
    if info.file_size >= 0xFFFFFFFF or info.extra:
        pytest.skip("the member was written with a zip64 size field")
    lying = lie_about_size(small, member, 1024)
    with plait.use_limits(max_inflated_bytes=1 << 20):
        start = time.perf_counter()
        with pytest.raises((LimitExceeded, ExecutableFormatError)):
            Executable.from_bytes(lying)
        assert time.perf_counter() - start < 1.0


WEIGHTS = np.arange(4 << 20, dtype=np.float32).reshape(1 << 20, 4) % 3


def big_stored() -> bytes:
    """A saved executable whose 16 MiB constant is stored uncompressed (as plait saves
    constants, to map them)."""
    from plait.ir import BlockBuilder, Constant, TensorType, Var
    from plait.op import make_call

    x = Var("x", TensorType((1 << 20, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(make_call("add", x, Constant(WEIGHTS))))
        bb.emit_func_output(out)
    data = plait.build(bb.get(), "numpy").to_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        big = max(zf.infolist(), key=lambda i: i.file_size)
    assert big.compress_type == zipfile.ZIP_STORED and big.file_size > 16 << 20
    return data


def test_stored_members_are_the_files_own_bytes_not_inflation():
    """A model's weights stored uncompressed are not counted against max_inflated_bytes
    (a 1B-parameter model's float32 weights are 4.4 GB, past the default): they are
    the file's bytes, so the file asks for no more than its size."""
    data = big_stored()
    with plait.use_limits(max_inflated_bytes=1 << 20):
        exe = Executable.from_bytes(data)
    x = np.ones((1 << 20, 4), np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), x + WEIGHTS)


def test_a_stored_member_that_claims_more_than_it_stores_is_refused():
    """A stored member cannot ask for memory through a forged size: declaring more than
    it stores, or more than the whole file holds, refuses the file before any member
    is read."""
    data = built().to_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        member = json.loads(zf.read("manifest.json"))["constants"][0]
        info = zf.getinfo(member)
    assert info.compress_type == zipfile.ZIP_STORED
    lying = lie_about_size(data, member, 3 << 30)
    with pytest.raises(ExecutableFormatError, match=r"stored uncompressed but declares "
                                                    r"3,221,225,472 bytes"):
        Executable.from_bytes(lying)
    huge = lie_about_size(data, member, 3 << 30, compressed=3 << 30)
    with pytest.raises(ExecutableFormatError, match="more than its .* bytes hold"):
        Executable.from_bytes(huge)


def test_an_executable_within_the_budget_loads():
    data = built().to_bytes()
    with plait.use_limits(max_inflated_bytes=1 << 20):
        exe = Executable.from_bytes(data)
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe)["main"](x), x + [1, 2, 3, 4])


def test_a_broadcast_input_of_a_billion_rows_is_a_clean_error():
    vm = VirtualMachine(built())
    x = np.broadcast_to(np.ones(4, np.float32), (10**9, 4))   # 16 GB once copied
    with pytest.raises(VMError, match=r"parameter 'x'.*16,000,000,000 bytes.*exceeds the "
                                      r"limit max_tensor_bytes.*PLAIT_MAX_TENSOR_BYTES"):
        vm["main"](x)
    # a byte-swapped argument needs a copy as well
    with plait.use_limits(max_tensor_bytes=1000):
        with pytest.raises(VMError, match="max_tensor_bytes"):
            vm["main"](np.ones((100, 4), ">f4"))
        small = np.broadcast_to(np.ones(4, np.float32), (10, 4))
        np.testing.assert_array_equal(vm["main"](small), small + [1, 2, 3, 4])


def test_an_allocation_past_the_budget_is_a_clean_error():
    """A tensor the VM allocates from a symbolic size (here the output) is checked."""
    vm = VirtualMachine(built())
    x = np.ones((1000, 4), np.float32)
    with plait.use_limits(max_tensor_bytes=4 * 4 * 999):
        with pytest.raises(VMError, match=r"shape \(1000, 4\) float32 needs: 16,000 bytes .*"
                                          r"exceeds the limit max_tensor_bytes"):
            vm["main"](x)
