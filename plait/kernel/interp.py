"""Run kernels on numpy arrays without a C compiler: the kernel IR's reference semantics.

``run_kernel(kernel, args)`` runs ``kernel`` on numpy arrays (inputs, then the output
arrays it writes: destination-passing style, as the C code does).  The kernel is
translated once into a Python function over numpy arrays, executed SIMT-style:

* a loop whose iterations are independent runs as one step over all its iterations
  at once (its variable becomes an array, one *lane* per iteration); nested
  independent loops multiply the lanes.  A loop is independent when every buffer its
  body writes (other than scratch buffers allocated inside it) is written and read at
  one index that contains the loop variable — the lanes then touch disjoint elements.
  Reductions (an accumulator written at an index without the loop variable) stay
  serial, with their enclosing loops' lanes still in step;
* ``if`` on a value that differs between lanes runs both branches, each under a mask
  of the lanes that take it; a loop whose bound differs between lanes runs to the
  largest bound under a mask;
* a scratch buffer allocated inside lanes gets one copy per lane.

Where the analysis is not sure the lanes write distinct elements, the store checks
it; if two lanes would write one element, the kernel is rerun with that loop serial.
Arithmetic follows the C code generator: the dtype of the IR, integer division
truncating toward zero, ``//`` and ``%`` flooring, casts truncating.  Reads and writes
are bounds-checked (an error names the kernel, the buffer and the index), scratch and
output buffers start as NaN for floats, so a kernel reading what it never wrote shows
it.  This is the kernel part of the numpy reference path (:mod:`plait.interp`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plait.errors import PlaitError

from .dispatch import TypeTable
from .ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Sub,
    Var,
    expr_children,
    is_float_dtype,
    stmt_children,
    stmt_exprs,
)


class KernelRunError(PlaitError, RuntimeError):
    """A kernel cannot run on the given arrays, or did something C would do silently
    wrong (an out-of-bounds access); the message names the kernel and the buffer."""


class _Conflict(Exception):
    """Two lanes of a loop run as one step would write one element."""

    def __init__(self, loop: int) -> None:
        self.loop = loop


# ------------------------------------------------------------------ analysis


def _key(e: PrimExpr) -> tuple:
    """A hashable key of an index expression: equal keys, equal values (variables and
    buffers by identity)."""
    out: dict[int, tuple] = {}
    stack: list[tuple[PrimExpr, bool]] = [(e, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in out:
            continue
        kids = expr_children(node)
        if not done and kids:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
            continue
        k: tuple = _KEY_HEAD[type(node)](node)
        out[id(node)] = (*k, *(out[id(c)] for c in kids)) if kids else k
    return out[id(e)]


def _class_name(node: PrimExpr) -> tuple:
    return (type(node).__name__,)


_KEY_HEAD: TypeTable[Callable[[Any], tuple]] = TypeTable("kernel index keys", PrimExpr, {
    Var: lambda node: ("var", id(node)),
    (IntImm, FloatImm): lambda node: ("imm", node.value, node.dtype),
    BufferLoad: lambda node: ("BufferLoad", id(node.buffer)),
    Call: lambda node: ("Call", node.name), Cast: lambda node: ("Cast", node.dtype),
    (BinaryOp, Not, Select): _class_name,
}, fallback=_class_name)
"""The head of each node's key (its operands' keys follow)."""


def _mentions(key: tuple, var_id: int) -> bool:
    stack = [key]
    while stack:
        k = stack.pop()
        if k[0] == "var":
            if k[1] == var_id:
                return True
            continue
        stack.extend(x for x in k if isinstance(x, tuple))
    return False


@dataclass
class _Access:
    stores: dict[int, set[tuple]] = field(default_factory=dict)
    loads: dict[int, set[tuple]] = field(default_factory=dict)
    allocated: set[int] = field(default_factory=set)


def _accesses(body: Stmt) -> _Access:
    """Stores, loads (index keys per buffer) and allocations inside ``body``."""
    acc = _Access()
    stack: list[Stmt] = [body]
    exprs: list[PrimExpr] = []
    while stack:
        s = stack.pop()
        if type(s) is BufferStore:
            acc.stores.setdefault(id(s.buffer), set()).add(tuple(_key(i) for i in s.indices))
        elif type(s) is Allocate:
            acc.allocated.add(id(s.buffer))
        exprs.extend(stmt_exprs(s))
        stack.extend(stmt_children(s))
    while exprs:
        e = exprs.pop()
        if isinstance(e, BufferLoad):
            acc.loads.setdefault(id(e.buffer), set()).add(tuple(_key(i) for i in e.indices))
        exprs.extend(expr_children(e))
    return acc


def _independent(loop: For) -> bool:
    """The iterations of ``loop`` touch disjoint elements of every buffer they write
    (see the module docstring)."""
    acc = _accesses(loop.body)
    vid = id(loop.var)
    for buf, keys in acc.stores.items():
        if buf in acc.allocated:
            continue
        if len(keys) != 1:
            return False
        (key,) = keys
        if not any(_mentions(k, vid) for k in key):
            return False
        if acc.loads.get(buf, {key}) != {key}:
            return False
    return True


def _varying(e: PrimExpr, varying: set[int], private: set[int]) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var) and id(x) in varying:
            return True
        if isinstance(x, BufferLoad) and id(x.buffer) in private:
            return True
        stack.extend(expr_children(x))
    return False


# ------------------------------------------------------------------ helpers of the generated code


def _cdiv(a: Any, b: Any) -> Any:
    """Integer division truncating toward zero (C)."""
    q = np.abs(a) // np.abs(b)
    neg = np.logical_xor(np.less(a, 0), np.less(b, 0))
    return np.where(neg, -q, q) if np.ndim(q) else (-q if neg else q)


def _fail(kernel: str, buf: str, size: int, idx: Any) -> KernelRunError:
    bad = np.asarray(idx)
    bad = bad[(bad < 0) | (bad >= size)]
    return KernelRunError(f"kernel {kernel!r} accesses buffer {buf!r} out of bounds: flat "
                          f"index {int(bad.flat[0])} of {size} elements")


def _load(data: np.ndarray, idx: Any, mask: Any, kernel: str, buf: str) -> Any:
    size = data.shape[0]
    if not isinstance(idx, np.ndarray) or idx.ndim == 0:
        i = int(idx)
        if not 0 <= i < size:
            raise _fail(kernel, buf, size, i)
        return data[i]
    if mask is not None:
        idx = np.where(mask, idx, 0)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise _fail(kernel, buf, size, idx)
    return data[idx]


def _store(data: np.ndarray, idx: Any, val: Any, mask: Any, lanes: tuple[int, ...],
           check: int, kernel: str, buf: str) -> None:
    size = data.shape[0]
    if mask is None and np.ndim(idx) == 0 and np.ndim(val) == 0:
        i = int(idx)
        if not 0 <= i < size:
            raise _fail(kernel, buf, size, i)
        data[i] = val
        return
    idx = np.broadcast_to(idx, lanes)
    val = np.broadcast_to(val, lanes)
    if mask is not None:
        m = np.broadcast_to(mask, lanes)
        idx, val = idx[m], val[m]
    else:
        idx, val = idx.reshape(-1), val.reshape(-1)
    if idx.size == 0:
        return
    if idx.min() < 0 or idx.max() >= size:
        raise _fail(kernel, buf, size, idx)
    if check >= 0 and idx.size > 1 and np.unique(idx).size != idx.size:
        raise _Conflict(check)
    data[idx] = val


def _lane_ids(lanes: tuple[int, ...]) -> np.ndarray:
    return np.arange(int(np.prod(lanes)), dtype=np.int64).reshape(lanes)


def _scratch(n: int, dtype: str) -> np.ndarray:
    if is_float_dtype(dtype):
        return np.full(n, np.nan, dtype=dtype)
    return np.zeros(n, dtype=dtype)


def _sigmoid(x: Any) -> Any:
    one = x.dtype.type(1) if hasattr(x, "dtype") else 1.0
    return one / (one + np.exp(-x))


def _erf(x: Any) -> Any:
    from plait.runtime.special import erf_erfc

    arr = np.asarray(x)
    out = erf_erfc(arr)[0].astype(arr.dtype)
    return out if isinstance(x, np.ndarray) else out[()]


def _checked_index(i: Any, n: Any, mask: Any, kernel: str) -> Any:
    """``checked_index`` (plait.kernel.intrin): negative counts from the end; an index
    out of range in an active lane is an error."""
    j = np.where(i < 0, i + n, i)
    bad = (j < 0) | (j >= n)
    hit = bad if mask is None else bad & mask
    if np.any(hit):
        shape = np.broadcast(i, hit, n).shape
        first = np.broadcast_to(i, shape)[np.broadcast_to(hit, shape)][0]
        size = np.broadcast_to(n, shape)[np.broadcast_to(hit, shape)][0]
        raise KernelRunError(f"kernel {kernel!r}: index {int(first)} is out of range for an "
                             f"axis of size {int(size)}")
    out = np.where(bad, 0, j)
    return out if out.ndim else out[()]


def _cast(x: Any, dtype: str) -> Any:
    if dtype == "bool":
        return x != 0
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    if dtype == "int64":
        return int(x)
    return np.dtype(dtype).type(x)


_INTRIN = {
    "exp": "np.exp", "exp2": "np.exp2", "expm1": "np.expm1", "log": "np.log",
    "log2": "np.log2", "log10": "np.log10", "log1p": "np.log1p", "sqrt": "np.sqrt",
    "sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "asin": "np.arcsin",
    "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh", "cosh": "np.cosh",
    "tanh": "np.tanh", "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh",
    "floor": "np.floor", "ceil": "np.ceil", "round": "np.round", "trunc": "np.trunc",
    "pow": "np.power", "atan2": "np.arctan2", "fmod": "np.fmod", "abs": "np.abs",
    "isnan": "np.isnan", "isinf": "np.isinf", "isfinite": "np.isfinite",
    "erf": "_erf", "sigmoid": "_sigmoid",
}
_BINOPS = {Add: "+", Sub: "-", Mul: "*", FloorDiv: "//", FloorMod: "%",
           EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
_CALLOPS = {Min: "np.minimum", Max: "np.maximum", And: "np.logical_and",
            Or: "np.logical_or"}
_GLOBALS = {"np": np, "_cdiv": _cdiv, "_load": _load, "_store": _store,
            "_lane_ids": _lane_ids, "_scratch": _scratch, "_sigmoid": _sigmoid,
            "_erf": _erf, "_cast": _cast, "_Conflict": _Conflict,
            "_checked_index": _checked_index}


# ------------------------------------------------------------------ translation


class _Translator:
    """Writes the Python function of one kernel (see the module docstring)."""

    def __init__(self, kernel: Kernel, name: str, serial: frozenset[int]) -> None:
        self.kernel = kernel
        self.name = name
        self.serial = serial  # ids of loops forced serial (after a conflict)
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.count = itertools.count()
        self.varying: set[int] = set()      # ids of variables that differ per lane
        self.private: set[int] = set()      # ids of buffers with one copy per lane
        self.buffers: dict[int, Buffer] = {}
        self.loops: list[For] = []          # loops run as lanes, by their check number
        self.open_lanes: list[For] = []     # the lane loops around the statement emitted
        self.allocated: dict[int, set[int]] = {}  # loop id -> buffers allocated inside
        self.consts: dict[str, Any] = {}    # constants the code refers to by name
        self.depth_max = 0

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.count)}"

    def name_of(self, node: Any, prefix: str) -> str:
        n = self.names.get(id(node))
        if n is None:
            n = self.names[id(node)] = f"{prefix}{next(self.count)}_{_ident(node.name_hint)}"
        return n

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    # -------------------------------------------------------------- entry
    def translate(self) -> tuple[str, list[For]]:
        k = self.kernel
        self.emit(0, "def kernel(args, lanes0):")
        self.emit(1, "shapes = args.shapes")
        for i, p in enumerate(k.params):
            self.buffers[id(p)] = p
            self.emit(1, f"{self.name_of(p, 'b')} = args[{i}]")
        for v in k.size_vars:
            for i, p in enumerate(k.params):
                axes = [a for a, d in enumerate(p.shape) if d is v]
                if axes:
                    self.emit(1, f"{self.name_of(v, 'v')} = int(shapes[{i}][{axes[0]}])")
                    break
        self.stmt(k.body, 1, depth=0, mask=None, lanes="lanes0")
        self.emit(1, "return None")
        return "\n".join(self.lines) + "\n", self.loops

    # -------------------------------------------------------------- buffers
    def strides(self, buf: Buffer) -> list[str]:
        out: list[str] = []
        acc = "1"
        for d in reversed(buf.shape):
            out.append(acc)
            dim = str(d) if isinstance(d, int) else self.names[id(d)]
            acc = dim if acc == "1" else f"{acc} * {dim}"
        return out[::-1]

    def size_text(self, buf: Buffer) -> str:
        parts = [str(d) if isinstance(d, int) else self.names[id(d)] for d in buf.shape]
        return " * ".join(parts) if parts else "1"

    def flat(self, buf: Buffer, indices: Sequence[PrimExpr], indent: int, mask: str | None) -> str:
        terms = []
        for idx, stride in zip(indices, self.strides(buf)):
            if isinstance(idx, IntImm) and idx.value == 0:
                continue
            t = self.expr(idx, indent, mask)
            terms.append(t if stride == "1" else f"{t} * ({stride})")
        text = " + ".join(terms) if terms else "0"
        if id(buf) in self.private:
            text = f"{self.name_of(buf, 'b')}_lane * ({self.size_text(buf)}) + {text}"
        tmp = self.fresh("f")
        self.emit(indent, f"{tmp} = {text}")
        return tmp

    # -------------------------------------------------------------- expressions
    def expr(self, e: PrimExpr, indent: int, mask: str | None) -> str:
        """Emit three-address code computing ``e``; return the name holding it."""
        leaf = _LEAF[type(e)]
        if leaf is not None:
            return leaf(self, e)
        # iterative post-order over the operands; Select and loads handled in place
        results: dict[int, str] = {}
        stack: list[tuple[PrimExpr, bool]] = [(e, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in results:
                continue
            leaf = _LEAF[type(node)]
            if leaf is not None:
                results[id(node)] = leaf(self, node)
                continue
            if type(node) is Select:
                results[id(node)] = self.select(node, indent, mask)
                continue
            kids = expr_children(node)
            if not done:
                stack.append((node, True))
                stack.extend((k, False) for k in kids)
                continue
            args = [results[id(k)] for k in kids]
            results[id(node)] = self.operation(node, args, indent, mask)
        return results[id(e)]

    def _var(self, e: Var) -> str:
        name = self.names.get(id(e))
        if name is None:
            raise KernelRunError(f"kernel {self.name!r}: variable {e.name_hint!r} is used "
                                 "where it is not defined")
        return name

    def _int(self, e: IntImm) -> str:
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if e.dtype == "int64":
            return str(e.value) if e.value >= 0 else f"({e.value})"
        return self.const(np.dtype(e.dtype).type(e.value))

    def _float(self, e: FloatImm) -> str:
        return self.const(np.dtype(e.dtype).type(e.value))

    def const(self, value: Any) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = value
        return name

    def operation(self, node: PrimExpr, args: list[str], indent: int, mask: str | None) -> str:
        tmp = self.fresh("t")
        if type(node) is BufferLoad:
            buf = node.buffer
            f = self.flat(buf, node.indices, indent, mask)
            self.emit(indent, f"{tmp} = _load({self.name_of(buf, 'b')}, {f}, {mask}, "
                              f"{self.name!r}, {buf.name_hint!r})")
            return tmp
        self.emit(indent, f"{tmp} = {_OPERATION[type(node)](self, node, args, mask)}")
        return tmp

    def _div(self, node: Div, args: list[str], mask: str | None) -> str:
        if is_float_dtype(node.dtype):
            return f"{args[0]} / {args[1]}"
        return f"_cdiv({args[0]}, {args[1]})"

    def _binop(self, node: BinaryOp, args: list[str], mask: str | None) -> str:
        return f"{args[0]} {_BINOPS[type(node)]} {args[1]}"

    def _callop(self, node: BinaryOp, args: list[str], mask: str | None) -> str:
        return f"{_CALLOPS[type(node)]}({args[0]}, {args[1]})"

    def _not(self, node: Not, args: list[str], mask: str | None) -> str:
        return f"np.logical_not({args[0]})"

    def _cast(self, node: Cast, args: list[str], mask: str | None) -> str:
        return f"_cast({args[0]}, {node.dtype!r})"

    def _call(self, node: Call, args: list[str], mask: str | None) -> str:
        if node.name == "checked_index":
            return f"_checked_index({args[0]}, {args[1]}, {mask}, {self.name!r})"
        fn = _INTRIN.get(node.name)
        if node.name == "rsqrt":
            fn = f"{self.const(np.dtype(node.dtype).type(1))} / np.sqrt"
        if fn is None:
            raise KernelRunError(f"kernel {self.name!r}: unknown intrinsic {node.name!r}")
        return f"{fn}({', '.join(args)})"

    def _cannot_run(self, node: Any, *rest: Any) -> str:
        raise KernelRunError(f"kernel {self.name!r}: cannot run a {type(node).__name__}")

    def select(self, node: Select, indent: int, mask: str | None) -> str:
        cond = self.expr(node.cond, indent, mask)
        tmp = self.fresh("t")
        if not _varying(node.cond, self.varying, self.private):
            self.emit(indent, f"if {cond}:")
            a = self.expr(node.true_value, indent + 1, mask)
            self.emit(indent + 1, f"{tmp} = {a}")
            self.emit(indent, "else:")
            b = self.expr(node.false_value, indent + 1, mask)
            self.emit(indent + 1, f"{tmp} = {b}")
            return tmp
        mt, mf = self.fresh("m"), self.fresh("m")
        both = f"({mask}) & " if mask is not None else ""
        self.emit(indent, f"{mt} = {both}{cond}")
        self.emit(indent, f"{mf} = {both}np.logical_not({cond})")
        a = self.expr(node.true_value, indent, mt)
        b = self.expr(node.false_value, indent, mf)
        self.emit(indent, f"{tmp} = np.where({cond}, {a}, {b})")
        return tmp

    # -------------------------------------------------------------- statements
    def stmt(self, s: Stmt, indent: int, depth: int, mask: str | None, lanes: str) -> None:
        _RUN_STMT[type(s)](self, s, indent, depth, mask, lanes)

    def _seq(self, s: Seq, indent: int, depth: int, mask: str | None, lanes: str) -> None:
        for x in s.stmts:
            self.stmt(x, indent, depth, mask, lanes)

    def _let(self, s: Let, indent: int, depth: int, mask: str | None, lanes: str) -> None:
        val = self.expr(s.value, indent, mask)
        if _varying(s.value, self.varying, self.private):
            self.varying.add(id(s.var))
        self.emit(indent, f"{self.name_of(s.var, 'v')} = {val}")
        self.stmt(s.body, indent, depth, mask, lanes)

    def _allocate(self, s: Allocate, indent: int, depth: int, mask: str | None,
                  lanes: str) -> None:
        buf = s.buffer
        self.buffers[id(buf)] = buf
        name = self.name_of(buf, "b")
        size = self.size_text(buf)
        if depth > 0:
            self.private.add(id(buf))
            self.emit(indent, f"{name}_lane = _lane_ids({lanes})")
            self.emit(indent, f"{name} = _scratch({name}_lane.size * ({size}), "
                              f"{buf.dtype!r})")
        else:
            self.emit(indent, f"{name} = _scratch({size}, {buf.dtype!r})")
        self.stmt(s.body, indent, depth, mask, lanes)

    def _evaluate(self, s: Evaluate, indent: int, depth: int, mask: str | None,
                  lanes: str) -> None:
        self.expr(s.value, indent, mask)

    def store(self, s: BufferStore, indent: int, depth: int, mask: str | None,
              lanes: str) -> None:
        buf = s.buffer
        val = self.expr(s.value, indent, mask)
        f = self.flat(buf, s.indices, indent, mask)
        check = -1
        if depth > 0:
            check = self._store_check(s)
        self.emit(indent, f"_store({self.name_of(buf, 'b')}, {f}, {val}, {mask}, {lanes}, "
                          f"{check}, {self.name!r}, {buf.name_hint!r})")

    def _store_check(self, s: BufferStore) -> int:
        """The loop to blame if lanes of this store may collide, or -1 when each lane
        loop's variable is a whole index of its own (lanes are then disjoint)."""
        bare = {id(i) for i in s.indices if isinstance(i, Var)}
        for lp in reversed(self.open_lanes):
            inside = self.allocated.get(id(lp))
            if inside is None:
                inside = self.allocated[id(lp)] = _accesses(lp.body).allocated
            if id(s.buffer) in inside:
                break  # the buffer has one copy per lane of this loop and those around it
            if id(lp.var) not in bare:
                return self.loops.index(lp)
        return -1

    def loop(self, s: For, indent: int, depth: int, mask: str | None, lanes: str) -> None:
        var = self.name_of(s.var, "v")
        ext = self.expr(s.extent, indent, mask)
        ext_varies = _varying(s.extent, self.varying, self.private)
        if (not ext_varies and id(s) not in self.serial and _independent(s)):
            self.varying.add(id(s.var))
            self.loops.append(s)
            self.open_lanes.append(s)
            self.depth_max = max(self.depth_max, depth + 1)
            new_lanes = self.fresh("lanes")
            self.emit(indent, f"if {ext} > 0:")
            self.emit(indent + 1, f"{new_lanes} = {lanes}[:{depth}] + ({ext},) + "
                                  f"{lanes}[{depth + 1}:]")
            self.emit(indent + 1, f"{var} = np.arange({ext}, dtype=np.int64).reshape("
                                  f"(1,) * {depth} + (-1,) + (1,) * (len({lanes}) - "
                                  f"{depth + 1}))")
            start = len(self.lines)
            self.stmt(s.body, indent + 1, depth + 1, mask, new_lanes)
            if len(self.lines) == start:
                self.emit(indent + 1, "pass")
            self.open_lanes.pop()
            return
        if not ext_varies:
            self.emit(indent, f"for {var} in range({ext}):")
            start = len(self.lines)
            self.stmt(s.body, indent + 1, depth, mask, lanes)
            if len(self.lines) == start:
                self.emit(indent + 1, "pass")
            return
        # a bound that differs between lanes: run to the largest, masked
        top = self.fresh("n")
        inner = self.fresh("m")
        active = f"np.broadcast_to({mask}, np.shape({ext}))" if mask is not None else "True"
        self.emit(indent, f"{top} = int(np.max(np.where({active}, {ext}, 0))) "
                          f"if np.size({ext}) else 0")
        self.emit(indent, f"for {var} in range({top}):")
        both = f"({mask}) & " if mask is not None else ""
        self.emit(indent + 1, f"{inner} = {both}({var} < {ext})")
        self.stmt(s.body, indent + 1, depth, inner, lanes)

    def branch(self, s: IfThenElse, indent: int, depth: int, mask: str | None,
               lanes: str) -> None:
        cond = self.expr(s.cond, indent, mask)
        if not _varying(s.cond, self.varying, self.private):
            self.emit(indent, f"if {cond}:")
            start = len(self.lines)
            self.stmt(s.then_body, indent + 1, depth, mask, lanes)
            if len(self.lines) == start:
                self.emit(indent + 1, "pass")
            if s.else_body is not None:
                self.emit(indent, "else:")
                start = len(self.lines)
                self.stmt(s.else_body, indent + 1, depth, mask, lanes)
                if len(self.lines) == start:
                    self.emit(indent + 1, "pass")
            return
        both = f"({mask}) & " if mask is not None else ""
        for body, text in ((s.then_body, cond), (s.else_body, f"np.logical_not({cond})")):
            if body is None:
                continue
            m = self.fresh("m")
            self.emit(indent, f"{m} = {both}{text}")
            self.emit(indent, f"if np.any({m}):")
            start = len(self.lines)
            self.stmt(body, indent + 1, depth, m, lanes)
            if len(self.lines) == start:
                self.emit(indent + 1, "pass")


