"""Fuzzing plait: mutated inputs of four kinds, running them, and judging the outcome.

Targets:

* ``text`` — modules in the text format (real ones: the examples, the docs, printed
  models) with characters, lines, numbers and names mutated; parsed, built on numpy and
  run;
* ``onnx`` — real ONNX models (examples/models and small graphs made here) mutated at
  the protobuf level (dims, types, attributes, op types, names, initializers, nodes) and
  as raw bytes; imported, built on numpy, run, and compared with onnxruntime when both
  run;
* ``exe`` — saved executables (numpy and ``c``) with corrupted members (truncated,
  flipped, replaced, missing, duplicated), with and without recomputed digests (a
  forger's file), mutated manifests and raw byte flips; loaded with the default policy
  and run;
* ``vm`` — hostile arguments for built executables (wrong dtypes, byte orders, ranks and
  sizes, non-contiguous and zero-stride views, empty and 0-d arrays, NaN, Python objects,
  missing or extra arguments); a call that succeeds is checked against numpy;
* ``trust`` — executables carrying code (C sources and kernels in their kept graph,
  native external modules) or naming files (onnxruntime models with external data), run
  on every path from a file to code, without and with consent (tests/fuzz/trustlib.py).

Every case is bytes (so a finding can be kept in ``tests/fuzz/corpus/<target>/``);
mutations draw their choices from a :class:`Chooser`, backed by ``random.Random`` (the
long runs of tools/fuzz.py) or by hypothesis (the tests, which then shrink findings).

An outcome is ``ok`` (ran, and agreed with the reference when there is one), ``clean``
(an error plait raised on purpose: an exception class of plait's, or a built-in one
raised by a ``raise`` statement of plait's code, following ``PassError``/``VMError`` to
the error they wrap;
``MemoryError`` counts as clean unless :data:`MEMORY_ERRORS_ARE_CLEAN` is false, as in
tools/fuzz.py, whose children run under a memory cap with plait's limits set below it:
there a huge count or size must be refused by ``plait.runtime.limits`` before the work,
so a ``MemoryError`` is ``raw``), ``raw`` (an exception
escaping from deep inside: an internal error type such as ``KeyError`` or
``AssertionError``, or one raised in numpy, onnx or the standard library), or
``mismatch`` (ran but disagreed with the reference), or, for the ``trust`` target,
``breach`` (foreign code ran or a file was read without the caller's consent).  An
error the VM located (raised inside a function an instruction called, reported with the
instruction, its callers and its arguments' shapes) counts as clean when it is a refusal
of the arguments (``ValueError``, ``TypeError``, ``OverflowError``, or numpy's
``IndexError`` for an index out of range), not an internal error; tools/fuzz.py counts
those apart (``located``).
``hang`` and ``crash`` are judged by tools/fuzz.py, which runs cases in a child
process.
"""

from __future__ import annotations

import io
import json
import linecache
import math
import random
import re
import traceback
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
TARGETS = ("text", "onnx", "exe", "vm", "trust")
MEMORY_ERRORS_ARE_CLEAN = True
"""Whether a ``MemoryError`` is a clean outcome (see the module docstring)."""
BOMB_BYTES = 16 << 20
"""The inflated size of the deflated constant that :func:`mutate_exe` plants (a few
KiB in the file); tools/fuzz.py sets ``max_inflated_bytes`` below it."""
MAX_ELEMENTS = 1 << 20
"""Inputs (and static tensors of a fuzzed model) above this many elements are not run:
a mutated size makes a model slow, not wrong."""
INTERESTING_INTS = (0, 1, -1, 2, 3, 7, 255, 256, 65535, 2**31 - 1, 2**31, -(2**31), 2**32,
                    2**62, 2**63 - 1, 2**63, -(2**63), 2**64, 10**6)
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 3.4e38, 1e308, math.inf, -math.inf,
                      math.nan)


# ----------------------------------------------------------------------------- choosers


class Chooser(Protocol):
    """Where a mutation draws its choices from."""

    def int(self, lo: int, hi: int) -> int:
        """An int in ``[lo, hi]``."""

    def choice(self, items: Sequence[Any]) -> Any:
        """One of ``items`` (non-empty)."""


class RandomChooser:
    """Choices from a seeded ``random.Random`` (reproducible from the seed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self.rng.randrange(len(items))]


class DataChooser:
    """Choices drawn from hypothesis (``st.data()``), so failures shrink."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self.data, self.st = data, st

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(self.st.integers(lo, hi))

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self.data.draw(self.st.integers(0, len(items) - 1))]


def _interesting_int(ch: Chooser) -> int:
    return ch.choice(INTERESTING_INTS) if ch.int(0, 3) else ch.int(-5, 70000)


# ------------------------------------------------------------------------------ outcome


@dataclass(frozen=True)
class Outcome:
    """How one case ended: ``kind`` (ok, clean, raw, mismatch, hang, crash) and a short
    ``detail`` (the exception and where it came from) that groups equal findings."""

    kind: str
    detail: str = ""


