"""Sibling products (plait/target/c/dispatch/siblings.py): ``qnn.matmul_nbits`` calls of
one input and one format (a layer's q, k and v; gate and up) become one call of
``plait_wq_matmul`` whose weights are theirs concatenated along N and whose outputs are
theirs, written apart (``plait_wq_outs``).  Each output equals the numpy reference of
its own product (``qnn.reference.matmul_nbits``) within the float32 summation bound
(float activations: wq_helpers.assert_close; int8 activations: the bound of
test_wquant_int8_act), on every copy this CPU runs, for decode rows (1 to 4: one
product over all the weights) and prefill rows (each output its own product)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from test_wquant_int8_act import assert_close_int8
from wq_helpers import assert_close, nbits_cases, nbits_module

import plait
from plait.dialects.qnn import nbits
from plait.dialects.qnn import reference as R
from plait.runtime.vm import VirtualMachine
from plait.target.c import cpu_features, use_isa

# (K, N, bits, block, symmetric, bias) per member: q, k, v of a grouped-query layer
# (one bias missing), and an asymmetric 8-bit pair
GROUPS = {
    "int4-g32-sym": [(96, 64, 4, 32, True, False), (96, 16, 4, 32, True, False),
                     (96, 24, 4, 32, True, False)],
    "int8-g16-bias": [(80, 40, 8, 16, False, True), (80, 33, 8, 16, False, False)],
}
ROWS = (1, 3, 6)


@pytest.fixture(scope="module", params=[0, 4], ids=["float", "int8-act"])
def built(request: Any) -> list[tuple[str, list, Any]]:
    out = []
    for name, configs in GROUPS.items():
        cases = nbits_cases(np.random.default_rng(len(name)), configs)
        exe = plait.build(nbits_module(cases, request.param, shared_input=True), "c")
        out.append((name, cases, exe))
    return [(request.param, *o) for o in out]


def test_one_call_takes_every_member(built: list) -> None:
    for _, name, cases, exe in built:
        calls = re.findall(r"call (plait_wq_\w+)\(", exe.as_text())
        assert len(calls) == 1, f"{name}: {len(cases)} products, calls {calls}"


@pytest.mark.parametrize("isa", ["avx512vnni", "avx512", "avx2", "baseline"])
def test_every_output_equals_its_own_product(built: list, isa: str) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    rng = np.random.default_rng(9)
    for level, name, cases, exe in built:
        if isa == "avx512vnni" and level == 0:
            continue   # (its float paths are the avx512 copy's)
        with use_isa(isa):
            vm = VirtualMachine(exe)
            for m in ROWS:
                x = rng.standard_normal((m, cases[0][0])).astype(np.float32)
                got = vm["main"](x)
                for g, (k, n, bits, bs, b, s, z, bias) in zip(got, cases, strict=True):
                    want = R.matmul_nbits(x, b, s, z, bias, K=k, N=n, bits=bits,
                                          block_size=bs, accuracy_level=level)
                    what = f"{isa}, {name}, {m} rows, N={n}"
                    assert np.asarray(g).shape == (m, n), what
                    if level == 4:
                        assert_close_int8(np.asarray(g), want, x, b, s, z, k, bits, bs,
                                          what=what)
                    else:
                        assert_close(np.asarray(g), want, x,
                                     nbits.dequantize_weights(b, s, z, k, bits, bs), what)
