"""Loading and checking an ONNX model before anything is built.

:func:`load_model` reads a path, bytes or a ``ModelProto``; :func:`prepare_model`
upgrades old opsets, inlines model-local functions and expands ops that plait has no
converter for but that ONNX defines as a function of other ops; :func:`check_model`
walks every graph (subgraphs included, without recursion) and collects *every*
problem — unsupported ops with their nodes and opset, undefined or duplicated values,
cycles, missing inputs, wrong attribute types, unsupported attribute values — into one
:class:`OnnxImportError`.  :func:`topological_order` sorts the nodes of a graph
(Kahn's algorithm, iterative).
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from google.protobuf.descriptor import FieldDescriptor
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto

from .attr_values import attribute_problem
from .dtypes import onnx_type_name, to_dtype
from .errors import OnnxImportError, describe_node
from .op_specs import OpSpec, op_spec
from .registry import DEFAULT_DOMAIN, find_converter, normalize_domain
from .weights import open_model, read_initializers

FALLBACK_HINT = (
    "onnxruntime can run the nodes plait cannot import: from_onnx(..., "
    "fallback=\"onnxruntime\"); plait run/compile: --fallback onnxruntime (or --offload "
    "onnxruntime, which also hands onnxruntime every op it takes)")
"""The last line of an unsupported-operator error: the option that runs them."""

MIN_OPSET = 7
"""The oldest default-domain opset plait imports directly; older models are upgraded
with ``onnx.version_converter`` first."""


def max_opset() -> int:
    """The newest default-domain opset the installed onnx package knows."""
    return onnx.defs.onnx_opset_version()


@dataclass
class LoadedModel:
    """A parsed model, where it came from, and its opset of each domain."""

    model: ModelProto
    source: str
    opsets: dict[str, int]
    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """Main-graph initializers plait read from the file itself (weights.py), by name:
    their tensors in ``model`` have a type and dimensions but no data."""

    @property
    def opset(self) -> int:
        return self.opsets.get(DEFAULT_DOMAIN, max_opset())


# ----------------------------------------------------------------------------- loading


def load_model(model_or_path: Any, *, mmap: bool = True) -> LoadedModel:
    """Parse ``model_or_path`` (a path, ``bytes`` or an ``onnx.ModelProto``).  Unreadable,
    truncated or corrupt input raises :class:`OnnxImportError`.  From a path, the large
    weights are views of their file's mapping (``mmap``) or read (see
    :mod:`.weights`)."""
    arrays: dict[str, np.ndarray] = {}
    if isinstance(model_or_path, ModelProto):
        model = model_or_path
        source = model.graph.name or "<ModelProto>"
    elif isinstance(model_or_path, bytes | bytearray | memoryview):
        model = _parse(bytes(model_or_path), "<bytes>")
        source = model.graph.name or "<bytes>"
    elif isinstance(model_or_path, str | os.PathLike):
        path = os.fspath(model_or_path)
        source = path
        try:
            data = open_model(path)
        except OSError as e:
            raise OnnxImportError(f"cannot read the file: {e.strerror or e}", source=path) from None
        model = _parse(data, path)
        del data
        base_dir = os.path.dirname(os.path.abspath(path))
        arrays = read_initializers(model, base_dir, path, mmap=mmap)
        _load_external_data(model, base_dir, path)
    else:
        raise OnnxImportError(
            "from_onnx takes a file path, the bytes of a model or an onnx.ModelProto, got "
            f"{type(model_or_path).__name__}"
        )
    if not model.HasField("graph"):
        raise OnnxImportError(
            "the model has no graph (the file is empty, truncated or not an ONNX model)",
            source=source,
        )
    if len(model.graph.output) == 0:
        raise OnnxImportError(
            "the graph has no outputs (the file is truncated or not an ONNX model)",
            source=source,
        )
    model = _decode_invalid_strings(model, copy=isinstance(model_or_path, ModelProto))
    external = external_tensors(model)
    if external:
        unique = list(dict.fromkeys(t.name or "<unnamed>" for t in external))
        names = ", ".join(map(repr, unique[:3]))
        more = f" and {len(unique) - 3} more" if len(unique) > 3 else ""
        if isinstance(model_or_path, str | os.PathLike):  # not loaded: sparse tensors
            raise OnnxImportError(
                f"tensor(s) {names}{more} keep their data in an external file, which plait "
                "reads only for the initializers and node attributes of a model loaded "
                "from its path; save the model with its data inside",
                source=source,
            )
        raise OnnxImportError(
            f"tensor(s) {names}{more} keep their data in an external file; pass the "
            "model's path (not a ModelProto or bytes) so the data is read from the "
            "model's folder (never from the working directory)",
            source=source,
        )
    return LoadedModel(model, source, _opsets(model, source), arrays)


def _parse(data: bytes, source: str) -> ModelProto:
    if not data:
        raise OnnxImportError("the file is empty", source=source)
    model = ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as e:  # google.protobuf.message.DecodeError and friends
        raise OnnxImportError(
            f"the file is not a valid ONNX model (truncated or corrupt protobuf: {e})",
            source=source,
        ) from None
    return model


def _invalid_strings(model: ModelProto) -> list[tuple[Any, Any]]:
    """``(message, field)`` of every string field holding bytes that are not UTF-8
    (protobuf returns those as ``bytes``), found without recursion."""
    found = []
    stack: list[Any] = [model]
    string, message = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
    while stack:
        msg = stack.pop()
        for field, value in msg.ListFields():
            if field.type == message:
                if _is_repeated(field):
                    stack.extend(value)
                else:
                    stack.append(value)
            elif field.type == string:
                items = value if _is_repeated(field) else (value,)
                if any(isinstance(v, bytes) for v in items):
                    found.append((msg, field))
    return found


def _is_repeated(field: Any) -> bool:
    # FieldDescriptor.label is deprecated in newer protobuf releases
    rep = getattr(field, "is_repeated", None)
    return bool(rep) if rep is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _text(v: str | bytes) -> str:
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v


def _decode_invalid_strings(model: ModelProto, copy: bool) -> ModelProto:
    """``model`` with every string that is not valid UTF-8 (a name, a ``dim_param``...)
    decoded with backslash escapes (``b"N\\xff"`` becomes ``"N\\xff"``), the same way
    everywhere, so names still match; onnxruntime, in C++, takes such names as they are.
    A ``ModelProto`` given by the caller is copied first, never changed."""
    found = _invalid_strings(model)
    if not found:
        return model
    if copy:
        clone = ModelProto()
        clone.CopyFrom(model)
        model = clone
        found = _invalid_strings(model)
    for msg, field in found:
        if _is_repeated(field):
            fixed = [_text(v) for v in getattr(msg, field.name)]
            del getattr(msg, field.name)[:]
            getattr(msg, field.name).extend(fixed)
        else:
            setattr(msg, field.name, _text(getattr(msg, field.name)))
    return model


def external_tensors(model: ModelProto) -> list[onnx.TensorProto]:
    """Every tensor of ``model`` (initializers, sparse ones, node attributes, subgraphs,
    functions, training graphs) whose data is in another file, found without
    recursion.  A model from bytes must have none: onnx would read them from the working
    directory, a file the model names on the machine that imports it."""
    found, stack = [], [model]
    message = FieldDescriptor.TYPE_MESSAGE
    while stack:
        msg = stack.pop()
        if isinstance(msg, onnx.TensorProto):
            if msg.data_location == onnx.TensorProto.EXTERNAL or len(msg.external_data):
                found.append(msg)
            continue
        for field, value in msg.ListFields():
            if field.type == message:
                stack.extend(value if _is_repeated(field) else (value,))
    return found


def _load_external_data(model: ModelProto, base_dir: str, source: str) -> None:
    """Read the external data of every tensor onnx finds (initializers, node attributes,
    subgraphs, functions) from the model's folder ``base_dir``; onnx refuses locations
    outside it."""
    from onnx.external_data_helper import load_external_data_for_model

    if not external_tensors(model):
        return
    try:
        load_external_data_for_model(model, base_dir)
    except Exception as e:
        raise OnnxImportError(
            f"cannot load the external data of the tensors from {base_dir!r}: {e}",
            source=source,
        ) from None


def _opsets(model: ModelProto, source: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        opsets[normalize_domain(imp.domain)] = int(imp.version)
    if DEFAULT_DOMAIN not in opsets:
        if model.ir_version and model.ir_version < 3:
            opsets[DEFAULT_DOMAIN] = 1
        elif any(normalize_domain(n.domain) == DEFAULT_DOMAIN for n in model.graph.node):
            raise OnnxImportError(
                "the model imports no opset of the default domain (ai.onnx) but uses its ops",
                source=source,
            )
    newest = max_opset()
    v = opsets.get(DEFAULT_DOMAIN)
    if v is not None and v > newest:
        raise OnnxImportError(
            f"the model uses opset {v} of the default domain, newer than the newest this "
            f"onnx package knows ({newest}); upgrade onnx (pip install -U onnx)",
            source=source,
            opset=v,
        )
    return opsets


# ------------------------------------------------------------------------- preparation


def prepare_model(loaded: LoadedModel) -> LoadedModel:
    """Upgrade an opset older than :data:`MIN_OPSET`, inline model-local functions and
    expand, through their ONNX function definitions, the ops that have no converter."""
    model, source = loaded.model, loaded.source
    v = loaded.opsets.get(DEFAULT_DOMAIN)
    if v is not None and v < MIN_OPSET:
        try:
            from onnx import version_converter

            model = version_converter.convert_version(model, MIN_OPSET)
        except Exception as e:
            raise OnnxImportError(
                f"the model uses opset {v}, older than the oldest plait imports "
                f"({MIN_OPSET}), and onnx.version_converter could not upgrade it: "
                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}",
                source=source,
                opset=v,
            ) from None
    if len(model.functions):
        try:
            model = onnx.inliner.inline_local_functions(model)
        except Exception as e:
            raise OnnxImportError(
                f"cannot inline the model's local functions: {str(e).splitlines()[0]}",
                source=source,
            ) from None
    opsets = _opsets(model, source)
    for _ in range(4):
        expand = _expandable_ops(model, opsets)
        if not expand:
            break
        model = _with_default_attributes(model, expand, opsets)
        try:
            model = onnx.inliner.inline_selected_functions(
                model, sorted(expand), inline_schema_functions=True
            )
        except Exception:
            break  # the ops stay unexpanded and are reported as unsupported
        opsets = _opsets(model, source)
    return LoadedModel(model, source, opsets, loaded.arrays)


def _with_default_attributes(
    model: ModelProto, ops: set[tuple[str, str]], opsets: dict[str, int]
) -> ModelProto:
    """A copy of ``model`` where the nodes of ``ops`` spell out their default attribute
    values (function bodies refer to them, and the inliner does not fill them in)."""
    model = ModelProto.FromString(model.SerializeToString())
    for node, _graph in iter_nodes(model.graph):
        if (node.domain, node.op_type) not in ops:
            continue
        dom = normalize_domain(node.domain)
        try:  # onnx's own schema: its default values (only ops expanded need it)
            schema = onnx.defs.get_schema(node.op_type, opsets.get(dom, 1), dom)
        except Exception:
            continue
        given = {a.name for a in node.attribute}
        for name, spec in schema.attributes.items():
            default = spec.default_value
            if name not in given and default is not None and default.type:
                a = node.attribute.add()
                a.CopyFrom(default)
                a.name = name
    return model


def _expandable_ops(model: ModelProto, opsets: dict[str, int]) -> set[tuple[str, str]]:
    """(domain, op_type) of the nodes that have no converter but an ONNX function body."""
    out: set[tuple[str, str]] = set()
    for node, _graph in iter_nodes(model.graph):
        dom = normalize_domain(node.domain)
        version = opsets.get(dom)
        if version is None or find_converter(node.op_type, dom, version) is not None:
            continue
        spec = _spec(node.op_type, version, dom)
        if spec is not None and spec.expandable:
            out.add((node.domain, node.op_type))
    return out


# ----------------------------------------------------------------------------- walking


def iter_nodes(graph: GraphProto) -> Iterator[tuple[NodeProto, GraphProto]]:
    """Every node of ``graph`` and of its subgraphs, with the graph that holds it
    (iterative, depth first)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            yield node, g
            stack.extend(subgraphs(node))


