"""PyTorch's OpInfo samples through the importer, compared with eager PyTorch.

``tools/torch_opinfo.py`` runs the samples of the OpInfos in :data:`OPINFOS` (the ops
the importer claims) and records the results in
``tests/frontend/torch/opinfo_results.json`` (shown in docs/pytorch.md);
``tests/frontend/torch/test_torch_opinfo.py`` runs the recorded passing samples again,
all the samples of one dtype in one exported module (one export, one build per target).

A sample is run as a module whose inputs are the sample's tensors (the other arguments
are fixed), exported with ``torch.export``, imported, built, run and compared with the
eager result (float: ``rtol`` 1e-4, ``atol`` 1e-5, NaN equal to NaN; integers and
booleans: exact).  A sample is *skipped*, with the reason recorded, when it is outside
what a static-graph importer takes: ``torch.export`` refuses it, its decomposition has an
ATen op without a converter (listed in docs/pytorch.md), the importer declines an
argument value it names (a boolean mask, a 3-D convolution, ...), or it has no tensor
output.  Everything else that does not match is a failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RTOL = 1e-4
ATOL = 1e-5

OPINFOS: tuple[str, ...] = (
    # elementwise
    "abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
    "reciprocal", "sin", "cos", "tan", "tanh", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sign",
    "sgn", "square", "isnan", "isinf", "add", "sub", "rsub", "mul", "div.no_rounding_mode",
    "div.trunc_rounding", "div.floor_rounding", "true_divide", "floor_divide", "remainder",
    "fmod", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "where", "clamp", "clamp_min", "clamp_max", "masked_fill",
    # activations
    "nn.functional.relu", "nn.functional.relu6", "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.elu", "nn.functional.leaky_relu", "nn.functional.hardtanh",
    "nn.functional.hardsigmoid", "nn.functional.hardswish", "nn.functional.softplus",
    "nn.functional.mish", "nn.functional.selu", "nn.functional.celu", "nn.functional.logsigmoid",
    "nn.functional.glu", "softmax", "log_softmax", "nn.functional.softmin",
    # linear algebra and nn
    "mm", "bmm", "addmm", "baddbmm", "matmul", "nn.functional.linear", "nn.functional.conv1d",
    "nn.functional.conv2d", "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d",
    "nn.functional.batch_norm", "nn.functional.layer_norm", "nn.functional.group_norm",
    "nn.functional.rms_norm", "nn.functional.embedding", "nn.functional.max_pool2d",
    "nn.functional.avg_pool1d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.pad.constant", "constant_pad_nd", "nn.functional.scaled_dot_product_attention",
    # reductions
    "sum", "mean", "prod", "amax", "amin", "argmax", "argmin", "max.reduction_with_dim",
    "min.reduction_with_dim", "max.reduction_no_dim", "min.reduction_no_dim", "var", "std",
    "any", "all", "cumsum", "logsumexp",
    # shapes and indexing
    "view", "reshape", "flatten", "permute", "transpose", "t", "expand", "unsqueeze",
    "squeeze", "squeeze.multiple", "cat", "stack", "split", "split_with_sizes", "chunk",
    "unbind", "narrow", "select", "flip", "repeat", "index_select", "gather", "take_along_dim",
    "__getitem__", "movedim", "tril", "triu",
    # creation and copies
    "full_like", "zeros_like", "ones_like", "new_full", "new_zeros", "new_ones", "full",
    "zeros", "ones", "arange", "scalar_tensor", "clone", "contiguous", "to",
)  # fmt: skip
"""The OpInfos (``name`` or ``name.variant``) whose samples the importer is checked on."""

DTYPES: tuple[str, ...] = ("float32", "int64", "bool")


@dataclass
class SampleResult:
    """The result of one sample: ``status`` is pass, skip or fail."""

    index: int
    status: str
    reason: str = ""
    aten: list[str] = field(default_factory=list)


def full_name(opinfo: Any) -> str:
    """``name`` or ``name.variant`` of an OpInfo."""
    v = opinfo.variant_test_name
    return opinfo.name + (f".{v}" if v else "")


def find_opinfo(name: str) -> Any:
    """The OpInfo ``name`` (``"div.floor_rounding"``) of ``op_db``."""
    from torch.testing._internal.common_methods_invocations import op_db

    for o in op_db:
        if full_name(o) == name:
            return o
    raise KeyError(f"no OpInfo {name!r} in op_db")


def samples(opinfo: Any, dtype: str, limit: int | None = None) -> list[Any]:
    """The OpInfo's samples for ``dtype`` on the CPU (seeded: the same on every call)."""
    import torch

    torch.manual_seed(0)
    out = []
    for s in opinfo.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False):
        out.append(s)
        if limit is not None and len(out) >= limit:
            break
    return out


def supports(opinfo: Any, dtype: str) -> bool:
    import torch

    return getattr(torch, dtype) in opinfo.supported_dtypes("cpu")


