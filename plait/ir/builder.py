"""The block builder: builds functions binding by binding, normalizes expressions to
A-normal form and fills in every type through the operator registry.

    bb = BlockBuilder()
    x = Var("x", TensorType((1, 256), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(make_call("relu", make_call("add", x, x)))   # add is bound first
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()

Everything is iterative: an expression nested 100,000 calls deep normalizes without
recursion.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from plait.errors import PlaitError

from .attrs import Attrs
from .expr import (
    BaseFunc,
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Span,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from .module import IRModule
from .types import (
    FuncType,
    ObjectType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
)

ATOM_TYPES = (Var, Constant, GlobalVar, Op, ExternFunc, ShapeExpr, PrimValue, StringImm)
"""Expressions that may appear as call arguments in A-normal form (plus tuples of them)."""

_SIMPLE_LEAVES = frozenset({Var, DataflowVar, Constant, ShapeExpr, PrimValue, StringImm})


class IRTypeError(PlaitError, TypeError):
    """A type error found while building or normalizing IR.  The message names the
    function, the binding and the source position when they are known."""

    def __init__(
        self,
        message: str,
        *,
        function: str | None = None,
        binding: str | None = None,
        span: Span | None = None,
    ) -> None:
        self.detail = message
        self.function = function
        self.binding = binding
        self.span = span
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.function:
            where.append(f"function {self.function!r}")
        if self.binding:
            where.append(f"binding {self.binding!r}")
        if self.span is not None and (self.span.line or self.span.note):
            where.append(str(self.span))
        prefix = "in " + ", ".join(where) + ": " if where else ""
        return prefix + self.detail


def is_atom(expr: Expr) -> bool:
    """True for leaves and (nested) tuples of leaves."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Tuple):
            stack.extend(e.fields)
        elif not isinstance(e, ATOM_TYPES):
            return False
    return True


def types_compatible(declared: Type | None, inferred: Type | None) -> bool:
    """True when a value of type ``inferred`` may be bound to ``declared``: unknown
    parts on either side are compatible, known parts must agree."""
    if declared is None or inferred is None or declared is inferred:
        return True
    if isinstance(declared, ObjectType):
        return True
    if type(declared) is not type(inferred):
        return False
    if declared == inferred:  # equal types fit (unknown parts equal unknown parts)
        return True
    if isinstance(declared, TensorType):
        assert isinstance(inferred, TensorType)
        if declared.dtype and inferred.dtype and declared.dtype != inferred.dtype:
            return False
        if declared.shape is None or inferred.shape is None:
            return True
        if len(declared.shape) != len(inferred.shape):
            return False
        return all(
            not (isinstance(a, int) and isinstance(b, int)) or a == b
            for a, b in zip(declared.shape, inferred.shape)
        )
    if isinstance(declared, TupleType):
        assert isinstance(inferred, TupleType)
        return len(declared.fields) == len(inferred.fields) and all(
            types_compatible(a, b) for a, b in zip(declared.fields, inferred.fields)
        )
    if isinstance(declared, ShapeType):
        assert isinstance(inferred, ShapeType)
        return declared.ndim is None or inferred.ndim is None or declared.ndim == inferred.ndim
    if isinstance(declared, FuncType):
        return True
    return declared == inferred