_LEAF: TypeTable[Callable[..., str] | None] = TypeTable(
    "kernel interpreter leaves", PrimExpr, {
        Var: _Translator._var, IntImm: _Translator._int, FloatImm: _Translator._float,
    }, fallback=None, register=False)
"""Leaves (a variable of any Var subclass included): a name or a constant, no code;
None for the other nodes."""

_OPERATION: TypeTable[Callable[..., str]] = TypeTable("kernel interpreter", PrimExpr, {
    Div: _Translator._div, tuple(_BINOPS): _Translator._binop,
    tuple(_CALLOPS): _Translator._callop, Not: _Translator._not, Cast: _Translator._cast,
    Call: _Translator._call,
    # a leaf has no code, a select branches and a load reads (Translator.expr/operation)
    (Var, IntImm, FloatImm, Select, BufferLoad): _Translator._cannot_run,
}, fallback=_Translator._cannot_run)
"""The Python text of each operation on its operands' names."""

_RUN_STMT: TypeTable[Callable[..., None]] = TypeTable("kernel interpreter", Stmt, {
    Seq: _Translator._seq, BufferStore: _Translator.store, For: _Translator.loop,
    Let: _Translator._let, IfThenElse: _Translator.branch, Allocate: _Translator._allocate,
    Evaluate: _Translator._evaluate,
}, fallback=_Translator._cannot_run)
"""The Python code of each statement."""