_INTERNAL = (AssertionError, KeyError, IndexError, AttributeError, NameError,
             ZeroDivisionError, RecursionError, NotImplementedError, SystemError,
             StopIteration, LookupError)


def _plait_raise(tb: Any) -> str | None:
    """``file:line`` of the innermost traceback frame when it is a ``raise`` statement
    of plait's code (an error plait raises on purpose, with its own message), else
    None (an operation failing inside plait, or code outside plait)."""
    last = None
    for frame, line in traceback.walk_tb(tb):
        last = (frame.f_code.co_filename.replace("\\", "/"), line)
    if last is None:
        return None
    name, line = last
    if "/plait/" not in name or "/tests/" in name:
        return None
    if not linecache.getline(name, line).lstrip().startswith("raise"):
        return None
    return f"{name.split('/plait/', 1)[1]}:{line}"


def _root(exc: BaseException) -> tuple[BaseException, bool]:
    """The error a ``PassError``/``VMError`` wraps (its ``__cause__``), and whether the VM
    located it (a failure inside a function the VM called, reported with the
    instruction, its callers and its arguments)."""
    from plait.runtime.vm import VMError
    from plait.transform.errors import PassError

    located, seen = False, 0
    while (type(exc) in (PassError, VMError) and exc.__cause__ is not None and seen < 20):
        located = located or type(exc) is VMError
        exc, seen = exc.__cause__, seen + 1
    return exc, located


def classify(exc: BaseException) -> Outcome:
    """``clean`` or ``raw`` for an exception a case raised (see the module docstring)."""
    root, located = _root(exc)
    name = type(root).__name__
    own = type(root).__module__.startswith("plait")
    frame = _plait_raise(root.__traceback__)
    where = frame or _innermost(root.__traceback__)
    if isinstance(root, MemoryError):
        if MEMORY_ERRORS_ARE_CLEAN:
            return Outcome("clean", f"MemoryError at {where}")
        return Outcome("raw", f"MemoryError at {where}: a size past the memory that no "
                              "limit of plait.runtime.limits refused")
    if own and not isinstance(root, AssertionError):
        return Outcome("clean", f"{name}")
    if located and (isinstance(root, _REFUSALS) or (
            isinstance(root, IndexError) and not _in_plait(root.__traceback__))):
        # a function refused the arguments an instruction gave it (numpy, for a size
        # bound at run time against one the model assumed; a packed function, for a
        # value a hand-made executable passes): the VM's error names the instruction,
        # its callers and the arguments' shapes
        return Outcome("clean", f"located {name} at {where}")
    if isinstance(root, _INTERNAL):
        return Outcome("raw", f"{name} at {where}: {_first(root)}")
    if frame is not None:
        return Outcome("clean", f"{name} at {frame}")
    return Outcome("raw", f"{name} at {where}: {_first(root)}")


_REFUSALS = (ValueError, TypeError, OverflowError, FloatingPointError)


def _in_plait(tb: Any) -> bool:
    """Whether the innermost frame is plait's code (an ``IndexError`` there is plait's
    bug; one from numpy refuses an index the arguments hold)."""
    last = ""
    for frame, _ in traceback.walk_tb(tb):
        last = frame.f_code.co_filename.replace("\\", "/")
    return "/plait/" in last and "/tests/" not in last


def _innermost(tb: Any) -> str:
    last = "?"
    for frame, line in traceback.walk_tb(tb):
        last = f"{Path(frame.f_code.co_filename).name}:{line}"
    return last


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else ""


