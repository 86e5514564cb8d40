"""Deferred constants (plait.ir.deferred): typed without their data, computed once when
first read, by every reader alike, and the source dropped then."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from plait.ir import Constant
from plait.ir.deferred import deferred_constant, deferred_of
from plait.ir.printer import const_text
from plait.ir.visitor import post_order
from plait.target.c.kernels.gemm import (
    MR,
    NR,
    pack_a,
    pack_b,
    packed_a_constant,
    packed_b_constant,
    unpack_a,
    unpack_b,
)
from plait.target.c.kernels.winograd import WINOGRAD_G, winograd_constant, winograd_weights


def _calls(log: list[int]):  # type: ignore[no-untyped-def]
    def make(src: np.ndarray) -> np.ndarray:
        log.append(1)
        return np.ascontiguousarray(src.T) * 2
    return make


def test_typed_unread_then_computed_once_and_the_source_dropped():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    ref = weakref.ref(src)
    log: list[int] = []
    c = deferred_constant(src, _calls(log), (4, 3))
    del src
    assert c.ty.shape == (4, 3) and c.ty.dtype == "float32"
    assert list(post_order(c)) == [c] and log == []        # walking does not read it
    d = deferred_of(c)
    assert d is not None and d.source is not None
    first = c.data
    assert log == [1] and c.data is first and not first.flags.writeable
    np.testing.assert_array_equal(first, np.arange(12, dtype=np.float32).reshape(3, 4).T * 2)
    gc.collect()
    assert ref() is None and deferred_of(c) is None and d.source is None


def test_a_wrong_declaration_is_named():
    c = deferred_constant(np.zeros((2, 3), np.float32), lambda s: s.T, (2, 3))
    with pytest.raises(ValueError, match=r"declared \(2, 3\) float32.*fix the declaration"):
        _ = c.data


def test_an_ordinary_constant_is_unchanged():
    a = np.ones((2, 2))
    c = Constant(a)
    assert deferred_of(c) is None and not c.data.flags.writeable and np.shares_memory(c.data, a)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (6, 7), (13, 40), (100, 17), (32, 16)])
def test_panels_unpack_bit_for_bit(shape: tuple[int, int]):
    rng = np.random.default_rng(sum(shape))
    w = rng.standard_normal(shape).astype(np.float32)
    w.flat[0] = -0.0
    m, k = shape
    a = pack_a(w)
    assert a.shape == (-(-m // MR), k, MR)
    # the panels read as the definition says: row r of panel p is column r of the block
    for p in range(a.shape[0]):
        rows = w[p * MR:(p + 1) * MR]
        np.testing.assert_array_equal(a[p, :, :len(rows)], rows.T)
        assert not a[p, :, len(rows):].any()
    b = pack_b(w)
    assert b.shape == (-(-k // NR), m, NR)
    for p in range(b.shape[0]):
        cols = w[:, p * NR:(p + 1) * NR]
        np.testing.assert_array_equal(b[p, :, :cols.shape[1]], cols)
        assert not b[p, :, cols.shape[1]:].any()
    assert unpack_a(a, m).tobytes() == w.tobytes()
    assert unpack_b(b, k).tobytes() == w.tobytes()


@pytest.mark.parametrize("make,shape", [
    (lambda w: packed_a_constant(w), (37, 5, 3, 3)),
    (lambda w: packed_b_constant(w, transposed=True), (37, 5, 3, 3)),
    (lambda w: packed_b_constant(w, transposed=True), (33, 20)),
    (lambda w: packed_b_constant(w), (20, 33)),
    # a grouped convolution's weights, group by group: 3 groups of 7 rows (a tail each)
    (lambda w: packed_a_constant(w, groups=3), (21, 4, 3, 3)),
    (lambda w: packed_b_constant(w, transposed=True, groups=3), (21, 4, 3, 3)),
])
def test_packed_constants_declare_their_type_and_invert_exactly(make, shape):  # type: ignore[no-untyped-def]
    w = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    c = make(w)
    d = deferred_of(c)
    assert d is not None and d.inverse is not None
    data = c.data   # the declared type was right (else ValueError)
    back = d.inverse(data)
    assert back.flags.c_contiguous and back.shape == w.shape and back.tobytes() == w.tobytes()
    # float64 weights round when packed: no way back, so no inverse
    assert deferred_of(make(w.astype(np.float64))).inverse is None


def test_grouped_packing_is_each_groups_own_packing() -> None:
    """packed_a_constant / packed_b_constant with groups: each group's rows packed on
    their own (pack_a, pack_b of the transpose), the groups one after the other (what
    plait_conv2d and plait_conv2d_pixel_rows read with plait_conv2d_desc.G)."""
    w = np.random.default_rng(6).standard_normal((21, 4, 3, 3)).astype(np.float32)
    rows = [w[g * 7:(g + 1) * 7].reshape(7, -1) for g in range(3)]
    a = packed_a_constant(w, groups=3).data
    np.testing.assert_array_equal(a, np.concatenate([pack_a(r) for r in rows]))
    b = packed_b_constant(w, transposed=True, groups=3).data
    np.testing.assert_array_equal(b, np.concatenate([pack_b(r.T) for r in rows]))
    with pytest.raises(ValueError, match="do not split into 4 groups"):
        packed_a_constant(w, groups=4)


def _winograd_reference(w: np.ndarray, m: int) -> np.ndarray:
    """G g G^T per (output, input) channel with numpy, rounded once to float32, then
    packed per transform element (the layout winograd_weights documents)."""
    g = WINOGRAD_G[m]
    o, c = w.shape[:2]
    a = m + 2
    u = np.empty((o, c, a, a))
    for i in range(o):
        for j in range(c):
            u[i, j] = g @ w[i, j].astype(np.float64) @ g.T
    u32 = u.reshape(o, c, a * a).astype(np.float32)
    return np.stack([pack_a(u32[:, :, xi]) for xi in range(a * a)])


@pytest.mark.parametrize("o,c", [(1, 1), (7, 3), (13, 5), (130, 17)])
@pytest.mark.parametrize("m", [2, 4])
def test_winograd_weights_in_blocks(monkeypatch: pytest.MonkeyPatch, o: int, c: int, m: int):
    """Transformed a block of output channels at a time, the weights equal numpy's
    transform (to a float32 rounding of its float64 sums); and the block size changes
    nothing, bit for bit."""
    import plait.target.c.kernels.winograd as wino

    w = np.random.default_rng(o * c).standard_normal((o, c, 3, 3)).astype(np.float32)
    whole = winograd_weights(w, m)
    np.testing.assert_allclose(whole, _winograd_reference(w, m), rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(wino, "WINOGRAD_BLOCK_BYTES", 1)   # one panel at a time
    assert winograd_weights(w, m).tobytes() == whole.tobytes()
    const = winograd_constant(w, m)
    assert const.ty.shape == whole.shape and const.data.tobytes() == whole.tobytes()


def test_a_printer_reads_a_deferred_constant():
    c = deferred_constant(np.arange(3, dtype=np.float32), lambda s: s + 1, (3,))
    assert const_text(c.data) == const_text(np.arange(1, 4, dtype=np.float32))


def test_constants_computed_together_once_and_the_source_dropped_after_the_last():
    from plait.ir.deferred import deferred_constants

    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref = weakref.ref(src)
    log: list[int] = []

    def make(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        log.append(1)
        return s.sum(axis=1), s.T.astype(np.int64)

    a, b = deferred_constants(src, make, [((2,), np.float32, None), ((3, 2), np.int64, None)])
    del src
    assert log == [] and a.ty.shape == (2,) and b.ty.dtype == "int64"
    np.testing.assert_array_equal(a.data, [3, 12])
    gc.collect()
    assert log == [1] and ref() is not None      # b, unread, still needs the source
    np.testing.assert_array_equal(b.data, np.arange(6).reshape(2, 3).T)
    gc.collect()
    assert log == [1] and ref() is None
    bad = deferred_constants(np.zeros(2), lambda s: (s,), [((2,), np.float64, None)] * 2)
    with pytest.raises(ValueError, match="returned 1 arrays for 2 constants"):
        _ = bad[0].data


def test_a_record_holds_what_was_made_in_it_while_alive_and_not_computed():
    """``recording_deferred`` (what ``plait.build`` reads the packed weights from instead
    of walking the built module) lists the deferred constants made inside it, in the
    order made, without keeping any alive: one dropped or already computed is not
    pending, one made outside the block is not listed, and a nested record shadows."""
    from plait.ir.deferred import recording_deferred

    def made(n: int) -> Constant:
        return deferred_constant(np.zeros(n, np.float32), lambda s: s + 1, (n,))

    before = made(1)
    with recording_deferred() as record:
        a, dropped, read, b = made(2), made(3), made(4), made(5)
        with recording_deferred() as inner:
            c = made(6)
        _ = read.data
        del dropped
        gc.collect()
    after = made(7)
    assert [d.shape for d in record.pending()] == [(2,), (5,)]
    assert [d.shape for d in inner.pending()] == [(6,)]
    assert deferred_of(a) is record.pending()[0] and deferred_of(b) is record.pending()[1]
    assert deferred_of(before) is not None and deferred_of(after) is not None
    assert deferred_of(c) is not None
    _ = a.data
    assert [d.shape for d in record.pending()] == [(5,)]


@pytest.mark.parametrize("make,shape,bound", [
    # F(4x4, 3x3): 9 MiB transformed; one block of the float64 transform beside it
    (lambda w: winograd_constant(w, 4), (256, 256, 3, 3), 3.0),
    # grouped: the groups written into one array, one group's transform beside it
    (lambda w: winograd_constant(w, 4, groups=8), (512, 64, 3, 3), 3.0),
    (lambda w: packed_a_constant(w, groups=8), (1024, 256, 3, 3), 3.0),
    (lambda w: packed_b_constant(w, transposed=True, groups=8), (1024, 256, 3, 3), 3.0),
])
def test_packing_holds_little_beside_its_result(make, shape, bound):  # type: ignore[no-untyped-def]
    """Computing a packed or transformed weight allocates its result once and little
    else (tracemalloc, which numpy reports its buffers to): no concatenation of the
    whole (which held a grouped weight's panels, or a Winograd weight's transform, twice)
    and the float64 transform a block of WINOGRAD_BLOCK_BYTES at a time.  A build's
    peak is the weights and their packed form plus this; before, ResNet-18's largest
    3x3 convolution added twice its transform.  The grouped results equal each group's
    own transform, one after the other."""
    import tracemalloc

    w = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    c = make(w)
    tracemalloc.start()
    try:
        data = c.data
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (peak - data.nbytes) / 2**20 < bound, (peak / 2**20, data.nbytes / 2**20)
    if shape == (512, 64, 3, 3):
        parts = [winograd_weights(w[g * 64:(g + 1) * 64], 4) for g in range(8)]
        assert data.tobytes() == np.concatenate(parts).tobytes()
