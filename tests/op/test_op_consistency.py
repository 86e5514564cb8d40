"""Whole-registry checks of the core operators.

For every core op one sample call (inputs and attributes) is run through both halves of
the op: type inference on the inputs' types and the numpy implementation on the inputs.
The result must have exactly the inferred shape and dtype, be a fresh writeable array
(also for read-only inputs) and, through the destination-passing packed function
``numpy.<op>``, land unchanged in a caller-provided output array.  Also checked: the
implementation's keyword defaults equal the attribute schema's defaults, and every core
op has a sample here (a new op must add one).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from plait.ir import symbolic as sym
from plait.ir.types import TensorType, TupleType
from plait.op import get_op, list_ops, normalize_attrs
from plait.op.infer import infer_op_type
from plait.op.registry import REQUIRED
from plait.runtime import numpy_ops

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def pos32(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def unit32(*shape: int) -> np.ndarray:
    return RNG.uniform(-0.9, 0.9, shape).astype(np.float32)


def i64(lo: int, hi: int, *shape: int) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(np.int64)


def i32(lo: int, hi: int, *shape: int) -> np.ndarray:
    return RNG.integers(lo, hi, shape).astype(np.int32)


def b(*shape: int) -> np.ndarray:
    return RNG.integers(0, 2, shape).astype(bool)


# op name -> (inputs, attributes); a tuple input stands for a Tuple of tensors
SAMPLES: dict[str, tuple[list, dict]] = {
    # elementwise, binary
    "add": ([f32(2, 3), f32(3)], {}),
    "subtract": ([i32(-5, 5, 2, 1), i32(-5, 5, 1, 4)], {}),
    "multiply": ([f32(2, 3), f32(2, 3)], {}),
    "divide": ([i64(-9, 9, 4, 3), i64(1, 4, 3)], {}),
    "floor_divide": ([f32(3, 2), pos32(3, 2)], {}),
    "mod": ([i32(-9, 9, 5), i32(1, 4, 5)], {"fmod": True}),
    "power": ([pos32(3), f32(2, 3)], {}),
    "maximum": ([f32(4), f32(4)], {}),
    "minimum": ([i64(0, 9, 4), i64(0, 9, 1)], {}),
    "equal": ([i32(0, 3, 6), i32(0, 3, 6)], {}),
    "not_equal": ([f32(2, 2), f32(2, 2)], {}),
    "less": ([f32(3), f32(2, 3)], {}),
    "less_equal": ([i64(0, 3, 5), i64(0, 3, 5)], {}),
    "greater": ([f32(3), f32(3)], {}),
    "greater_equal": ([f32(1, 3), f32(2, 1)], {}),
    "logical_and": ([b(4), b(4)], {}),
    "logical_or": ([b(2, 4), b(4)], {}),
    "logical_xor": ([b(4), b(4)], {}),
    "bitwise_and": ([i32(0, 99, 4), i32(0, 99, 4)], {}),
    "bitwise_or": ([i64(0, 99, 4), i64(0, 99, 1)], {}),
    "bitwise_xor": ([b(3), b(3)], {}),
    "where": ([b(2, 3), f32(3), f32(2, 1)], {}),
    # elementwise, unary
    "abs": ([i32(-5, 5, 4)], {}),
    "neg": ([f32(2, 3)], {}),
    "sign": ([f32(5)], {}),
    "square": ([i64(-3, 3, 4)], {}),
    "relu": ([f32(3, 4)], {}),
    "exp": ([f32(3)], {}),
    "expm1": ([f32(3)], {}),
    "log": ([pos32(3)], {}),
    "log2": ([pos32(3)], {}),
    "log1p": ([pos32(3)], {}),
    "sqrt": ([pos32(3)], {}),
    "rsqrt": ([pos32(3)], {}),
    "reciprocal": ([pos32(3)], {}),
    "sin": ([f32(3)], {}),
    "cos": ([f32(3)], {}),
    "tan": ([unit32(3)], {}),
    "asin": ([unit32(3)], {}),
    "acos": ([unit32(3)], {}),
    "atan": ([f32(3)], {}),
    "sinh": ([f32(3)], {}),
    "cosh": ([f32(3)], {}),
    "tanh": ([f32(3)], {}),
    "asinh": ([f32(3)], {}),
    "acosh": ([pos32(3) + 1], {}),
    "atanh": ([unit32(3)], {}),
    "erf": ([f32(2, 3)], {}),
    "sigmoid": ([f32(4)], {}),
    "silu": ([f32(4)], {}),
    "floor": ([f32(4)], {}),
    "ceil": ([f32(4)], {}),
    "trunc": ([f32(4)], {}),
    "round": ([f32(4) * 3], {}),
    "isnan": ([np.array([0.0, np.nan], np.float32)], {}),
    "isinf": ([np.array([np.inf, 1.0], np.float64)], {}),
    "isfinite": ([np.array([np.inf, 1.0], np.float16)], {}),
    "logical_not": ([b(3)], {}),
    "bitwise_not": ([i32(0, 9, 3)], {}),
    "leaky_relu": ([f32(5)], {"alpha": 0.2}),
    "hard_sigmoid": ([f32(5)], {}),
    "softplus": ([f32(5)], {"beta": 2.0}),
    "gelu": ([f32(5)], {"approximate": "tanh"}),
    "clip": ([f32(5)], {"min": -0.5, "max": 0.5}),
    "cast": ([f32(5)], {"dtype": "int32"}),
    # linalg
    "matmul": ([f32(2, 3, 4), f32(4, 5)], {}),
    "linear": ([f32(2, 4), f32(3, 4), f32(3)], {}),
    "conv1d": ([f32(1, 4, 9), f32(6, 2, 3)], {"groups": 2, "padding": (1, 2)}),
    "conv2d": ([f32(2, 3, 7, 6), f32(4, 3, 3, 2)], {"strides": 2, "padding": 1}),
    "conv_transpose1d": ([f32(1, 2, 5), f32(2, 3, 3)], {"strides": 2}),
    "conv_transpose2d": ([f32(1, 4, 3, 3), f32(4, 1, 2, 2)], {"groups": 2, "strides": 2}),
    # manipulate
    "reshape": ([f32(2, 6)], {"shape": (3, -1)}),
    "permute_dims": ([f32(2, 3, 4)], {"axes": (2, 0, 1)}),
    "concat": ([(f32(2, 3), f32(1, 3))], {"axis": 0}),
    "flatten": ([f32(2, 3, 4)], {"start_dim": 1}),
    "squeeze": ([f32(1, 3, 1)], {"axis": (0,)}),
    "expand_dims": ([f32(3, 4)], {"axis": (0, 2)}),
    "broadcast_to": ([f32(3, 1)], {"shape": (2, 3, 4)}),
    "tile": ([f32(2, 3)], {"repeats": (2, 1, 2)}),
    "repeat": ([f32(2, 3)], {"repeats": 2, "axis": 1}),
    "split": ([f32(7, 2)], {"indices_or_sections": 3}),
    "pad": ([f32(3, 4)], {"pad_width": (1, 2, 0, 1), "pad_mode": "reflect"}),
    "shape_of": ([f32(2, 3)], {}),
    # index
    "strided_slice": ([f32(5, 6)], {"axes": (1,), "begin": (5,), "end": (0,), "strides": (-2,)}),
    "take": ([f32(5, 3), i64(-5, 5, 2, 2)], {"axis": 0}),
    "gather_elements": ([f32(3, 4), i64(0, 3, 2, 4)], {"axis": 0}),
    "scatter_elements": ([f32(3, 4), i64(0, 4, 3, 2), f32(3, 2)], {"axis": 1, "reduction": "add"}),
    "topk": ([f32(3, 6)], {"k": 2}),
    # create
    "full": ([], {"shape": (2, 3), "fill_value": 7}),
    "full_like": ([f32(2, 3)], {"fill_value": 1.5}),
    "zeros_like": ([f32(2, 3)], {"dtype": "int8"}),
    "ones_like": ([i32(0, 3, 2)], {}),
    "arange": ([], {"start": 1, "end": 10, "step": 3}),
    "one_hot": ([i64(0, 4, 2, 3)], {"depth": 4, "axis": 1}),
    # reduce
    "sum": ([f32(2, 3, 4)], {"axis": (0, 2)}),
    "prod": ([i32(1, 3, 3, 4)], {"axis": 1, "keepdims": True}),
    "mean": ([f32(2, 3)], {}),
    "max": ([f32(2, 3)], {"axis": -1}),
    "min": ([i64(0, 9, 2, 3)], {"axis": 0}),
    "variance": ([f32(4, 5)], {"axis": 1}),
    "l2_norm": ([f32(4, 5)], {"axis": 0, "keepdims": True}),
    "argmax": ([f32(3, 4)], {"axis": 1}),
    "argmin": ([f32(3, 4)], {"keepdims": True}),
    "cumsum": ([i32(0, 9, 3, 4)], {"axis": 1, "exclusive": True}),
    # nn
    "softmax": ([f32(2, 5)], {}),
    "log_softmax": ([f32(2, 5)], {"axis": 0}),
    "layer_norm": ([f32(2, 3, 4), f32(3, 4), f32(3, 4)], {"axes": (1, 2)}),
    "batch_norm": ([f32(2, 3, 4), f32(3), f32(3), f32(3), pos32(3)], {}),
    "group_norm": ([f32(2, 4, 3), f32(4), f32(4)], {"num_groups": 2}),
    "instance_norm": ([f32(2, 3, 4, 4), f32(3), f32(3)], {}),
    "max_pool1d": ([f32(1, 2, 9)], {"pool_size": 3, "strides": 2, "ceil_mode": True}),
    "max_pool2d": ([f32(1, 2, 7, 7)], {"pool_size": 3, "strides": 2, "padding": 1}),
    "avg_pool1d": ([f32(1, 2, 9)], {"pool_size": 2, "strides": 2}),
    "avg_pool2d": ([f32(1, 2, 6, 6)], {"pool_size": 3, "strides": 2, "padding": 1}),
    "adaptive_avg_pool2d": ([f32(1, 2, 7, 5)], {"output_size": (3, 2)}),
    "global_avg_pool2d": ([f32(2, 3, 4, 5)], {}),
    "resize2d": ([f32(1, 2, 3, 4)], {"size": (6, 5)}),
}

CORE_OPS = sorted(d.name for d in list_ops() if d.extra.get("module", "").startswith("plait.op."))


def _type_of(v) -> TensorType | TupleType:
    if isinstance(v, tuple):
        return TupleType(tuple(_type_of(x) for x in v))
    return TensorType(v.shape, v.dtype.name)


def _readonly(v):
    if isinstance(v, tuple):
        return tuple(_readonly(x) for x in v)
    v = v.copy()
    v.flags.writeable = False
    return v


def _flat_arrays(v) -> list[np.ndarray]:
    return [x for y in v for x in _flat_arrays(y)] if isinstance(v, tuple) else [v]


def _outputs(ty) -> list[TensorType]:
    return list(ty.fields) if isinstance(ty, TupleType) else [ty]


def test_every_core_op_has_a_sample():
    assert len(CORE_OPS) > 100
    missing = sorted(set(CORE_OPS) - set(SAMPLES))
    assert not missing, f"add a sample for {missing}"
    unknown = sorted(set(SAMPLES) - set(CORE_OPS))
    assert not unknown


@pytest.mark.parametrize("name", CORE_OPS)
def test_reference_matches_inferred_type(name):
    inputs, attrs = SAMPLES[name]
    ty = infer_op_type(name, *(_type_of(v) for v in inputs), **attrs)
    opdef = get_op(name)
    assert opdef.reference is numpy_ops.IMPLS[name]
    ro_inputs = [_readonly(v) for v in inputs]
    result = opdef.reference(*ro_inputs, **normalize_attrs(opdef, attrs))
    results = result if isinstance(result, tuple) else (result,)
    assert isinstance(ty, TupleType) == isinstance(result, tuple)
    want = _outputs(ty)
    assert len(results) == len(want)
    for r, t in zip(results, want):
        assert isinstance(r, np.ndarray), type(r)
        assert r.shape == t.shape and r.dtype.name == t.dtype, (r.shape, r.dtype, t)
        assert r.flags.writeable
        for a in _flat_arrays(tuple(ro_inputs)):
            assert not np.shares_memory(r, a), "the result aliases an input"


@pytest.mark.parametrize("name", CORE_OPS)
def test_packed_dps_writes_into_outputs(name):
    packed = pytest.importorskip("plait.runtime.packed")
    inputs, attrs = SAMPLES[name]
    opdef = get_op(name)
    expected = opdef.reference(*inputs, **normalize_attrs(opdef, attrs))
    expected = expected if isinstance(expected, tuple) else (expected,)
    outs = [np.full(e.shape, 1, dtype=e.dtype) for e in expected]
    fn = packed.get_func(f"numpy.{name}")
    # attributes as the VM passes them: the given ones only, defaults left out
    assert fn(*inputs, *outs, **attrs) is None
    for o, e in zip(outs, expected):
        np.testing.assert_array_equal(o, e)  # exact: same computation


def test_dps_rejects_a_wrongly_shaped_output():
    x = f32(2, 3)
    with pytest.raises(ValueError, match=r"numpy.relu: output 0 has shape \(3, 2\)"):
        numpy_ops.DPS["relu"](x, np.empty((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"numpy.softmax: output 0 has shape \(6,\)"):
        numpy_ops.DPS["softmax"](x, np.empty(6, np.float32))
    # a ufunc would silently broadcast into a larger output: rejected too
    with pytest.raises(ValueError, match=r"numpy.add: output 0 has shape \(4, 2, 3\)"):
        numpy_ops.DPS["add"](x, x, np.empty((4, 2, 3), np.float32))


def test_dps_output_may_alias_an_input():
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    numpy_ops.DPS["relu"](x, x)
    np.testing.assert_array_equal(x, [[0, 0, 0], [1, 2, 3]])
    y = np.arange(4, dtype=np.float32)
    numpy_ops.DPS["cumsum"](y, y, axis=0)
    np.testing.assert_array_equal(y, [0, 1, 3, 6])
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    numpy_ops.DPS["matmul"](a, a, a)
    np.testing.assert_array_equal(a, [[2, 3], [6, 11]])


def test_dps_multiple_outputs():
    x = np.array([[3.0, 1.0, 2.0]], np.float32)
    vals, idx = np.empty((1, 2), np.float32), np.empty((1, 2), np.int64)
    numpy_ops.DPS["topk"](x, vals, idx, k=2)
    np.testing.assert_array_equal(vals, [[3, 2]])
    np.testing.assert_array_equal(idx, [[0, 2]])
    parts = [np.empty((2,), np.float32), np.empty((3,), np.float32)]
    numpy_ops.DPS["split"](np.arange(5, dtype=np.float32), *parts, indices_or_sections=(2,))
    np.testing.assert_array_equal(parts[1], [2, 3, 4])


@pytest.mark.parametrize("name", CORE_OPS)
def test_implementation_defaults_match_the_schema(name):
    opdef = get_op(name)
    params = inspect.signature(numpy_ops.IMPLS[name]).parameters
    kw = {k: p for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(kw) == set(opdef.attrs), f"{name}: {sorted(kw)} vs {sorted(opdef.attrs)}"
    for key, spec in opdef.attrs.items():
        default = kw[key].default
        if spec.default is REQUIRED:
            assert default is inspect.Parameter.empty, key
        else:
            assert default == spec.default, (key, default, spec.default)
    positional = [p for p in params.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [p.name for p in positional] == [i.rstrip("?") for i in opdef.inputs]


@pytest.mark.parametrize("name", CORE_OPS)
def test_op_definition_is_complete(name):
    opdef = get_op(name)
    assert opdef.pure
    assert opdef.doc and "\n" not in opdef.doc
    assert opdef.infer_type.__doc__, f"{name}: the inference function needs a docstring"


SYMBOLIC_CASES = [
    n for n in CORE_OPS if SAMPLES[n][0] and not isinstance(SAMPLES[n][0][0], tuple)
    and SAMPLES[n][0][0].ndim > 0
]  # fmt: skip

# ops whose result shape becomes unknown when the sample's axis 0 is symbolic: none,
# since sizes are expressions (reshape's -1 is n * 2, split's chunks are min/max of
# (n + 2) // 3, pad's rows n + 3)
LOSES_SHAPE: dict[str, str] = {}


@pytest.mark.parametrize("name", SYMBOLIC_CASES)
def test_symbolic_leading_dim_agrees_with_static_inference(name):
    """Make axis 0 of the first input the symbolic size ``n``: inference keeps the rank
    and every size, and evaluating the sizes at n's value gives the static result."""
    inputs, attrs = SAMPLES[name]
    static = infer_op_type(name, *(_type_of(v) for v in inputs), **attrs)
    types = [_type_of(v) for v in inputs]
    first = inputs[0]
    types[0] = TensorType(("n",) + first.shape[1:], first.dtype.name)
    symbolic = infer_op_type(name, *types, **attrs)
    lost = False
    for s, t in zip(_outputs(symbolic), _outputs(static)):
        assert s.dtype == t.dtype
        if s.shape is None:
            lost = True
            continue
        assert tuple(sym.evaluate(d, {"n": first.shape[0]}) for d in s.shape) == t.shape
    assert lost == (name in LOSES_SHAPE), f"{name}: {symbolic}"
