"""The one writer of native call wrappers (plait.target.c.kernels.wrapper): what it
writes for static and symbolic sizes, the errors it gives, and that no other module of
the c target or the dialects writes wrapper C text itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from plait.target.c.kernels.wrapper import (
    DESC,
    NULL,
    Buffer,
    Local,
    NativeCall,
    Ref,
    Struct,
    emit_call,
)


def _call(shape: tuple, out: tuple, **kw: object) -> NativeCall:
    return NativeCall("t", "plait_t", (Buffer("x", shape), Buffer("out", out, out=True)),
                      (DESC, Ref("x"), NULL, 1, Ref("out")), "plait_t_desc",
                      (("n", shape[0]), ("scale", 0.5), ("inner", Struct((("k", 2),)))),
                      **kw)  # type: ignore[arg-type]


def test_static_call_has_a_static_descriptor_and_no_size_arguments() -> None:
    name, code, fn = emit_call(_call((4, 3), (4, 3)))
    assert name.startswith("plait_t_")
    assert code.startswith(f"int {name}(const float* x, float* out)")
    assert "    static const plait_t_desc d = {.n = 4, .scale = 0.5f, .inner = {.k = 2}};\n" in code
    assert "    return plait_t(&d, x, NULL, 1, out);\n" in code
    assert [tuple(b.shape) for b in fn.params] == [(4, 3), (4, 3)] and fn.num_outputs == 1


def test_symbolic_sizes_are_size_arguments_and_the_empty_output_returns_early() -> None:
    n = "n"
    name, code, fn = emit_call(_call((n, 3), (n, 3)))
    assert f"int {name}(const float* x, float* out, int64_t n0)" in code
    assert "    const plait_t_desc d = {.n = n0," in code          # not static: run-time size
    assert "return 0;" in code.split("const plait_t_desc")[0]    # the guard comes first
    assert [str(b.shape[0]) for b in fn.params] == ["n0", "n0"]   # a size variable


def test_a_pointer_field_makes_the_descriptor_non_static() -> None:
    call = NativeCall("t", "plait_t", (Buffer("a", (2,)), Buffer("out", (2,), out=True)),
                      (DESC,), "plait_t_desc", (("a", Ref("a")), ("c", Ref("out"))),
                      locals=(Local("o", "plait_o", (("k", 1),)),))
    _, code, _ = emit_call(call)
    assert ("    static const plait_o o = {.k = 1};\n"
            "    const plait_t_desc d = {.a = a, .c = out};") in code


def test_equal_calls_share_a_wrapper_and_different_ones_do_not() -> None:
    assert emit_call(_call((4, 3), (4, 3)))[0] == emit_call(_call((4, 3), (4, 3)))[0]
    assert emit_call(_call((4, 3), (4, 3)))[0] != emit_call(_call((5, 3), (5, 3)))[0]


def test_bad_calls_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="must end with the outputs"):
        NativeCall("t", "plait_t", (Buffer("out", (1,), out=True), Buffer("x", (1,))), ())
    with pytest.raises(ValueError, match="no C type for dtype 'complex64'"):
        NativeCall("t", "plait_t", (Buffer("x", (1,), "complex64"),
                                    Buffer("out", (1,), out=True)), ())


def test_no_other_module_writes_wrapper_text() -> None:
    """Every family's wrappers come from emit_call: no dispatch rule, family package or
    dialect writes ``int <symbol>(`` C text itself."""
    root = Path(__file__).resolve().parents[2] / "plait"
    writer = re.compile(r"""f["']int \{""")
    offenders = {str(p.relative_to(root)) for d in ("target/c", "dialects")
                 for p in sorted((root / d).rglob("*.py"))
                 if p.name != "wrapper.py" and writer.search(p.read_text())}
    assert not offenders, offenders
