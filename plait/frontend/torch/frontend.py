"""``from_exported_program`` and ``from_torch``: the entry points of the PyTorch
importer."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ...ir.module import IRModule
from .errors import TorchImportError
from .importer import ProgramImporter
from .symbolic import sanitize, sym_expr


def from_exported_program(
    ep: Any,
    *,
    keep_params_as_input: bool = False,
    run_decompositions: bool = True,
    function_name: str = "main",
    dim_names: Mapping[Any, str] | None = None,
) -> IRModule:
    """Import a ``torch.export.ExportedProgram`` as an IRModule in phase ``ingestion``.

    Args:
        ep: the exported program (``torch.export.export(...)`` or ``torch.export.load``).
        keep_params_as_input: parameters and buffers become parameters of ``main`` after
            the user inputs (in the order of :func:`exported_params`; the function's
            attribute ``num_input`` counts the user inputs) instead of constants.
        run_decompositions: decompose the program to the core ATen op set first
            (``ep.run_decompositions()``); turn it off for a program already decomposed.
        function_name: the name of the function the program becomes.
        dim_names: plait names of PyTorch's shape symbols (``from_torch`` passes the
            names of the ``torch.export.Dim`` objects); other dynamic sizes are named
            ``<input>_<axis>``.

    Returns:
        A module with one function whose parameters are the program's tensor inputs,
        flattened (pytree leaves, in order), and whose result is its tensor outputs,
        flattened (a tuple when there are several; :func:`unflatten_outputs` restores
        the structure).  The ranges of the dynamic sizes are the module's ``dim_ranges``.

    Raises:
        TorchImportError: the program uses ATen ops plait has no converter for (all are
            listed, with the source lines PyTorch recorded), or a node cannot be
            expressed (the node, its op and its source line are named).
    """
    import torch

    if not isinstance(ep, torch.export.ExportedProgram):
        raise TypeError(f"from_exported_program() takes a torch.export.ExportedProgram, got "
                        f"{type(ep).__name__}; use from_torch(module, example_args) for an "
                        "nn.Module")
    if run_decompositions:
        ep = _decompose(ep)
    importer = ProgramImporter(ep, keep_params_as_input=keep_params_as_input,
                               dim_names=dim_names)
    return importer.run(function_name)


def _decompose(ep: Any) -> Any:
    """``ep.run_decompositions()``; when PyTorch's own decomposition fails, again with
    ``scaled_dot_product_attention`` kept whole (plait converts it): in torch 2.13 its
    decomposition fails for a dynamic sequence ("Cannot view a tensor with shape [s77,
    s27, 64] and strides (64, 64*s77, 1)", GPT-2's default attention)."""
    import torch

    try:
        return ep.run_decompositions()
    except Exception as first:
        table = torch.export.default_decompositions()
        sdpa = torch.ops.aten.scaled_dot_product_attention.default
        if sdpa not in table:
            raise _decompose_error(first) from first
        del table[sdpa]
        try:
            return ep.run_decompositions(table)
        except Exception:
            raise _decompose_error(first) from first


def _decompose_error(e: Exception) -> TorchImportError:
    first = (str(e).strip().splitlines() or [""])[0]
    return TorchImportError(f"cannot import the exported program: PyTorch's "
                            f"run_decompositions() failed ({type(e).__name__}: {first})")


