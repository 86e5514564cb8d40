"""What the importer's checks need of each ONNX operator schema, without onnx's registry.

``onnx.defs.get_schema`` builds onnx's whole table of operator schemas at its first call
(every op of every version of every domain: about 7 MiB of native heap and code pages,
once per process), and the importer checks every node against its schema.  The few
facts the checks use (the formal inputs and which are required, the input and output
counts, each attribute's type and whether it is required, and whether the op has a
function body) are kept here instead, in :mod:`.op_spec_table`, written from onnx by
``python tools/gen_onnx_op_specs.py`` and checked against onnx, op by op and version by
version, by tests/frontend/test_onnx_op_specs.py.

:func:`op_spec` answers from the table for the opsets it covers (those of the onnx
release it was written from) and asks onnx only beyond them (a newer onnx and a model of
a newer opset).  Expanding an op through its ONNX function body still needs onnx's
schema (its default attribute values and the body): only ops without a converter are
expanded.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import onnx

from .op_spec_table import MAX_OPSETS, SPECS


class OpSpec(NamedTuple):
    """One version of one operator's schema, as the importer's checks use it."""

    since: int
    """The opset version this schema is defined since."""
    inputs: tuple[str, ...]
    """The names of the formal inputs, in order."""
    options: str
    """One letter per formal input: ``S`` single (required), ``O`` optional, ``V``
    variadic."""
    max_input: int
    max_output: int
    attributes: tuple[tuple[str, int, bool], ...]
    """``(name, AttributeProto type, required)`` of each attribute, in onnx's order."""
    expandable: bool
    """The op has an ONNX function body (plain or context dependent)."""

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a[0] for a in self.attributes)


_OPTION_LETTERS = {"Single": "S", "Optional": "O", "Variadic": "V"}


def spec_of(schema: Any) -> OpSpec:
    """The :class:`OpSpec` of an ``onnx.defs.OpSchema``."""
    return OpSpec(
        since=int(schema.since_version),
        inputs=tuple(p.name for p in schema.inputs),
        options="".join(_OPTION_LETTERS[p.option.name] for p in schema.inputs),
        max_input=int(schema.max_input),
        max_output=int(schema.max_output),
        attributes=tuple((name, int(a.type), bool(a.required))
                         for name, a in schema.attributes.items()),
        expandable=bool(schema.has_function or schema.has_context_dependent_function),
    )


def covered(version: int, domain: str) -> bool:
    """Whether the table answers for opset ``version`` of ``domain`` (normalized: ``""``
    is the default domain) without asking onnx."""
    newest = MAX_OPSETS.get(domain)
    if newest is not None:
        return version <= newest
    # a domain the table's onnx release did not know: onnx knows it only if it is newer
    return onnx.defs.onnx_opset_version() <= MAX_OPSETS[""]


def op_spec(op_type: str, version: int, domain: str) -> OpSpec | None:
    """The schema of ``op_type`` in opset ``version`` of ``domain`` (the newest defined
    at or before that version), or None where onnx defines none."""
    if covered(version, domain):
        found = None
        for row in SPECS.get((domain, op_type), ()):
            if row[0] > version:
                break
            found = row
        return None if found is None else OpSpec(*found)
    try:
        return spec_of(onnx.defs.get_schema(op_type, version, domain))
    except Exception:
        return None


def table_rows() -> dict[tuple[str, str], list[tuple]]:
    """Every schema of the installed onnx as table rows, by (domain, op), oldest first
    (what tools/gen_onnx_op_specs.py writes)."""
    rows: dict[tuple[str, str], list[tuple]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        rows.setdefault((s.domain, s.name), []).append(tuple(spec_of(s)))
    return {k: sorted(v) for k, v in sorted(rows.items())}
