"""Passes: ``IRModule -> IRModule`` functions with declarations the manager checks.

Three kinds, all callable (``mod = FoldConstant()(mod)``):

* :class:`ModulePass` -- ``transform_module(self, mod, ctx) -> IRModule``;
* :class:`FunctionPass` -- ``transform_function(self, func, mod, ctx) -> Function``,
  called for each graph function (functions owned by an external codegen,
  ``compiler="name"``, are skipped unless the pass is enabled for that codegen);
* :class:`DataflowBlockPass` -- ``transform_block(self, block, mod, ctx) ->
  DataflowBlock``, called for each dataflow block.

Every pass class carries a :class:`PassInfo` (name, opt_level, the phases it accepts,
the transition it makes, the passes it requires before it, one line of doc), set by
the decorators :func:`module_pass`, :func:`function_pass` and
:func:`dataflow_block_pass`, which accept a function (and return a pass instance) or a
class (and return the pass class), and register the pass by name.

Calling a pass -- directly or inside a :class:`~plait.transform.Sequential` -- goes
through the same steps: the current :class:`~plait.transform.PassContext` decides
whether it runs (``disabled``, ``opt_level``/``required``, instrument veto); the
module's phase must be one the pass accepts (:class:`PhaseError` otherwise);
instruments see it before and after; an exception inside becomes a
:class:`PassError` naming the pass, phase and function (and writes a reproducer when
``transform.reproducer_dir`` is set); a transition pass's result gets its new phase
and, unless ``transform.check_transitions`` is off, is checked for well-formedness in
that phase.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, ClassVar

from ..ir.builder import IRTypeError
from ..ir.expr import DataflowBlock, Function, If, SeqExpr, VarBinding
from ..ir.module import PHASES, IRModule
from ..ir.well_formed import well_formed
from .context import PassContext
from .errors import (
    InstrumentError,
    PassCheckError,
    PassError,
    PassWellFormedError,
    TransformError,
)

_LOG = logging.getLogger("plait.transform")

PASS_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
"""Pass names: identifiers, possibly dotted (``qnn.Legalize``)."""

ANY_PHASE = PHASES
"""Use as ``phases=ANY_PHASE`` for a pass valid in every phase."""

PASS_KINDS = ("module", "function", "dataflow_block", "sequential")


def _phase_tuple(phases: str | Iterable[str], where: str) -> tuple[str, ...]:
    if isinstance(phases, str):
        phases = PHASES if phases == "*" else (phases,)
    out = tuple(phases)
    for p in out:
        if p not in PHASES:
            import difflib

            close = difflib.get_close_matches(str(p), PHASES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown phase {p!r}{hint}; phases are {', '.join(PHASES)}")
    if not out:
        raise ValueError(f"{where}: a pass must accept at least one phase")
    return tuple(p for p in PHASES if p in out)


@dataclass(frozen=True)
class PassInfo:
    """What a pass declares: ``name``; ``opt_level`` (it runs when the context's
    opt_level is at least this, or when required); ``phases`` it may run in;
    ``transition``, the phase of the module after it (None: unchanged); ``requires``,
    passes that must run before it in a pipeline; ``doc``, one line of purpose;
    ``kind``: module, function, dataflow_block or sequential; ``essential``: the module
    cannot be built without it although no pass requires it (``c.CompileKernels``):
    bisection never skips it."""

    name: str
    opt_level: int = 0
    phases: tuple[str, ...] = ("optimization",)
    transition: str | None = None
    requires: tuple[str, ...] = ()
    doc: str = ""
    kind: str = "module"
    essential: bool = False

    def __post_init__(self) -> None:
        where = f"pass {self.name!r}"
        if not isinstance(self.name, str) or not PASS_NAME_RE.match(self.name):
            raise ValueError(f"invalid pass name {self.name!r}: use letters, digits, _ and "
                             "dots (e.g. 'FoldConstant', 'qnn.Legalize')")
        if not isinstance(self.opt_level, int) or not 0 <= self.opt_level <= 4:
            raise ValueError(f"{where}: opt_level must be an int from 0 to 4")
        object.__setattr__(self, "phases", _phase_tuple(self.phases, where))
        if self.transition is not None:
            if self.transition not in PHASES:
                raise ValueError(f"{where}: unknown transition phase {self.transition!r}; "
                                 f"phases are {', '.join(PHASES)}")
            late = [p for p in self.phases if PHASES.index(p) > PHASES.index(self.transition)]
            if late:
                raise ValueError(f"{where}: the transition to {self.transition} would move "
                                 f"a module in phase {late[0]} backwards")
        reqs = (self.requires,) if isinstance(self.requires, str) else tuple(self.requires)
        object.__setattr__(self, "requires", reqs)
        object.__setattr__(self, "doc", _first_line(self.doc))
        if self.kind not in PASS_KINDS:
            raise ValueError(f"{where}: kind must be one of {PASS_KINDS}")

    def accepts(self, phase: str) -> bool:
        return phase in self.phases

    def describe(self) -> str:
        """``[phases] -> transition, requires ..., opt_level n`` on one line."""
        text = f"[{', '.join(self.phases)}]"
        if self.transition is not None:
            text += f" -> {self.transition}"
        if self.requires:
            text += f", requires {', '.join(self.requires)}"
        if self.opt_level:
            text += f", opt_level {self.opt_level}"
        if self.essential:
            text += ", essential"
        return text


def _first_line(doc: str | None) -> str:
    for line in (doc or "").strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


@cache
def _init_signature(cls: type) -> inspect.Signature:
    return inspect.signature(cls.__init__)


class Pass:
    """Base of every pass.  Subclass :class:`ModulePass`, :class:`FunctionPass` or
    :class:`DataflowBlockPass` (and decorate), or use the decorators on a function.

    A pass's constructor arguments are recorded (``params``) so the pass prints in a
    pipeline's textual form (``FoldConstant(max_size=64)``) and can be rebuilt by name.
    """

    info: ClassVar[PassInfo]
    _needs_info: ClassVar[bool] = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Pass:
        if cls._needs_info and "info" not in cls.__dict__:
            raise TypeError(
                f"pass class {cls.__qualname__} has no PassInfo of its own; decorate it with "
                "@module_pass(...), @function_pass(...) or @dataflow_block_pass(...)"
            )
        self = object.__new__(cls)
        if cls._needs_info:
            self._params = _capture_params(cls, args, kwargs)
        return self

    def __init__(self, *, codegens: Iterable[str] | None = None) -> None:
        """``codegens``: external codegens whose functions this pass also transforms."""
        if isinstance(codegens, str):
            codegens = (codegens,)
        self.codegens: frozenset[str] = frozenset(codegens or ())

    # ------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        return self.info.name

    @property
    def params(self) -> dict[str, Any]:
        """The constructor arguments this pass was created with."""
        return dict(self._params)

    def with_params(self, **params: Any) -> Pass:
        """A new pass of the same class with some constructor arguments changed."""
        return type(self)(**{**self._params, **params})

    def to_text(self) -> str:
        """The pass in the pipeline text format: ``Name`` or ``Name(key=value, ...)``."""
        if not self._params:
            return self.info.name
        from .sequential import format_params

        return f"{self.info.name}({format_params(self.info.name, self._params)})"

    def __repr__(self) -> str:
        try:
            return self.to_text()
        except TransformError:
            return f"{self.info.name}(...)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pass) or type(self) is not type(other):
            return NotImplemented if not isinstance(other, Pass) else False
        return self._params == other._params

    def __hash__(self) -> int:
        return hash((type(self), self.info.name))

    # ------------------------------------------------------------ running
    def __call__(self, mod: IRModule) -> IRModule:
        """Run the pass on ``mod`` under the current PassContext; returns the result."""
        return self._invoke(mod, PassContext.current(), nested=False)

    def _run(self, mod: IRModule, ctx: PassContext) -> IRModule:  # pragma: no cover
        raise NotImplementedError

    def _invoke(self, mod: IRModule, ctx: PassContext, nested: bool) -> IRModule:
        if not isinstance(mod, IRModule):
            raise TypeError(f"pass {self.info.name!r} takes an IRModule, got {type(mod).__name__}")
        info = self.info
        instruments = ctx.instruments
        reason = ctx.skip_reason(info)
        if reason is None and instruments:
            for inst in instruments:
                if not _hook(inst, "should_run", info, mod, info):
                    reason = f"vetoed by instrument {inst.name}"
                    break
        if reason is not None:
            _LOG.log(logging.INFO if nested else logging.WARNING,
                     "pass %r skipped: %s", info.name, reason)
            for inst in instruments:
                _hook(inst, "run_skipped_pass", info, mod, info, reason)
            return mod
        phase = mod.phase
        if phase not in info.phases:
            from .phases import phase_error

            raise phase_error(info, phase, direct=not nested)
        for inst in instruments:
            _hook(inst, "run_before_pass", info, mod, info)
        counter = ctx._config.get("debug_counter") if info.kind != "sequential" else None
        try:
            if counter is None:
                result = self._run(mod, ctx)
            else:  # number this pass's rewrite sites (plait.transform.debug_counter)
                frame = counter.begin(info.name)
                try:
                    result = self._run(mod, ctx)
                finally:
                    counter.end(frame)
            result = self._finish(mod, result, ctx)
        except TransformError as err:
            _notify_error(instruments, mod, info, err)
            raise
        except Exception as err:
            failure = self._failure(err, mod, ctx)
            _notify_error(instruments, mod, info, failure)
            raise failure from err
        if instruments:
            try:
                for inst in instruments:
                    _hook(inst, "run_after_pass", info, mod, result, info)
            except PassCheckError as err:
                self._attach_reproducer(err, mod, ctx)
                raise
        return result

    def _finish(self, mod: IRModule, result: Any, ctx: PassContext) -> IRModule:
        info = self.info
        if not isinstance(result, IRModule):
            raise TypeError(f"the pass returned {type(result).__name__}, not an IRModule; a "
                            "pass returns the (new) module")
        if info.transition is None:
            if result.phase != mod.phase and info.kind != "sequential":
                raise TypeError(
                    f"the pass changed the phase from {mod.phase} to {result.phase} but "
                    f"declares no transition; declare transition={result.phase!r}"
                )
            return result
        if result.phase != info.transition:
            result = result.with_phase(info.transition)
        if ctx.get_config("transform.check_transitions"):
            violations = well_formed(result)
            if violations:
                err = PassWellFormedError(
                    info.name, result.phase, violations,
                    f"after transition pass {info.name!r} ({mod.phase} -> {result.phase})",
                )
                self._attach_reproducer(err, mod, ctx, check="transition")
                raise err
        return result

    def _failure(
        self,
        err: BaseException,
        mod: IRModule,
        ctx: PassContext,
        function: str | None = None,
        binding: str | None = None,
    ) -> PassError:
        """The :class:`PassError` for ``err`` raised while transforming ``mod``
        (writing a reproducer when ``transform.reproducer_dir`` is set)."""
        if isinstance(err, IRTypeError):
            function = function or err.function
            binding = binding or err.binding
        path = note = None
        rdir = ctx.get_config("transform.reproducer_dir")
        if rdir:
            from .replay import write_reproducer

            try:
                path = str(write_reproducer(rdir, self, mod, ctx, err, function=function))
            except Exception as werr:  # the reproducer must never hide the real error
                note = f"writing the reproducer to {rdir} failed: {type(werr).__name__}: {werr}"
        return PassError(self.info.name, mod.phase, err, function=function, binding=binding,
                         reproducer=path, note=note)

    def _attach_reproducer(
        self, err: PassCheckError, mod: IRModule, ctx: PassContext, check: str | None = None
    ) -> None:
        """Write a reproducer for a check that failed after this pass (once).  The check
        may name itself (``err.check``), choose the directory (``err.reproducer_dir``)
        and add files (``err.add_reproducer_files(path)``)."""
        rdir = getattr(err, "reproducer_dir", None) or ctx.get_config(
            "transform.reproducer_dir")
        if not rdir or err.pass_name != self.info.name or getattr(err, "reproducer", None):
            return
        from .errors import ImmutabilityError
        from .replay import write_reproducer

        if check is None:
            check = getattr(err, "check", None) or (
                "immutability" if isinstance(err, ImmutabilityError) else "well_formed")
        try:
            path = str(write_reproducer(rdir, self, mod, ctx, err, check=check,
                                        text=getattr(err, "input_text", None)))
            extra = getattr(err, "add_reproducer_files", None)
            if extra is not None:
                extra(path)
        except Exception as werr:  # pragma: no cover - never hide the real error
            _LOG.warning("writing the reproducer failed: %s", werr)
            return
        err.reproducer = path  # type: ignore[attr-defined]
        err.args = (f"{err.args[0]}\n  a reproducer was written to {path}; rerun it with "
                    f"plait.transform.replay({path!r})",)


def _capture_params(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    if not args and not kwargs:
        return {}
    sig = _init_signature(cls)
    try:
        bound = sig.bind(None, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"pass {cls.info.name!r}: {e}") from None
    out: dict[str, Any] = {}
    for i, (name, value) in enumerate(bound.arguments.items()):
        if i == 0:
            continue  # self
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"pass {cls.info.name!r}: *args are not supported in a pass "
                            "constructor (use keyword parameters)")
        else:
            out[name] = value
    return out


def _hook(inst: Any, hook: str, info: PassInfo, *args: Any) -> Any:
    try:
        return getattr(inst, hook)(*args)
    except TransformError:
        raise
    except Exception as e:
        raise InstrumentError(
            f"instrument {type(inst).__name__} failed in {hook} for pass {info.name!r}: "
            f"{type(e).__name__}: {e}"
        ) from e


def _notify_error(instruments: tuple, mod: IRModule, info: PassInfo, err: BaseException) -> None:
    for inst in instruments:
        try:
            inst.on_pass_error(mod, info, err)
        except Exception as e:  # keep the pass's error; report the instrument's
            _LOG.warning("instrument %s failed in on_pass_error: %s", type(inst).__name__, e)


# ------------------------------------------------------------------ pass kinds


class ModulePass(Pass):
    """A pass over the whole module: override ``transform_module(mod, ctx)``."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__} must define transform_module")

    def _run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.transform_module(mod, ctx)


