"""PyTorch's size expressions (sympy, with torch's FloorDiv, PythonMod, Max, Min) as
plait size expressions: the translation agrees with sympy's own evaluation at random
values, and what plait cannot write is reported as None (never a wrong size).  A model
whose slice bounds, views and ``arange`` use SymInt arithmetic imports with those sizes
as expressions and matches eager PyTorch on numpy and c."""

from __future__ import annotations

import random

import pytest

from plait.ir.symbolic import evaluate

torch = pytest.importorskip("torch")
sympy = pytest.importorskip("sympy")
from torch.utils._sympy.functions import FloorDiv, Max, Min, PythonMod  # noqa: E402
from torch_helpers import assert_close, vm_for  # noqa: E402

from plait.frontend.torch import from_torch  # noqa: E402
from plait.frontend.torch.symbolic import to_dim  # noqa: E402

S0, S1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True,
                                                                      positive=True)
NAMES = {S0: "batch", S1: "seq"}


@pytest.mark.parametrize("expr", [
    S0 * S1, 2 * S0 - 1, S0 * S1 + 3 * S1 - 7, FloorDiv(S1 - 1, 2) + 1,
    PythonMod(S0 * 12 + 5, 4), Max(1, S1 - 3), Min(S0, S1, 16), S0 ** 2 + S1,
    FloorDiv(FloorDiv(S0 * S1, 3), 2),
])
def test_translation_agrees_with_sympy(expr) -> None:  # type: ignore[no-untyped-def]
    dim = to_dim(expr, NAMES)
    assert dim is not None
    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randint(1, 200), rng.randint(1, 200)
        want = int(expr.subs({S0: a, S1: b}))
        assert evaluate(dim, {"batch": a, "seq": b}) == want, (expr, a, b)


@pytest.mark.parametrize("expr", [S0 / 2, sympy.Symbol("u0") + S0, S0 ** S1])
def test_what_plait_cannot_write_is_none(expr) -> None:  # type: ignore[no-untyped-def]
    assert to_dim(expr, NAMES) is None


class _Windows(torch.nn.Module):
    """SymInt arithmetic into slices, views, expand and arange."""

    def forward(self, x):  # type: ignore[no-untyped-def]
        b, n = x.shape[0], x.shape[1]
        head = x[:, : n - 2]                                   # end n - 2
        tail = x[:, n - 3:]                                    # start n - 3
        flat = x.reshape(b * n)                                # view to b * n
        pos = torch.arange(n - 1, dtype=torch.float32)         # arange(n - 1)
        grid = pos.expand(b, n - 1)                            # expand to (b, n - 1)
        halves = torch.arange(n // 2 + b)                      # arange(n // 2 + b)
        last = x[:, n - 1] * x[b - 1, 0]                       # select at n - 1, b - 1
        return head.sum(1) + tail.sum(1), flat * 2, grid + x[:, 1:], halves, last


def test_symint_arithmetic_into_slices_views_and_arange() -> None:
    m = _Windows()
    b, n = torch.export.Dim("b", min=1, max=16), torch.export.Dim("n", min=4, max=64)
    mod = from_torch(m, (torch.randn(2, 10),), dynamic_shapes=({0: b, 1: n},))
    text = mod.script()
    assert "reshape(x, shape=(\"b * n\",))" in text
    assert "begin=(-3,)" in text and "end=(-2,)" in text  # n - 3, n - 2 from the end
    assert " d_" not in text  # every size written as an expression over b and n, none named
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        for shape in ((1, 4), (3, 9), (5, 17)):
            x = torch.randn(*shape)
            for got, want in zip(vm["main"](x.numpy()), m(x)):
                assert_close(got, want)


class _RepeatByBatch(torch.nn.Module):
    """``y.repeat(b, 1, 2)`` with ``b`` the batch size of another input."""

    def forward(self, x, y):  # type: ignore[no-untyped-def]
        return y.repeat(x.shape[0], 1, 2)


def test_repeat_by_a_symbolic_size() -> None:
    m = _RepeatByBatch()
    b, n = torch.export.Dim("b", min=1, max=16), torch.export.Dim("n", min=2, max=16)
    mod = from_torch(m, (torch.randn(3, 4), torch.randn(1, 5, 3)),
                     dynamic_shapes=({0: b}, {1: n}))  # fmt: skip
    assert str(mod["main"].body.ty) == 'Tensor((b, n, 6), "float32")'
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        for bs, ns in ((1, 2), (4, 7)):
            x, y = torch.randn(bs, 4), torch.randn(1, ns, 3)
            assert_close(vm["main"](x.numpy(), y.numpy()), m(x, y))
