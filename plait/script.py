"""IR modules written directly in Python files, in the text format.

    from plait.script import Tensor, dataflow, function, module, output, relu

    @module
    class Model:
        @function
        def main(x: Tensor((1, "n"), "float32")) -> Tensor((1, "n"), "float32"):
            with dataflow():
                y = relu(x)
                output(y)
            return y

    # Model is now an IRModule

:func:`module` reads the class's source with :func:`inspect.getsource` and parses it
with :func:`plait.ir.parser.parse`; the body of the class is never run as IR (Python
only creates the class, and never calls its functions).  Error messages point at the
lines of the Python file.

The other names here (``function``, ``dataflow``, ``output``, ``Tensor``, ``cls``, the
registered op names, ...) are inert markers: they exist so that the file imports
and linters find every name, and they do nothing.  Python evaluates the annotations
of a ``def`` when the class is created, so write symbolic sizes as strings there
(``Tensor((1, "n"), "float32")``) or add ``from __future__ import annotations``;
the parser reads ``n`` and ``"n"`` alike.  Any registered op can be imported from
this module as a marker (``from plait.script import relu``); dotted dialect ops are
reached through their namespace (``from plait.script import qnn``).
"""

from __future__ import annotations

import collections.abc as cabc
import inspect
import textwrap
from typing import Any

from .ir.expr import Op
from .ir.module import IRModule
from .ir.parser import ParseError, parse


class _Marker:
    """An inert name of the text format: calling it, indexing it or reading an
    attribute of it gives the marker back, and as a decorator it returns the
    decorated object."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if (
            len(args) == 1
            and not kwargs
            and (inspect.isfunction(args[0]) or isinstance(args[0], type))
        ):
            return args[0]
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key: Any) -> Any:
        return self

    def __enter__(self) -> _Marker:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return f"<plait.script marker {self._name}>"


function = _Marker("function")
"""``@function`` / ``@function(attrs={...}, pure=False)``: a graph function."""
dataflow = _Marker("dataflow")
"""``with dataflow():`` opens a dataflow block."""
output = _Marker("output")
"""``output(a, b)`` ends a dataflow block, naming the variables used after it."""
match_cast = _Marker("match_cast")
const = _Marker("const")
prim = _Marker("prim")
shape = _Marker("shape")
extern = _Marker("extern")
cls = _Marker("cls")
"""``cls.name`` refers to function ``name`` of the module."""
ops = _Marker("ops")
Tensor = _Marker("Tensor")
Tuple = _Marker("Tuple")
Shape = _Marker("Shape")
Prim = _Marker("Prim")
Object = _Marker("Object")
Callable = _Marker("Callable")


def module(
    cls_: type | None = None, /, *, attrs: cabc.Mapping[str, Any] | None = None
) -> IRModule | cabc.Callable[[type], IRModule]:
    """Class decorator: the class, written in the text format, as an IRModule.

    ``@module`` or ``@module(attrs={...})``; the attributes given here are the
    module's attributes (the decorator's text is not re-read)."""
    if cls_ is None:
        return lambda c: _module_from_class(c, attrs)
    return _module_from_class(cls_, attrs)


def _module_from_class(klass: type, attrs: cabc.Mapping[str, Any] | None) -> IRModule:
    try:
        lines, start = inspect.getsourcelines(klass)
        filename = inspect.getsourcefile(klass) or "<unknown>"
    except (OSError, TypeError) as e:
        raise ValueError(
            f"@module needs the source of class {klass.__name__} ({e}); "
            "use plait.parse(text) for text that is not in a file"
        ) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first = next((ln for ln in lines if ln.strip()), "")
    indent = len(first) - len(first.lstrip())
    return parse(
        dedented,
        filename,
        first_line=start,
        col_offset=indent,
        module_attrs=dict(attrs) if attrs is not None else None,
    )


def __getattr__(name: str) -> Any:
    """Registered op names (and dialect namespaces) as markers."""
    if not name.startswith("_") and any(
        n == name or n.startswith(name + ".") for n in Op.definitions
    ):
        marker = globals()[name] = _Marker(name)  # one marker per name
        return marker
    raise AttributeError(f"module 'plait.script' has no attribute {name!r}")


__all__ = [
    "Callable",
    "Object",
    "ParseError",
    "Prim",
    "Shape",
    "Tensor",
    "Tuple",
    "cls",
    "const",
    "dataflow",
    "extern",
    "function",
    "match_cast",
    "module",
    "ops",
    "output",
    "parse",
    "prim",
    "shape",
]
