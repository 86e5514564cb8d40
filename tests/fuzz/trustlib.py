"""The ``trust`` fuzz target: executables that carry code or name files of the machine
that runs them, and a judge that watches for code running or files being read without
the caller's consent.

A case is an executable (``.plx`` bytes) made from a small ``c`` executable whose
kept graph (``graph/module.plait.py``) or external modules were replaced by one of the
attacks of issue 27, with the digests recomputed and the signature dropped (what
anyone can make), or left signed-then-edited, and sometimes corrupted further by the
``exe`` mutations:

* ``c_source`` — the graph carries a user C source (module attribute ``c_sources``)
  whose constructor, and the function ``main`` calls, append to the file named by
  ``$PLAIT_FUZZ_MARKER``; the function fills its output with :data:`CODE_VALUE`;
* ``kernel`` — the graph carries a hand-written kernel filling ``main``'s output with
  :data:`CODE_VALUE`;
* ``forged_trust`` — the ``c_source`` graph with a ``trust`` module attribute claiming
  consent;
* ``ort_external_data`` — an external module of format ``onnxruntime`` whose ONNX model
  keeps a tensor in another file: :data:`SECRET_FILE` in the working directory (several
  spellings of the path), or onnxruntime's in-memory address form; signed by this
  machine or not (the model must be refused either way);
* ``native_module`` — an external module of format ``native`` whose library's
  constructor appends to the marker file, unsigned.

:func:`run_trust_case` runs a case in a fresh working directory holding
:data:`SECRET_FILE` (the bytes of :data:`SECRET`), with ``$PLAIT_FUZZ_MARKER`` pointing
into it, on every path that turns a file into code: the VM on the loaded file, rebuilds
on numpy and on ``c``, the interpreter on ``plait.graph_module(exe)`` and the ONNX
importer on the models of its external modules — first under the default policy, then
with ``allow_native=True`` (the file's own libraries only when they are as this process
built them: :func:`intact`).  Its outcome is ``breach`` when,
without consent, the marker file appears or an output holds :data:`CODE_VALUE` (foreign
code ran), when an output holds :data:`SECRET` on any path (a file was read: the
caller's consent covers code, never the machine's files), or when an executable rebuilt
from an unsigned file saves signed by this machine (laundering); otherwise the outcome
of the paths' errors, judged as the other targets' are (``ok``, ``clean``, ``raw``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

MARKER_ENV = "PLAIT_FUZZ_MARKER"
"""The environment variable naming the file the injected native code appends to."""
SECRET_FILE = "plait-fuzz-secret.bin"
"""The file (in the case's working directory) the injected ONNX models name."""
SECRET = np.array([1234.5, -8765.25, 0.001953125, 42.0], np.float32)
"""The bytes of :data:`SECRET_FILE`: an output holding them read the file."""
CODE_VALUE = np.float32(4321.0)
"""What the injected code writes to ``main``'s output (its inputs are zeros)."""
INJECTIONS = ("c_source", "kernel", "forged_trust", "ort_external_data", "native_module")
LOCATIONS = (SECRET_FILE, f"./{SECRET_FILE}", f"sub/../{SECRET_FILE}", "*/_ORT_MEM_ADDR_/*")
"""How the injected ONNX models spell the external file (``sub`` exists; the last is
onnxruntime's "data at this memory address")."""

EVIL_C = r"""
#include <stdio.h>
#include <stdlib.h>
static void plait_fuzz_mark(const char* how) {
    const char* path = getenv("PLAIT_FUZZ_MARKER");
    if (path) { FILE* f = fopen(path, "a"); if (f) { fputs(how, f); fclose(f); } }
}
__attribute__((constructor)) static void plait_fuzz_ctor(void) { plait_fuzz_mark("constructor\n"); }
void plait_fuzz_fill(const float* x, float* y) {
    plait_fuzz_mark("called\n");
    for (int i = 0; i < 4; i++) y[i] = 4321.0f;
}
"""
"""A user C source: its constructor and its function write the marker."""
EVIL_LIBRARY_C = EVIL_C + r"""
const char* plait_manifest(void) { return "{\"abi\": 1, \"functions\": []}"; }
"""
"""A library of plait's native ABI (an empty manifest) with the same constructor."""

PLAIN = '''
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        y = relu(x)
        return y
'''
"""The carrier: a model built for ``c`` (so the file keeps its graph)."""
CALLS_C = '''
@module
class M:
    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        y = call_extern(extern("fuzz_fill"), (x,), out=Tensor((4,), "float32"))
        return y
'''
KERNEL = '''
@module
class M:
    @kernel
    def fill(a: Buffer((4,), "float32"), out: Buffer((4,), "float32", output=True)):
        for i in range(4):
            out[i] = 4321.0

    @function
    def main(x: Tensor((4,), "float32")) -> Tensor((4,), "float32"):
        y = call_kernel(cls.fill, (x,), out=Tensor((4,), "float32"))
        return y
'''
GRAPH_MEMBER = "graph/module.plait.py"
ELF_MAGIC = b"\x7fELF"


# ------------------------------------------------------------------------------ bases


@cache
def carrier() -> bytes:
    """The ``c`` executable the graph attacks edit (signed by this machine)."""
    import fuzzlib

    import plait

    data = plait.build(plait.parse(PLAIN), "c").to_bytes()
    for member in fuzzlib._members(data).values():
        _remember(member)
    return data


_KNOWN_LIBRARIES: set[str] = set()
"""SHA-256 of the libraries this process built for the cases (see :func:`intact`)."""


def _remember(member: bytes) -> None:
    if member[:4] == ELF_MAGIC:
        _KNOWN_LIBRARIES.add(hashlib.sha256(member).hexdigest())


def intact(data: bytes) -> bool:
    """Whether every library in the case (a member that is an ELF file) is one this
    process built for it.  Consent covers a file's native code, and native code given
    consent may do anything, crashing the process included: a library whose bytes a
    mutation changed is mapped only without consent (where it must be refused)."""
    import fuzzlib

    try:
        members = fuzzlib._members(data).values()
    except Exception:  # noqa: BLE001 - not a zip: nothing maps it
        return True
    return all(hashlib.sha256(m).hexdigest() in _KNOWN_LIBRARIES for m in members
               if m[:4] == ELF_MAGIC)


def _nonce_text(nonce: int) -> str:
    """C that makes a library of other bytes (a comment would compile to the same)."""
    return f'const char plait_fuzz_case_{nonce}[] = "{nonce}";\n' if nonce else ""


@cache
def evil_library(nonce: int = 0) -> bytes:
    """:data:`EVIL_LIBRARY_C` compiled (a library of plait's native ABI); a ``nonce``
    makes another library (one this process has not mapped, so its constructor runs)."""
    from plait.codegen.c import compile_shared

    code = EVIL_LIBRARY_C + _nonce_text(nonce)
    data = compile_shared({"plait_fuzz_evil.c": code}).read_bytes()
    _remember(data)
    return data


def trust_bases() -> None:
    """Build what the cases are made of (before the first case is timed)."""
    carrier()
    evil_library()


def _c_source_graph(calls: bool, forged_trust: bool, nonce: int) -> str:
    import plait
    from plait.codegen.c import CFunction, CSource
    from plait.target.c import add_c_source

    mod = plait.parse(CALLS_C if calls else PLAIN)
    if forged_trust:
        mod = mod.with_attrs(trust={"source": "built in this process", "allow_native": True})
    fn = CFunction("fuzz_fill", (((4,), "float32"),) * 2, 1, "plait_fuzz_fill")
    code = EVIL_C + _nonce_text(nonce)
    return add_c_source(mod, CSource(code, (fn,), "plait_fuzz.c")).script()


POSITIONS = ("initializer", "constant", "if_constant", "if_initializer")
"""Where the injected ONNX models keep the external tensor: onnxruntime's graph
optimizations refuse external data in the main graph of a model given as bytes, but
read it inside an ``If`` branch, with every optimization on."""


def _external_data_model(location: str, position: str, with_extent: bool) -> bytes:
    """``y = x + w`` (``x`` zeros) where ``w``'s four floats are kept in ``location``,
    as ``position`` says (:data:`POSITIONS`)."""
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, (4,), np.zeros(4, np.float32))
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if with_extent:
        entries += [("offset", "0"), ("length", str(SECRET.nbytes))]
    for k, v in entries:
        e = w.external_data.add()
        e.key, e.value = k, v
    vec = (4,)
    nodes, inits = [helper.make_node("Add", ["x", "w"], ["y"])], []
    if position == "initializer":
        inits = [w]
    elif position == "constant":
        nodes.insert(0, helper.make_node("Constant", [], ["w"], value=w))
    else:  # w made inside a branch of an If whose condition (always true) needs x
        branch = helper.make_graph(
            [helper.make_node("Constant", [], ["c"], value=w) if position == "if_constant"
             else helper.make_node("Identity", ["w"], ["c"])], "branch", [],
            [helper.make_tensor_value_info("c", 1, vec)],
            [] if position == "if_constant" else [w])
        nodes[:0] = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                     helper.make_node("Less", ["s", "s"], ["never"]),
                     helper.make_node("Not", ["never"], ["always"]),
                     helper.make_node("If", ["always"], ["w"], then_branch=branch,
                                      else_branch=branch)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, vec)],
                          [helper.make_tensor_value_info("y", 1, vec)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _external_executable(fmt: str, blobs: dict[str, bytes], meta: dict[str, Any]) -> Any:
    """An executable whose ``main(x: (4,) float32)`` calls external function ``f``."""
    from plait.runtime import Executable, ExternalFunction, ExternalModule, TensorSig
    from plait.runtime.executable import AllocTensor, Call, ParamSig, Reg, Ret, VMFunction

    sig = ExternalFunction("f", (TensorSig((4,), "float32"),), (TensorSig((4,), "float32"),))
    ext = ExternalModule("fuzz", fmt, (sig,), blobs, meta)
    main = VMFunction("main", [ParamSig("x", "tensor", (4,), "float32")], 2, [
        AllocTensor(1, [4], "float32"), Call("f", [Reg(0), Reg(1)], None), Ret(1)])
    return Executable({"main": main}, [], {}, {}, external=[ext])


def _forged(data: bytes, members: dict[str, bytes] | None = None) -> bytes:
    """``data`` with ``members`` replaced, the digests recomputed, the signature dropped."""
    import fuzzlib

    parts = fuzzlib._members(data)
    parts.update(members or {})
    fuzzlib._forge(parts)
    return fuzzlib._zip(list(parts.items()))


def attack_file(kind: str, *, calls: bool = True, nonce: int = 0,
                location: str = SECRET_FILE, position: str = "if_constant",
                extent: bool = True, signed: bool = False) -> bytes:
    """The attack file ``kind`` (:data:`INJECTIONS`).  ``nonce``: in the C text (of the
    graph's source or the native module), a library this process has not mapped yet, so
    its constructor runs again.  Graph attacks: ``calls`` (``main`` calls the carried C
    function), ``signed`` (edited after signing,
    the signature kept; else forged).  ``ort_external_data``: ``location``,
    ``position`` (:data:`POSITIONS`), ``extent`` (offset and length given), ``signed``
    (as built here, signed by this machine; else forged)."""
    import fuzzlib

    if kind in ("c_source", "kernel", "forged_trust"):
        graph = KERNEL if kind == "kernel" else _c_source_graph(calls, kind == "forged_trust",
                                                                nonce)
        if not signed:
            return _forged(carrier(), {GRAPH_MEMBER: graph.encode()})
        parts = fuzzlib._members(carrier())
        parts[GRAPH_MEMBER] = graph.encode()
        return fuzzlib._zip(list(parts.items()))
    if kind == "ort_external_data":
        model = _external_data_model(location, position, extent)
        data = _external_executable("onnxruntime", {"f.onnx": model}, {"graphs": {
            "f": {"model": "f.onnx", "inputs": ["x"], "outputs": ["y"]}}}).to_bytes()
        return data if signed else _forged(data)
    if kind == "native_module":
        return _forged(_external_executable("native", {"lib": evil_library(nonce)},
                                            {}).to_bytes())
    raise ValueError(f"no attack {kind!r}; choose from {', '.join(INJECTIONS)}")


def make_trust_case(ch: Any) -> bytes:
    """One attack file (see the module docstring), drawn from ``ch``; sometimes
    corrupted further by the ``exe`` mutations."""
    import fuzzlib

    kind = ch.choice(INJECTIONS)
    calls = bool(ch.int(0, 1))
    fresh = not calls or kind == "native_module"  # only a constructor would show it ran
    data = attack_file(kind, calls=calls, nonce=ch.int(1, 2**31) if fresh else 0,
                       location=ch.choice(LOCATIONS), position=ch.choice(POSITIONS),
                       extent=bool(ch.int(0, 1)), signed=ch.int(0, 7) == 0)
    if ch.int(0, 4) == 0:
        data = fuzzlib.mutate_exe(data, ch)
    return data


# ---------------------------------------------------------------------------- running


@contextmanager
def sandbox() -> Iterator[Path]:
    """A fresh working directory holding :data:`SECRET_FILE` (and a folder ``sub``),
    with ``$PLAIT_FUZZ_MARKER`` naming a file in it; yields the marker's path."""
    old_cwd, old_marker = os.getcwd(), os.environ.get(MARKER_ENV)
    with tempfile.TemporaryDirectory(prefix="plait-fuzz-trust-") as d:
        root = Path(d)
        (root / SECRET_FILE).write_bytes(SECRET.tobytes())
        (root / "sub").mkdir()
        marker = root / "marker"
        os.environ[MARKER_ENV] = str(marker)
        os.chdir(root)
        try:
            yield marker
        finally:
            os.chdir(old_cwd)
            if old_marker is None:
                os.environ.pop(MARKER_ENV, None)
            else:
                os.environ[MARKER_ENV] = old_marker


def _zeros(params: Any) -> list[np.ndarray]:
    """Zeros for the VM function parameters ``params`` (symbolic sizes 4)."""
    return [np.zeros(tuple(d if isinstance(d, int) else 4 for d in (p.shape or ())),
                     p.dtype or "float32") for p in params]


def _graph_zeros(mod: Any) -> list[np.ndarray]:
    """Zeros for the parameters of graph function ``main`` of ``mod`` (none when there
    is no such function: the interpreter says so)."""
    out = []
    for p in getattr(mod.functions.get("main"), "params", ()):
        ty = p.ty
        out.append(np.zeros(tuple(d if isinstance(d, int) else 4 for d in ty.shape),
                            ty.dtype))
    return out


def _arrays(value: Any) -> list[np.ndarray]:
    if isinstance(value, tuple | list):
        return [a for v in value for a in _arrays(v)]
    return [np.asarray(value)] if isinstance(value, np.ndarray) else []


def _paths(data: bytes, consent: bool, seen: list[np.ndarray]) -> list[tuple[str, Callable]]:
    """``(name, step)`` of every path from the file to code: each step runs ``main`` on
    zeros and adds its outputs to ``seen``; a rebuild also checks it is not laundered."""
    import plait
    from plait.runtime import Executable, VirtualMachine

    def load() -> Any:
        return Executable.from_bytes(data, allow_native=consent)

    def vm() -> None:
        exe = load()
        seen.extend(_arrays(VirtualMachine(exe)["main"](*_zeros(exe.functions["main"].params))))

    def rebuild(target: str) -> Callable[[], str | None]:
        def step() -> str | None:
            exe = load()
            new = plait.rebuild(exe, target, allow_native=consent)
            seen.extend(_arrays(VirtualMachine(new)["main"](
                *_zeros(new.functions["main"].params))))
            again = Executable.from_bytes(new.to_bytes())
            if exe.trust.signer is None and again.trust.signer is not None:
                return (f"an executable rebuilt for {target} from an unsigned file saves "
                        f"signed by {again.trust.signer}")
            return None
        return step

    def interpreter() -> None:
        mod = plait.graph_module(load(), allow_native=consent)
        seen.extend(_arrays(plait.interp.run(mod, *_graph_zeros(mod))))

    def onnx_import() -> None:  # the models an executable carries, given to the importer
        from plait.frontend import from_onnx

        for m in load().external:
            for blob in m.blobs.values() if m.format == "onnxruntime" else ():
                exe = plait.build(from_onnx(blob), "numpy")
                seen.extend(_arrays(VirtualMachine(exe)["main"](
                    *_zeros(exe.functions["main"].params))))

    return [("load and run", vm), ("rebuild numpy", rebuild("numpy")),
            ("rebuild c", rebuild("c")), ("interpreter", interpreter),
            ("onnx import", onnx_import)]


def _breach(marker: Path, seen: list[np.ndarray], consent: bool) -> str | None:
    """What went wrong that no error shows, or None."""
    for a in seen:
        flat = a.reshape(-1)
        if a.dtype.kind == "f" and np.isin(SECRET, flat).all():
            return f"an output holds the bytes of {SECRET_FILE}: a file was read"
        if not consent and a.dtype.kind == "f" and (flat == CODE_VALUE).any():
            return "an output holds the value the carried code writes: foreign code ran"
    if not consent and marker.exists():
        what = marker.read_text().split()
        return f"the carried native code ran ({', '.join(sorted(set(what)))})"
    return None


def run_trust_case(data: bytes) -> Any:
    """Run one ``trust`` case on every path, without and then with consent; its
    outcome (see the module docstring)."""
    import fuzzlib

    refused: list[str] = []
    with sandbox() as marker:
        for consent in (False, True):
            seen: list[np.ndarray] = []
            policy = "allow_native" if consent else "default policy"
            for name, step in _paths(data, consent, seen):
                if consent and name == "load and run" and not intact(data):
                    continue  # its own libraries, changed by a mutation: see intact()
                laundered: list[str] = []

                def one(step: Callable = step, laundered: list[str] = laundered) -> Any:
                    why = step()
                    if why:
                        laundered.append(why)
                    return fuzzlib.Outcome("ok")

                outcome = fuzzlib.guarded(one)
                breach = laundered[0] if laundered else _breach(marker, seen, consent)
                if breach:
                    return fuzzlib.Outcome("breach", f"{name} ({policy}): {breach}")
                if outcome.kind not in ("ok", "clean"):
                    return fuzzlib.Outcome(outcome.kind,
                                           f"{name} ({policy}): {outcome.detail}")
                if outcome.kind == "clean":
                    refused.append(f"{name} ({policy}): {outcome.detail}")
    # clean: some path refused the file (an attack file always meets a refusal)
    return fuzzlib.Outcome("clean", refused[0]) if refused else fuzzlib.Outcome("ok")