def guarded(fn: Callable[[], Outcome]) -> Outcome:
    """Run one case, turning its exception into an outcome."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - judging every exception is the point
        return classify(exc)


# -------------------------------------------------------------------------------- bases

VM_MODELS: dict[str, tuple[str, Callable[..., np.ndarray]]] = {
    "mlp": ('''
@module
class M:
    @function
    def main(x: Tensor((n, 8), "float32"), w: Tensor((8, 4), "float32"),
             b: Tensor((4,), "float32")) -> Tensor((n, 4), "float32"):
        with dataflow():
            y = relu(add(matmul(x, w), b))
            output(y)
        return y
''', lambda x, w, b: np.maximum(x.astype(np.float64) @ w + b, 0)),
    "softmax": ('''
@module
class M:
    @function
    def main(x: Tensor((n, m), "float32")) -> Tensor((n, m), "float32"):
        with dataflow():
            y = softmax(x, axis=1)
            output(y)
        return y
''', lambda x: np.exp(x - x.max(1, keepdims=True).astype(np.float64))
        / np.exp(x - x.max(1, keepdims=True).astype(np.float64)).sum(1, keepdims=True)),
    "concat": ('''
@module
class M:
    @function
    def main(a: Tensor((n, 3), "int32"), b: Tensor((k, 3), "int32")) -> Tensor((j, 3), "int32"):
        with dataflow():
            c = concat((a, b), axis=0)
            s = multiply(c, c)
            output(s)
        return s
''', lambda a, b: np.concatenate([a, b]).astype(np.int64) ** 2),
    "pool": ('''
@module
class M:
    @function
    def main(x: Tensor((n, 2, 8, 8), "float32")) -> Tensor((n, 2, 4, 4), "float32"):
        with dataflow():
            y = max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
            output(y)
        return y
''', lambda x: x.reshape(x.shape[0], 2, 4, 2, 4, 2).max(axis=(3, 5))),
}
"""Models the ``vm`` and ``exe`` targets use, with numpy references."""


@cache
def vm_executables() -> dict[str, Any]:
    """``<model>-<target>`` -> executable, built on numpy and (when a C compiler is
    there) on ``c``."""
    import plait
    from plait.codegen.c import NativeUnavailableError

    out = {}
    for name, (text, _) in VM_MODELS.items():
        mod = plait.parse(text)
        out[f"{name}-numpy"] = plait.build(mod, "numpy")
        try:
            out[f"{name}-c"] = plait.build(mod, "c")
        except NativeUnavailableError:
            pass
    return out


@cache
def text_bases() -> tuple[str, ...]:
    """Real modules in the text format."""
    out = [(ROOT / "examples" / "mlp.plait.py").read_text()]
    doc = (ROOT / "docs" / "ir.md").read_text()
    out += [b.split("```", 1)[0] for b in doc.split("```python\n")[1:]
            if b.startswith("@module")]
    out += [text for text, _ in VM_MODELS.values()]
    out += [_lowered(text) for text, _ in VM_MODELS.values()]
    out.append(SPLIT_TEXT)   # a count to mutate into a huge one
    return tuple(out)


def _lowered(text: str) -> str:
    """``text`` lowered for numpy: its calls are ``call_extern`` s with attributes."""
    import plait
    from plait.transform import Sequential

    target = plait.Target("numpy")
    stages = [s for s in plait.default_pipeline(target).passes if s.name != "build"]
    return Sequential(stages)(plait.parse(text).with_attrs(target=target)).script()


SPLIT_TEXT = '''@module
class Split:
    @function
    def main(x: Tensor((6, 4), "float32")):
        y = split(x, indices_or_sections=3, axis=0)
        a = y[0]
        return a
'''
"""A base whose ``split`` count the mutations make huge (``2147483647`` hung)."""


def _onnx_models() -> list[bytes]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT

    def model(nodes: list, inputs: list, outputs: list, inits: list = (),
              opset: int = 17) -> bytes:
        g = helper.make_graph(nodes, "fuzz", inputs, outputs, list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m.SerializeToString()

    def init(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    conv = model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                          strides=[1, 1], group=1),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [helper.make_tensor_value_info("x", f, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", f, ["n", 4, 4, 4])],
        [init("w", (4, 3, 3, 3)), init("b", (4,))])
    shapes = model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
         helper.make_node("Reshape", ["t", "shape"], ["r"]),
         helper.make_node("Concat", ["r", "r"], ["c"], axis=0),
         helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["s"]),
         helper.make_node("Gather", ["s", "idx"], ["y"], axis=1)],
        [helper.make_tensor_value_info("x", f, [4, 6])],
        [helper.make_tensor_value_info("y", f, [4, 3])],
        [numpy_helper.from_array(np.array([3, 8], np.int64), "shape"),
         numpy_helper.from_array(np.array([1], np.int64), "starts"),
         numpy_helper.from_array(np.array([5], np.int64), "ends"),
         numpy_helper.from_array(np.array([0], np.int64), "axes"),
         numpy_helper.from_array(np.array([0, 2, 7], np.int64), "idx")])
    reduce = model(
        [helper.make_node("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1),
         helper.make_node("Sub", ["x", "m"], ["d"]),
         helper.make_node("Softmax", ["d"], ["s"], axis=-1),
         helper.make_node("MatMul", ["s", "w"], ["y"])],
        [helper.make_tensor_value_info("x", f, ["batch", 5])],
        [helper.make_tensor_value_info("y", f, ["batch", 2])],
        [init("w", (5, 2))])
    # counts and flags for the attribute mutations to make huge or out of range
    # (num_outputs=2**31-1 hung; ceil_mode=2 was taken as ceil)
    split = model(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
         helper.make_node("AveragePool", ["a"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                          ceil_mode=1, count_include_pad=0),
         helper.make_node("Relu", ["b"], ["z"])],
        [helper.make_tensor_value_info("x", f, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", f, [1, 2, 3, 3]),
         helper.make_tensor_value_info("z", f, [1, 2, 5, 5])], opset=18)
    out = [(ROOT / "examples" / "models" / "tiny_mlp.onnx").read_bytes(), conv, shapes, reduce,
           split]
    for data in out:
        onnx.checker.check_model(onnx.load_from_string(data))
    return out


@cache
def onnx_bases() -> tuple[bytes, ...]:
    """Real ONNX models: the example model and small graphs of common ops."""
    return tuple(_onnx_models())


@cache
def exe_bases() -> tuple[bytes, ...]:
    """Saved executables (each signed by this machine, as ``plait compile`` leaves them)."""
    return tuple(exe.to_bytes() for exe in vm_executables().values())


def base(target: str, ch: Chooser) -> bytes:
    """A real input of ``target`` to mutate."""
    if target == "text":
        return ch.choice(text_bases()).encode()
    if target == "onnx":
        return ch.choice(onnx_bases())
    if target == "exe":
        return ch.choice(exe_bases())
    raise ValueError(target)


# ------------------------------------------------------------------------------ mutators

_TEXT_PIECES = ("(", ")", "[", "]", ",", ":", "=", ".", '"', "'", " ", "\n", "    ", "-",
                "*", "0", "1", "-1", "1e400", "2**63", "9223372036854775808", "n", "x",
                "None", "float32", "int8", "Tensor", "relu", "add", "const", "output",
                "with", "dataflow()", "return", "@function", "cls.", "lambda", "import os",
                "__import__", "\\", "\x00", "é", "axis=", "shape(", "prim(", "2147483647",
                "10**6", "split(x, indices_or_sections=", "num_outputs")


def mutate_text(data: bytes, ch: Chooser) -> bytes:
    """Character, line, number and name edits of a module's text."""
    text = data.decode("utf-8", "replace")
    for _ in range(ch.int(1, 4)):
        if not text:
            text = ch.choice(_TEXT_PIECES)
        op = ch.int(0, 6)
        i = ch.int(0, len(text))
        if op == 0:  # insert a piece
            text = text[:i] + ch.choice(_TEXT_PIECES) + text[i:]
        elif op == 1:  # delete a span
            text = text[:i] + text[i + ch.int(1, 12):]
        elif op == 2:  # replace a number
            nums = list(re.finditer(r"-?\d+(\.\d+)?", text))
            if nums:
                m = ch.choice(nums)
                text = text[:m.start()] + str(_interesting_int(ch)) + text[m.end():]
        elif op == 3:  # duplicate, delete or swap lines
            lines = text.split("\n")
            a, b = ch.int(0, len(lines) - 1), ch.int(0, len(lines) - 1)
            kind = ch.int(0, 2)
            if kind == 0:
                lines.insert(b, lines[a])
            elif kind == 1:
                del lines[a]
            else:
                lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif op == 4:  # swap two names
            names = sorted(set(re.findall(r"\b[a-z_][a-z_0-9]*\b", text)))
            if len(names) >= 2:
                old, new = ch.choice(names), ch.choice(names)
                text = re.sub(rf"\b{old}\b", new, text, count=ch.int(0, 3))
        elif op == 5:  # a dtype for another
            dtypes = ("float32", "float16", "int8", "int64", "bool", "uint8", "float64")
            text = text.replace(ch.choice(dtypes), ch.choice(dtypes), 1)
        else:  # truncate
            text = text[:i]
    return text.encode("utf-8", "surrogatepass")


