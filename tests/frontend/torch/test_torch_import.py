"""The PyTorch importer on small models: numbers against eager PyTorch (rtol 1e-4,
atol 1e-5 for float32; exact for integers and booleans) on numpy and c, dynamic batch
sizes, facts, pytrees, parameters as inputs, and the errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_helpers import assert_close, vm_for  # noqa: E402

from plait.frontend import FrontendImportError, from_exported_program, from_torch  # noqa: E402
from plait.frontend.torch import (  # noqa: E402
    TorchImportError,
    UnsupportedOpsError,
    exported_params,
    flatten_inputs,
    unflatten_outputs,
)
from plait.ir.facts import dim_ranges  # noqa: E402
from plait.ir.parser import parse  # noqa: E402
from plait.ir.structural import structural_equal  # noqa: E402
from plait.runtime.vm import VMInputError  # noqa: E402

nn = torch.nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)

    def forward(self, x):
        return torch.log_softmax(self.fc2(torch.nn.functional.silu(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, groups=2)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        x = nn.functional.avg_pool2d(nn.functional.gelu(self.c2(x)), 2, ceil_mode=True)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, ids, mask):
        return self.layer(self.emb(ids), src_key_padding_mask=mask).mean(dim=1)


def _seeded(cls):
    torch.manual_seed(0)
    m = cls().eval()
    with torch.no_grad():  # non-trivial running statistics
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
    return m


BATCH = torch.export.Dim("batch", min=1, max=32)


@pytest.fixture(scope="module")
def mlp():
    m = _seeded(MLP)
    return m, from_torch(m, (torch.randn(2, 16),), dynamic_shapes=({0: BATCH},))


@pytest.fixture(scope="module")
def cnn():
    m = _seeded(CNN)
    return m, from_torch(m, (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: BATCH},))


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_mlp_dynamic_batch(mlp, target: str) -> None:
    m, mod = mlp
    assert mod.phase == "ingestion"
    assert mod["main"].params[0].ty.shape == ("batch", 16)
    vm = vm_for(mod, target)
    for b in (1, 7):
        x = torch.randn(b, 16)
        assert_close(vm["main"](x.numpy()), m(x))


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_cnn_dynamic_batch(cnn, target: str) -> None:
    m, mod = cnn
    vm = vm_for(mod, target)
    for b in (1, 5):
        x = torch.randn(b, 3, 16, 16)
        assert_close(vm["main"](x.numpy()), m(x))


def test_transformer_layer_with_mask_dynamic_batch() -> None:
    m = _seeded(Encoder)
    ids = torch.randint(0, 50, (2, 6))
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mod = from_torch(m, (ids, mask), dynamic_shapes=({0: BATCH}, {0: BATCH}))
    vm = vm_for(mod, "numpy")
    for b in (1, 3):
        ids = torch.randint(0, 50, (b, 6))
        mask = torch.zeros(b, 6, dtype=torch.bool)
        mask[:, 4:] = True
        assert_close(vm["main"](ids.numpy(), mask.numpy()), m(ids, mask))


def test_range_fact_is_kept_printed_and_checked(mlp) -> None:
    _, mod = mlp
    assert dim_ranges(mod) == {"batch": (1, 32)}
    again = parse(mod.script())
    assert structural_equal(again, mod)
    assert dim_ranges(again) == {"batch": (1, 32)}
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        with pytest.raises(VMInputError, match=r"dimension 0 is 33, outside the range \[1, 32\] "
                           r"of symbolic size 'batch'"):
            vm["main"](np.zeros((33, 16), np.float32))


def test_symbolic_shape_arithmetic_on_numpy_and_c() -> None:
    class M(nn.Module):
        def forward(self, x):
            b = x.shape[0]
            y = x.view(b, -1, 2).transpose(1, 2)  # (b, 2, 6)
            z = y.reshape(-1, 3)  # (4b, 3): a compound size
            return z * b, torch.cat([z, z], dim=0)[1:], x.new_full((b, 2), 3.0)

    m = M()
    dim = torch.export.Dim("n", min=2, max=16)
    mod = from_torch(m, (torch.randn(3, 12),), dynamic_shapes=({0: dim},))
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        for b in (2, 5):
            x = torch.randn(b, 12)
            for got, want in zip(vm["main"](x.numpy()), m(x)):
                assert_close(got, want)


def test_advanced_indexing_over_a_dynamic_axis() -> None:
    """Several index tensors (adjacent, on a symbolic axis: transformers' mask builders;
    and non-adjacent, whose result axes go first), with negative indices."""

    class M(nn.Module):
        def forward(self, x, rows, cols):
            b = torch.arange(x.shape[0])
            return x[b[:, None], cols[0]], x[rows, :, cols]

    m = M()
    dim = torch.export.Dim("n", min=2, max=8)
    args = (torch.randn(3, 5, 4), torch.tensor([0, -1]), torch.tensor([[1, -2], [3, 0]]))
    mod = from_torch(m, args, dynamic_shapes=({0: dim}, None, None))
    vm = vm_for(mod, "numpy")
    for b in (2, 6):
        a = (torch.randn(b, 5, 4),) + args[1:]
        for got, want in zip(vm["main"](*flatten_inputs(a)), m(*a)):
            assert_close(got, want)


def test_pytree_inputs_and_outputs() -> None:
    class M(nn.Module):
        def forward(self, pair, extra):
            a, b = pair
            return {"sum": a + b, "more": [a * extra["scale"], None, 3]}

    m = M()
    args = ((torch.randn(2, 3), torch.randn(2, 3)), {"scale": torch.randn(3)})
    mod = from_torch(m, args)
    assert [p.name_hint for p in mod["main"].params] == ["pair_0", "pair_1", "extra_scale"]
    vm = vm_for(mod, "numpy")
    out = unflatten_outputs(vm, vm["main"](*flatten_inputs(args)))
    want = m(*args)
    assert set(out) == {"sum", "more"}
    assert_close(out["sum"], want["sum"])
    assert_close(out["more"][0], want["more"][0])
    assert out["more"][1:] == [None, 3]
    assert unflatten_outputs(mod, vm["main"](*flatten_inputs(args)))["more"][2] == 3


def test_integer_and_boolean_tensors() -> None:
    class M(nn.Module):
        def forward(self, idx, flags, x):
            pos = (idx * 3 + 1) // 2 % 7
            keep = flags & (idx > 2)
            y = torch.where(keep, x, -x)
            return pos, keep, ~flags, y.sum(dim=1), idx.sum(), (flags | keep).any(dim=1)

    m = M()
    args = (torch.randint(-5, 9, (4, 6), dtype=torch.int64),
            torch.rand(4, 6) > 0.5, torch.randn(4, 6))
    mod = from_torch(m, args)
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        for got, want in zip(vm["main"](*flatten_inputs(args)), m(*args)):
            assert_close(got, want)


def test_in_place_ops_after_functionalization() -> None:
    class M(nn.Module):
        def forward(self, x):
            y = x.clone()
            y.mul_(2).add_(1)
            y[:, 0] = 0.0
            torch.relu_(y)
            return y

    m = M()
    x = torch.randn(3, 4)
    mod = from_torch(m, (x,))
    assert_close(vm_for(mod, "numpy")["main"](x.numpy()), m(x))


def test_keep_params_as_input() -> None:
    m = _seeded(MLP)
    x = torch.randn(3, 16)
    ep = torch.export.export(m, (x,))
    mod = from_exported_program(ep, keep_params_as_input=True)
    names = [p.name_hint for p in mod["main"].params]
    assert names == ["x", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]
    assert mod["main"].attrs["num_input"] == 1
    params = exported_params(ep)
    assert [p.shape for p in params] == [(32, 16), (32,), (8, 32), (8,)]
    vm = vm_for(mod, "numpy")
    assert_close(vm["main"](x.numpy(), *params), m(x))
    # other weights, same executable
    params2 = [p * 0.5 for p in params]
    with torch.no_grad():
        for t, p in zip(m.parameters(), params2):
            t.copy_(torch.from_numpy(p))
    assert_close(vm["main"](x.numpy(), *params2), m(x))


def test_unsupported_ops_are_reported_together_with_source_lines() -> None:
    class M(nn.Module):
        def forward(self, x):
            s, _ = torch.sort(x)
            n = torch.nonzero(x > 0)
            t, _ = torch.sort(s * 2)
            return s, n, t

    with pytest.raises(UnsupportedOpsError) as info:
        from_torch(M(), (torch.randn(5),))
    err = info.value
    assert isinstance(err, TorchImportError) and isinstance(err, FrontendImportError)
    text = str(err)
    assert "2 unsupported ATen ops" in text
    assert "aten.sort.default: node 'sort' at " in text and "node 'sort_1' at " in text
    assert "aten.nonzero.default" in text
    assert "test_torch_import.py:" in text and "(s, _ = torch.sort(x))" in text
    assert "hint: docs/pytorch.md" in text
    assert set(err.unsupported) == {"aten.sort.default", "aten.nonzero.default"}


def test_unconvertible_node_names_node_and_line() -> None:
    class M(nn.Module):
        def forward(self, x):
            return x[x > 0]

    with pytest.raises(TorchImportError, match=r"aten.index.Tensor.*boolean mask"):
        from_torch(M(), (torch.randn(5),))


def test_import_plait_does_not_import_torch() -> None:
    code = ("import sys, plait, plait.frontend, plait.runtime; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
