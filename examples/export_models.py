"""Export example models from PyTorch to ONNX.

    python examples/export_models.py                  # all models into examples/models/
    python examples/export_models.py --only tiny_mlp  # just the small MLP shipped in the repo
    python examples/export_models.py --out /tmp/models --only mlp,cnn

Models (batch size dynamic, named ``batch``):

* ``mlp``: 784-512-512-10 with ReLU (input ``(batch, 784)``);
* ``cnn``: a ResNet-style CNN: a conv + batch-norm stem and four basic blocks (two
  downsampling), global average pooling and a classifier (input ``(batch, 3, 32, 32)``);
* ``transformer``: one transformer encoder layer, d_model 256, 4 heads, sequence 128
  (input ``(batch, 128, 256)``);
* ``tiny_mlp``: 64-32-10, small enough to keep in the repository (``examples/models/``).

Then run one with plait and compare with onnxruntime:

    plait run examples/models/tiny_mlp.onnx --compare onnxruntime

The exporter is ``torch.onnx.export(..., dynamo=False)`` (TorchScript-based): the dynamo
exporter needs ``onnxscript``, which plait does not require.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "models")
OPSET = 17


class MLP(nn.Sequential):
    """Fully connected layers with ReLU between them."""

    def __init__(self, sizes: tuple[int, ...] = (784, 512, 512, 10)) -> None:
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        super().__init__(*layers)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv + batch norm, and a (projected) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.shortcut(x))


class ResNetCNN(nn.Module):
    """A stem (conv, batch norm, ReLU, max pool), four basic blocks, pooling, a head."""

    def __init__(self, widths: tuple[int, ...] = (32, 32, 64, 128, 128), classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(),
            nn.MaxPool2d(2),
        )  # fmt: skip
        strides = (1, 2, 2, 1)
        self.blocks = nn.Sequential(
            *(BasicBlock(widths[i], widths[i + 1], strides[i]) for i in range(4))
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.blocks(self.stem(x)))
        return self.head(torch.flatten(y, 1))


class EncoderLayer(nn.Module):
    """One ``nn.TransformerEncoderLayer``: d_model 256, 4 heads, feed-forward 1024, batch
    first, no dropout.  (``is_causal`` is passed explicitly: traced, the default becomes
    a tensor that ``scaled_dot_product_attention`` rejects.)"""

    def __init__(self, d_model: int = 256, heads: int = 4, ffn: int = 1024) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model=d_model, nhead=heads, dim_feedforward=ffn, dropout=0.0, batch_first=True
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x, is_causal=False)


def _randomize_batch_norm(model: nn.Module, seed: int) -> None:
    """Give the batch norms non-trivial running statistics (fresh ones are 0 and 1)."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


# name: (constructor, example input shape)
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (MLP, (1, 784)),
    "cnn": (ResNetCNN, (1, 3, 32, 32)),
    "transformer": (EncoderLayer, (1, 128, 256)),
    "tiny_mlp": (lambda: MLP((64, 32, 10)), (1, 64)),
    # the MLP's first two layers alone (Linear + ReLU), to benchmark one product at a time
    "mlp_layer1": (lambda: nn.Sequential(nn.Linear(784, 512), nn.ReLU()), (1, 784)),
    "mlp_layer2": (lambda: nn.Sequential(nn.Linear(512, 512), nn.ReLU()), (1, 512)),
}


def export(
    name: str,
    out_dir: str = DEFAULT_OUT,
    seed: int = 0,
    dynamic_batch: bool = True,
    shape: tuple[int, ...] | None = None,
) -> str:
    """Export model ``name`` (a key of :data:`MODELS`) to ``<out_dir>/<name>.onnx`` and
    return the path.  Weights are seeded, the model is in eval mode.  ``shape``
    overrides the example input shape (e.g. a 224x224 image for the CNN)."""
    make, default_shape = MODELS[name]
    shape = default_shape if shape is None else tuple(shape)
    torch.manual_seed(seed)
    model = make().eval()
    _randomize_batch_norm(model, seed)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.onnx")
    example = torch.randn(*shape)
    dynamic = {"input": {0: "batch"}, "output": {0: "batch"}} if dynamic_batch else None
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder kernel has no ONNX form
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example,), path, input_names=["input"], output_names=["output"],
            dynamic_axes=dynamic, opset_version=OPSET, dynamo=False,
        )  # fmt: skip
    torch.backends.mha.set_fastpath_enabled(fastpath)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default examples/models)")
    p.add_argument("--only", default=",".join(MODELS), help="comma-separated model names")
    p.add_argument("--static-batch", action="store_true", help="export with batch size 1 fixed")
    args = p.parse_args(argv)
    for name in args.only.split(","):
        if name not in MODELS:
            print(f"unknown model {name!r}; choose from {', '.join(MODELS)}", file=sys.stderr)
            return 2
        path = export(name, args.out, dynamic_batch=not args.static_batch)
        print(f"{path}: {os.path.getsize(path) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