def _all_messages(model: Any) -> list[Any]:
    from google.protobuf.descriptor import FieldDescriptor

    out, stack = [], [model]
    while stack:
        msg = stack.pop()
        out.append(msg)
        for field, value in msg.ListFields():
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                rep = getattr(field, "is_repeated", None)
                repeated = rep if rep is not None else field.label == field.LABEL_REPEATED
                stack.extend(value if repeated else [value])
    return out


_OP_TYPES = ("Relu", "Add", "MatMul", "Conv", "Reshape", "Transpose", "Concat", "Gather",
             "Slice", "Softmax", "MaxPool", "Sigmoid", "Identity", "Cast", "Where",
             "NonExistentOp", "Loop", "If", "Split", "Expand", "Pad", "Resize", "TopK")


def mutate_onnx(data: bytes, ch: Chooser) -> bytes:
    """Protobuf-level edits of an ONNX model, or raw byte flips of its bytes."""
    import onnx

    if ch.int(0, 5) == 0:
        return mutate_bytes(data, ch)
    m = onnx.ModelProto()
    m.ParseFromString(data)
    for _ in range(ch.int(1, 3)):
        _mutate_model(m, ch)
    return m.SerializeToString()


def _mutate_model(m: Any, ch: Chooser) -> None:  # noqa: C901 - one branch per edit
    from onnx import AttributeProto

    g = m.graph
    op = ch.int(0, 11)
    dims = [d for msg in _all_messages(m) if type(msg).__name__ == "TensorShapeProto"
            for d in msg.dim]
    if op == 0 and dims:
        d = ch.choice(dims)
        if ch.int(0, 2):
            d.dim_value = max(-(2**63), min(2**63 - 1, _interesting_int(ch)))
        else:
            d.dim_param = ch.choice(("n", "", "a b", "N\u00e9", "batch", "0"))
    elif op == 1 and len(g.node):
        ch.choice(g.node).op_type = ch.choice(_OP_TYPES)
    elif op == 2 and len(g.node):
        node = ch.choice(g.node)
        if len(node.attribute):
            a = ch.choice(node.attribute)
            if a.type == AttributeProto.INT:
                a.i = max(-(2**63), min(2**63 - 1, _interesting_int(ch)))
            elif a.type == AttributeProto.INTS and len(a.ints):
                a.ints[ch.int(0, len(a.ints) - 1)] = max(-(2**63), min(2**63 - 1,
                                                                      _interesting_int(ch)))
                if ch.int(0, 1):
                    del a.ints[ch.int(0, len(a.ints) - 1)]
            elif a.type == AttributeProto.FLOAT:
                a.f = ch.choice(INTERESTING_FLOATS)
            else:
                a.name = ch.choice(("axis", "perm", "bogus", ""))
    elif op == 3 and len(g.node):
        node = ch.choice(g.node)
        names = [v for n in g.node for v in (*n.input, *n.output)] + ["", "missing"]
        if len(node.input) and ch.int(0, 1):
            node.input[ch.int(0, len(node.input) - 1)] = ch.choice(names)
        elif len(node.output):
            node.output[ch.int(0, len(node.output) - 1)] = ch.choice(names)
    elif op == 4 and len(g.node):
        del g.node[ch.int(0, len(g.node) - 1)]
    elif op == 5 and len(g.node):
        g.node.append(g.node[ch.int(0, len(g.node) - 1)])
    elif op == 6 and len(g.initializer):
        t = ch.choice(g.initializer)
        kind = ch.int(0, 3)
        if kind == 0 and len(t.dims):
            t.dims[ch.int(0, len(t.dims) - 1)] = max(-(2**63), min(2**63 - 1,
                                                                  _interesting_int(ch)))
        elif kind == 1:
            t.data_type = ch.int(0, 22)
        elif kind == 2 and t.raw_data:
            t.raw_data = t.raw_data[: ch.int(0, len(t.raw_data))]
        else:
            t.name = ch.choice([n.name for n in g.input] + ["w", ""])
    elif op == 7:
        vis = [*g.input, *g.output]
        if vis:
            ch.choice(vis).type.tensor_type.elem_type = ch.int(0, 22)
    elif op == 8 and len(m.opset_import):
        m.opset_import[0].version = ch.choice((1, 6, 7, 11, 13, 17, 18, 21, 99, 10**9))
    elif op == 9 and len(g.input):
        g.input[0].name = ch.choice(("", "x", "y", "input", "a b"))
    elif op == 10 and len(g.output):
        if ch.int(0, 1):
            del g.output[ch.int(0, len(g.output) - 1)]
        else:
            g.output.append(g.output[0])
    elif len(g.node):  # a node's domain
        ch.choice(g.node).domain = ch.choice(("", "ai.onnx", "com.microsoft", "custom"))