class FunctionPass(Pass):
    """A pass over each graph function: override ``transform_function(func, mod, ctx)``
    and return the function (the same object when unchanged).

    Functions with ``compiler="name"`` belong to an external codegen and are skipped
    unless the pass is enabled for ``name``: by the constructor (``codegens=[...]``),
    by the context config ``transform.external_passes`` (``{name: [pass names]}``) or
    by the codegen's registration (:func:`plait.transform.register_external_passes`).
    The function keeps its ``compiler`` attribute.
    """

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        raise NotImplementedError(f"{type(self).__name__} must define transform_function")

    def _run(self, mod: IRModule, ctx: PassContext) -> IRModule:
        from .external import enabled_codegens

        enabled: frozenset[str] | None = None
        changed: dict[str, Function] = {}
        for name, func in mod.graph_functions():
            codegen = func.attrs.get("compiler")
            if codegen is not None:
                if enabled is None:
                    enabled = enabled_codegens(self, ctx)
                if codegen not in enabled:
                    continue
            try:
                new = self.transform_function(func, mod, ctx)
                if new is not func and not isinstance(new, Function):
                    raise TypeError(f"transform_function returned {type(new).__name__}, "
                                    "not a Function")
            except TransformError:
                raise
            except Exception as err:
                raise self._failure(err, mod, ctx, function=name) from err
            if new is not func:
                if codegen is not None and new.attrs.get("compiler") != codegen:
                    new = new.with_attrs(compiler=codegen)  # type: ignore[assignment]
                changed[name] = new
        return mod.with_functions(changed) if changed else mod