def from_torch(
    module: Any,
    example_args: Any,
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    keep_params_as_input: bool = False,
    function_name: str = "main",
) -> IRModule:
    """Export ``module`` with ``torch.export.export`` and import it
    (:func:`from_exported_program`).

    ``example_args``/``example_kwargs`` are example inputs (a tuple; one tensor is taken
    as a 1-tuple); ``dynamic_shapes`` gives the dynamic dimensions as in
    ``torch.export.export`` (e.g. ``({0: torch.export.Dim("batch", max=64)},)``): they
    become plait symbolic sizes named after the ``Dim``, with their ranges kept in the
    module's ``dim_ranges``.  ``strict`` is passed to ``torch.export.export``.
    """
    import torch

    args = example_args if isinstance(example_args, tuple) else (example_args,)
    kwargs = dict(example_kwargs or {})
    if isinstance(module, torch.nn.Module):
        module = module.eval()
    try:
        ep = torch.export.export(module, args, kwargs or None, dynamic_shapes=dynamic_shapes,
                                 strict=strict)
    except Exception as e:
        raise TorchImportError(f"cannot import the module: torch.export.export failed "
                               f"({type(e).__name__}: {str(e).strip().splitlines()[0]})"
                               ) from e
    names = _dim_names(ep, module, args, kwargs, dynamic_shapes)
    return from_exported_program(ep, keep_params_as_input=keep_params_as_input,
                                 function_name=function_name, dim_names=names)


def _dim_names(ep: Any, module: Any, args: tuple, kwargs: dict, dynamic_shapes: Any
               ) -> dict[Any, str]:
    """PyTorch's shape symbols named after the ``Dim`` objects of ``dynamic_shapes``."""
    import torch
    from torch.export.graph_signature import InputKind

    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, Mapping) and not isinstance(args, Mapping):
        forward = module.forward if isinstance(module, torch.nn.Module) else module
        try:
            bound = inspect.signature(forward).bind(*args, **kwargs)
        except TypeError:
            return {}
        pairs = [(bound.arguments[k], dynamic_shapes.get(k)) for k in bound.arguments]
    else:
        ds = list(dynamic_shapes)
        pairs = list(zip(args, ds[: len(args)]))
        if len(ds) > len(args) and isinstance(ds[len(args)], Mapping):
            pairs += [(kwargs[k], v) for k, v in ds[len(args)].items() if k in kwargs]
    # the (tensor, spec) leaves in pytree order (an explicit stack, depth-first)
    axes: list[dict[int, str]] = []
    stack = list(reversed(pairs))
    while stack:
        value, spec = stack.pop()
        if isinstance(value, torch.Tensor):
            axes.append(_spec_names(spec))
        elif isinstance(value, list | tuple):
            specs = list(spec) if isinstance(spec, list | tuple) else [None] * len(value)
            stack.extend(reversed(list(zip(value, specs))))
        elif isinstance(value, Mapping):
            specs = spec if isinstance(spec, Mapping) else {}
            stack.extend(reversed([(value[k], specs.get(k)) for k in value]))
    user = [n for n, s in zip((n for n in ep.graph.nodes if n.op == "placeholder"),
                              ep.graph_signature.input_specs)
            if s.kind == InputKind.USER_INPUT and isinstance(n.meta.get("val"), torch.Tensor)]
    names: dict[Any, str] = {}
    for node, named in zip(user, axes):
        shape = node.meta["val"].shape
        for axis, name in named.items():
            if axis < len(shape):
                e = sym_expr(shape[axis])
                if getattr(e, "is_Symbol", False) and e not in names:
                    names[e] = sanitize(name)
    return names


def _spec_names(spec: Any) -> dict[int, str]:
    items = (spec.items() if isinstance(spec, Mapping)
             else enumerate(spec) if isinstance(spec, list | tuple) else ())
    out = {}
    for axis, dim in items:
        name = getattr(dim, "__name__", None)
        if isinstance(name, str) and name.isidentifier():
            out[int(axis)] = name
    return out


def exported_params(ep: Any) -> list[Any]:
    """The values (numpy arrays) of the parameters and buffers of ``ep`` in the order
    ``from_exported_program(ep, keep_params_as_input=True)`` makes them parameters of
    ``main`` (after the user inputs)."""
    import numpy as np
    from torch.export.graph_signature import InputKind

    out = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            t = ep.state_dict[spec.target] if spec.target in ep.state_dict else (
                ep.constants[spec.target])
            out.append(np.array(t.detach().cpu().numpy(), order="C", copy=True))
    return out
