"""Find the tensors of a serialized ONNX model that point at external data, without
the ``onnx`` package: a walk over the protobuf wire format.

An ONNX tensor may hold its bytes in another file (``data_location = EXTERNAL``, with
``external_data`` entries naming a ``location`` relative to the model's folder).
onnxruntime reads that file when it creates a session — for a model given as bytes,
relative to the working directory.  A model inside an executable is data from a file,
so it must not make the process read other files: :func:`external_data_tensors` finds
every such tensor (initializers, sparse initializers, tensors in node attributes, in
subgraphs, in model-local functions and in training graphs) before the model is given
to onnxruntime.

The walk knows the field numbers of the messages that can contain a ``TensorProto``
(from ``onnx.proto``) and skips every other field by its wire type; it is iterative
(an explicit stack), so deeply nested subgraphs cannot exhaust the recursion limit, and
it refuses a malformed message rather than guessing.
"""

from __future__ import annotations

from typing import Any

from plait.errors import PlaitError

# message kinds
_MODEL, _GRAPH, _NODE, _ATTR, _TENSOR, _SPARSE, _FUNCTION, _TRAINING, _ENTRY = range(9)

# (message kind, field number) -> the kind of the embedded message
_CHILDREN: dict[tuple[int, int], int] = {
    (_MODEL, 7): _GRAPH,          # ModelProto.graph
    (_MODEL, 20): _TRAINING,      # ModelProto.training_info
    (_MODEL, 25): _FUNCTION,      # ModelProto.functions
    (_TRAINING, 1): _GRAPH,       # TrainingInfoProto.initialization
    (_TRAINING, 2): _GRAPH,       # TrainingInfoProto.algorithm
    (_GRAPH, 1): _NODE,           # GraphProto.node
    (_GRAPH, 5): _TENSOR,         # GraphProto.initializer
    (_GRAPH, 15): _SPARSE,        # GraphProto.sparse_initializer
    (_FUNCTION, 7): _NODE,        # FunctionProto.node
    (_FUNCTION, 11): _ATTR,       # FunctionProto.attribute_proto
    (_NODE, 5): _ATTR,            # NodeProto.attribute
    (_ATTR, 5): _TENSOR,          # AttributeProto.t
    (_ATTR, 6): _GRAPH,           # AttributeProto.g
    (_ATTR, 10): _TENSOR,         # AttributeProto.tensors
    (_ATTR, 11): _GRAPH,          # AttributeProto.graphs
    (_ATTR, 22): _SPARSE,         # AttributeProto.sparse_tensor
    (_ATTR, 23): _SPARSE,         # AttributeProto.sparse_tensors
    (_SPARSE, 1): _TENSOR,        # SparseTensorProto.values
    (_SPARSE, 2): _TENSOR,        # SparseTensorProto.indices
    (_TENSOR, 13): _ENTRY,        # TensorProto.external_data
}
_TENSOR_NAME = 8
_TENSOR_DATA_LOCATION = 14
_EXTERNAL = 1
_ENTRY_KEY, _ENTRY_VALUE = 1, 2


