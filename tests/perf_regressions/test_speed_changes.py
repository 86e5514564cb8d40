"""Correctness of the speed work of issue 7 (no timing asserts: each fast path must give
exactly what the general path gives).

* ``well_formed``'s fast path for a flat op call (leaves and tuples of leaves) reports
  the same violations as the general bottom-up walk;
* the block builder's fast path now takes ``call_extern``/``call_kernel``/``call_dps``
  calls (extern functions, global vars, tuples of leaves) and types them like
  ``normalize``'s general path;
* ``blas.conv2d`` computes its im2col into a reused per-thread scratch buffer: results
  equal the numpy reference across shapes, groups, strides, dilations, paddings and
  back-to-back calls of different sizes;
* the runtime leaves OpenMP's settings alone (the thread pool of plait_threads.c replaced
  OpenMP's threads), and generated kernels only go parallel above ``PARALLEL_MIN_WORK``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from plait.ir import (
    BindingBlock,
    DataflowBlock,
    DataflowVar,
    ExternFunc,
    Function,
    IRModule,
    SeqExpr,
    TensorType,
    Tuple,
    TupleType,
    Var,
    VarBinding,
    const,
)
from plait.ir import well_formed as wf
from plait.ir.builder import BlockBuilder
from plait.op import make_call
from plait.runtime import blas_ops, numpy_ops

T = TensorType((2, 3), "float32")


def _slow_well_formed(mod: IRModule) -> list[str]:
    """well_formed with the flat-call fast path turned off."""
    saved = wf._infer_flat_call
    wf._infer_flat_call = lambda *a: wf._SLOW  # type: ignore[assignment]
    try:
        return [str(v) for v in wf.well_formed(mod)]
    finally:
        wf._infer_flat_call = saved  # type: ignore[assignment]


def _module(*bindings: VarBinding, result: Var, phase: str = "ingestion") -> IRModule:
    params = tuple(
        v for v in {id(v): v for b in bindings for v in _vars(b.value)}.values()
        if not any(v is b2.var for b2 in bindings)
    )
    f = Function(params, SeqExpr((BindingBlock(tuple(bindings)),), result, ty=result.ty),
                 result.ty)
    return IRModule({"main": f}, {"phase": phase})


def _vars(e: object) -> list[Var]:
    out = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.append(x)
        elif isinstance(x, Tuple):
            stack.extend(x.fields)
        elif hasattr(x, "args"):
            stack.extend(x.args)  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("case", ["ok", "bad_decl", "ill_typed", "bad_annot", "tuple_annot",
                                  "extern", "unknown"])
def test_well_formed_fast_path_matches_general_walk(case: str) -> None:
    x, y = Var("x", T), Var("y", T)
    if case == "ok":
        z = Var("z", T)
        mod = _module(VarBinding(z, make_call("add", x, y)), result=z)
    elif case == "bad_decl":
        z = Var("z", TensorType((3, 3), "float32"))
        mod = _module(VarBinding(z, make_call("relu", x)), result=z)
    elif case == "ill_typed":
        z = Var("z")
        mod = _module(VarBinding(z, make_call("add", x, const([1.0, 2.0], "float32"))),
                      result=z)
    elif case == "bad_annot":
        z = Var("z", T)
        call = make_call("relu", x)
        from dataclasses import replace

        call = replace(call, ty=TensorType((5,), "float32"))
        mod = _module(VarBinding(z, call), result=z)
    elif case == "tuple_annot":
        from dataclasses import replace

        tup = replace(Tuple((x, y)), ty=TupleType((T,)))  # wrong arity on purpose
        z = Var("z", T)
        call = make_call("concat", tup, axis=0)
        mod = _module(VarBinding(z, call), result=z)
    elif case == "extern":
        z = Var("z", T)
        call = make_call("call_extern", ExternFunc("numpy.add"), Tuple((x, y)), out=T)
        mod = _module(VarBinding(z, call), result=z)
    else:  # unknown argument types are fine in ingestion
        p, z = Var("p"), Var("z")
        mod = _module(VarBinding(z, make_call("relu", p)), result=z)
    assert [str(v) for v in wf.well_formed(mod)] == _slow_well_formed(mod)


def test_well_formed_fast_path_on_built_pipeline_stages() -> None:
    """Every stage of the default pipeline on a small model: same (empty) reports."""
    import plait
    from plait.pipeline import default_pipeline
    from plait.target import Target

    x = Var("x", TensorType((4, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(20):
                v = bb.emit(make_call("add" if i % 2 else "multiply", v, x))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    mod = bb.get().with_attrs(target=Target.from_any("numpy"))
    for stage in default_pipeline("numpy").passes:
        mod = stage(mod)
        assert [str(v) for v in wf.well_formed(mod)] == _slow_well_formed(mod) == []
    assert plait.build(bb.get(), "numpy") is not None


def _normalize_general(bb: BlockBuilder, call: object) -> object:
    saved = bb._simple_call
    bb._simple_call = lambda c: None  # type: ignore[assignment, method-assign]
    try:
        return bb.normalize(call)  # type: ignore[arg-type]
    finally:
        bb._simple_call = saved  # type: ignore[method-assign]


@pytest.mark.parametrize("kind", ["extern", "dps", "annotated_tuple"])
def test_builder_fast_path_types_like_normalize(kind: str) -> None:
    x, y = Var("x", T), Var("y", T)
    if kind == "extern":
        call = make_call("call_extern", ExternFunc("numpy.add"), Tuple((x, y)), out=T)
    elif kind == "dps":
        call = make_call("builtin.call_dps", ExternFunc("numpy.add"), Tuple((x, y)),
                         Tuple((Var("o", T),)))
    else:
        from dataclasses import replace

        call = make_call("call_extern", ExternFunc("numpy.add"),
                         replace(Tuple((x, y)), ty=TupleType((T, T))), out=T)
    bb = BlockBuilder()
    fast = bb._simple_call(call)  # type: ignore[arg-type]
    assert fast is not None, "the fast path should take this call"
    slow = _normalize_general(BlockBuilder(), call)
    assert fast.ty == slow.ty  # type: ignore[attr-defined]
    assert [a.ty for a in fast.args] == [a.ty for a in slow.args]  # type: ignore[attr-defined]
    assert fast.attrs == slow.attrs  # type: ignore[attr-defined]


def test_builder_fast_path_declines_remapped_and_untyped_tuple_fields() -> None:
    x = Var("x", T)
    bb = BlockBuilder()
    untyped = make_call("call_extern", ExternFunc("numpy.relu"), Tuple((Var("u"),)), out=T)
    assert bb._simple_call(untyped) is None
    bb.var_remap[x] = Var("x2", T)
    remapped = make_call("call_extern", ExternFunc("numpy.relu"), Tuple((x,)), out=T)
    assert bb._simple_call(remapped) is None
    assert bb.normalize(remapped).args[1].fields[0] is bb.var_remap[x]  # type: ignore


def test_builder_fast_path_in_a_dataflow_function() -> None:
    x = Var("x", T)
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(make_call("call_extern", ExternFunc("numpy.relu"), Tuple((x,)), out=T))
            out = bb.emit_output(make_call("add", a, x))
        bb.emit_func_output(out)
    mod = bb.get()
    f = mod["main"]
    block = f.body.blocks[0]
    assert isinstance(block, DataflowBlock) and isinstance(a, DataflowVar)
    assert block.bindings[0].value.args[1].ty == TupleType((T,))
    assert wf.well_formed(mod) == []


CONV_CASES = [
    # n, c, h, w, o, k, strides, padding, dilation, groups
    (1, 3, 17, 17, 8, 3, 1, 1, 1, 1),
    (2, 4, 9, 11, 6, 3, 2, (1, 0, 2, 1), 1, 2),
    (1, 3, 8, 8, 4, 3, 1, 1, 2, 1),
    (1, 8, 7, 7, 8, 1, 1, 0, 1, 4),
    (1, 6, 12, 12, 4, 1, 2, 0, 1, 1),
    (1, 4, 5, 5, 4, 3, 1, 2, 1, 4),
]


def test_conv2d_scratch_buffer_matches_reference_back_to_back() -> None:
    rng = np.random.default_rng(0)
    for n, c, h, w, o, k, s, p, d, g in CONV_CASES * 2:  # twice: reuse after growth
        x = rng.standard_normal((n, c, h, w)).astype("float32")
        wt = rng.standard_normal((o, c // g, k, k)).astype("float32")
        ref = numpy_ops.IMPLS["conv2d"](x, wt, strides=s, padding=p, dilation=d, groups=g)
        out = np.full_like(ref, np.nan)
        blas_ops.conv2d(x, wt, out, strides=s, padding=p, dilation=d, groups=g)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_conv2d_nhwc_and_float64() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 9, 9, 4))
    wt = rng.standard_normal((3, 3, 4, 5))  # HWIO
    ref = numpy_ops.IMPLS["conv2d"](x, wt, padding=1, data_layout="NHWC",
                                    kernel_layout="HWIO")
    out = np.empty_like(ref)
    blas_ops.conv2d(x, wt, out, padding=1, data_layout="NHWC", kernel_layout="HWIO")
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)


def test_the_runtime_leaves_openmp_settings_alone() -> None:
    """Native libraries run their parallel work on their own pool (plait_threads.c),
    not OpenMP's threads, so importing the runtime no longer sets GOMP_SPINCOUNT for the
    whole process (where it would change how other libraries' OpenMP threads wait)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOMP_", "OMP_"))}
    r = subprocess.run([sys.executable, "-c", "import os, plait.runtime.vm; "
                        "print(os.environ.get('GOMP_SPINCOUNT'))"],
                       capture_output=True, text=True, env=env, check=True)
    assert r.stdout.strip() == "None"


def test_small_kernels_stay_serial() -> None:
    from plait.codegen.c import emit

    assert emit.PARALLEL_MIN_WORK >= 1 << 13   # a few microseconds of work at least


@pytest.mark.parametrize("xs,ys", [((128, 1, 256), (256, 96)), ((2, 3, 4, 5), (5, 6)),
                                   ((3, 0, 4), (4, 2)), ((4, 5), (5, 3)), ((2, 4, 5), (2, 5, 3)),
                                   ((7,), (7, 3)), ((2, 3, 4), (4,))])
def test_matmul_stack_times_matrix_is_one_product(xs: tuple, ys: tuple) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs).astype("float32")
    y = rng.standard_normal(ys).astype("float32")
    ref = np.matmul(x, y)
    np.testing.assert_allclose(numpy_ops.IMPLS["matmul"](x, y), ref, rtol=1e-5, atol=1e-5)
    for dps in (numpy_ops.DPS["matmul"], blas_ops.matmul):
        out = np.full(ref.shape, np.nan, np.float32)
        dps(x, y, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    # a non-contiguous output (and input) still works
    out = np.full(ref.shape + (2,), np.nan, np.float32)[..., 0]
    numpy_ops.DPS["matmul"](x, y, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    if x.ndim > 2:
        xt = np.ascontiguousarray(np.swapaxes(x, 0, 1)).swapaxes(0, 1)
        np.testing.assert_allclose(numpy_ops.IMPLS["matmul"](xt, y), ref, rtol=1e-5, atol=1e-5)


def test_linear_on_a_stack_and_int_matmul() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 1, 32)).astype("float32")
    w = rng.standard_normal((8, 32)).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    ref = x @ w.T + b
    np.testing.assert_allclose(numpy_ops.IMPLS["linear"](x, w, b), ref, rtol=1e-5, atol=1e-5)
    out = np.empty(ref.shape, np.float32)
    blas_ops.linear(x, w, b, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    xi = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    yi = np.arange(8, dtype=np.int32).reshape(4, 2)
    got = numpy_ops.IMPLS["matmul"](xi, yi)
    assert got.dtype == (xi @ yi).dtype and np.array_equal(got, xi @ yi)