def mutate_bytes(data: bytes, ch: Chooser) -> bytes:
    """Byte flips, insertions, deletions and truncation."""
    b = bytearray(data)
    for _ in range(ch.int(1, 8)):
        if not b:
            break
        i = ch.int(0, len(b) - 1)
        op = ch.int(0, 4)
        if op == 0:
            b[i] ^= 1 << ch.int(0, 7)
        elif op == 1:
            b[i] = ch.choice((0, 0xFF, 0x7F, 0x80))
        elif op == 2:
            del b[i:i + ch.int(1, 64)]
        elif op == 3:
            b[i:i] = bytes(ch.int(0, 255) for _ in range(ch.int(1, 8)))
        else:
            del b[i:]
    return bytes(b)


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(parts: list[tuple[str, bytes]], deflate: bool = False) -> bytes:
    import warnings

    out = io.BytesIO()
    kind = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", kind, compresslevel=1) as zf:
        warnings.simplefilter("ignore")  # a member twice is what some cases want
        for name, payload in parts:
            zf.writestr(name, payload)
    return out.getvalue()


def _forge(parts: dict[str, bytes]) -> None:
    """Recompute the members' digests and drop the signatures (what a forger does)."""
    import hashlib

    parts.pop("signatures.json", None)
    try:
        manifest = json.loads(parts["manifest.json"])
        manifest["members"] = {n: hashlib.sha256(b).hexdigest() for n, b in parts.items()
                               if n != "manifest.json"}
        parts["manifest.json"] = json.dumps(manifest).encode()
    except (KeyError, ValueError, TypeError, RecursionError):
        pass


def _mutate_json(value: Any, ch: Chooser) -> Any:
    """``value`` (parsed JSON) with one leaf or container changed."""
    path: list[Any] = []
    node = value
    while isinstance(node, dict | list) and node and ch.int(0, 4):
        key = ch.choice(list(node)) if isinstance(node, dict) else ch.int(0, len(node) - 1)
        path.append((node, key))
        node = node[key]
    replacement = ch.choice((None, True, -1, 0, 2**63, 1e308, "", "x", "float32", [], {},
                             [0], {"reg": 0}, {"const": 99}, {"tuple": [1]}, "libs/0",
                             _interesting_int(ch)))
    if not path:
        return replacement
    parent, key = path[-1]
    if isinstance(parent, list) and ch.int(0, 2) == 0:
        del parent[key]
    elif isinstance(parent, list) and ch.int(0, 1) == 0:
        parent.insert(key, parent[key])
    else:
        parent[key] = replacement
    return value


_KEYWORD_NAMES = ("axis", "strides", "pool_size", "padding", "dilation", "groups", "layout",
                  "keepdims", "dtype", "ceil_mode", "fmod", "no_such_keyword", "")