class SampleModule:
    """A sample as a function of its tensors (the other arguments fixed)."""

    def __init__(self, opinfo: Any, sample: Any) -> None:
        import torch
        from torch.utils import _pytree as pytree

        tree = (sample.input, tuple(sample.args), dict(sample.kwargs))
        leaves, self.spec = pytree.tree_flatten(tree)
        self.slots = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        self.leaves = leaves
        self.tensors = [leaves[i].detach().clone() for i in self.slots]
        self.op = opinfo.op

    def __call__(self, *tensors: Any) -> Any:
        from torch.utils import _pytree as pytree

        leaves = list(self.leaves)
        for i, t in zip(self.slots, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.op(inp, *args, **kwargs)


def combined(parts: Sequence[SampleModule]) -> tuple[Any, tuple, list[int]]:
    """One ``nn.Module`` calling every sample (its inputs: all their tensors, in order),
    the example inputs and, per sample, how many tensors it returns."""
    import torch
    from torch.utils import _pytree as pytree

    counts = [len(p.tensors) for p in parts]

    class Combined(torch.nn.Module):
        def forward(self, *tensors: Any) -> Any:
            outs = []
            at = 0
            for p, n in zip(parts, counts):
                result = p(*tensors[at:at + n])
                at += n
                outs.extend(t for t in pytree.tree_leaves(result)
                            if isinstance(t, torch.Tensor))
            return tuple(outs)

    inputs = tuple(t for p in parts for t in p.tensors)
    return Combined(), inputs, counts


def eager(parts: Sequence[SampleModule]) -> list[list[np.ndarray]]:
    """The eager outputs of each sample (tensor leaves, as numpy arrays)."""
    import torch
    from torch.utils import _pytree as pytree

    out = []
    for p in parts:
        with torch.no_grad():
            result = p(*[t.clone() for t in p.tensors])
        out.append([t.detach().numpy() for t in pytree.tree_leaves(result)
                    if isinstance(t, torch.Tensor)])
    return out


def compare(got: np.ndarray, want: np.ndarray) -> str:
    """'' when ``got`` matches ``want`` (rtol/atol for floats, exact otherwise), else why."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind == "f":
        ok = np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
        if not ok.all():
            bad = np.argwhere(~ok)[0]
            return (f"{int((~ok).sum())} of {want.size} values differ, e.g. at "
                    f"{tuple(int(i) for i in bad)}: {got[tuple(bad)]} vs {want[tuple(bad)]}")
        return ""
    if not np.array_equal(got, want):
        return f"{int((got != want).sum())} of {want.size} values differ"
    return ""


_DECLINED = re.compile(r"is not supported|must be static|has symbolic entries|plait does not "
                       r"support|depends on the data")


_WHERE = re.compile(r" at \S+:\d+ \(.*?\)(?= is| \(|:|$)")
"""A node's source location in a message (machine-specific: left out of reasons)."""


def classify(e: BaseException) -> tuple[str, str]:
    """(status, reason) of an exception raised while exporting or importing a sample."""
    from .errors import TorchImportError, UnsupportedOpsError

    if isinstance(e, UnsupportedOpsError):
        return "skip", "needs " + ", ".join(sorted(e.unsupported)) + " (no converter)"
    if isinstance(e, TorchImportError) and str(e).startswith("cannot import the module: "
                                                             "torch.export.export failed"):
        return "skip", "torch.export refuses the sample"
    if isinstance(e, TorchImportError) and _DECLINED.search(str(e)) and "internal" not in str(e):
        m = re.search(r"\((aten\.[\w.]+)\)", str(e))
        tail = _WHERE.sub("", str(e)).rsplit(": ", 1)[-1]
        return "skip", f"{m.group(1) if m else 'importer'}: {tail}"
    if isinstance(e, TorchImportError) and "returns no tensor" in str(e):
        return "skip", "no tensor output"
    return "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def aten_ops(mod: Any) -> list[str]:
    """The ATen ops an imported module was converted from (its bindings' spans)."""
    found: set[str] = set()
    for _, f in mod.graph_functions():
        for block in f.body.blocks:
            for b in block.bindings:
                span = getattr(b.value, "span", None)
                m = re.search(r"\((aten\.[\w.]+)\)$", getattr(span, "note", "") or "")
                if m:
                    found.add(m.group(1))
    return sorted(found)


def run_samples(parts: Sequence[tuple[Any, SampleModule]],
                targets: Sequence[str] = ("numpy", "c"),
                log: Callable[[str], None] | None = None) -> dict[Any, SampleResult]:
    """Run samples (``(key, sample)`` pairs) and compare them with eager PyTorch.

    The samples are exported, imported and built together (one module, one build per
    target); a group that fails is split in halves until the failing samples are alone,
    and a sample alone is classified (:func:`classify`)."""
    results: dict[Any, SampleResult] = {}
    wants: dict[Any, list[np.ndarray]] = {}
    live: list[tuple[Any, SampleModule]] = []
    for key, part in parts:
        try:
            wants[key] = eager([part])[0]
        except Exception as e:  # noqa: BLE001 - the op refuses its own sample
            results[key] = SampleResult(0, "skip", f"eager PyTorch raises {type(e).__name__}")
            continue
        if not wants[key]:
            results[key] = SampleResult(0, "skip", "no tensor output")
            continue
        live.append((key, part))
    stages: list[str | None] = [None, *targets]  # None: import only
    imported: dict[tuple, tuple[Any, tuple]] = {}  # a group's module, imported once
    work: list[tuple[int, list[tuple[Any, SampleModule]]]] = [(0, live)] if live else []
    while work:
        stage, group = work.pop()
        got = _try(group, stages[stage], imported)
        if isinstance(got, BaseException):
            if len(group) > 1:
                half = len(group) // 2
                work += [(stage, group[:half]), (stage, group[half:])]
                continue
            key = group[0][0]
            if stage == 0:
                status, reason = classify(got)
            else:
                first = str(got).splitlines()[0][:300] if str(got) else ""
                status, reason = "fail", f"{stages[stage]}: {type(got).__name__}: {first}"
            results[key] = SampleResult(0, status, reason)
            continue
        if stage == 0:
            for key, _ in group:
                results[key] = SampleResult(0, "pass", aten=got)
        else:
            at = 0
            passing = []
            for key, part in group:
                w = wants[key]
                outs = got[at:at + len(w)]
                at += len(w)
                why = next((c for c in (compare(g, ww) for g, ww in zip(outs, w)) if c), "")
                if why:
                    results[key] = SampleResult(0, "fail", f"{stages[stage]}: {why}")
                else:
                    passing.append((key, part))
            group = passing
        if log:
            log(f"  {len(group)} samples through {stages[stage] or 'import'}")
        if stage + 1 < len(stages) and group:
            work.append((stage + 1, group))
    return results


def _try(group: Sequence[tuple[Any, SampleModule]], target: str | None,
         imported: dict[tuple, tuple[Any, tuple]]) -> Any:
    """Import (target None: the ATen ops) or build and run a group of samples (the flat
    outputs), or the exception raised.  ``imported`` keeps each group's module."""
    from plait.build import build
    from plait.runtime import VirtualMachine

    from .frontend import from_torch

    key = tuple(k for k, _ in group)
    try:
        if key not in imported:
            module, inputs, _ = combined([p for _, p in group])
            imported[key] = (from_torch(module, inputs), inputs)
        mod, inputs = imported[key]
        if target is None:
            return aten_ops(mod)
        vm = VirtualMachine(build(mod, target=target))
        outs = vm["main"](*[t.numpy() for t in inputs])
    except Exception as e:  # noqa: BLE001 - classified by the caller
        return e
    return list(outs) if isinstance(outs, tuple) else [outs]


def run_op(opinfo: Any, dtypes: Sequence[str] = DTYPES, targets: Sequence[str] = ("numpy", "c"),
           limit: int | None = None, indices: dict[str, Sequence[int]] | None = None,
           log: Callable[[str], None] | None = None) -> dict[tuple[str, int], SampleResult]:
    """Run the samples of ``opinfo`` (the first ``limit`` of each dtype it supports, or
    the given ``indices`` per dtype); results by (dtype, sample index)."""
    name = full_name(opinfo)
    return run_ops([opinfo], dtypes, targets, limit, {name: indices} if indices else None,
                   log)[name]


def run_ops(opinfos: Sequence[Any], dtypes: Sequence[str] = DTYPES,
            targets: Sequence[str] = ("numpy", "c"), limit: int | None = None,
            indices: dict[Any, dict[str, Sequence[int]]] | None = None,
            log: Callable[[str], None] | None = None
            ) -> dict[str, dict[tuple[str, int], SampleResult]]:
    """:func:`run_op` for several OpInfos at once (their samples in one module); results
    and ``indices`` by the OpInfos' full names."""
    parts: list[tuple[Any, SampleModule]] = []
    results: dict[str, dict[tuple[str, int], SampleResult]] = {}
    for op in opinfos:
        o = full_name(op)
        results[o] = {}
        for dtype in dtypes:
            if not supports(op, dtype):
                continue
            want = None if indices is None else list((indices.get(o) or {}).get(dtype, ()))
            if want is not None and not want:
                continue
            n = limit if want is None else max(want) + 1
            for i, sample in enumerate(samples(op, dtype, n)):
                if want is not None and i not in want:
                    continue
                try:
                    parts.append(((o, dtype, i), SampleModule(op, sample)))
                except Exception as e:  # noqa: BLE001 - a sample the harness cannot wrap
                    results[o][(dtype, i)] = SampleResult(
                        i, "skip", f"sample not expressible ({type(e).__name__})")
    for (o, dtype, i), r in run_samples(parts, targets, log).items():
        r.index = i
        results[o][(dtype, i)] = r
    return {o: dict(sorted(r.items())) for o, r in results.items()}


def _Wrap(part: SampleModule) -> Any:  # noqa: N802 - a class factory
    import torch

    class Sample(torch.nn.Module):
        def forward(self, *tensors: Any) -> Any:
            return part(*tensors)

    return Sample()


__all__ = ["ATOL", "DTYPES", "OPINFOS", "RTOL", "SampleResult", "classify", "compare",
           "find_opinfo", "full_name", "run_op", "run_ops", "run_samples", "samples", "supports"]