class OnnxWireError(PlaitError, ValueError):
    """The bytes are not a well-formed ONNX model (protobuf) message."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise OnnxWireError(f"a truncated or overlong varint at byte {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int):
    """(field number, wire type, value or (start, end) of the bytes) of one message."""
    for field, wire, value, _ in _spans(buf, start, end):
        yield field, wire, value


def _spans(buf: bytes, start: int, end: int):
    """Like :func:`_fields`, each with the (start, end) of the whole field, key included."""
    pos = start
    while pos < end:
        first = pos
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise OnnxWireError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value, (first, pos)
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise OnnxWireError(f"a truncated fixed-size field at byte {pos}")
            pos += size
        elif wire == 2:
            size, pos = _varint(buf, pos, end)
            if pos + size > end:
                raise OnnxWireError(f"a length-delimited field of {size} bytes at byte {pos} "
                                    "runs past its message")
            yield field, wire, (pos, pos + size), (first, pos + size)
            pos += size
        else:  # groups (3, 4) are not used by onnx.proto; 6 and 7 do not exist
            raise OnnxWireError(f"wire type {wire} at byte {pos}")


def external_data_tensors(model: bytes) -> list[str]:
    """The tensors of the serialized ONNX model ``model`` whose data lives in another
    file, each as ``"<tensor name> (location '<file>')"``; empty when there is none.
    Raises :class:`OnnxWireError` for bytes that are not a well-formed message."""
    buf = bytes(model)
    found: list[str] = []
    stack: list[tuple[int, int, int]] = [(_MODEL, 0, len(buf))]
    while stack:
        kind, start, end = stack.pop()
        name, location, external = "", "", False
        for field, wire, value in _fields(buf, start, end):
            if kind == _TENSOR:
                if field == _TENSOR_DATA_LOCATION and wire == 0 and value == _EXTERNAL:
                    external = True
                elif field == _TENSOR_NAME and wire == 2:
                    name = buf[value[0]:value[1]].decode("utf-8", "replace")
                elif field == 13 and wire == 2:
                    external = True
                    key, val = _entry(buf, *value)
                    if key == "location":
                        location = val
                continue
            child = _CHILDREN.get((kind, field))
            if child is not None and wire == 2:
                stack.append((child, value[0], value[1]))
        if external:
            found.append(f"{name or '<unnamed>'!r}" +
                         (f" (location {location!r})" if location else ""))
    return found


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _encode_varint(field << 3 | 2) + _encode_varint(len(data)) + data


_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA = 9, 13


def _externalized_tensor(buf: Any, start: int, end: int, location: bytes,
                         min_bytes: int) -> bytes | None:
    """The tensor message at ``buf[start:end]`` with its ``raw_data`` replaced by an
    external-data reference to the same bytes of the file; None when it keeps its data
    (small, already external, or a field repeated in a way the rewrite would change)."""
    raw = None
    kept: list[tuple[int, int]] = []
    for field, wire, value, span in _spans(buf, start, end):
        if field in (_TENSOR_DATA_LOCATION, _TENSOR_EXTERNAL_DATA):
            return None
        if field == _TENSOR_RAW_DATA and wire == 2:
            if raw is not None:
                return None
            raw = value
        else:
            kept.append(span)
    if raw is None or raw[1] - raw[0] < min_bytes:
        return None
    out = bytearray()
    for a, b in kept:
        out += buf[a:b]
    for key, val in ((b"location", location), (b"offset", str(raw[0]).encode()),
                     (b"length", str(raw[1] - raw[0]).encode())):
        out += _bytes_field(_TENSOR_EXTERNAL_DATA,
                            _bytes_field(_ENTRY_KEY, key) + _bytes_field(_ENTRY_VALUE, val))
    out += _encode_varint(_TENSOR_DATA_LOCATION << 3) + _encode_varint(_EXTERNAL)
    return bytes(out)


def externalize_initializers(model: Any, location: str, min_bytes: int = 1 << 14) -> bytes | None:
    """The serialized model ``model`` (bytes, or a read-only ``mmap`` of the file) with
    the ``raw_data`` of every initializer of its main graph of at least ``min_bytes``
    bytes replaced by an external-data reference (``location``, ``offset``, ``length``)
    to where those bytes already are: in the model's own file, named ``location``.

    Parsing the result holds the graph without its weights, which the importer then
    reads once each, straight from the file, into the arrays it keeps — instead of
    holding the whole protobuf and a copy of every weight at once.  Only the bytes of
    the model's structure are read here (the walk steps over the weights).  Returns
    None when nothing would change, or when the main graph appears more than once (a
    protobuf merge the rewrite would not reproduce); raises :class:`OnnxWireError` for
    a malformed message."""
    loc = location.encode("utf-8")
    end = len(model)
    graphs = [(value, span) for field, wire, value, span in _spans(model, 0, end)
              if field == 7 and wire == 2]
    if len(graphs) != 1:
        return None
    (g_start, g_end), (f_start, f_end) = graphs[0]
    graph = bytearray()
    changed = False
    for field, wire, value, (a, b) in _spans(model, g_start, g_end):
        tensor = None
        if field == 5 and wire == 2:
            tensor = _externalized_tensor(model, value[0], value[1], loc, min_bytes)
        if tensor is None:
            graph += model[a:b]
        else:
            graph += _bytes_field(5, tensor)
            changed = True
    if not changed:
        return None
    return bytes(model[0:f_start]) + _bytes_field(7, bytes(graph)) + bytes(model[f_end:end])


def _entry(buf: bytes, start: int, end: int) -> tuple[str, str]:
    key = val = ""
    for field, wire, value in _fields(buf, start, end):
        if wire == 2 and field in (_ENTRY_KEY, _ENTRY_VALUE):
            text = buf[value[0]:value[1]].decode("utf-8", "replace")
            if field == _ENTRY_KEY:
                key = text
            else:
                val = text
    return key, val


__all__ = ["OnnxWireError", "external_data_tensors", "externalize_initializers"]