_KEYWORD_VALUES = (0, -1, 1, 2**63, 1.5, float("nan"), "x", "NCHW", "NHWC", True, None,
                   (), (0, 0), (1, 2, 3), (-1, 1), [1], "float32")


def _mutate_keywords(manifest: Any, ch: Chooser) -> None:
    """A call instruction's keywords: one added, changed or removed (unknown names,
    values of the wrong kind, outside their choices or below their minimum)."""
    from plait.runtime.executable import encode_value

    calls = [ins for fn in manifest.get("functions", ()) if isinstance(fn, dict)
             for ins in fn.get("instructions", ()) if isinstance(ins, dict)
             and ins.get("kind") == "call"]
    if not calls:
        return
    ins = ch.choice(calls)
    kwargs = ins.setdefault("kwargs", {})
    if not isinstance(kwargs, dict):
        return
    op = ch.int(0, 2)
    value = {"imm": encode_value(ch.choice(_KEYWORD_VALUES))}
    if op == 0 or not kwargs:
        kwargs[ch.choice(_KEYWORD_NAMES)] = value
    elif op == 1:
        kwargs[ch.choice(list(kwargs))] = value
    else:
        del kwargs[ch.choice(list(kwargs))]


def mutate_exe(data: bytes, ch: Chooser) -> bytes:
    """Corrupted members, forged digests, manifest edits (among them the keywords of
    calls), raw byte flips, a deflated bomb."""
    op = ch.int(0, 6)
    if op == 0:
        return mutate_bytes(data, ch)
    parts = _members(data)
    if op == 6:   # a constant inflating to BOMB_BYTES from a few KiB, digests forged
        names = [n for n in parts if n.startswith("constants/")]
        if names:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": "<f4", "fortran_order": False, "shape": (BOMB_BYTES // 4,)})
            parts[ch.choice(names)] = header.getvalue() + bytes(BOMB_BYTES)
            _forge(parts)
            return _zip(list(parts.items()), deflate=True)
    names = list(parts)
    name = ch.choice(names)
    if op == 1:  # truncate a member
        parts[name] = parts[name][: ch.int(0, len(parts[name]))]
    elif op == 2:  # flip bytes of a member
        parts[name] = mutate_bytes(parts[name], ch)
    elif op == 3:  # the manifest's JSON
        try:
            parts["manifest.json"] = json.dumps(
                _mutate_json(json.loads(parts["manifest.json"]), ch)).encode()
        except (ValueError, RecursionError):
            pass
    elif op == 4:  # a member swapped with another, removed, or added
        kind = ch.int(0, 2)
        other = ch.choice(names)
        if kind == 0:
            parts[name], parts[other] = parts[other], parts[name]
        elif kind == 1:
            del parts[name]
        else:
            parts[f"libs/{ch.int(0, 3)}"] = parts[other]
    elif op == 5:  # a member of another executable
        donor = _members(ch.choice(exe_bases()))
        key = ch.choice(list(donor))
        parts[key] = donor[key]
    else:  # the keywords of a call (forged, as a file from elsewhere would be)
        try:
            manifest = json.loads(parts["manifest.json"])
            _mutate_keywords(manifest, ch)
            parts["manifest.json"] = json.dumps(manifest).encode()
        except (KeyError, ValueError, TypeError, AttributeError, RecursionError):
            pass
        _forge(parts)
    if op != 6 and ch.int(0, 1):
        _forge(parts)
    items = list(parts.items())
    if ch.int(0, 7) == 0 and items:
        items.append(ch.choice(items))  # a member twice
    return _zip(items)


def mutate(target: str, ch: Chooser) -> bytes:
    """A mutated input of ``target``."""
    if target == "vm":
        return make_vm_case(ch)
    if target == "selftest":
        return str(ch.int(0, 3)).encode()
    if target == "trust":
        from trustlib import make_trust_case

        return make_trust_case(ch)
    data = base(target, ch)
    return {"text": mutate_text, "onnx": mutate_onnx, "exe": mutate_exe}[target](data, ch)


# ------------------------------------------------------------------------ vm arguments

_DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool",
           ">f4", ">i4", "complex64")


