"""Every core op, built through the default pipeline for the ``c`` target and run on the
VM, agrees with its numpy reference — on the same samples as the numpy target
(tests/op/test_ops_built.py), with static shapes and with a symbolic leading dimension.
All samples of a variant are built into one module (a function per op), so one
compiler run makes its library; pytest-xdist workers share what one of them built.

Tolerances per op family (``rtol``, ``atol``):

* exact families — arithmetic, comparisons, logic, casts, clip, piecewise-linear
  activations, sqrt/rounding, data movement (reshape, concat, pad, take...), creation,
  max/min/arg reductions, max pooling, batch_norm, resize2d: the numpy target's own
  tolerance, ``rtol=1e-6, atol=0`` (the kernels perform the reference's operations in
  the reference's order);
* transcendental — exp/log/trig/hyperbolic functions, erf, sigmoid, silu, softplus,
  gelu, power: ``rtol=1e-5, atol=1e-7`` (the C math library and numpy's SIMD routines
  may differ by a few ulps);
* reductions — float sums, means, variances, norms, softmax, the normalizations,
  average pooling, matmul/linear/convolutions: ``rtol=1e-5, atol=1e-6`` (kernels
  accumulate in index order, numpy and BLAS pairwise or blocked).

Each case also checks how the op was lowered: a generated kernel, except the calls
listed in ``LIBRARY`` (no compute, integer bit operations, float16, results of unknown
shape) and the BLAS dispatch of float matmul/linear/conv2d.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking, just duplicate work
    fcntl = None  # type: ignore[assignment]
from test_op_consistency import SAMPLES  # same directory (pytest's rootdir import mode)

import plait
from plait.ir import BlockBuilder, TensorType, Tuple, Var
from plait.kernel import Kernel
from plait.op import make_call
from plait.runtime import Executable, VirtualMachine, numpy_ops
from plait.runtime.native import library_functions
from plait.transform import Sequential

EXACT = (1e-6, 0.0)
TRANSCENDENTAL = (1e-5, 1e-7)
REDUCTION = (1e-5, 1e-6)

TOLERANCE: dict[str, tuple[float, float]] = {
    **{n: TRANSCENDENTAL for n in (
        "exp expm1 log log2 log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh "
        "atanh erf sigmoid silu softplus gelu power").split()},
    **{n: REDUCTION for n in (
        "sum prod mean variance l2_norm cumsum softmax log_softmax layer_norm group_norm "
        "instance_norm avg_pool1d avg_pool2d adaptive_avg_pool2d global_avg_pool2d matmul "
        "linear conv1d conv2d conv_transpose1d conv_transpose2d").split()},
}

# calls that stay numpy library calls on `c` (op -> why); "symbolic" ones only when the
# leading dimension is symbolic
LIBRARY = {
    "scatter_elements": "no compute",
    "topk": "no compute",
    "bitwise_and": "integer sample: the kernel IR has no bit operations",
    "bitwise_or": "integer sample: the kernel IR has no bit operations",
    "isfinite": "float16 sample: no float16 in generated C",
}
LIBRARY_SYMBOLIC = {
    "pad": "the result shape is unknown",
}
BLAS = {"matmul", "linear", "conv2d"}


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (so two workers do not compile the same
    library at once: the second waits, then finds it in the cache)."""
    with open(path, "a") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _add_sample(bb: BlockBuilder, name: str, symbolic: bool) -> list[np.ndarray]:
    """Add function ``op_<name>`` calling op ``name`` on its sample; returns the inputs
    to pass (a symbolic leading ``n`` on every input sharing the first one's leading
    size and rank)."""
    inputs, attrs = SAMPLES[name]
    params: list[Var] = []
    args = []
    lead = None
    if inputs and not isinstance(inputs[0], tuple) and inputs[0].ndim >= 1:
        lead = (inputs[0].shape[0], inputs[0].ndim)
    flat: list[np.ndarray] = []

    def param(a: np.ndarray, pname: str) -> Var:
        shape = list(a.shape)
        if symbolic and lead is not None and a.ndim == lead[1] and a.shape[0] == lead[0]:
            shape[0] = "n"
        v = Var(pname, TensorType(tuple(shape), a.dtype.name))
        params.append(v)
        flat.append(a)
        return v

    for i, a in enumerate(inputs):
        if isinstance(a, tuple):
            args.append(Tuple(tuple(param(t, f"t{i}_{j}") for j, t in enumerate(a))))
        else:
            args.append(param(a, f"a{i}"))
    with bb.function(f"op_{name}", params):
        with bb.dataflow():
            out = bb.emit_output(make_call(name, *args, **attrs), "out")
        bb.emit_func_output(out)
    return flat


VARIANTS = {"static": False, "symbolic": True}
"""Variant name -> whether the leading dimension is symbolic."""


