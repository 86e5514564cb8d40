"""c.DispatchPool: max_pool2d through plait_pool.c, checked against a numpy reference
(exact: a maximum involves no rounding)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import max_pool_reference  # tests/target

import plait
from plait.ir import BlockBuilder, TensorType, Var
from plait.ir.expr import Call, ExternFunc
from plait.ir.visitor import post_order
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.target.c import DispatchPool

RNG = np.random.default_rng(3)


_reference = max_pool_reference


CASES = [
    ((1, 32, 224, 224), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),   # the CNN's stem
    ((2, 3, 17, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ((1, 4, 9, 11), (3, 2), (1, 3), (1, 1), (0, 1, 2, 0)),
    ((1, 2, 15, 15), (3, 3), (2, 1), (2, 2), (2, 2, 2, 2)),        # dilation
    ((1, 5, 112, 112), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),      # ResNet's stem, threaded
    ((2, 3, 10, 23), (2, 3), (3, 3), (1, 1), (0, 2, 1, 0)),        # stride 3, uneven pads
    ((1, 2, 9, 8), (2, 2), (2, 2), (1, 1), (0, 0, 1, 1)),          # odd padded row
    ((1, 3, 6, 5), (4, 4), (1, 1), (1, 1), (3, 3, 3, 3)),          # pads of k - 1
    ((1, 2, 11, 17), (3, 2), (2, 3), (1, 2), (1, 0, 2, 1)),        # stride 3 + dilation
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