def subgraphs(node: NodeProto) -> list[GraphProto]:
    """The graphs held by the attributes of ``node`` (If branches, Loop bodies, ...)."""
    out: list[GraphProto] = []
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def free_names(graph: GraphProto) -> set[str]:
    """The names ``graph`` (or any graph nested in it) uses without defining them: the
    values it captures from enclosing graphs."""
    used: set[str] = set()
    defined: set[str] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        defined.update(i.name for i in g.input)
        defined.update(i.name for i in g.initializer)
        defined.update(i.name for i in g.sparse_initializer)
        used.update(o.name for o in g.output)
        for node in g.node:
            used.update(n for n in node.input if n)
            defined.update(n for n in node.output if n)
            stack.extend(subgraphs(node))
    return used - defined


def node_inputs_with_captures(node: NodeProto) -> list[str]:
    """The node's inputs plus the outer values its subgraphs capture."""
    names = [n for n in node.input if n]
    for g in subgraphs(node):
        names.extend(sorted(free_names(g)))
    return names


_ORDER_CACHE: dict[int, tuple[GraphProto, list[NodeProto]]] = {}


def topological_order(graph: GraphProto, source: str = "") -> list[NodeProto]:
    """The nodes of ``graph`` in an order where every value is defined before it is used
    (the original order where it already is).  A cycle raises :class:`OnnxImportError`
    naming the nodes on it.  The last few orders are cached (checking and importing a
    model both need them)."""
    hit = _ORDER_CACHE.get(id(graph))
    if hit is not None and hit[0] is graph:
        return hit[1]
    order = _topological_order(graph, source)
    if len(_ORDER_CACHE) > 64:
        _ORDER_CACHE.clear()
    _ORDER_CACHE[id(graph)] = (graph, order)
    return order


