"""c.DispatchPool: max_pool2d through plait_pool.c, checked against a numpy reference
(exact: a maximum involves no rounding)."""

from __future__ import annotations

import numpy as np
import pytest

import plait
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Call, ExternFunc
from plait.ir.visitor import post_order
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.target.c import DispatchPool

RNG = np.random.default_rng(3)


def _reference(x: np.ndarray, k, s, d, p) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Max pooling by brute force over the padded input (padding is -inf: never wins)."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + p[0] + p[2], w + p[1] + p[3]), -np.inf, np.float32)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh = (h + p[0] + p[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + p[1] + p[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.full((n, c, oh, ow), -np.inf, np.float32)
    for i in range(k[0]):
        for j in range(k[1]):
            win = xp[:, :, i * d[0]:i * d[0] + (oh - 1) * s[0] + 1:s[0],
                     j * d[1]:j * d[1] + (ow - 1) * s[1] + 1:s[1]]
            out = np.where(np.isnan(win) | (win > out), win, out)
    return out


CASES = [
    ((1, 32, 224, 224), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),   # the CNN's stem
    ((2, 3, 17, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ((1, 4, 9, 11), (3, 2), (1, 3), (1, 1), (0, 1, 2, 0)),
    ((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2)),        # dilation
]


@pytest.mark.parametrize("shape,k,s,d,p", CASES)
def test_max_pool2d_matches_reference(shape, k, s, d, p) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::97] = np.nan
    ref = _reference(x, k, s, d, p)
    param = Var("x", TensorType(shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [param]):
        with bb.dataflow():
            y = bb.emit_output(make_call("max_pool2d", param, pool_size=k, strides=s,
                                         dilation=d, padding=p))
        bb.emit_func_output(y)
    mod = bb.get()
    lowered = DispatchPool()(mod.with_attrs(phase="optimization"))
    calls = [n.args[0].symbol for n in post_order(lowered["main"].body)
             if isinstance(n, Call) and isinstance(n.args[0], ExternFunc)]
    assert len(calls) == 1 and calls[0].startswith("plait_max_pool2d_")
    got = VirtualMachine(plait.build(mod, "c"))["main"](x)
    np.testing.assert_array_equal(got, ref)