def join_types(a: Type | None, b: Type | None) -> Type | None:
    """The most precise type that both ``a`` and ``b`` fit (for the branches of If)."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        dtype = a.dtype if a.dtype == b.dtype else None
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return TensorType(None, dtype)
        if all(x == y for x, y in zip(a.shape, b.shape)):
            return TensorType(a.shape, dtype)
        return TensorType(None, dtype)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        fields = [join_types(x, y) for x, y in zip(a.fields, b.fields)]
        if all(f is not None for f in fields):
            return TupleType(tuple(fields))  # type: ignore[arg-type]
    return ObjectType()


def infer_type(expr: Expr, global_types: dict[str, Type] | None = None) -> tuple[Type | None, Expr]:
    """Infer the type of ``expr`` from the types of its children (which must already
    be set).  Returns the type and the expression, possibly rebuilt with normalized
    attributes (defaults filled in).  Raises :class:`IRTypeError` (without location;
    the caller adds it)."""
    if isinstance(expr, Call):
        op = expr.op
        arg_types = tuple(a.ty for a in expr.args)
        if isinstance(op, Op):
            if not op.is_registered:
                try:
                    op.definition  # noqa: B018 - raises the helpful KeyError
                except KeyError as e:
                    raise IRTypeError(str(e.args[0])) from None
            opdef = op.definition
            # A GlobalVar naming a kernel has no type; ops that take one (call_kernel,
            # builtin.call_dps) use it by reference only, so it does not block inference.
            if any(
                t is None and not isinstance(a, GlobalVar) for t, a in zip(arg_types, expr.args)
            ):
                return None, expr
            from_op = _op_error_types()
            try:
                ty, attrs = opdef.infer_call(expr, arg_types)
            except from_op as e:
                raise IRTypeError(str(e)) from None
            if attrs != expr.attrs:
                expr = replace(expr, attrs=attrs)
            return ty, expr
        fty = op.ty
        if isinstance(op, GlobalVar) and fty is None and global_types:
            fty = global_types.get(op.name_hint)
        if isinstance(fty, FuncType):
            if len(fty.params) != len(expr.args):
                name = getattr(op, "name_hint", "function")
                raise IRTypeError(
                    f"call of {name!r} passes {len(expr.args)} arguments, "
                    f"it takes {len(fty.params)}"
                )
            for i, (p, a) in enumerate(zip(fty.params, arg_types)):
                if not types_compatible(p, a):
                    name = getattr(op, "name_hint", "function")
                    raise IRTypeError(
                        f"argument {i} of call to {name!r} has type {a}, expected {p}"
                    )
            return fty.ret, expr
        if expr.ty is not None:
            return expr.ty, expr
        return ObjectType(), expr
    if isinstance(expr, Tuple):
        fts = tuple(f.ty for f in expr.fields)
        if any(t is None for t in fts):
            return None, expr
        return TupleType(fts), expr  # type: ignore[arg-type]
    if isinstance(expr, TupleGetItem):
        t = expr.tuple_value.ty
        if t is None:
            return None, expr
        if not isinstance(t, TupleType):
            raise IRTypeError(f"tuple_get_item on a value of type {t}, which is not a tuple")
        if not -len(t.fields) <= expr.index < len(t.fields):
            raise IRTypeError(
                f"tuple index {expr.index} out of range for a tuple of {len(t.fields)} fields"
            )
        return t.fields[expr.index], expr
    if isinstance(expr, If):
        ct = expr.cond.ty
        if isinstance(ct, TensorType) and ct.shape not in (None, ()):
            raise IRTypeError(f"the condition of if must be a scalar, got {ct}")
        return join_types(expr.then_branch.ty, expr.else_branch.ty), expr
    if isinstance(expr, SeqExpr):
        return expr.body.ty, expr
    if isinstance(expr, Function):
        return expr.ty, expr
    if isinstance(expr, GlobalVar) and expr.ty is None and global_types:
        return global_types.get(expr.name_hint), expr
    return expr.ty, expr


def _op_error_types() -> tuple[type[BaseException], ...]:
    # The op layer defines its error classes; they derive from TypeError, and a
    # registered inference function may also raise ValueError/KeyError on bad input.
    return (TypeError, ValueError, KeyError, IndexError)


def _with_type(expr: Expr, ty: Type | None) -> Expr:
    if ty is None or expr.ty == ty:
        return expr
    return replace(expr, ty=ty)


@dataclass
class _Frame:
    """A block under construction."""

    dataflow: bool
    bindings: list[Binding] = field(default_factory=list)


@dataclass
class _FuncFrame:
    name: str
    params: list[Var]
    attrs: dict[str, Any]
    pure: bool
    ret_ty: Type | None
    span: Span | None
    blocks: list[BindingBlock] = field(default_factory=list)
    result: Expr | None = None


class BlockBuilder:
    """Builds an IRModule function by function and binding by binding."""

    def __init__(self, mod: IRModule | None = None) -> None:
        self._functions: dict[str, BaseFunc] = dict(mod.functions) if mod is not None else {}
        self._attrs: Attrs = mod.attrs if mod is not None else Attrs()
        self.global_types: dict[str, Type] = {
            n: f.ty for n, f in self._functions.items() if f.ty is not None
        }
        self._funcs: list[_FuncFrame] = []
        self._frames: list[_Frame] = []
        self.current_binding: str | None = None
        self.current_span: Span | None = None
        self.var_remap: dict[Var, Var] = {}
        """Variables replaced while normalizing (old -> new); uses are substituted."""
        # (op, id(attributes), then each argument's class and id(type)) -> (the type
        # inferred, the attributes, the types): a call of an op on variables, see
        # _simple_call (an entry keeps the objects of its ids alive)
        self._inferred: dict[tuple, tuple] = {}

    # ---------------------------------------------------------------- module
    def get(self) -> IRModule:
        """The module built so far."""
        if self._funcs:
            raise RuntimeError(f"function {self._funcs[-1].name!r} is still being built")
        return IRModule(self._functions, self._attrs)

    def set_module_attrs(self, **attrs: Any) -> None:
        self._attrs = self._attrs.set(**attrs)

    def declare_function(self, name: str, ty: FuncType) -> GlobalVar:
        """Make ``name`` callable (with type ``ty``) before its body is built."""
        self.global_types[name] = ty
        return GlobalVar(name, ty=ty)

    def add_func(self, func: BaseFunc, name: str) -> GlobalVar:
        """Add a finished function or kernel under a fresh name based on ``name``."""
        name = self.unique_name(name)
        self._functions[name] = func
        if func.ty is not None:
            self.global_types[name] = func.ty
        return GlobalVar(name, ty=func.ty)

    def update_func(self, name: str, func: BaseFunc) -> None:
        self._functions[name] = func
        if func.ty is not None:
            self.global_types[name] = func.ty

    def unique_name(self, hint: str) -> str:
        if hint not in self._functions:
            return hint
        i = 1
        while f"{hint}_{i}" in self._functions:
            i += 1
        return f"{hint}_{i}"

    # ---------------------------------------------------------------- functions
    @contextmanager
    def function(
        self,
        name: str,
        params: list[Var],
        *,
        attrs: dict[str, Any] | None = None,
        pure: bool = True,
        ret_ty: Type | None = None,
        span: Span | None = None,
    ) -> Iterator[None]:
        """Build function ``name``; finish it with :meth:`emit_func_output`."""
        frame = _FuncFrame(name, list(params), dict(attrs or {}), pure, ret_ty, span)
        funcs_depth, frames_depth = len(self._funcs), len(self._frames)
        self._funcs.append(frame)
        self._frames.append(_Frame(dataflow=False))
        try:
            yield
        except BaseException:
            # Unwind to the state before this function, however far the error got
            # (emit_func_output may already have popped the block frame).
            del self._funcs[funcs_depth:]
            del self._frames[frames_depth:]
            raise
        if frame.result is None:
            self._funcs.pop()
            self._frames.pop()
            raise RuntimeError(f"function {name!r} was not finished with emit_func_output")

    @property
    def function_name(self) -> str | None:
        return self._funcs[-1].name if self._funcs else None

    def emit_func_output(self, output: Expr) -> GlobalVar:
        """Finish the current function with result ``output``."""
        frame = self._funcs[-1]
        if self._frames[-1].dataflow:
            raise RuntimeError("emit_func_output inside a dataflow block; leave it first")
        output = self.normalize_arg(output)
        self._close_block(frame)
        self._frames.pop()
        body = SeqExpr(tuple(frame.blocks), output, ty=output.ty)
        if frame.ret_ty is not None and not types_compatible(frame.ret_ty, output.ty):
            raise IRTypeError(
                f"the function returns {output.ty}, but its declared return type is {frame.ret_ty}",
                function=frame.name,
                span=frame.span,
            )
        ret_ty = frame.ret_ty if frame.ret_ty is not None else output.ty
        func = Function(
            tuple(frame.params),
            body,
            ret_ty,
            frame.pure,
            attrs=Attrs(frame.attrs),
            span=frame.span,
        )
        frame.result = func
        self._funcs.pop()
        self._functions[frame.name] = func
        if func.ty is not None:
            self.global_types[frame.name] = func.ty
        return GlobalVar(frame.name, ty=func.ty)

    # ---------------------------------------------------------------- blocks
    @contextmanager
    def dataflow(self) -> Iterator[None]:
        """Bindings emitted inside go into a dataflow block."""
        if not self._funcs:
            raise RuntimeError("dataflow() outside a function")
        frame = self._funcs[-1]
        self._close_block(frame)
        self._frames[-1] = _Frame(dataflow=True)
        yield
        self._close_block(frame)
        self._frames[-1] = _Frame(dataflow=False)

    def _close_block(self, frame: _FuncFrame) -> None:
        cur = self._frames[-1]
        if cur.bindings:
            blocks = frame.blocks
            if not cur.dataflow and blocks and type(blocks[-1]) is BindingBlock:
                # an empty dataflow block between two plain blocks: keep one block
                blocks[-1] = BindingBlock(blocks[-1].bindings + tuple(cur.bindings))
            else:
                block_cls = DataflowBlock if cur.dataflow else BindingBlock
                blocks.append(block_cls(tuple(cur.bindings)))
            cur.bindings = []

    def begin_scope(self, dataflow: bool = False) -> None:
        """Start collecting bindings for a nested sequence (an If branch, a mutator's
        rewrite of a block).  Close it with :meth:`end_scope`."""
        self._frames.append(_Frame(dataflow=dataflow))

    def end_scope(self) -> list[Binding]:
        return self._frames.pop().bindings

    @property
    def in_dataflow(self) -> bool:
        return bool(self._frames) and self._frames[-1].dataflow

    # ---------------------------------------------------------------- emitting
    def emit(
        self,
        value: Expr,
        name_hint: str = "lv",
        *,
        ty: Type | None = None,
        is_output: bool = False,
        span: Span | None = None,
    ) -> Var:
        """Bind ``value`` (normalized) to a new variable and return the variable.

        Inside a dataflow block the variable is a :class:`DataflowVar` unless
        ``is_output``; ``ty`` is a declared type the inferred type must fit."""
        if ty is None and type(value) is Call:
            # Fast path for the common binding: an op applied to typed leaves.
            typed = self._simple_call(value)
            if typed is not None:
                frame = self._frames[-1]
                var_cls = DataflowVar if frame.dataflow and not is_output else Var
                var = var_cls(name_hint, ty=typed.ty, span=span)
                frame.bindings.append(VarBinding(var, typed))
                return var
        prev = self.current_binding, self.current_span
        self.current_binding, self.current_span = name_hint, span or value.span
        try:
            value = self.normalize(value)
            if ty is not None and not types_compatible(ty, value.ty):
                self._fail(f"the value has type {value.ty}, but the binding declares {ty}")
            var_ty = ty if ty is not None and not isinstance(ty, ObjectType) else value.ty
            if ty is not None and isinstance(ty, ObjectType):
                var_ty = ty
            var_cls = DataflowVar if self.in_dataflow and not is_output else Var
            var = var_cls(name_hint, ty=var_ty, span=span)
            self._frames[-1].bindings.append(VarBinding(var, value))
            return var
        finally:
            self.current_binding, self.current_span = prev

    def emit_output(self, value: Expr, name_hint: str = "gv") -> Var:
        """Bind ``value`` to a variable visible after the dataflow block."""
        if not self.in_dataflow:
            raise RuntimeError("emit_output outside a dataflow block")
        return self.emit(value, name_hint, is_output=True)

    def emit_match_cast(
        self, value: Expr, ty: Type, name_hint: str = "lv", *, is_output: bool = False
    ) -> Var:
        """Bind ``value`` with the refined type ``ty`` (checked at run time)."""
        value = self.normalize_arg(value)
        var_cls = DataflowVar if self.in_dataflow and not is_output else Var
        var = var_cls(name_hint, ty=ty)
        self._frames[-1].bindings.append(MatchCast(var, value, ty))
        return var

    def emit_binding(self, binding: Binding) -> None:
        """Append an already normalized binding as it is."""
        self._frames[-1].bindings.append(binding)

    # ---------------------------------------------------------------- normalizing
    def _fail(self, message: str) -> None:
        raise IRTypeError(
            message,
            function=self.function_name,
            binding=self.current_binding,
            span=self.current_span,
        )

    def _simple_call(self, call: Call) -> Call | None:
        """``call`` typed, if it is a call of a registered op on typed leaves
        (variables, constants...) and inference succeeds; else None, and the
        general path (which reports errors with their context) takes over."""
        op = call.op
        if type(op) is not Op:
            return None
        opdef = Op.definitions.get(op.name)  # type: ignore[attr-defined]
        if opdef is None:
            return None
        args = call.args
        remap = self.var_remap
        new_args: list[Expr] | None = None
        # A call of an op on variables with attributes checked for it: its type is
        # kept per key (what OpDef.infer_call caches it by, without the signature it
        # makes: the classes of variables are the signature); None: not kept.
        attrs = call.attrs
        key: list | None = [op, id(attrs)] if attrs.checked_by is opdef else None
        for i, a in enumerate(args):
            t = type(a)
            if t in _SIMPLE_LEAVES:
                if a.ty is None or (remap and a in remap):
                    return None
                if key is not None:
                    if t is Var or t is DataflowVar:
                        key.append(t)
                        key.append(id(a.ty))
                    else:
                        key = None  # (a constant's value may be read)
            elif t is ExternFunc:  # always typed (Object)
                key = None
            elif t is GlobalVar:  # a kernel or function by reference (may be untyped)
                if a.ty is None and a.name_hint in self.global_types:
                    return None
                key = None
            elif t is Tuple:  # call_kernel/call_extern/call_dps argument tuples
                typed_tuple = self._simple_tuple(a)
                if typed_tuple is None:
                    return None
                if typed_tuple is not a:
                    if new_args is None:
                        new_args = list(args)
                    new_args[i] = typed_tuple
                key = None
            else:
                return None
        if key is not None:
            k = tuple(key)
            hit = self._inferred.get(k)
            if hit is not None:
                ty = hit[0]
            else:
                types = tuple([a.ty for a in args])
                try:
                    ty, attrs = opdef.infer_call(call, types)
                except Exception:
                    return None
                if ty is not None and attrs is call.attrs:
                    self._inferred[k] = (ty, attrs, types)
        else:
            if new_args is not None:
                args = tuple(new_args)
            types = tuple([a.ty for a in args])
            # Inference is cached by the op (see OpDef.infer_call) when it can only see
            # the argument types and the attributes.
            try:
                ty, attrs = opdef.infer_call(call, types)
            except Exception:
                return None
        if ty is None or (call.ty is not None and not types_compatible(call.ty, ty)):
            return None
        if attrs is call.attrs and (call.ty is ty or call.ty == ty) and new_args is None:
            return call
        return Call(op, args, attrs, ty, call.span)

    def _simple_tuple(self, tup: Tuple) -> Tuple | None:
        """``tup`` typed, if it is a non-empty tuple of typed simple leaves whose
        annotation (if any) fits; else None (the general path takes over)."""
        fields = tup.fields
        if not fields:
            return None
        remap = self.var_remap
        for f in fields:
            if type(f) not in _SIMPLE_LEAVES or f.ty is None or (remap and f in remap):
                return None
        ty = tup.ty
        if type(ty) is TupleType and len(ty.fields) == len(fields):
            for a, f in zip(ty.fields, fields):
                if a is not f.ty:
                    break
            else:
                return tup  # already typed with its fields' very types
        tt = TupleType(tuple([f.ty for f in fields]))
        if tup.ty is None:
            return Tuple(fields, ty=tt, span=tup.span)
        if tup.ty == tt:
            return tup
        if types_compatible(tup.ty, tt):
            return Tuple(fields, ty=tt, span=tup.span)
        return None

    def normalize_arg(self, expr: Expr) -> Expr:
        """Normalize ``expr`` and bind it unless it is an atom."""
        expr = self.normalize(expr)
        if is_atom(expr):
            return expr
        return self.emit(expr, "lv")

    def normalize(self, expr: Expr) -> Expr:
        """Return ``expr`` with every nested non-atomic argument bound to a variable
        (emitted before it) and every type filled in."""
        if isinstance(expr, ATOM_TYPES) and not isinstance(expr, GlobalVar | Var):
            return expr
        if type(expr) is Call:
            typed = self._simple_call(expr)
            if typed is not None:
                return typed
        done: dict[int, Expr] = {}
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            e, visited = stack.pop()
            if id(e) in done:
                continue
            if not visited:
                kids = _arg_children(e)
                if not kids:
                    done[id(e)] = self._infer_leaf(e)
                    continue
                stack.append((e, True))
                for k in reversed(kids):
                    if id(k) not in done:
                        stack.append((k, False))
                continue
            done[id(e)] = self._rebuild(e, done, top=e is expr)
        return done[id(expr)]

    def _infer_leaf(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return self.var_remap.get(e, e)
        if isinstance(e, SeqExpr):
            return self.normalize_seq(e)
        if isinstance(e, Function):
            return self.normalize_function(e)
        if isinstance(e, GlobalVar) and e.ty is None and e.name_hint in self.global_types:
            return replace(e, ty=self.global_types[e.name_hint])
        if isinstance(e, Call) and not e.args:
            return self._typed(e)
        if isinstance(e, Tuple) and not e.fields and e.ty is None:
            return replace(e, ty=TupleType(()))
        return e

    def _rebuild(self, e: Expr, done: dict[int, Expr], top: bool) -> Expr:
        def arg(k: Expr) -> Expr:
            new = done[id(k)]
            if not is_atom(new):
                new = self.emit(new, "lv", span=new.span)
            return new

        if isinstance(e, Call):
            op = done[id(e.op)] if id(e.op) in done else e.op
            args = tuple(arg(a) for a in e.args)
            if op is not e.op or any(x is not y for x, y in zip(args, e.args)):
                e = replace(e, op=op, args=args)
        elif isinstance(e, Tuple):
            fields = tuple(arg(f) for f in e.fields)
            if any(x is not y for x, y in zip(fields, e.fields)):
                e = replace(e, fields=fields)
        elif isinstance(e, TupleGetItem):
            tv = arg(e.tuple_value)
            if tv is not e.tuple_value:
                e = replace(e, tuple_value=tv)
        elif isinstance(e, If):
            cond = arg(e.cond)
            then_b = self.normalize_seq(_as_seq(e.then_branch))
            else_b = self.normalize_seq(_as_seq(e.else_branch))
            e = replace(e, cond=cond, then_branch=then_b, else_branch=else_b)
        return self._typed(e)

    def _typed(self, e: Expr) -> Expr:
        try:
            ty, e = infer_type(e, self.global_types)
        except IRTypeError as err:
            raise IRTypeError(
                err.detail,
                function=self.function_name,
                binding=self.current_binding,
                span=e.span or self.current_span,
            ) from None
        if e.ty is not None and ty is not None and not types_compatible(e.ty, ty):
            self._fail(f"expression annotated {e.ty} but its inferred type is {ty}")
        return _with_type(e, ty if ty is not None else e.ty)

    def normalize_seq(self, seq: SeqExpr) -> SeqExpr:
        """Normalize a sequence expression in a fresh scope: its blocks are rebuilt
        binding by binding (variables keep their identity when their type is set)."""
        blocks: list[BindingBlock] = []
        for block in seq.blocks:
            self.begin_scope(isinstance(block, DataflowBlock))
            for b in block.bindings:
                self.normalize_binding(b)
            bindings = self.end_scope()
            blocks.append(type(block)(tuple(bindings)))
        self.begin_scope(False)
        body = self.normalize_arg(seq.body)
        extra = self.end_scope()
        if extra:
            blocks.append(BindingBlock(tuple(extra)))
        return SeqExpr(tuple(blocks), body, ty=body.ty, span=seq.span)

    def normalize_binding(self, b: Binding) -> None:
        """Normalize the value of ``b`` and emit it, keeping the variable."""
        value = b.value
        if type(value) is Call and type(b) is VarBinding and b.var.ty is not None:
            # Fast path: a call typed already, as the variable is, stays as it is
            if self._simple_call(value) is value and b.var.ty is value.ty:
                self._frames[-1].bindings.append(b)
                return
        prev = self.current_binding, self.current_span
        self.current_binding, self.current_span = b.var.name_hint, b.value.span
        try:
            value = self.normalize(b.value)
            if isinstance(b, MatchCast):
                if not is_atom(value):
                    value = self.emit(value, "lv")
                self.emit_binding(replace(b, value=value))
                return
            var = b.var
            if var.ty is not None and not types_compatible(var.ty, value.ty):
                self._fail(f"the value has type {value.ty}, but the variable is declared {var.ty}")
            if var.ty is None and value.ty is not None:
                var = replace(var, ty=value.ty)
                self.var_remap[b.var] = var
            if var is b.var and value is b.value:
                self.emit_binding(b)
            else:
                self.emit_binding(replace(b, var=var, value=value))
        finally:
            self.current_binding, self.current_span = prev

    def normalize_function(self, func: Function) -> Function:
        """A copy of ``func`` with a normalized body and filled-in types."""
        body = self.normalize_seq(_as_seq(func.body))
        if func.ret_ty is not None and not types_compatible(func.ret_ty, body.ty):
            raise IRTypeError(
                f"the function returns {body.ty}, but its declared return type is {func.ret_ty}",
                function=self.function_name,
                span=func.span,
            )
        return Function(
            func.params,
            body,
            func.ret_ty if func.ret_ty is not None else body.ty,
            func.pure,
            attrs=func.attrs,
            span=func.span,
        )


def _as_seq(e: Expr) -> SeqExpr:
    return e if isinstance(e, SeqExpr) else SeqExpr((), e)


def _arg_children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Call):
        # The callee is normalized too (unless it is an op or an extern function), so
        # a called GlobalVar gets its type and a called variable its remapped version.
        return ((e.op,) if not isinstance(e.op, Op | ExternFunc) else ()) + e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, If):
        return (e.cond,)
    return ()


_TUPLE_TYPES: dict[tuple[int, ...], tuple[tuple[Type, ...], TupleType]] = {}
_TUPLE_TYPES_MAX = 4096


def tuple_type(fields: tuple[Expr, ...]) -> TupleType | None:
    """The type of a tuple of ``fields`` (None if one is untyped): one ``TupleType``
    object for tuples whose fields have the very same type objects (then the builder
    takes such a tuple as typed, without rebuilding it)."""
    types = tuple([f.ty for f in fields])
    key = tuple(map(id, types))
    hit = _TUPLE_TYPES.get(key)
    if hit is not None:
        # the entry keeps its types alive, so a live type with the id of one of them
        # is that very type: the ids matching is the types being the same objects
        return hit[1]
    if any(t is None for t in types):
        return None
    if len(_TUPLE_TYPES) >= _TUPLE_TYPES_MAX:
        _TUPLE_TYPES.clear()
    tt = TupleType(types)  # type: ignore[arg-type]
    _TUPLE_TYPES[key] = (types, tt)  # (keeps the types alive: their ids stay theirs)
    return tt


def normalize_module(mod: IRModule) -> IRModule:
    """Every function of ``mod`` normalized (A-normal form, types filled in)."""
    bb = BlockBuilder(mod)
    for name, f in mod.graph_functions():
        if f.ty is not None:
            bb.global_types[name] = f.ty
    for name, f in list(mod.graph_functions()):
        bb._funcs.append(_FuncFrame(name, list(f.params), dict(f.attrs), f.pure, f.ret_ty, f.span))
        try:
            nf = bb.normalize_function(f)
        finally:
            bb._funcs.pop()
        bb.update_func(name, nf)
    return bb.get()


__all__ = [
    "ATOM_TYPES",
    "BlockBuilder",
    "IRTypeError",
    "infer_type",
    "is_atom",
    "join_types",
    "normalize_module",
    "tuple_type",
    "types_compatible",
]