def clear_order_cache() -> None:
    """Forget the cached orders (and the graphs they keep alive)."""
    _ORDER_CACHE.clear()


def _topological_order(graph: GraphProto, source: str) -> list[NodeProto]:
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer[out] = i
    users: list[list[int]] = [[] for _ in nodes]
    missing = [0] * len(nodes)
    for i, node in enumerate(nodes):
        deps = {producer[n] for n in node_inputs_with_captures(node) if n in producer}
        for d in deps:
            users[d].append(i)
        missing[i] = len(deps)
    ready = deque(i for i in range(len(nodes)) if missing[i] == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        # the waiting nodes minus those only downstream of a cycle (no waiting user)
        waiting = {i for i in range(len(nodes)) if missing[i] > 0}
        n_users = {i: sum(1 for u in users[i] if u in waiting) for i in waiting}
        leaves = [i for i in waiting if n_users[i] == 0]
        while leaves:
            i = leaves.pop()
            waiting.discard(i)
            for d in {producer[n] for n in node_inputs_with_captures(nodes[i]) if n in producer}:
                if d in waiting and d != i:
                    n_users[d] -= 1
                    if n_users[d] == 0:
                        leaves.append(d)
        stuck = [nodes[i] for i in sorted(waiting)]
        names = ", ".join(describe_node(n.name, n.op_type) for n in stuck[:8])
        more = f" and {len(stuck) - 8} more" if len(stuck) > 8 else ""
        raise OnnxImportError(
            f"the graph {graph.name!r} has a cycle: {len(stuck)} nodes wait on each other "
            f"({names}{more})",
            source=source,
        )
    return [nodes[i] for i in order]


# ---------------------------------------------------------------------------- checking

_SPECS: dict[tuple[str, int, str], OpSpec | None] = {}


def _spec(op_type: str, version: int, domain: str) -> OpSpec | None:
    """The schema facts of ``op_type`` (op_specs.py: without onnx's registry), cached."""
    key = (op_type, version, domain)
    if key not in _SPECS:
        _SPECS[key] = op_spec(op_type, version, domain)
    return _SPECS[key]


_SCHEMA_OK: set[tuple] = set()
"""Node signatures (op, opset, inputs given, outputs, attribute types) that passed the
schema checks."""

_ATTR_TYPE_NAMES = {v: k for k, v in AttributeProto.AttributeType.items()}


def value_type_problem(vi: onnx.ValueInfoProto, what: str) -> str | None:
    """Why the declared type of a graph input cannot be represented, or None."""
    t = vi.type
    kind = t.WhichOneof("value")
    if kind is None:
        return None  # untyped: the importer reports it if it needs the type
    if kind == "sequence_type" and t.sequence_type.elem_type.HasField("tensor_type"):
        t = t.sequence_type.elem_type
    elif kind != "tensor_type":
        return (
            f"{what} {vi.name!r} has a {kind.replace('_type', '')} type; plait imports tensors "
            "and sequences of tensors only"
        )
    elem = t.tensor_type.elem_type
    if elem and to_dtype(elem) is None:
        return (
            f"{what} {vi.name!r} has element type {onnx_type_name(elem)}, which plait does "
            "not support"
        )
    return None


def check_model(loaded: LoadedModel, fallback: str | None = None) -> None:
    """Check every graph of the model; raise one :class:`OnnxImportError` listing every
    problem (unsupported ops first, with their nodes and the opset, and the option that
    runs them on onnxruntime).  With a ``fallback``, ops without a converter are not
    problems (the fallback runs them); everything else still is."""
    model, source, opsets = loaded.model, loaded.source, loaded.opsets
    problems: list[str] = []
    unsupported: dict[str, list[str]] = {}
    unsupported_versions: dict[str, set[int]] = {}

    graph = model.graph
    for vi in graph.input:
        if vi.name in {i.name for i in graph.initializer}:
            continue
        p = value_type_problem(vi, "graph input")
        if p:
            problems.append(p)
    for init in graph.initializer:
        if to_dtype(init.data_type) is None:
            problems.append(
                f"initializer {init.name!r} has element type {onnx_type_name(init.data_type)}, "
                "which plait does not support"
            )

    # (graph, names visible from enclosing graphs, path for messages)
    stack: list[tuple[GraphProto, set[str], str]] = [(graph, set(), "")]
    while stack:
        g, outer, path = stack.pop()
        where = f" in subgraph {path}" if path else ""
        defined: dict[str, str] = {}

        def define(
            name: str, what: str, where: str = where, defined: dict[str, str] = defined
        ) -> None:
            if not name:
                return
            if name in defined:
                problems.append(
                    f"value {name!r} is defined twice{where} ({defined[name]} and {what})"
                )
            else:
                defined[name] = what

        for vi in g.input:
            define(vi.name, "a graph input")
        for init in g.initializer:
            if init.name not in defined or defined[init.name] != "a graph input":
                define(init.name, "an initializer")
        for init in g.sparse_initializer:
            define(init.values.name, "a sparse initializer")
        for node in g.node:
            for out in node.output:
                define(out, describe_node(node.name, node.op_type))
        visible = outer | set(defined)
        for node in g.node:
            _check_node(node, visible, opsets, where, problems, unsupported, unsupported_versions)
            for a in node.attribute:
                subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
                for k, sg in enumerate(subs):
                    label = f"{node.name or node.op_type}.{a.name}" + (
                        f"[{k}]" if len(subs) > 1 else ""
                    )
                    stack.append((sg, visible, f"{path}/{label}" if path else label))
        for vi in g.output:
            if vi.name not in visible:
                problems.append(
                    f"graph output {vi.name!r}{where} is not defined by any node, graph input "
                    "or initializer"
                )
        try:
            topological_order(g, source)
        except OnnxImportError as e:
            problems.append(e.problems[0] + where)

    opset = opsets.get(DEFAULT_DOMAIN)
    if fallback is not None:
        unsupported = {}
    if unsupported:
        lines = []
        for op, nodes in sorted(unsupported.items()):
            shown = ", ".join(repr(n) for n in nodes[:50])
            more = f" and {len(nodes) - 50} more" if len(nodes) > 50 else ""
            vers = ", ".join(str(v) for v in sorted(unsupported_versions[op]))
            lines.append(f"unsupported operator {op} (opset {vers}): nodes {shown}{more}")
        problems = lines + problems
    if problems:
        n_ops = len(unsupported)
        head = None
        if n_ops:
            head = (
                f"{n_ops} unsupported operator{'s' if n_ops > 1 else ''} (model opset "
                f"{opset})"
                + (f" and {len(problems) - n_ops} other problems" if len(problems) > n_ops else "")
            )
        raise OnnxImportError(
            problems, source=source, unsupported=unsupported, opset=opset, headline=head,
            hint=FALLBACK_HINT if unsupported else None,
        )


def _check_node(
    node: NodeProto,
    visible: set[str],
    opsets: dict[str, int],
    where: str,
    problems: list[str],
    unsupported: dict[str, list[str]],
    unsupported_versions: dict[str, set[int]],
) -> None:
    dom = normalize_domain(node.domain)
    label = node.name or f"<unnamed {node.op_type}>"
    version = opsets.get(dom)
    desc = describe_node(node.name, node.op_type, version, dom)
    if not node.op_type:
        problems.append(f"{desc}{where} has no op type")
        return
    if version is None:
        problems.append(
            f"{desc}{where} uses domain {node.domain!r}, which the model does not import "
            "(no opset_import entry)"
        )
        return
    for i, name in enumerate(node.input):
        if name and name not in visible:
            problems.append(
                f"{desc}{where}: input {i} {name!r} is not defined by any node, graph input "
                "or initializer"
            )
    conv = find_converter(node.op_type, dom, version)
    if conv is None:
        key = node.op_type if dom == DEFAULT_DOMAIN else f"{dom}::{node.op_type}"
        unsupported.setdefault(key, []).append(label)
        unsupported_versions.setdefault(key, set()).add(version)
    spec = _spec(node.op_type, version, dom)
    if spec is not None:
        # nodes of the same op, arity and attribute types check alike: check each once
        key = (
            node.op_type, version, dom, tuple(bool(i) for i in node.input), len(node.output),
            tuple((a.name, a.type) for a in node.attribute),
        )  # fmt: skip
        if key not in _SCHEMA_OK:
            before = len(problems)
            _check_against_spec(node, spec, desc + where, problems)
            if len(problems) == before and len(_SCHEMA_OK) < 100_000:
                _SCHEMA_OK.add(key)
    refused: set[str] = set()
    if dom == DEFAULT_DOMAIN:   # the values ONNX allows (attr_values), for every op
        for a in node.attribute:
            if a.type in (AttributeProto.INT, AttributeProto.STRING):
                bad = attribute_problem(node.op_type, a.name,
                                        onnx.helper.get_attribute_value(a))
                if bad is not None:
                    problems.append(f"{desc}{where}: {bad}")
                    refused.add(a.name)
    if conv is not None:
        for a in node.attribute:
            allowed = conv.attr_choices.get(a.name)
            if allowed is None or a.name in refused:
                continue
            value = onnx.helper.get_attribute_value(a)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if value not in allowed:
                problems.append(
                    f"{desc}{where}: attribute {a.name!r} = {value!r} is not supported; plait "
                    f"supports {', '.join(repr(v) for v in allowed)}"
                )


def _check_against_spec(node: NodeProto, spec: OpSpec, desc: str, problems: list[str]) -> None:
    n_in = len(node.input)
    for i, (name, option) in enumerate(zip(spec.inputs, spec.options, strict=True)):
        if option == "S" and (i >= n_in or not node.input[i]):
            problems.append(f"{desc}: the required input {i} ({name}) is missing")
    if spec.max_input >= 0 and n_in > spec.max_input:
        problems.append(f"{desc}: takes at most {spec.max_input} inputs, the node has {n_in}")
    if len(node.output) > spec.max_output:
        problems.append(
            f"{desc}: has at most {spec.max_output} outputs, the node has {len(node.output)}"
        )
    given = {a.name: a for a in node.attribute}
    for name, _type, required in spec.attributes:
        if required and name not in given:
            problems.append(f"{desc}: the required attribute {name!r} is missing")
    types = {name: t for name, t, _ in spec.attributes}
    for name, a in given.items():
        want = types.get(name)
        if want is None:
            problems.append(
                f"{desc}: unknown attribute {name!r} (the op's attributes are: "
                f"{', '.join(sorted(types)) or 'none'})"
            )
            continue
        if want and a.type != want:
            problems.append(
                f"{desc}: attribute {name!r} has type {_ATTR_TYPE_NAMES.get(a.type, a.type)}, "
                f"expected {_ATTR_TYPE_NAMES.get(want, want)}"
            )
