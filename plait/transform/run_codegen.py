"""RunCodegen and ForCodegen: compile external functions; transform exactly them.

``RunCodegen`` (first pass of the build stage; also valid in the optimization phase)
hands each external codegen its functions — extracted together as one IRModule in the
optimization phase, without their ``compiler`` attribute (:func:`extract_external`) —
after running on them the codegen's registered ``passes`` and then the user's
(``PassContext(config={"codegen.<name>.passes": "ConvertLayout(...),FoldConstant"})``).
The codegen returns :class:`~plait.runtime.external.ExternalModule` s; every call of one
of its functions in the host becomes ``call_extern(extern(<global_symbol>), (args...),
out=<type>)``, the functions leave the module, and the modules go into the module
attribute ``external_mods``, which the executable stores.  The VM then calls them like
any other extern function.

``ForCodegen("name", passes)`` runs ``passes`` on exactly the functions of codegen
``name``, anywhere before RunCodegen — inside the default pipeline
(``pipeline.insert_before("RunCodegen", ForCodegen(...))``) or by hand: the functions
are extracted, transformed as an ordinary module and merged back (the same as calling
:func:`extract_external`, the passes and :func:`merge_external` yourself).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..ir.expr import Call, Expr, ExternFunc, Function, GlobalVar, Tuple
from ..ir.module import IRModule
from ..ir.types import TensorType, TupleType, Type
from ..ir.visitor import ExprMutator
from ..op.registry import make_call
from ..runtime.trust import register_code_attribute
from . import external_text  # noqa: F401  (external modules in the text format)
from .codegens import Codegen, CodegenError, as_pipeline_items, get_codegen
from .context import PassContext
from .errors import PhaseError
from .external import COMPILER_ATTR, external_codegens, extract_external, merge_external
from .partition import GLOBAL_SYMBOL_ATTR
from .pass_base import module_pass
from .sequential import Sequential

EXTERNAL_MODS_ATTR = "external_mods"
"""The module attribute holding the compiled external modules."""
register_code_attribute(EXTERNAL_MODS_ATTR, "compiled external modules")

_LOG = logging.getLogger("plait.transform")


def _owned(mod: IRModule, codegen: str) -> list[str]:
    return [n for n, f in mod.items() if f.attrs.get(COMPILER_ATTR) == codegen]


def _check_pipeline(pipeline: Sequential, phase: str, codegen: str, who: str,
                    ctx: PassContext) -> None:
    try:
        pipeline.validate(phase, ctx)
    except PhaseError as e:
        raise CodegenError(
            f"{who}: the passes cannot run on the functions of codegen {codegen!r}, which "
            f"are in phase {phase} (external functions keep their graph form until "
            f"RunCodegen): {e}") from None


class _CallsToExtern(ExprMutator):
    def __init__(self, mod: IRModule, symbols: dict[str, tuple[str, Type]]) -> None:
        super().__init__(mod)
        self.symbols = symbols

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if isinstance(op, GlobalVar) and op.name_hint in self.symbols:
            symbol, ret = self.symbols[op.name_hint]
            return make_call("call_extern", ExternFunc(symbol), Tuple(call.args), out=ret,
                             span=call.span)
        return call


def _sig_matches(ext_fn: Any, func: Function) -> str | None:
    """Why the external function's signature does not fit ``func``, or None."""
    want_in = [p.ty for p in func.params]
    ret = func.ret_ty
    want_out = list(ret.fields) if isinstance(ret, TupleType) else [ret]
    for what, got, want in (("inputs", ext_fn.inputs, want_in),
                            ("outputs", ext_fn.outputs, want_out)):
        if len(got) != len(want):
            return f"it has {len(got)} {what}, the function {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            if not isinstance(w, TensorType) or w.shape is None:
                return f"{what[:-1]} {k} of the function is {w}, not a tensor of known rank"
            if g.dtype != w.dtype or len(g.shape) != len(w.shape) or any(
                    isinstance(a, int) and isinstance(b, int) and a != b
                    for a, b in zip(g.shape, w.shape)):
                return f"{what[:-1]} {k} is {g}, the function has {w}"
    return None


