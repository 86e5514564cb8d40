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
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise OnnxWireError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, wire, value
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
            yield field, wire, (pos, pos + size)
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


__all__ = ["OnnxWireError", "external_data_tensors"]
