"""The real-model benchmark suite's models: architectures from ``transformers``, built
from their configs with random (seeded) weights -- nothing is downloaded -- and exported
to ONNX with ``torch.onnx.export`` (the TorchScript exporter, ``dynamo=False``), and for
the ``from_torch`` backend with ``torch.export.export`` into a ``.pt2``
(``torch.export.save``; static shapes, like the ONNX export).

    python benchmarks/real_models.py                     # export every model (cached)
    python benchmarks/real_models.py --only bert,llama   # some of them
    python benchmarks/real_models.py --kind pt2          # their torch.export programs
    python benchmarks/real_models.py --list              # names, configs, inputs

Importing this module needs neither torch nor transformers: the specs are plain data,
so the timing processes of ``benchmarks/run.py --suite real`` read them without torch.
Only :func:`build` and :func:`export` (run in a process of their own by
:func:`export_cached`) import torch and transformers.

Each export is cached in ``--cache`` (default ``$PLAIT_BENCH_CACHE``, else
``~/.cache/plait/bench-models``) under a key made of the spec (config, input, output),
the seed, the opset and the versions of torch and transformers, so a model is exported
once per machine and a changed spec is exported afresh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OPSET = 17
SEED = 0
FORMAT = 3
"""Bumped when the export code changes what it writes (part of the cache key)."""


@dataclass(frozen=True)
class RealModel:
    """One benchmark model: a ``transformers`` model class built from a config.

    ``model_class`` is the class's name in ``transformers``, ``config_class`` and
    ``config`` its config (keyword arguments over the config's defaults), ``init`` extra
    keyword arguments of the model's constructor; the model is called with the input
    as ``input_kw`` (``pixel_values``, ``input_ids`` or positional when None) and the
    wrapper returns the output's ``output`` attribute (``logits`` or
    ``last_hidden_state``).  ``shape`` and ``dtype`` describe the one input; integer
    inputs (token ids) are drawn from ``[0, vocab)``."""

    model_class: str
    config_class: str
    config: dict[str, Any]
    shape: tuple[int, ...]
    dtype: str = "float32"
    input_kw: str | None = "pixel_values"
    output: str = "logits"
    vocab: int = 0
    init: dict[str, Any] = field(default_factory=dict)
    encoder_only: bool = False
    """Export ``model.encoder`` (Whisper's encoder) instead of the whole model."""
    note: str = ""

    def key(self) -> dict[str, Any]:
        """What the cached export depends on besides the library versions."""
        return {**asdict(self), "opset": OPSET, "seed": SEED, "format": FORMAT}


# The models (issue 14): name -> spec.  Sizes follow the published configs of
# the named models where a config is named; "small" variants say what they cut.
MODELS: dict[str, RealModel] = {
    "resnet50": RealModel(
        "ResNetForImageClassification", "ResNetConfig", {"num_labels": 1000},
        (1, 3, 224, 224), note="ResNet-50 (bottleneck, 3-4-6-3, 256-2048)"),
    "efficientnet-b0": RealModel(
        "EfficientNetForImageClassification", "EfficientNetConfig",
        {"width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224,
         "hidden_dim": 1280, "dropout_rate": 0.2, "num_labels": 1000},
        (1, 3, 224, 224), note="EfficientNet-B0 (depthwise convs, SiLU, squeeze-excite)"),
    "bert": RealModel(
        "BertModel", "BertConfig", {"num_hidden_layers": 4}, (1, 128), "int64",
        "input_ids", "last_hidden_state", vocab=30522, init={"add_pooling_layer": False},
        note="BERT-base, 4 layers, sequence 128 (erf GELU)"),
    "llama": RealModel(
        "LlamaModel", "LlamaConfig",
        {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
         "max_position_embeddings": 256, "attn_implementation": "eager"},
        (1, 128), "int64", "input_ids", "last_hidden_state", vocab=32000,
        note="Llama-style decoder, 4 layers of 512, 8 heads (4 KV heads), sequence 128: "
             "RMSNorm, rotary, SiLU-gated MLP, causal attention (eager attention: the "
             "TorchScript exporter has no grouped-query scaled_dot_product_attention)"),
    "whisper-encoder": RealModel(
        "WhisperModel", "WhisperConfig", {}, (1, 80, 3000), input_kw=None,
        output="last_hidden_state", encoder_only=True,
        note="Whisper-tiny's encoder (4 layers of 384, 6 heads), 30 s of 80 mel bins"),
    "deit-small": RealModel(
        "DeiTModel", "DeiTConfig",
        {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6,
         "intermediate_size": 1536},
        (1, 3, 224, 224), output="last_hidden_state", init={"add_pooling_layer": False},
        note="DeiT-small (12 layers of 384, 6 heads)"),
    # the first table
    "resnet18": RealModel(
        "ResNetForImageClassification", "ResNetConfig",
        {"layer_type": "basic", "depths": [2, 2, 2, 2], "hidden_sizes": [64, 128, 256, 512],
         "num_labels": 1000},
        (1, 3, 224, 224), note="ResNet-18 (basic blocks, 64-512)"),
    "mobilenetv2": RealModel(
        "MobileNetV2ForImageClassification", "MobileNetV2Config", {"num_labels": 1000},
        (1, 3, 224, 224), note="MobileNetV2 1.0 (depthwise convs, ReLU6)"),
    "convnext": RealModel(
        "ConvNextForImageClassification", "ConvNextConfig",
        {"depths": [2, 2, 2, 2], "hidden_sizes": [48, 96, 192, 384], "num_labels": 1000},
        (1, 3, 224, 224), note="ConvNeXt, depths 2-2-2-2, 48-384 (7x7 depthwise, "
                               "LayerNorm over channels, GELU)"),
    "gpt2": RealModel(
        "GPT2Model", "GPT2Config", {"n_layer": 4}, (1, 64), "int64", "input_ids",
        "last_hidden_state", vocab=50257,
        note="GPT-2, 4 layers of 768, sequence 64 (tanh GELU, causal attention)"),
    "vit": RealModel(
        "ViTModel", "ViTConfig", {"num_hidden_layers": 4}, (1, 3, 224, 224),
        output="last_hidden_state", init={"add_pooling_layer": False},
        note="ViT-base, 4 layers"),
}


def default_cache() -> Path:
    """``$PLAIT_BENCH_CACHE``, else ``~/.cache/plait/bench-models``."""
    env = os.environ.get("PLAIT_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "plait" / "bench-models"


def cache_key(spec: RealModel, versions: dict[str, str]) -> str:
    """16 hex digits of the hash of the spec, the export settings and ``versions`` (of
    torch and transformers)."""
    text = json.dumps({**spec.key(), **versions}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_input(spec: RealModel) -> Any:
    """The benchmark input of ``spec`` (numpy, seeded): normal floats, or token ids."""
    import numpy as np

    rng = np.random.default_rng(SEED)
    if spec.dtype == "int64":
        return rng.integers(0, spec.vocab, spec.shape).astype(np.int64)
    return rng.standard_normal(spec.shape).astype(spec.dtype)


def build(spec: RealModel) -> Any:
    """The model of ``spec`` as a torch module (eval mode, seeded random weights) that
    takes the one input tensor and returns one tensor."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    config = getattr(transformers, spec.config_class)(**spec.config)
    model = getattr(transformers, spec.model_class)(config, **spec.init).eval()
    inner = model.encoder if spec.encoder_only else model
    _calibrate_batch_norms(inner, spec)

    class Wrapped(torch.nn.Module):
        """Calls the model with the input by keyword and returns one output tensor."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.inner(**{spec.input_kw: x}) if spec.input_kw else self.inner(x)
            return getattr(out, spec.output)

    return Wrapped().eval()


def _calibrate_batch_norms(model: Any, spec: RealModel) -> None:
    """Give every batch norm a scale in [0.5, 1.5), a small shift and the running
    statistics of its input on a calibration batch (another seed than the benchmark
    input), as training would have.  With transformers' initialization (EfficientNet's
    scales are drawn around 0 with deviation 0.02, running statistics 0 and 1) the
    activations shrink layer by layer: MobileNetV2's logits came out near 1e-21 and
    EfficientNet-B0's near 1e-31, so their deep layers computed on subnormal numbers,
    which no trained model does and which measures the CPU's subnormal handling instead
    of the kernels."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for m in norms:
            m.reset_running_stats()
            m.momentum = None   # a cumulative average: after one batch, its statistics
            if m.affine:
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    calib = torch.randn((4, *spec.shape[1:]), generator=g)
    with torch.no_grad():
        for m in norms:
            m.train()
        model(**{spec.input_kw: calib}) if spec.input_kw else model(calib)
    model.eval()


KINDS = ("onnx", "pt2")
"""What a model is exported to: ONNX (torch.onnx.export) or an ExportedProgram
(torch.export.export, saved with torch.export.save)."""


def export_pt2(spec: RealModel, path: Path) -> None:
    """Build ``spec``'s model and save its ``torch.export`` program to ``path`` (one
    input, one output, static shapes: the benchmark input's)."""
    import torch

    net = build(spec)
    example = torch.from_numpy(make_input(spec))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.pt2")   # parallel exporters do not collide
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        ep = torch.export.export(net, (example,))
        torch.export.save(ep, str(tmp))
    tmp.replace(path)   # a reader never sees half a file


def export(spec: RealModel, path: Path) -> None:
    """Build ``spec``'s model and export it to ``path`` (one input ``input``, one output
    ``output``, static shapes)."""
    import torch

    net = build(spec)
    example = torch.from_numpy(make_input(spec))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")   # parallel exporters do not collide
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (example,), str(tmp), input_names=["input"],
                          output_names=["output"], opset_version=OPSET, dynamo=False)
    tmp.replace(path)   # a reader never sees half a file


def library_versions() -> dict[str, str]:
    """The versions of torch and transformers, read without importing them."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


SPEC_SUITES = ("real", "broad", "broad-tiny")
"""The tables of specs this module exports: the real suite's (:data:`MODELS`), the broad
suite's (broad_models.py) and the broad suite's tiny twins (its tests')."""


def suite_specs(suite: str = "real") -> dict[str, RealModel]:
    """The specs of ``suite`` (one of :data:`SPEC_SUITES`), by model name."""
    if suite == "real":
        return MODELS
    import broad_models  # noqa: PLC0415 (a sibling module; it imports this one)

    if suite == "broad":
        return broad_models.FULL
    if suite == "broad-tiny":
        return broad_models.TINY
    raise ValueError(f"no spec suite {suite!r}; choose from {', '.join(SPEC_SUITES)}")


def cached_path(name: str, cache: Path, versions: dict[str, str], kind: str = "onnx",
                suite: str = "real") -> Path:
    """Where model ``name``'s export (``kind``: onnx or pt2) is cached (the broad
    suites' files carry the suite's name in front)."""
    prefix = "" if suite == "real" else f"{suite}-"
    return cache / f"{prefix}{name}-{cache_key(suite_specs(suite)[name], versions)}.{kind}"


def export_cached(names: list[str], cache: Path | None = None,
                  kind: str = "onnx", suite: str = "real") -> dict[str, Path]:
    """The ONNX file (``kind="pt2"``: the saved ``torch.export`` program) of each model
    in ``names`` (of spec table ``suite``), exporting the missing ones in a child process
    (so the caller never imports torch).  Raises RuntimeError naming the model when an
    export fails, or when torch or transformers is missing."""
    cache = cache or default_cache()
    versions = library_versions()
    missing = [k for k, v in versions.items() if v == "missing"]
    paths = {n: cached_path(n, cache, versions, kind, suite) for n in names}
    todo = [n for n, p in paths.items() if not p.exists()]
    if todo and missing:
        raise RuntimeError(
            f"exporting {', '.join(todo)} needs {' and '.join(missing)}: install the "
            "benchmark extra (pip install -e '.[bench]')")
    if todo:
        proc = subprocess.run([sys.executable, __file__, "--only", ",".join(todo),
                               "--cache", str(cache), "--kind", kind, "--suite", suite],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"exporting {', '.join(todo)} ({kind}) failed:\n{tail}")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=None, help="comma-separated model names (default all)")
    p.add_argument("--suite", choices=SPEC_SUITES, default="real",
                   help="which table of specs: the real suite's (default), the broad "
                        "suite's (broad_models.py) or its tiny twins")
    p.add_argument("--cache", default=None, help="cache directory (see above)")
    p.add_argument("--kind", choices=KINDS, default="onnx",
                   help="export to ONNX (default) or a torch.export program (.pt2)")
    p.add_argument("--list", action="store_true", help="print the models and exit")
    args = p.parse_args(argv)
    specs = suite_specs(args.suite)
    if args.list:
        for name, spec in specs.items():
            print(f"{name:16s} {spec.dtype}{list(spec.shape)}  {spec.note}")
        return 0
    names = args.only.split(",") if args.only else list(specs)
    unknown = [n for n in names if n not in specs]
    if unknown:
        print(f"unknown model {', '.join(unknown)}; choose from {', '.join(specs)}",
              file=sys.stderr)
        return 2
    cache = Path(args.cache) if args.cache else default_cache()
    versions = library_versions()
    failed = []
    for name in names:
        path = cached_path(name, cache, versions, args.kind, args.suite)
        if not path.exists():
            prefix = path.name[: -len(path.name.split("-")[-1])]
            for stale in cache.glob(f"{prefix}*.{args.kind}"):   # an export of an older spec
                if stale != path:   # (a parallel exporter may have just written this one)
                    stale.unlink(missing_ok=True)
            try:
                (export_pt2 if args.kind == "pt2" else export)(specs[name], path)
            except Exception as err:  # noqa: BLE001 (one model's failure is reported, the rest go on)
                print(f"{name}: export failed: {type(err).__name__}: {err}", file=sys.stderr)
                failed.append(name)
                continue
        print(f"{name}: {path} ({path.stat().st_size / 2**20:.0f} MiB)", flush=True)
    if failed:
        print(f"export failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