def make_vm_case(ch: Chooser) -> bytes:
    """Arguments for one of :func:`vm_executables`, as an ``.npz`` (arrays, and the
    ``spec`` saying how to present each: as it is, transposed, strided, broadcast,
    read-only, as a list, a scalar, None...)."""
    exes = vm_executables()
    name = ch.choice(sorted(exes))
    params = exes[name].functions["main"].params
    sizes: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    spec: list[Any] = []
    count = len(params) + ch.choice((0, 0, 0, 0, -1, 1))
    for i in range(max(count, 0)):
        p = params[min(i, len(params) - 1)]
        shape = [d if isinstance(d, int) else sizes.setdefault(d, ch.choice((0, 1, 2, 3, 5)))
                 for d in (p.shape or ())]
        dtype = p.dtype or "float32"
        kind = ch.int(0, 14)
        if kind == 1:
            dtype = ch.choice(_DTYPES)
        elif kind == 2 and shape:
            shape[ch.int(0, len(shape) - 1)] = ch.choice((0, 1, 4, 7, 100))
        elif kind == 3:
            shape = shape[:-1] if shape and ch.int(0, 1) else [*shape, 2]
        rng = np.random.default_rng(ch.int(0, 2**16))
        values = rng.standard_normal(max(1, math.prod(shape))) * ch.choice((1, 1, 1e30, 1e-30))
        if ch.int(0, 9) == 0:
            values[0] = ch.choice((math.nan, math.inf, -math.inf))
        with np.errstate(all="ignore"):
            a = values[: math.prod(shape)].astype(np.dtype(dtype)).reshape(shape)
        key = f"a{i}"
        arrays[key] = a
        how = ("as_is" if kind < 4 else
               ch.choice(("as_is", "transposed", "strided", "broadcast", "readonly", "list",
                          "scalar", "none", "string", "zero_d", "tuple", "huge_broadcast")))
        spec.append([how, key])
    buf = io.BytesIO()
    np.savez(buf, spec=np.array(json.dumps({"exe": name, "args": spec})), **arrays)
    return buf.getvalue()


def _present(how: str, a: np.ndarray) -> Any:
    if how == "transposed":
        return np.ascontiguousarray(a.T).T if a.ndim >= 2 else a
    if how == "strided":
        return np.repeat(a, 2, axis=-1)[..., ::2] if a.ndim else a
    if how == "broadcast":
        return np.broadcast_to(a.reshape(-1)[:1].reshape((1,) * a.ndim), a.shape) \
            if a.size else a
    if how == "readonly":
        a = a.copy()
        a.flags.writeable = False
        return a
    if how == "list":
        return a.tolist()
    if how == "scalar":
        return a.reshape(-1)[0].item() if a.size else 0.0
    if how == "none":
        return None
    if how == "string":
        return "x"
    if how == "zero_d":
        return np.array(a.reshape(-1)[0] if a.size else 0, a.dtype)
    if how == "tuple":
        return tuple(a.shape)
    if how == "huge_broadcast":  # a zero-stride view that would need exabytes to copy
        return np.broadcast_to(np.zeros((1,) * max(a.ndim, 1), a.dtype),
                               (2**40,) + tuple(a.shape[1:]) if a.ndim else (2**40,))
    return a


def run_vm_case(data: bytes) -> Outcome:
    from plait.runtime import VirtualMachine

    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        spec = json.loads(str(z["spec"]))
        arrays = {k: z[k] for k in z.files if k != "spec"}
    exe = vm_executables()[spec["exe"]]
    args = [_present(how, arrays[key]) for how, key in spec["args"]]
    vm = VirtualMachine(exe)
    got = vm["main"](*args)
    # it ran: the arguments were valid (or converted losslessly); check the answer,
    # unless float32 arithmetic may overflow (then float32 and float64 rightly differ)
    _, reference = VM_MODELS[spec["exe"].rsplit("-", 1)[0]]
    plain = [np.asarray(a) for a in args]
    if any(a.dtype.kind == "f" and a.size and not np.all(np.abs(a) < 1e15) for a in plain):
        return Outcome("ok")
    try:
        with np.errstate(all="ignore"):
            want = reference(*plain)
    except (ValueError, MemoryError):
        # numpy has no answer either (a reduction over nothing; or the reference itself
        # needs more memory: the max over an empty axis of 2**40 rows, which plait's
        # 0-byte result did not)
        return Outcome("ok")
    if not _close(got, want):
        return Outcome("mismatch", f"{spec['exe']}: {_diff(got, want)}")
    return Outcome("ok")


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if got.dtype.kind in "iub":
        return bool(np.array_equal(got, want.astype(got.dtype)))
    with np.errstate(all="ignore"):
        g, w = got.astype(np.float64), want.astype(np.float64)
        # float32 results of short sums and exp against float64 numpy
        ok = np.isclose(g, w, rtol=1e-4, atol=1e-5) | (np.isnan(g) & np.isnan(w))
        # values beyond float32's range: both infinite of the same sign, or float32 max
        ok |= (np.abs(w) > 3e38) & ((g == w) | (np.abs(g) > 3e38))
    return bool(ok.all())


def _diff(got: Any, want: Any) -> str:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    with np.errstate(all="ignore"):
        return f"max |d| {np.nanmax(np.abs(got.astype(np.float64) - want)):.3g}"


# ---------------------------------------------------------------------------- running


def _random_inputs(params: Sequence[Any], seed: int) -> list[np.ndarray] | None:
    """Inputs for ``params`` (symbolic sizes 2), or None when too big or not tensors."""
    rng = np.random.default_rng(seed)
    out = []
    for p in params:
        if p.kind != "tensor" or p.shape is None or p.dtype is None:
            return None
        shape = tuple(d if isinstance(d, int) else 2 for d in p.shape)
        if math.prod(shape) > MAX_ELEMENTS or max(shape, default=0) > MAX_ELEMENTS:
            return None  # (numpy cannot make (0, 2**63 - 1) either: no caller can pass it)
        with np.errstate(all="ignore"):
            out.append((rng.standard_normal(shape) * 3).astype(p.dtype))
    return out


