"""The c target's weight-only kernels (``plait_wquant.c``): every copy this CPU runs
(PLAIT_ISA = avx512, avx2, baseline) equals the numpy reference of ``qnn.matmul_nbits``
within the float32 summation bound (wq_helpers.assert_close), for the decode rows (1 to 4:
the matrix-vector product) and the prefill rows (5 and more: the tiled product), from
one executable whose rows are symbolic; 4 and 8 bits, groups 16 to 128 and per channel,
K not a multiple of the group, N not a multiple of the tile, with and without a bias, and
a product large enough for the threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from wq_helpers import assert_close, nbits_cases, nbits_module

import plait
from plait.dialects.qnn import nbits
from plait.dialects.qnn import reference as R
from plait.ir import TensorType, Var
from plait.ir.expr import Constant
from plait.runtime.vm import VirtualMachine
from plait.target.c import cpu_features, library_isas, use_isa

# (K, N, bits, block_size, bias): block_size None is per channel
CONFIGS = [(80, 50, 4, 32, True), (64, 33, 4, 16, False), (90, 20, 4, None, True),
           (300, 20, 8, 128, False), (70, 40, 8, None, True), (200, 17, 8, 16, True),
           (512, 600, 4, 128, False), (96, 33, 4, 32, True), (96, 21, 8, 32, False)]
# symmetric (every block's zero point 2^(bits-1): the kernels' uniform-zero paths) when
# K is a multiple of 3
ROWS = (1, 2, 3, 4, 5, 37)


@pytest.fixture(scope="module")
def built() -> tuple[list[tuple], Any]:
    """One executable: every config applied to its own input of symbolic rows ``m``."""
    configs = []
    for k, n, bits, bs, has_bias in CONFIGS:
        step = 8 // bits
        block = bs if bs is not None else -(-k // step) * step
        configs.append((k, n, bits, block, k % 3 == 0, has_bias))
    cases = nbits_cases(np.random.default_rng(7), configs)
    return cases, plait.build(nbits_module(cases), "c")


def test_every_call_reaches_the_kernels(built: tuple[list[tuple], Any]) -> None:
    _, exe = built
    assert "wquant" in library_isas(exe)


def test_a_symmetric_weight_is_described_by_its_one_zero_point() -> None:
    """The dispatch passes the zero point every block shares (``plait_wq_desc.zero``),
    -1 when they differ: the kernels then read each block's."""
    from plait.dialects.qnn.dispatch_nbits import uniform_zero_point

    rng = np.random.default_rng(1)
    w = rng.standard_normal((5, 96)).astype(np.float32)
    for bits, want in ((4, 8), (8, 128)):
        for k in (96, 80):     # 80: the last of 3 blocks of 32 is padded
            _, _, z = nbits.quantize_blockwise(w[:, :k], bits, 32, symmetric=True)
            assert uniform_zero_point(Constant(z), 5, k, bits, 32) == want
            _, _, z = nbits.quantize_blockwise(w[:, :k], bits, 32)
            assert uniform_zero_point(Constant(z), 5, k, bits, 32) == -1
    x = Var("z", TensorType((5, 2), "uint8"))
    assert uniform_zero_point(x, 5, 96, 4, 32) == -1


@pytest.mark.parametrize("isa", ["avx512", "avx2", "baseline"])
def test_every_kernel_copy_equals_the_reference(built: tuple[list[tuple], Any], isa: str
                                                ) -> None:
    supported = cpu_features()["supported"]
    if isa not in supported:
        pytest.skip(f"this CPU does not run {isa} (it runs {', '.join(supported)})")
    cases, exe = built
    rng = np.random.default_rng(3)
    with use_isa(isa):
        vm = VirtualMachine(exe)
        assert library_isas(exe)["wquant"]["chosen"] == isa
        for m in ROWS:
            xs = [rng.standard_normal((m, c[0])).astype(np.float32) for c in cases]
            got = vm["main"](*xs)
            for x, g, (k, n, bits, block, b, s, z, bias) in zip(xs, got, cases):
                want = R.matmul_nbits(x, b, s, z, bias, K=k, N=n, bits=bits, block_size=block)
                w = nbits.dequantize_weights(b, s, z, k, bits, block)
                assert_close(np.asarray(g), want, x, w,
                             f"{isa}, {m} rows, K={k} N={n} bits={bits} block={block}")
