"""The compute DSL: stages, reductions, the default schedule, errors."""

import pytest

from plait.kernel import Allocate, For, Kernel, dsl, print_kernel, verify_kernel


def _loops(k: Kernel) -> list[tuple[str, str]]:
    out, stack = [], [k.body]
    while stack:
        s = stack.pop()
        if isinstance(s, For):
            out.append((s.var.name_hint, s.kind))
        for f in ("body", "stmts", "then_body", "else_body"):
            v = getattr(s, f, None)
            if isinstance(v, tuple):
                stack.extend(reversed(v))
            elif v is not None:
                stack.append(v)
    return out


def test_elementwise_schedule() -> None:
    a = dsl.placeholder(("n", 64), "float32", "a")
    b = dsl.placeholder((64,), "float32", "b")
    c = dsl.compute(("n", 64), lambda i, j: a[i, j] + b[j], "c")
    k = dsl.create_kernel([a, b, c], "badd")
    assert _loops(k) == [("i", "parallel"), ("j", "vectorized")]
    assert verify_kernel(k) == []
    assert [p.name for p in k.params] == ["a", "b", "c"] and k.num_outputs == 1


def test_batch_one_parallelizes_the_first_loop_with_more_than_one_iteration() -> None:
    a = dsl.placeholder((1, 64, 128), "float32", "a")
    c = dsl.compute((1, 64, 128), lambda n, i, j: a[n, i, j] * 2.0, "c")
    kinds = dict(_loops(dsl.create_kernel([a, c], "scale")))
    assert kinds == {"i": "parallel", "j": "vectorized"}  # the batch loop is gone


def test_a_symbolic_batch_is_fused_with_the_next_loop_into_the_parallel_one() -> None:
    """A dynamic batch may be 1 when the kernel runs: the parallel loop is over batch
    times rows (as a static batch of 1 parallelizes its rows), the batch and row
    numbers bound once per iteration, so the indices inside are as before."""
    from plait.codegen.c.emit import emit_kernel

    a = dsl.placeholder(("n", 64, 128), "float32", "a")
    c = dsl.compute(("n", 64, 128), lambda b, i, j: a[b, i, j] + a[b, 63 - i, j], "c")
    k = dsl.create_kernel([a, c], "flip")
    assert _loops(k) == [("b_i", "parallel"), ("j", "vectorized")]
    assert verify_kernel(k) == []
    text = emit_kernel("flip", k, True)
    assert "const int64_t b = plait_floordiv_i64(b_i, 64);" in text
    assert "const int64_t i = plait_floormod_i64(b_i, 64);" in text
    assert "c[(b * 64 + i) * 128 + j] = (a[(b * 64 + i) * 128 + j] + " in text
    small = dsl.compute(("n", 64), lambda b, j: a[b, 0, j], "small")
    assert _loops(dsl.create_kernel([a, small], "row")) == [("b", "parallel"), ("j", "vectorized")]


def test_small_static_stage_stays_serial_and_transposed_access_is_not_vectorized() -> None:
    a = dsl.placeholder((4, 4), "float32", "a")
    t = dsl.compute((4, 4), lambda i, j: a[j, i], "t")
    k = dsl.create_kernel([a, t])
    assert _loops(k) == [("i", "serial"), ("j", "serial")]


def test_reduction_stage_uses_local_accumulator() -> None:
    a = dsl.placeholder(("n", "k"), "float32", "a")
    b = dsl.placeholder(("k", "m"), "float32", "b")
    r = dsl.reduce_axis("k", "r")
    c = dsl.compute(("n", "m"), lambda i, j: dsl.sum(a[i, r] * b[r, j], axis=[r]), "c")
    k = dsl.create_kernel([a, b, c], "matmul")
    text = print_kernel("matmul", k)
    assert "c_acc = alloc((1,), \"float32\")" in text
    assert "c_acc[0] = c_acc[0] + a[i, r] * b[r, j]" in text
    assert _loops(k) == [("i", "parallel"), ("j", "serial"), ("r", "serial")]


def test_intermediate_stages_become_scratch() -> None:
    x = dsl.placeholder(("n",), "float32", "x")
    y = dsl.compute(("n",), lambda i: x[i] * 2.0, "y")
    z = dsl.compute(("n",), lambda i: y[i] + 1.0, "z")
    k = dsl.create_kernel([x, z])
    assert isinstance(k.body, Allocate) and k.body.buffer is y.buffer


def test_errors() -> None:
    x = dsl.placeholder((4,), "float32", "x")
    r = dsl.reduce_axis(4, "r")
    with pytest.raises(ValueError, match="a reduction must be the whole body"):
        dsl.compute((4,), lambda i: dsl.sum(x[r], axis=[r]) + 1.0, "bad")
    y = dsl.compute((4,), lambda i: x[i] + 1.0, "y")
    with pytest.raises(ValueError, match="placeholder 'x' is read by 'y' but is not among"):
        dsl.create_kernel([y])
    with pytest.raises(ValueError, match="placeholders .* first"):
        dsl.create_kernel([y, x])
    with pytest.raises(IndexError, match="tensor 'x' has rank 1, indexed with 2"):
        dsl.compute((4,), lambda i: x[i, i])
    with pytest.raises(TypeError, match="compute function takes 2 index"):
        dsl.compute((4,), lambda i, j: x[i])
    with pytest.raises(TypeError, match="axis entries must come from reduce_axis"):
        dsl.sum(x[0], axis=[0])