def _too_big(exe: Any) -> bool:
    return any(c.size > MAX_ELEMENTS for c in exe.constants)


def run_text_case(data: bytes) -> Outcome:
    import plait
    from plait.runtime import VirtualMachine

    mod = plait.parse(data.decode("utf-8", "surrogateescape"))
    exe = plait.build(mod, "numpy")
    if "main" not in exe.functions or _too_big(exe):
        return Outcome("ok")
    inputs = _random_inputs(exe.functions["main"].params, 0)
    if inputs is not None:
        VirtualMachine(exe)["main"](*inputs)
    return Outcome("ok")


def run_onnx_case(data: bytes) -> Outcome:
    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine

    mod = from_onnx(data)
    exe = plait.build(mod, "numpy")
    if _too_big(exe):
        return Outcome("ok")
    params = exe.functions["main"].params
    inputs = _random_inputs(params, 0)
    if inputs is None:
        return Outcome("ok")
    got = VirtualMachine(exe)["main"](*inputs)
    if not _finite_initializers(data):
        return Outcome("ok")  # NaN and inf through conv/relu/pool: implementations differ
    try:  # the reference, when onnxruntime takes the model too
        import onnxruntime as ort

        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        feeds = {i.name: a for i, a in zip(sess.get_inputs(), inputs)}
        want = sess.run(None, feeds)
    except Exception:
        return Outcome("ok")
    gots = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(gots, want):
        if not _close(np.asarray(g), np.asarray(w)):
            if _agrees_with_the_spec(data, sess, inputs, gots):
                return Outcome("ok")
            return Outcome("mismatch", f"onnx: {_diff(g, w)}")
    return Outcome("ok")


def _agrees_with_the_spec(data: bytes, sess: Any, inputs: list[np.ndarray],
                          gots: list[Any]) -> bool:
    """Whether plait's outputs are what onnx's reference evaluator (the spec written as
    numpy) computes, where onnxruntime differs from both: e.g. a pooling window larger
    than its input, where the spec's floor gives an empty axis and onnxruntime's C
    division rounds up to one row."""
    try:
        from onnx.reference import ReferenceEvaluator

        feeds = {i.name: a for i, a in zip(sess.get_inputs(), inputs)}
        spec = ReferenceEvaluator(data).run(None, feeds)
    except Exception:  # noqa: BLE001 (the evaluator lacks the op or fails: no verdict)
        return False
    return len(spec) == len(gots) and all(
        _close(np.asarray(g), np.asarray(w)) for g, w in zip(gots, spec))


def _finite_initializers(data: bytes) -> bool:
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.ParseFromString(data)
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            return False
    return True


def run_exe_case(data: bytes) -> Outcome:
    from plait.runtime import Executable, VirtualMachine
    from plait.runtime.limits import limit_value

    exe = Executable.from_bytes(data)
    allowed = limit_value("max_inflated_bytes")
    inflated = (sum(c.nbytes for c in exe.constants) + sum(len(b) for b in exe.libs.values())
                + len((exe.graph or "").encode()))
    # (members stored uncompressed are the file's own bytes and are not counted)
    if allowed is not None and inflated > allowed + len(data):
        return Outcome("raw", f"an executable of {inflated:,} inflated bytes from a file of "
                              f"{len(data):,} loaded past max_inflated_bytes = {allowed:,}")
    vm = VirtualMachine(exe)
    if "main" in exe.functions and not _too_big(exe):
        inputs = _random_inputs(exe.functions["main"].params, 0)
        if inputs is not None:
            vm["main"](*inputs)
    return Outcome("ok")


def run_selftest_case(data: bytes) -> Outcome:
    """The ``selftest`` target, which checks tools/fuzz.py's judging: case ``k`` kills
    its process (k % 4 == 0), hangs (1), raises an internal error (2) or is ok (3)."""
    import os
    import signal
    import time

    k = int(data.decode())
    if k % 4 == 0:
        os.kill(os.getpid(), signal.SIGSEGV)
    if k % 4 == 1:
        time.sleep(3600)
    if k % 4 == 2:
        raise KeyError("an internal error")
    return Outcome("ok")


def run_trust_case(data: bytes) -> Outcome:
    """The ``trust`` target (tests/fuzz/trustlib.py)."""
    from trustlib import run_trust_case as run

    return run(data)


RUNNERS: dict[str, Callable[[bytes], Outcome]] = {
    "text": run_text_case, "onnx": run_onnx_case, "exe": run_exe_case, "vm": run_vm_case,
    "trust": run_trust_case, "selftest": run_selftest_case,
}


def run_case(target: str, data: bytes) -> Outcome:
    """Run one case of ``target`` and judge it (in this process)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            return guarded(lambda: RUNNERS[target](data))


def corpus_cases() -> list[tuple[str, Path]]:
    """``(target, file)`` of every case kept in the corpus."""
    out = []
    for target in TARGETS:
        d = CORPUS / target
        if d.is_dir():
            out += [(target, p) for p in sorted(d.iterdir()) if p.is_file()]
    return out
