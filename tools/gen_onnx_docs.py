"""Generate the operator tables of docs/onnx.md from the ONNX converter registry.

    python tools/gen_onnx_docs.py          # rewrite the generated part of docs/onnx.md
    python tools/gen_onnx_docs.py --check  # exit 1 if docs/onnx.md is out of date

The tables sit between ``<!-- BEGIN GENERATED ONNX OPS -->`` and
``<!-- END GENERATED ONNX OPS -->``; the rest of the file is written by hand.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "onnx.md")
BEGIN = "<!-- BEGIN GENERATED ONNX OPS -->"
END = "<!-- END GENERATED ONNX OPS -->"

# Why an ONNX op of the default domain has no converter (shown in the table of
# unsupported ops; ops not listed here say "no converter yet").
REASONS = {
    "Bernoulli": "random",
    "RandomNormal": "random",
    "RandomNormalLike": "random",
    "RandomUniform": "random",
    "RandomUniformLike": "random",
    "Multinomial": "random",
    "NonMaxSuppression": "output size depends on the data",
    "StringConcat": "string tensors",
    "StringNormalizer": "string tensors",
    "StringSplit": "string tensors",
    "RegexFullMatch": "string tensors",
    "TfIdfVectorizer": "string/n-gram processing",
    "ImageDecoder": "image decoding",
    "BitCast": "needs a bit-reinterpreting op",
    "Det": "needs a determinant op",
    "RoiAlign": "needs an ROI-align op",
    "DeformConv": "needs a deformable convolution op",
    "MaxRoiPool": "needs an ROI pooling op",
}


def _range(c: object, newest: int, min_opset: int) -> str:
    lo = max(c.since, min_opset, _first_version(c.op_type))  # type: ignore[attr-defined]
    hi = newest if c.until is None else min(c.until, newest)  # type: ignore[attr-defined]
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def _first_version(op: str) -> int:
    versions = _schema_versions(op, "", 1, 10**6)
    return versions[0] if versions else 1


_VERSIONS: dict[tuple[str, str], list[int]] = {}


def _schema_versions(op: str, domain: str, lo: int, hi: int) -> list[int]:
    """The versions of the ONNX op ``op`` introduced between ``lo`` and ``hi``."""
    if not _VERSIONS:
        import onnx.defs

        for s in onnx.defs.get_all_schemas_with_history():
            _VERSIONS.setdefault((s.domain, s.name), []).append(s.since_version)
    return sorted({v for v in _VERSIONS.get((domain, op), []) if lo <= v <= hi})


def generate() -> str:
    """The generated part of docs/onnx.md (between the markers)."""
    import onnx
    import onnx.defs

    from plait.dialects import load_frontend_converters
    from plait.frontend.onnx import MIN_OPSET, list_converters, max_opset

    load_frontend_converters("onnx")   # the dialects' converters (qnn's), in any process
    newest = max_opset()
    convs = list_converters()
    by_op: dict[tuple[str, str], list] = {}
    for c in convs:
        by_op.setdefault((c.domain, c.op_type), []).append(c)
    lines = [
        f"Generated from the converter registry by `tools/gen_onnx_docs.py` (onnx "
        f"{onnx.__version__}, default-domain opsets {MIN_OPSET}–{newest}).",
        "",
        f"### Converted ops ({len(by_op)})",
        "",
        "| Op | Domain | Model opsets | ONNX op versions | Expressed as |",
        "|---|---|---|---|---|",
    ]
    for (dom, op), cs in sorted(by_op.items(), key=lambda kv: (kv[0][0] != "", kv[0][0], kv[0][1])):
        if dom == "":
            ranges = ", ".join(
                _range(c, newest, MIN_OPSET) for c in cs if (c.until or newest) >= MIN_OPSET
            )
            first = max(min(c.since for c in cs), MIN_OPSET)
            vers = _schema_versions(op, "", first, newest)
            # the version in effect at the first supported opset
            older = _schema_versions(op, "", 1, first)
            if older and (not vers or vers[0] > first):
                vers = [older[-1]] + vers
        else:
            ranges = ", ".join(f"{c.since}+" for c in cs)
            vers = _schema_versions(op, dom, 1, 10**6)
        doc = " ".join(cs[-1].doc.split()).replace("|", "\\|")
        shown_dom = dom or "ai.onnx"
        lines.append(
            f"| {op} | {shown_dom} | {ranges or '—'} | {', '.join(map(str, vers)) or '—'} | {doc} |"
        )
    lines += ["", "### Ops imported through their ONNX function definition", ""]
    lines.append(
        "These ops have no converter of their own; the importer replaces them by the body "
        "ONNX defines for them (`onnx.inliner`), whose ops are then converted.  They import "
        "when their body does (for the opset and attributes of the node)."
    )
    lines.append("")
    expandable = []
    unsupported = []
    for s in sorted(onnx.defs.get_all_schemas(), key=lambda s: (s.domain, s.name)):
        if s.domain not in ("", "ai.onnx.preview") or s.deprecated:
            continue
        if (s.domain, s.name) in by_op:
            continue
        if s.has_function or s.has_context_dependent_function:
            expandable.append(s)
        else:
            unsupported.append(s)
    lines.append(
        ", ".join(f"{s.name}" if not s.domain else f"{s.domain}::{s.name}" for s in expandable)
    )
    lines += ["", f"### Unsupported ops of the default domain ({len(unsupported)})", ""]
    lines += ["| Op | Why |", "|---|---|"]
    for s in unsupported:
        name = s.name if not s.domain else f"{s.domain}::{s.name}"
        lines.append(f"| {name} | {REASONS.get(s.name) or 'no converter yet'} |")
    return "\n".join(lines) + "\n"


def _current() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def updated(text: str) -> str:
    """``text`` (the whole doc) with the generated part replaced."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} section")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{generate()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--check", action="store_true", help="only check that the doc is up to date")
    args = p.parse_args(argv)
    text = _current()
    new = updated(text)
    if args.check:
        if new != text:
            print(f"{DOC} is out of date; run python tools/gen_onnx_docs.py", file=sys.stderr)
            return 1
        return 0
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