def compile_codegen(mod: IRModule, cg: Codegen, ctx: PassContext) -> IRModule:
    """``mod`` with the functions of codegen ``cg`` compiled (see the module docstring)."""
    name = cg.name
    owned = _owned(mod, name)
    # the host's calls of the codegen's functions: its entry points
    entries: dict[str, tuple[str, Type]] = {}
    for host, f in mod.graph_functions():
        codegen = f.attrs.get(COMPILER_ATTR)
        if codegen == name:
            continue
        from ..ir.visitor import post_order

        for node in post_order(f.body):
            if isinstance(node, GlobalVar) and node.name_hint in owned:
                if codegen is not None:
                    raise CodegenError(
                        f"RunCodegen: function {host!r} of codegen {codegen!r} calls "
                        f"{node.name_hint!r} of codegen {name!r}; an external function may "
                        "call only functions of its own codegen")
                target = mod[node.name_hint]
                if not isinstance(target, Function):
                    raise CodegenError(f"RunCodegen: {host!r} calls {node.name_hint!r} of "
                                       f"codegen {name!r}, which is not a graph function")
                symbol = target.attrs.get(GLOBAL_SYMBOL_ATTR, node.name_hint)
                entries[node.name_hint] = (symbol, target.ret_ty)  # type: ignore[assignment]
    ext = extract_external(mod, name)
    for fname, (symbol, _) in entries.items():  # every entry point has its symbol
        f = ext[fname]
        if f.attrs.get(GLOBAL_SYMBOL_ATTR) != symbol:
            ext = ext.with_function(fname, f.with_attrs(**{GLOBAL_SYMBOL_ATTR: symbol}))
    pipeline = Sequential([cg.pipeline(), ctx.get_config(cg.config_key) or Sequential(())],
                          name=f"codegen.{name}")
    _check_pipeline(pipeline, ext.phase, name, "RunCodegen", ctx)
    ext = pipeline(ext)
    try:
        result = cg.compile(ext)
    except CodegenError:
        raise
    except Exception as e:
        raise CodegenError(f"codegen {name!r} failed to compile its functions "
                           f"({', '.join(owned)}): {type(e).__name__}: {e}") from e
    from ..runtime.external import ExternalModule

    modules = [result] if isinstance(result, ExternalModule) else list(result)
    for m in modules:
        if not isinstance(m, ExternalModule):
            raise CodegenError(f"codegen {name!r}: compile returned {m!r}, not an "
                               "ExternalModule")
    provided = {f.name: f for m in modules for f in m.functions}
    for fname, (symbol, _) in entries.items():
        ef = provided.get(symbol)
        if ef is None:
            raise CodegenError(f"codegen {name!r} compiled no function {symbol!r} (the "
                               f"global symbol of {fname!r}); its modules provide "
                               f"{', '.join(provided) or 'nothing'}")
        func = ext[fname] if fname in ext else None
        if isinstance(func, Function):
            why = _sig_matches(ef, func)
            if why is not None:
                raise CodegenError(f"codegen {name!r}: the compiled {symbol!r} does not fit "
                                   f"function {fname!r}: {why}")
    changed: dict[str, Function] = {}
    for host, f in mod.graph_functions():
        if f.attrs.get(COMPILER_ATTR) is None:
            nf = _CallsToExtern(mod, entries).visit_function(f)
            if nf is not f:
                changed[host] = nf
    out = mod.with_functions(changed)
    for fname in owned:
        out = out.without_function(fname)
    mods = (*tuple(mod.attrs.get(EXTERNAL_MODS_ATTR) or ()), *modules)
    return out.with_attrs(**{EXTERNAL_MODS_ATTR: mods})


@module_pass(name="RunCodegen", phases=("optimization", "lowering"))
class RunCodegen:
    """Compile each external codegen's functions; the host calls them as extern functions."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for name in external_codegens(mod):
            owned = _owned(mod, name)
            cg = get_codegen(name, needed_by=f"RunCodegen (the module's functions "
                                             f"{', '.join(owned)} belong to it)")
            mod = compile_codegen(mod, cg, ctx)
        return mod


@module_pass(name="ForCodegen", phases=("optimization", "lowering"))
class ForCodegen:
    """Run passes on exactly the functions of one external codegen (extract, run, merge)."""

    def __init__(self, codegen: str, passes: Sequence[Any] | str = ()) -> None:
        super().__init__()
        get_codegen(codegen, needed_by="ForCodegen")
        self.codegen = codegen
        self.pipeline = Sequential(list(as_pipeline_items(passes, "ForCodegen")),
                                   name=f"for.{codegen}")

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        name = self.codegen
        if not _owned(mod, name):
            # (a module an importer made for the nodes it could not import -- the ONNX
            # fallback's, which notes them under "fallback_nodes" -- is not a compiled
            # partition: the module simply has no function of this codegen)
            if any(getattr(m, "codegen", None) == name
                   and not (getattr(m, "meta", None) or {}).get("fallback_nodes")
                   for m in mod.attrs.get(EXTERNAL_MODS_ATTR) or ()):
                raise CodegenError(
                    f"ForCodegen({name!r}): the functions of codegen {name!r} are already "
                    "compiled (RunCodegen ran before); ForCodegen must come before RunCodegen")
            _LOG.info("ForCodegen(%r): the module has no function of this codegen", name)
            return mod
        ext = extract_external(mod, name)
        who = f"ForCodegen({name!r})"
        _check_pipeline(self.pipeline, ext.phase, name, who, ctx)
        out = self.pipeline(ext)
        if out.phase != ext.phase:
            raise CodegenError(
                f"{who}: the passes moved the functions from phase {ext.phase} to "
                f"{out.phase}; functions merged back into the host stay in their phase — "
                "give transition passes to the codegen's own passes (RunCodegen runs them "
                "right before compiling)")
        return merge_external(mod, out, name)


__all__ = ["EXTERNAL_MODS_ATTR", "ForCodegen", "RunCodegen", "compile_codegen"]
