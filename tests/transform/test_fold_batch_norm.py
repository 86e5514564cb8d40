"""FoldBatchNorm: batch_norm(conv2d(x, w) [+ b]) with constant parameters becomes
conv2d(x, w * s) + bias.  Results are compared with the unfolded module on the numpy
target (numpy's own batch_norm and conv2d), rtol 1e-5 / atol 1e-5 (float32: the folded
weights are rounded once, the unfolded path rounds the normalization separately)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "target"))
from graph_helpers import build_graph, const, emit  # noqa: E402

import plait  # noqa: E402
from plait.ir.expr import Call  # noqa: E402
from plait.ir.visitor import post_order  # noqa: E402
from plait.runtime import VirtualMachine  # noqa: E402
from plait.transform.fold_batch_norm import FoldBatchNorm  # noqa: E402

RNG = np.random.default_rng(5)


def _ops(mod: plait.IRModule) -> list[str]:
    return [n.op.name for n in post_order(mod["main"].body)
            if isinstance(n, Call) and hasattr(n.op, "name")]


def _bn_params(c: int) -> list[np.ndarray]:
    return [RNG.uniform(0.5, 2, c).astype(np.float32), RNG.standard_normal(c).astype(np.float32),
            RNG.standard_normal(c).astype(np.float32), RNG.uniform(0.1, 3, c).astype(np.float32)]


def _model(c: int, o: int, groups: int, bias: str | None, layout: str = "NCHW",
           params_const: bool = True, reuse: bool = False):  # type: ignore[no-untyped-def]
    kl = "OIHW" if layout == "NCHW" else "HWIO"
    w = RNG.standard_normal((o, c // groups, 3, 3)).astype(np.float32)
    if kl == "HWIO":
        w = w.transpose(2, 3, 1, 0).copy()
    bn = _bn_params(o)
    b = RNG.standard_normal((o, 1, 1) if layout == "NCHW" else (o,)).astype(np.float32)

    def body(bb, p):  # type: ignore[no-untyped-def]
        y = emit(bb, "conv2d", p[0], const(w), padding=(1, 1), groups=groups,
                 data_layout=layout, kernel_layout=kl)
        conv = y
        if bias == "after":
            y = emit(bb, "add", y, const(b))
        elif bias == "before":
            y = emit(bb, "add", const(b), y)
        params = [const(v) for v in bn] if params_const else list(p[1:])
        y = emit(bb, "batch_norm", y, *params, axis=1 if layout == "NCHW" else 3,
                 epsilon=1e-3)
        y = emit(bb, "relu", y)
        return emit(bb, "add", y, conv) if reuse else y

    shape = (2, c, 9, 7) if layout == "NCHW" else (2, 9, 7, c)
    inputs = {"x": shape}
    if not params_const:
        inputs.update({f"p{i}": (o,) for i in range(4)})
    return build_graph(inputs, body), [RNG.standard_normal(shape).astype(np.float32)] + (
        [] if params_const else bn)


def _run(mod: plait.IRModule, args: list[np.ndarray], target: str = "numpy") -> np.ndarray:
    return np.asarray(VirtualMachine(plait.build(mod, target))["main"](*args))


@pytest.mark.parametrize("groups,bias,layout", [
    (1, None, "NCHW"), (1, "after", "NCHW"), (1, "before", "NCHW"),
    (8, None, "NCHW"),            # depthwise: one input channel per group
    (2, "after", "NCHW"), (1, None, "NHWC"), (1, "after", "NHWC"),
])
def test_folded_into_the_convolution(groups: int, bias: str | None, layout: str) -> None:
    mod, args = _model(8, 8, groups, bias, layout)
    ref = _run(mod, args)
    folded = FoldBatchNorm(mod.with_attrs(phase="optimization"))
    ops = _ops(folded)
    assert "batch_norm" not in ops and ops.count("conv2d") == 1, ops
    np.testing.assert_allclose(_run(folded, args), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_run(mod, args, "c"), ref, rtol=1e-5, atol=1e-5)


def test_default_pipeline_folds_it() -> None:
    assert "FoldBatchNorm" in plait.default_pipeline("numpy").names()
    mod, args = _model(4, 6, 1, "after")
    exe = plait.build(mod, "c")
    funcs = [i.func for fn in exe.functions.values() for i in fn.instructions
             if hasattr(i, "func")]
    assert not any("batch_norm" in f for f in funcs), funcs


@pytest.mark.parametrize("case", ["params_not_const", "conv_used_elsewhere"])
def test_left_alone(case: str) -> None:
    """Parameters that are inputs, or a convolution whose output is also read elsewhere,
    keep the batch_norm (and stay correct)."""
    mod, args = _model(4, 4, 1, None, params_const=case != "params_not_const",
                       reuse=case == "conv_used_elsewhere")
    folded = FoldBatchNorm(mod.with_attrs(phase="optimization"))
    assert "batch_norm" in _ops(folded)
    np.testing.assert_allclose(_run(folded, args), _run(mod, args), rtol=1e-6, atol=1e-6)


def test_torch_export_resnet_block_has_no_batch_norm_left() -> None:
    """A conv-BN-ReLU block through torch.export (which keeps the normalization, unlike
    the ONNX exporter) builds with the normalization folded and matches eager PyTorch
    (rtol 1e-4, atol 1e-5)."""
    torch = pytest.importorskip("torch")
    from plait.frontend import from_exported_program

    block = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
                                torch.nn.BatchNorm2d(8))
    with torch.no_grad():
        for m in block.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
                m.weight.uniform_(0.5, 2)
                m.bias.uniform_(-1, 1)
    block.eval()
    x = torch.randn(1, 3, 10, 10)
    ref = block(x).detach().numpy()
    mod = from_exported_program(torch.export.export(block, (x,)))
    exe = plait.build(mod, "c")
    funcs = [i.func for fn in exe.functions.values() for i in fn.instructions
             if hasattr(i, "func")]
    assert not any("batch_norm" in f for f in funcs), funcs
    got = VirtualMachine(exe)["main"](x.numpy())
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-5)