class DataflowBlockPass(FunctionPass):
    """A pass over each dataflow block: override ``transform_block(block, mod, ctx)``
    and return the block (the same object when unchanged).

    A block's output variables (``Var``, not ``DataflowVar``) are seen after it; keep
    them (same objects) or the uses after the block dangle.  Blocks inside ``If``
    branches are visited too (recursion only follows the nesting of ``If``)."""

    def transform_block(
        self, block: DataflowBlock, mod: IRModule, ctx: PassContext
    ) -> DataflowBlock:
        raise NotImplementedError(f"{type(self).__name__} must define transform_block")

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not isinstance(func.body, SeqExpr):
            return func
        body = self._rewrite_seq(func.body, mod, ctx)
        return func if body is func.body else replace(func, body=body)

    def _rewrite_seq(self, seq: SeqExpr, mod: IRModule, ctx: PassContext) -> SeqExpr:
        blocks = []
        changed = False
        for block in seq.blocks:
            if isinstance(block, DataflowBlock):
                new = self.transform_block(block, mod, ctx)
                if not isinstance(new, DataflowBlock):
                    raise TypeError(f"transform_block returned {type(new).__name__}, not a "
                                    "DataflowBlock")
            else:
                new = block
                bindings = list(block.bindings)
                for i, b in enumerate(bindings):
                    if isinstance(b, VarBinding) and isinstance(b.value, If):
                        value = self._rewrite_if(b.value, mod, ctx)
                        if value is not b.value:
                            bindings[i] = replace(b, value=value)
                if any(x is not y for x, y in zip(bindings, block.bindings)):
                    new = type(block)(tuple(bindings))
            changed |= new is not block
            blocks.append(new)
        return replace(seq, blocks=tuple(blocks)) if changed else seq

    def _rewrite_if(self, e: If, mod: IRModule, ctx: PassContext) -> If:
        then_b, else_b = e.then_branch, e.else_branch
        if isinstance(then_b, SeqExpr):
            then_b = self._rewrite_seq(then_b, mod, ctx)
        if isinstance(else_b, SeqExpr):
            else_b = self._rewrite_seq(else_b, mod, ctx)
        if then_b is e.then_branch and else_b is e.else_branch:
            return e
        return replace(e, then_branch=then_b, else_branch=else_b)