def _ident(hint: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in hint)
    return out[:24] or "x"


# ------------------------------------------------------------------ running


@dataclass
class _Compiled:
    fn: Any
    loops: list[For]
    depth: int
    source: str


_CACHE: dict[tuple[int, frozenset[int]], tuple[Kernel, _Compiled]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 256


def kernel_source(kernel: Kernel, name: str = "kernel") -> str:
    """The Python source :func:`run_kernel` runs for ``kernel`` (for debugging)."""
    return _compile(kernel, name, frozenset()).source


def _compile(kernel: Kernel, name: str, serial: frozenset[int]) -> _Compiled:
    key = (id(kernel), serial)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is kernel:
            return hit[1]
    tr = _Translator(kernel, name, serial)
    source, loops = tr.translate()
    namespace = {**_GLOBALS, **tr.consts}
    exec(compile(source, f"<kernel {name}>", "exec"), namespace)  # our own generated code
    compiled = _Compiled(namespace["kernel"], loops, tr.depth_max, source)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (kernel, compiled)
    return compiled


def _check_args(kernel: Kernel, args: Sequence[Any], name: str) -> list[np.ndarray]:
    if len(args) != len(kernel.params):
        raise KernelRunError(f"kernel {name!r} takes {len(kernel.params)} buffers "
                             f"({len(kernel.inputs)} inputs, {kernel.num_outputs} outputs), "
                             f"got {len(args)} arrays")
    sizes: dict[int, int] = {}
    out = []
    for p, a in zip(kernel.params, args):
        if not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.ndim != len(p.shape):
            raise KernelRunError(f"kernel {name!r}: buffer {p.name_hint!r} has rank "
                                 f"{len(p.shape)}, the array has shape {a.shape}")
        for axis, (d, n) in enumerate(zip(p.shape, a.shape)):
            want = d if isinstance(d, int) else sizes.setdefault(id(d), n)
            if want != n:
                what = d if isinstance(d, int) else f"{d.name_hint}={want}"
                raise KernelRunError(f"kernel {name!r}: buffer {p.name_hint!r} axis {axis} "
                                     f"is {what}, the array has {n} (shape {a.shape})")
        if a.dtype != np.dtype(p.dtype):
            raise KernelRunError(f"kernel {name!r}: buffer {p.name_hint!r} is {p.dtype}, "
                                 f"the array is {a.dtype}")
        out.append(a)
    return out


def run_kernel(kernel: Kernel, args: Sequence[np.ndarray], name: str = "kernel") -> None:
    """Run ``kernel`` on ``args`` (its inputs, then its outputs, which it writes in place);
    see the module docstring."""
    arrays = _check_args(kernel, args, name)
    n_in = len(arrays) - kernel.num_outputs
    flat: list[np.ndarray] = []
    copies: list[tuple[np.ndarray, np.ndarray]] = []
    for i, a in enumerate(arrays):
        if a.flags.c_contiguous and (i < n_in or a.flags.writeable):
            flat.append(a.reshape(-1))
        else:
            c = np.ascontiguousarray(a).reshape(-1).copy()
            flat.append(c)
            if i >= n_in:
                copies.append((a, c))
    saved = [f.copy() for f in flat[n_in:]]
    serial: frozenset[int] = frozenset()
    shapes = [a.shape for a in arrays]
    while True:
        compiled = _compile(kernel, name, serial)
        lanes0 = (1,) * max(compiled.depth, 1)
        try:
            with np.errstate(all="ignore"):
                compiled.fn(_Args(flat, shapes), lanes0)
            break
        except _Conflict as c:  # two lanes wrote one element: that loop runs serially
            serial = serial | {id(compiled.loops[c.loop])}
            for f, s in zip(flat[n_in:], saved):
                f[...] = s
        except KernelRunError:
            raise
        except Exception as e:
            raise KernelRunError(f"kernel {name!r} failed in the reference interpreter: "
                                 f"{type(e).__name__}: {e}") from e
    for a, c in copies:
        a[...] = c.reshape(a.shape)


class _Args(list):
    """The flat arrays, with the original shapes for the size variables."""

    def __init__(self, flat: list[np.ndarray], shapes: list[tuple[int, ...]]) -> None:
        super().__init__(flat)
        self.shapes = shapes


__all__ = ["KernelRunError", "kernel_source", "run_kernel"]
