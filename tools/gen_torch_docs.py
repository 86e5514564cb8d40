"""Generate the coverage tables of docs/pytorch.md from the ATen converter table.

    python tools/gen_torch_docs.py          # rewrite the generated part of docs/pytorch.md
    python tools/gen_torch_docs.py --check  # exit 1 if docs/pytorch.md is out of date

The tables sit between ``<!-- BEGIN GENERATED TORCH OPS -->`` and
``<!-- END GENERATED TORCH OPS -->``; the OpInfo counts come from
``tests/frontend/torch/opinfo_results.json`` (written by ``tools/torch_opinfo.py``).
The rest of the file is written by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "pytorch.md")
RESULTS = os.path.join(ROOT, "tests", "frontend", "torch", "opinfo_results.json")
BEGIN = "<!-- BEGIN GENERATED TORCH OPS -->"
END = "<!-- END GENERATED TORCH OPS -->"

HANDLED = {
    "aten.sym_size.int": "the size PyTorch recorded (a plait symbolic size)",
    "aten.sym_numel.default": "the size PyTorch recorded",
    "aten.sym_stride.int": "the stride PyTorch recorded",
    "aten.sym_storage_offset.default": "the offset PyTorch recorded",
}
"""Ops the importer itself handles (no converter): their value is the size expression
PyTorch recorded in the node."""

REASONS = {
    "backward": "a gradient op (plait imports inference graphs)",
    "rand": "random",
    "native_dropout": "random (export in eval mode: dropout disappears)",
    "nonzero": "output size depends on the data",
    "masked_scatter": "output depends on a data-dependent count",
    "_local_scalar_dense": "a tensor read as a Python number (data-dependent control)",
    "_fft": "complex numbers",
    "3d": "no 3-D op in plait",
    "_native_batch_norm_legit.": "training-mode batch norm (export in eval mode)",
    "as_strided": "strided views of storage",
}


def core_aten_ops() -> list[str]:
    """The core ATen op overloads of the installed torch (tagged ``core``), from every
    operator registered with the dispatcher (``dir(torch.ops.aten)`` lists only the op
    packets a process has touched so far: the count depended on what ran before)."""
    import torch

    out = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::"):].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except Exception:  # noqa: BLE001 - a lazily failing op packet
            continue
        if torch.Tag.core in op.tags:
            out.append(str(op))
    return sorted(set(out))


def _reason(op: str) -> str:
    for key, why in REASONS.items():
        if key in op:
            return why
    return "no converter yet"


def _opinfo_section() -> list[str]:
    if not os.path.exists(RESULTS):
        return ["No OpInfo results recorded yet (run `python tools/torch_opinfo.py`)."]
    with open(RESULTS, encoding="utf-8") as f:
        data = json.load(f)
    lines = [
        f"OpInfo samples (`op_db` of torch {data['torch']}) run through `from_exported_program` "
        f"and compared with eager PyTorch at rtol {data['rtol']}, atol {data['atol']} "
        f"(`tools/torch_opinfo.py`; dtypes {', '.join(data['dtypes'])}; targets "
        f"{', '.join(data['targets'])}; the first {data['max_samples']} samples of each "
        "OpInfo per dtype; a sample passes when it matches on every target):",
        "",
        "| OpInfo | samples | pass | skip | fail |",
        "|---|---|---|---|---|",
    ]
    tot = [0, 0, 0, 0]
    for name in sorted(data["ops"]):
        r = data["ops"][name]
        n = r["pass"] + r["skip"] + r["fail"]
        tot = [tot[0] + n, tot[1] + r["pass"], tot[2] + r["skip"], tot[3] + r["fail"]]
        lines.append(f"| {name} | {n} | {r['pass']} | {r['skip']} | {r['fail']} |")
    lines.append(f"| **total** | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | **{tot[3]}** |")
    reasons = data.get("skip_reasons") or {}
    if reasons:
        lines += ["", "Skipped samples, by reason:", ""]
        lines += [f"- {why}: {n}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    fails = data.get("failures") or {}
    if fails:
        lines += ["", "Failing samples, by op (first message):", ""]
        lines += [f"- {op}: {msg}" for op, msg in sorted(fails.items())]
    return lines


def generate() -> str:
    """The generated part of docs/pytorch.md (between the markers)."""
    import torch

    from plait.frontend.torch import list_converters

    convs = list_converters()
    names = {c.op for c in convs}
    core = core_aten_ops()
    covered = [op for op in core if op in names or op in HANDLED]
    lines = [
        f"Generated from the converter table by `tools/gen_torch_docs.py` (torch "
        f"{torch.__version__.split('+')[0]}).",
        "",
        f"Core ATen ops converted: **{len(covered)} of {len(core)}** (the ops tagged `core` "
        "that `run_decompositions()` leaves); the table also converts "
        f"{len(names - set(core))} other overloads that exported programs contain.",
        "",
        f"### Converted ops ({len(convs)})",
        "",
        "| ATen op | family | expressed as |",
        "|---|---|---|",
    ]
    for c in convs:
        doc = c.doc.replace("|", "\\|")
        lines.append(f"| `{c.op}` | {c.family} | {doc} |")
    for op, how in sorted(HANDLED.items()):
        lines.append(f"| `{op}` | importer | {how} |")
    missing = [op for op in core if op not in names and op not in HANDLED]
    lines += ["", f"### Core ATen ops without a converter ({len(missing)})", "",
              "| ATen op | why |", "|---|---|"]
    lines += [f"| `{op}` | {_reason(op)} |" for op in missing]
    lines += ["", "### OpInfo results", ""] + _opinfo_section()
    return "\n".join(lines) + "\n"


def updated(text: str) -> str:
    """``text`` (docs/pytorch.md) with the generated part replaced."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + generate() + text[end:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the doc is out of date")
    args = ap.parse_args()
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    new = updated(text)
    if args.check:
        if new != text:
            print("docs/pytorch.md is out of date: run python tools/gen_torch_docs.py")
            return 1
        return 0
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