# ------------------------------------------------------------------ decorators


def _arity(fn: Callable[..., Any]) -> int:
    params = [
        p for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(params)


_METHODS = {
    ModulePass: ("transform_module", ("mod", "ctx")),
    FunctionPass: ("transform_function", ("func", "mod", "ctx")),
    DataflowBlockPass: ("transform_block", ("block", "mod", "ctx")),
}
_KINDS = {ModulePass: "module", FunctionPass: "function", DataflowBlockPass: "dataflow_block"}


def _make_pass(
    obj: Any,
    base: type[Pass],
    decorator: str,
    *,
    name: str | None,
    opt_level: int,
    phases: str | Iterable[str],
    transition: str | None,
    requires: str | Iterable[str],
    doc: str | None,
    register: bool,
    override: bool,
    essential: bool = False,
) -> Any:
    method, args = _METHODS[base]
    if isinstance(obj, type):
        if issubclass(obj, Pass) and not issubclass(obj, base):
            raise TypeError(f"@{decorator} on {obj.__qualname__}, which is a "
                            f"{obj.__mro__[1].__name__}; use the matching decorator")
        if not callable(getattr(obj, method, None)) or (
            issubclass(obj, Pass) and getattr(obj, method) is getattr(base, method)
        ):
            raise TypeError(f"class {obj.__qualname__} decorated with @{decorator} must "
                            f"define {method}(self, {', '.join(args)})")
        cls = obj if issubclass(obj, base) else type(
            obj.__name__, (obj, base),
            {"__module__": obj.__module__, "__qualname__": obj.__qualname__,
             "__doc__": obj.__doc__},
        )
        pass_name = name or obj.__name__
        docstring = doc if doc is not None else obj.__doc__
    elif callable(obj):
        fn = obj
        n = _arity(fn)
        if not 1 <= n <= len(args):
            raise TypeError(f"@{decorator} function {fn.__qualname__} must take "
                            f"({', '.join(args)}) or a prefix of it, it takes {n} arguments")

        def run(self: Pass, *call_args: Any, _fn: Callable[..., Any] = fn, _n: int = n) -> Any:
            return _fn(*call_args[:_n])

        cls = type(
            fn.__name__, (base,),
            {method: run, "__module__": fn.__module__, "__qualname__": fn.__qualname__,
             "__doc__": fn.__doc__},
        )
        pass_name = name or fn.__name__
        docstring = doc if doc is not None else fn.__doc__
    else:
        raise TypeError(f"@{decorator} applies to a function or a class, not {obj!r}")
    cls.info = PassInfo(pass_name, opt_level, phases, transition, requires,  # type: ignore
                        docstring or "", _KINDS[base], essential)
    if register:
        from .registry import register_pass

        register_pass(cls, override=override)
    return cls if isinstance(obj, type) else cls()


def _decorator(base: type[Pass], decorator: str) -> Callable[..., Any]:
    def deco(
        target: Any = None,
        *,
        name: str | None = None,
        opt_level: int = 0,
        phases: str | Iterable[str] = ("optimization",),
        transition: str | None = None,
        requires: str | Iterable[str] = (),
        doc: str | None = None,
        register: bool = True,
        override: bool = False,
        essential: bool = False,
    ) -> Any:
        def wrap(obj: Any) -> Any:
            return _make_pass(obj, base, decorator, name=name, opt_level=opt_level,
                              phases=phases, transition=transition, requires=requires,
                              doc=doc, register=register, override=override,
                              essential=essential)

        return wrap(target) if target is not None else wrap

    deco.__name__ = decorator
    deco.__doc__ = f"""Make a {_KINDS[base]} pass from a function or a class.

    On a function ``f({', '.join(_METHODS[base][1])})`` (or a prefix of those
    parameters) it returns a pass *instance*; on a class defining
    ``{_METHODS[base][0]}`` it returns the pass *class*.  ``name`` defaults to the
    function or class name; ``phases`` (default ``("optimization",)``, ``"*"`` for
    all) are the phases the pass accepts; ``transition`` the phase it moves the
    module to; ``requires`` the passes that must run before it in a pipeline;
    ``doc`` defaults to the first docstring line; ``essential`` marks a pass the
    module cannot be built without (bisection never skips it).  The pass is registered
    by name unless ``register=False``."""
    return deco


module_pass = _decorator(ModulePass, "module_pass")
function_pass = _decorator(FunctionPass, "function_pass")
dataflow_block_pass = _decorator(DataflowBlockPass, "dataflow_block_pass")


__all__ = [
    "ANY_PHASE",
    "DataflowBlockPass",
    "FunctionPass",
    "ModulePass",
    "Pass",
    "PassInfo",
    "dataflow_block_pass",
    "function_pass",
    "module_pass",
]
