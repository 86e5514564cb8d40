"""The shared inference helpers of plait/op/infer.py: broadcasting (a property test
against numpy), window sizes (against torch's pooling output sizes), symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait.ir import symbolic as sym
from plait.ir.types import TensorType as T
from plait.op import OpTypeError
from plait.op.infer import (
    add_dim,
    infer_op_type,
    join_layout,
    merge_dims,
    mul_dim,
    shape_or_none,
    shape_str,
    split_layout,
    window_out_dim,
)
from plait.runtime.numpy_ops import pool_out_size

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = F = None

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@given(shapes, shapes)
def test_broadcast_inference_agrees_with_numpy(a, b):
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(OpTypeError, match=r"add: cannot broadcast dimension"):
            infer_op_type("add", T(a, "float32"), T(b, "float32"))
        return
    assert infer_op_type("add", T(a, "float32"), T(b, "float32")) == T(want, "float32")


@given(
    size=st.integers(1, 30),
    kernel=st.integers(1, 5),
    stride=st.integers(1, 4),
    dilation=st.integers(1, 3),
    pad=st.integers(0, 2),
    ceil_mode=st.booleans(),
)
def test_window_out_dim_agrees_with_the_runtime(size, kernel, stride, dilation, pad, ceil_mode):
    eff = dilation * (kernel - 1) + 1
    if size + 2 * pad < eff:
        return
    got = window_out_dim(size, kernel, stride, pad, pad, dilation, ceil_mode)
    assert got == pool_out_size(size, kernel, stride, pad, pad, dilation, ceil_mode)


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_window_out_dim_agrees_with_torch(ceil_mode):
    for size in range(3, 12):
        for kernel, stride, pad, dilation in [
            (3, 2, 1, 1),
            (2, 2, 0, 1),
            (3, 3, 1, 2),
            (4, 3, 2, 1),
        ]:
            if size + 2 * pad < dilation * (kernel - 1) + 1:
                continue
            x = torch.zeros(1, 1, size)
            want = F.max_pool1d(x, kernel, stride, pad, dilation, ceil_mode=ceil_mode).shape[-1]
            assert window_out_dim(size, kernel, stride, pad, pad, dilation, ceil_mode) == want


def test_symbolic_dim_helpers():
    assert window_out_dim("h", 3, 1, 1, 1, 1) == "h"
    assert window_out_dim("h", 3, 1, 2, 2, 2) == "h"
    assert window_out_dim("h", 3, 2, 1, 1, 1) == sym.parse_dim("(h - 1) // 2 + 1")
    assert add_dim(4, -1) == 3 and add_dim("n", 0) == "n"
    assert add_dim("n", 1) == sym.parse_dim("n + 1")
    assert mul_dim(4, 3) == 12 and mul_dim("n", 1) == "n"
    assert mul_dim("n", 2) == sym.parse_dim("2 * n")
    assert merge_dims((2, 3)) == 6 and merge_dims(("n", 1)) == "n"
    assert merge_dims(("n", "m")) == sym.parse_dim("m * n")
    assert shape_or_none([1, "n"]) == (1, "n") and shape_or_none([1, None]) is None
    assert shape_str(("n", 3)) == "(n, 3)" and shape_str((4,)) == "(4,)"
    assert shape_str(None) == "(unknown rank)"
    assert split_layout((1, 8, 9, 3), "NHWC") == (1, 3, [8, 9])
    assert join_layout(1, 3, [8, 9], "NHWC") == [1, 8, 9, 3]
    assert split_layout((3, 3, 4, 16), "HWIO", "O", "I") == (16, 4, [3, 3])


def test_infer_op_type_checks_arity_and_attributes():
    with pytest.raises(OpTypeError, match=r"op 'relu' takes 1 arguments \(x\), got 2"):
        infer_op_type("relu", T((2,), "float32"), T((2,), "float32"))
    with pytest.raises(KeyError, match=r"operator 'relux' is not registered; did you mean relu"):
        infer_op_type("relux", T((2,), "float32"))