def test_min_max_prod_and_integer_reductions() -> None:
    x = dsl.placeholder((3, 5), "int32", "x")
    r = dsl.reduce_axis(5, "r")
    lo = dsl.compute((3,), lambda i: dsl.min(x[i, r], axis=r), "lo")
    k = dsl.create_kernel([x, lo])
    assert "lo_acc[0] = 2147483647" in print_kernel("k", k)
    p = dsl.compute((3,), lambda i: dsl.prod(x[i, r], axis=[r]), "p")
    assert "p_acc[0] = 1" in print_kernel("k", dsl.create_kernel([x, p]))


def test_contiguous_reduction_accumulates_in_lanes() -> None:
    x = dsl.placeholder(("m", "n"), "float32", "x")
    r = dsl.reduce_axis("n", "r")
    s = dsl.compute(("m",), lambda i: dsl.sum(x[i, r], axis=[r]), "s")
    k = dsl.create_kernel([x, s], "rowsum")
    text = print_kernel("rowsum", k)
    assert 's_acc = alloc((16,), "float32")' in text
    assert "for r_o in range(n // 16):" in text
    assert "s_acc[lane_1] = s_acc[lane_1] + x[i, r_o * 16 + lane_1]" in text
    assert "for r_t in range(n % 16):" in text  # the remainder goes to lane 0
    assert "s_acc[0] = s_acc[0] + s_acc[1]" in text  # the last step of the lane tree
    assert _loops(k)[:4] == [("i", "parallel"), ("lane", "vectorized"), ("r_o", "serial"),
                             ("lane", "vectorized")]
    assert verify_kernel(k) == []


def test_short_or_strided_reductions_stay_serial() -> None:
    x = dsl.placeholder((8, 16), "float64", "x")
    r = dsl.reduce_axis(16, "r")  # 16 < REDUCE_LANES_MIN
    s = dsl.compute((8,), lambda i: dsl.max(x[i, r], axis=[r]), "s")
    assert 's_acc = alloc((1,), "float64")' in print_kernel("k", dsl.create_kernel([x, s]))
    y = dsl.placeholder((256, 8), "float32", "y")
    c = dsl.reduce_axis(256, "c")  # down a column: not contiguous
    t = dsl.compute((8,), lambda j: dsl.sum(y[c, j], axis=[c]), "t")
    assert 't_acc = alloc((1,), "float32")' in print_kernel("k", dsl.create_kernel([y, t]))
    z = dsl.placeholder((4, 100), "float64", "z")
    q = dsl.reduce_axis(100, "q")
    u = dsl.compute((4,), lambda i: dsl.min(z[i, q], axis=[q]), "u")
    text = print_kernel("k", dsl.create_kernel([z, u]))
    assert 'u_acc = alloc((8,), "float64")' in text  # 64 bytes of lanes
    assert "for q_t in range(4):" in text  # 100 = 12 * 8 + 4


def _padded(shape: tuple[int, ...], before: tuple[int, ...], after: tuple[int, ...],
            f: object = None) -> tuple[Kernel, dsl.Tensor]:
    """``pad(f(x))``: the select the c target's pad compute writes."""
    from plait.kernel import intrin as I

    x = dsl.placeholder(shape, "float32", "x")
    out_shape = tuple(s + b + a for s, b, a in zip(shape, before, after, strict=True))

    def body(*i: object) -> object:
        inside, src = None, []
        for d, e in enumerate(i):
            q = e - before[d] if before[d] else e
            src.append(q)
            if before[d] or after[d]:
                c = I.logical_and(q >= 0, q < shape[d])
                inside = c if inside is None else I.logical_and(inside, c)
        v = x[tuple(src)]
        return I.select(inside, f(v) if f else v, 0.0)

    return dsl.create_kernel([x, dsl.compute(out_shape, body, "pad")], "pad"), x


def test_a_padded_stage_is_split_at_the_pad_bounds() -> None:
    """The innermost loop becomes three (left pad, inside, right pad) and the outer
    bound an if, so the guarded value is never computed outside its guard (the AVX-512
    if-conversion computed it on stale lanes: floating-point assists); results are the
    select's (the interpreter against numpy)."""
    import numpy as np

    from plait.kernel import IfThenElse, Select
    from plait.kernel import intrin as I
    from plait.kernel.interp import run_kernel

    k, _ = _padded((3, 5, 7), (0, 1, 2), (0, 2, 1), lambda v: v * I.exp(v))
    # (a small stage: serial outer loops; the right pad of width 1 is one store)
    assert _loops(k) == [("i0", "serial"), ("i1", "serial"), ("i2", "vectorized"),
                         ("i2", "vectorized"), ("i2", "vectorized")]
    stack, ifs, selects = [k.body], 0, 0
    while stack:
        s = stack.pop()
        ifs += isinstance(s, IfThenElse)
        if hasattr(s, "value"):
            selects += isinstance(s.value, Select)
        for f in ("body", "stmts", "then_body", "else_body"):
            v = getattr(s, f, None)
            stack.extend(v if isinstance(v, tuple) else [v] if v is not None else [])
    assert ifs == 1 and selects == 0
    assert verify_kernel(k) == []
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    out = np.full((3, 8, 10), np.nan, np.float32)
    run_kernel(k, [x, out])
    ref = np.pad(x * np.exp(x), ((0, 0), (1, 2), (2, 1)))
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_a_pad_on_outer_axes_only_or_a_crop_keeps_one_loop() -> None:
    k, _ = _padded((4, 6, 8), (1, 0, 0), (1, 0, 0))
    assert [kind for _, kind in _loops(k)] == ["serial", "serial", "vectorized"]
