"""Shared helpers of the pass-infrastructure tests: text modules and small passes."""

from __future__ import annotations

import textwrap

from plait.ir import Call, Expr, Function, IRModule, Op
from plait.ir.parser import parse
from plait.ir.visitor import ExprMutator
from plait.op import make_call
from plait.transform import Pass, function_pass, module_pass


def P(text: str) -> IRModule:
    """Parse a module written in the text format (indentation removed)."""
    return parse(textwrap.dedent(text))


BASIC = """
    @module(attrs={"phase": "optimization"})
    class Module:
        @function
        def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
            with dataflow():
                y = relu(x)
                z = add(y, x)
                output(z)
            return z
"""

BASIC_ABS = BASIC.replace("relu(x)", "abs(x)")

INGESTION = """
    @module(attrs={"phase": "ingestion"})
    class Module:
        @function
        def main(
            x: Tensor((2, 3), "float32"),
            y: Tensor((2, 3), "float32"),
        ) -> Tensor((2, 3), "float32"):
            @function
            def f(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                b = add(a, y)
                return b
            z = f(x)
            w = relu(z)
            return w
"""


class _ReluToAbs(ExprMutator):
    def rewrite_call(self, call: Call) -> Expr:
        if isinstance(call.op, Op) and call.op.name == "relu":
            return make_call("abs", *call.args)
        return call


@function_pass(name="test.ReluToAbs")
def relu_to_abs(func: Function) -> Function:
    """Rewrite relu into abs (a tiny rewrite for tests)."""
    return _ReluToAbs().visit_function(func)


@module_pass(name="test.Tag", phases="*")
class Tag:
    """Set the module attribute ``tag``."""

    def __init__(self, value: str = "t", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        self.value = value

    def transform_module(self, mod: IRModule, ctx: object) -> IRModule:
        return mod.with_attrs(tag=self.value)


def recorder(name: str, log: list[str], phases: object = ("optimization",),
             transition: str | None = None, opt_level: int = 0,
             requires: tuple[str, ...] = ()) -> Pass:
    """An unregistered module pass that appends its name to ``log`` and changes
    nothing (but the phase, for a transition)."""

    def run(mod: IRModule) -> IRModule:
        log.append(name)
        return mod

    run.__name__ = run.__qualname__ = name.replace(".", "_")
    return module_pass(run, name=name, phases=phases, transition=transition,  # type: ignore
                       opt_level=opt_level, requires=requires, register=False)


def onnx_model(model: str, request: object) -> IRModule:
    """A real model imported from ONNX: ``tiny_mlp`` (examples/models, input (2, 64)),
    ``cnn`` or ``mlp`` (the session's exported models of conftest.py)."""
    import os

    import pytest

    pytest.importorskip("onnx")
    from plait.frontend import from_onnx

    if model == "tiny_mlp":
        path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models",
                            "tiny_mlp.onnx")
        shapes = {"input": (2, 64)}
    elif model == "cnn":
        path, shapes = request.getfixturevalue("cnn_onnx"), {"input": (1, 3, 32, 32)}  # type: ignore[attr-defined]
    else:
        path, shapes = request.getfixturevalue("mlp_onnx"), {"input": (2, 784)}  # type: ignore[attr-defined]
    return from_onnx(path, shapes=shapes)