def _build(names: list[str], symbolic: bool) -> tuple[Executable, dict[str, list[np.ndarray]]]:
    bb = BlockBuilder()
    inputs = {name: _add_sample(bb, name, symbolic) for name in names}
    # without FoldConstant, ops without inputs (full, arange) stay calls and run kernels
    pipeline = plait.default_pipeline("c").remove("FoldConstant")
    exe = plait.build(bb.get(), "c", pipeline=pipeline)
    return exe, inputs


_BUILT: dict[bool, Any] = {}


def _build_all(symbolic: bool, cache_dir: Path) -> None:
    """Build (or load what another xdist worker built and saved) every sample into one
    executable."""
    if symbolic in _BUILT:
        return
    tag = f"samples-{'symbolic' if symbolic else 'static'}"
    saved = cache_dir / f"{tag}.plx"
    with _exclusive(cache_dir / f"{tag}.lock"):
        try:
            if saved.exists():
                exe = Executable.load(saved)
                bb = BlockBuilder()
                inputs = {name: _add_sample(bb, name, symbolic) for name in sorted(SAMPLES)}
            else:
                exe, inputs = _build(sorted(SAMPLES), symbolic)
                exe.save(saved)
            _BUILT[symbolic] = exe, VirtualMachine(exe), inputs
        except Exception as err:  # noqa: BLE001 - rebuilt per op in _built_for
            _BUILT[symbolic] = err


def _built_for(name: str, symbolic: bool,
               cache_dir: Path) -> tuple[Executable, VirtualMachine, list[np.ndarray]]:
    """Every sample is built into one module (one library, one compiler run); if that
    build fails, each op is built on its own so that the failure names its op."""
    if not _BUILT:
        # the second xdist worker starts with the other variant: both compile at once
        _build_all(os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw1", cache_dir)
    _build_all(symbolic, cache_dir)
    built = _BUILT[symbolic]
    if isinstance(built, Exception):
        exe, inputs = _build([name], symbolic)
        return exe, VirtualMachine(exe), inputs[name]
    exe, vm, inputs = built
    return exe, vm, inputs[name]


def _compare(got, want, rtol: float, atol: float) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _compare(g, w, rtol, atol)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


def _lowering(exe: Executable, func: str) -> str:
    calls = [i.func for i in exe.functions[func].instructions if hasattr(i, "func")]
    calls = [c for c in calls if not c.startswith("vm.builtin.")]
    assert len(calls) == 1, calls
    if calls[0].startswith("numpy."):
        return "library"
    if calls[0].startswith("blas."):
        return "blas"
    if calls[0].startswith(("plait_gemm_", "plait_conv2d_")):
        assert calls[0] in library_functions(exe.libs["c"]), calls
        return "gemm"
    assert calls[0] in library_functions(exe.libs["c"]), calls  # a kernel of the library
    return "kernel"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_op_built_for_c_matches_reference(name: str, variant: str,
                                          plait_cache_dir: Path) -> None:
    inputs, attrs = SAMPLES[name]
    want = numpy_ops.IMPLS[name](*inputs, **attrs)
    symbolic = VARIANTS[variant]
    exe, vm, args = _built_for(name, symbolic, plait_cache_dir)
    got = vm[f"op_{name}"](*args)
    _compare(got, want, *TOLERANCE.get(name, EXACT))
    if name in LIBRARY or (symbolic and name in LIBRARY_SYMBOLIC):
        expected = "library"
    elif name in BLAS:
        # float32 matmul/linear go to plait's own product (c.DispatchGemm; a symbolic
        # size is an argument of the call), conv2d whose weight is a parameter (not a
        # constant) to BLAS
        expected = "blas" if name == "conv2d" else "gemm"
    else:
        expected = "kernel"
    assert _lowering(exe, f"op_{name}") == expected


def test_identical_calls_share_one_kernel() -> None:
    """Op by op (no fusion), ten relus of one shape are ten calls of one kernel; another
    shape is another kernel."""
    bb = BlockBuilder()
    x = Var("x", TensorType((4, 8), "float32"))
    y = Var("y", TensorType((8,), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            v = x
            for _ in range(10):
                v = bb.emit(make_call("relu", make_call("add", v, y)), "v")
            w = bb.emit(make_call("relu", y), "w")
            out = bb.emit_output(make_call("add", v, w), "out")
        bb.emit_func_output(out)
    target = plait.Target("c", fuse=False)
    stages = plait.default_pipeline(target).passes
    lowering = Sequential([s for s in stages if s.name != "build"])
    lowered = lowering(bb.get().with_attrs(target=target))
    kernels = sorted(n for n, f in lowered.items() if isinstance(f, Kernel))
    assert kernels == ["add", "relu", "relu_1"]
    assert len(lowered["main"].body.blocks[0].bindings) == 22
    exe = plait.build(bb.get(), target)
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    b = np.ones(8, np.float32)
    want = a
    for _ in range(10):
        want = np.maximum(want + b, 0)
    np.testing.assert_allclose(VirtualMachine(exe)["main"](a, b), want + 1, rtol=1e-6)
