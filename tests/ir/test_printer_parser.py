"""The text format: every node kind prints and parses back to a structurally equal
module, and every error in the text names its place (line, column, source line)."""

# ruff: noqa: E501  (texts in the format have long signature lines, as printed)

from __future__ import annotations

import ast
import math
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

import plait
from plait.ir import (
    DTYPES,
    BaseFunc,
    BindingBlock,
    BlockBuilder,
    Call,
    Constant,
    DataflowVar,
    ExternFunc,
    Function,
    FuncType,
    GlobalVar,
    If,
    IRModule,
    MatchCast,
    ObjectType,
    PrimType,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    ShapeType,
    StringImm,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    assert_structural_equal,
    structural_equal,
    structural_hash,
)
from plait.ir.expr import Op
from plait.ir.parser import ParseError, parse, register_func_parser
from plait.ir.printer import (
    _FUNC_PRINTERS,
    const_text,
    print_module,
    register_func_printer,
)
from plait.op import make_call, register_op
from plait.op.infer import infer_unary

F32 = TensorType((2, 3), "float32")


def roundtrip(mod: IRModule) -> str:
    """print -> parse is structurally equal (same hash) and prints the same text."""
    text = mod.script()
    again = parse(text)
    assert_structural_equal(mod, again)
    assert structural_hash(mod) == structural_hash(again)
    assert again.script() == text
    return text


def text_roundtrip(text: str) -> IRModule:
    """Parse hand-written text, then check that its printed form round-trips."""
    mod = parse(textwrap.dedent(text))
    roundtrip(mod)
    return mod


def func_body(mod: IRModule, name: str = "main") -> SeqExpr:
    body = mod[name].body
    assert isinstance(body, SeqExpr)
    return body


def bindings(mod: IRModule, name: str = "main") -> list:
    return [b for block in func_body(mod, name).blocks for b in block.bindings]


# ---------------------------------------------------------------- the guide's example


GUIDE_EXAMPLE = """\
@module(attrs={"target": "c"})
class Model:
    @function
    def main(x: Tensor((1, 256), "float32"), y: Tensor((1, 256), "float32")) -> Tensor((1, 512), "float32"):
        with dataflow():
            z = concat((x, y), axis=1)
            out = relu(z)
            output(out)
        return out
"""


def test_design_guide_example_parses_and_prints_the_same():
    mod = plait.parse(GUIDE_EXAMPLE)
    assert mod.attrs["target"] == "c"
    z, out = bindings(mod)
    assert isinstance(z.var, DataflowVar) and type(out.var) is Var
    assert out.var.ty == TensorType((1, 512), "float32")
    assert z.value.attrs["axis"] == 1
    assert mod.script("Model") == GUIDE_EXAMPLE
    roundtrip(mod)


def test_builder_module_round_trips_and_matches_text():
    bb = BlockBuilder()
    x, y = Var("x", TensorType((1, 256), "float32")), Var("y", TensorType((1, 256), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            z = bb.emit(make_call("concat", Tuple((x, y)), axis=1), "z")
            out = bb.emit_output(make_call("relu", z), "out")
        bb.emit_func_output(out)
    built = bb.get().with_attrs(target="c")
    assert_structural_equal(built, plait.parse(GUIDE_EXAMPLE))
    roundtrip(built)


# ---------------------------------------------------------------- every node kind


def test_every_node_kind_round_trips():
    mod = text_roundtrip(
        """
        @module(attrs={"phase": "ingestion", "nested": {"a": (1, 2.5, None, True)}})
        class M:
            @function(attrs={"compiler": "ext", "note": "it's"}, pure=False)
            def main(x: Tensor((n, 4), "float32"), c: Tensor((), "bool"), s: Shape(2), p: Prim("int32"), o: Object, f: Callable((Tensor((n, 4), "float32"),), Tensor((n, 4), "float32"))) -> Tuple(Tensor((n, 4), "float32"), Object):
                k = const(2.0, "float32")
                a = add(x, k)
                t = (a, x, (k,))
                u = t[0]
                v = t[-2]
                m = match_cast(u, Tensor((n, 4), "float32"))
                sh = shape((n, 4))
                pv = prim(7, "int64")
                st = "a string"
                e = extern("runtime.fn")
                g = cls.helper(m)
                ex = call_extern(extern("lib.gemm"), (m, g), out=Tensor((n, 4), "float32"), attrs={"alpha": 1.0})
                ck = call_kernel(cls.helper, (x,), out=Tensor((n, 4), "float32"))
                fc = f(x)
                if c:
                    r1 = relu(a)
                    r = r1
                else:
                    r = a
                def inner(z: Tensor((n, 4), "float32")) -> Tensor((n, 4), "float32"):
                    w = relu(z)
                    return w
                iv = inner(r)
                with dataflow():
                    d1 = relu(iv)
                    d2 = match_cast(d1, Tensor((n, 4), "float32"))
                    d3 = sum(d2, axis=(1,), keepdims=True)
                    output(d2, d3)
                res = (d2, o)
                return res

            @function
            def helper(y: Tensor((n, 4), "float32")) -> Tensor((n, 4), "float32"):
                return y
        """
    )
    kinds = {type(b.value) for b in bindings(mod)} | {type(b) for b in bindings(mod)}
    for kind in (
        Constant,
        Call,
        Tuple,
        TupleGetItem,
        ShapeExpr,
        PrimValue,
        StringImm,
        ExternFunc,
        If,
        Function,
        MatchCast,
        VarBinding,
    ):
        assert kind in kinds, kind
    main = mod["main"]
    assert main.pure is False and main.attrs["compiler"] == "ext"
    params = [p.ty for p in main.params]
    assert params[2] == ShapeType(2) and params[3] == PrimType("int32")
    assert params[4] == ObjectType() and isinstance(params[5], FuncType)
    assert mod.attrs["nested"]["a"] == (1, 2.5, None, True)


def test_forward_reference_and_call_types():
    mod = text_roundtrip(
        """
        @module
        class M:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                y = cls.later(x)
                return y

            @function
            def later(a: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                return a
        """
    )
    (b,) = bindings(mod)
    assert isinstance(b.value.op, GlobalVar)
    assert isinstance(b.value.op.ty, FuncType)  # the callee is typed, like a built one
    assert b.var.ty == F32


def test_defaults_are_omitted_and_filled_back():
    mod = text_roundtrip(
        """
        @module
        class M:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((1, 3), "float32"):
                s = sum(x, axis=(0,), keepdims=True)
                return s
        """
    )
    text = mod.script()
    assert "keepdims=True" in text and "axis=(0,)" in text
    reduced = parse(text.replace("keepdims=True", "keepdims=False").replace("(1, 3)", "(3,)"))
    (b,) = bindings(reduced)
    assert b.value.attrs["keepdims"] is False
    assert "keepdims" not in reduced.script()  # default, so not printed


def test_binding_annotations_declare_the_variable_type():
    mod = text_roundtrip(
        """
        @module
        class M:
            @function
            def main(x: Tensor((2, 3), "float32"), c: Tensor((), "bool")) -> Object:
                y: Tensor(None, "float32") = relu(x)
                z: Object = relu(y)
                w: Tensor((2, 3), "float32") = extern("f")(x)
                r: Tensor(None, "float32")
                if c:
                    r = x
                else:
                    r = x
                return z
        """
    )
    y, z, w, r = bindings(mod)
    assert y.var.ty == TensorType(None, "float32") and y.value.ty == F32
    assert z.var.ty == ObjectType()
    assert w.value.ty == F32  # a call of an extern takes its type from the annotation
    assert r.var.ty == TensorType(None, "float32") and r.value.ty == F32
    text = mod.script()
    assert "y: Tensor(None" in text and "        r: Tensor(None" in text


def test_elif_chain_parses_as_nested_if():
    mod = parse(
        textwrap.dedent(
            """
            @module
            class M:
                @function
                def main(a: Tensor((), "bool"), b: Tensor((), "bool"), x: Tensor((2,), "int32")) -> Tensor((2,), "int32"):
                    if a:
                        y = x
                    elif b:
                        y = relu(x)
                    else:
                        y = add(x, x)
                    return y
            """
        )
    )
    (b,) = bindings(mod)
    assert isinstance(b.value, If)
    inner = b.value.else_branch.blocks[0].bindings[0].value
    assert isinstance(inner, If)
    roundtrip(mod)


def test_nested_expressions_are_normalized():
    mod = text_roundtrip(
        """
        @module
        class M:
            @function
            def main(x: Tensor((2, 3), "float32")) -> Tensor((2, 3), "float32"):
                y = relu(add(relu(x), x))
                return relu(y)
        """
    )
    assert len(bindings(mod)) == 4  # two inner calls bound, y, and the returned call


@pytest.mark.parametrize("dtype", DTYPES)
def test_constants_of_every_dtype_round_trip_bit_exactly(dtype):
    rng = np.random.default_rng(DTYPES.index(dtype))
    arrays = []
    if dtype == "bool":
        arrays += [np.array(True), rng.integers(0, 2, (3, 4)).astype(bool)]
    else:
        info = np.iinfo(dtype) if dtype[0] in "iu" else np.finfo(dtype)
        arrays += [
            np.array([info.min, info.max, 0, 1], dtype=dtype),
            rng.integers(0, 255, 40, dtype=np.uint8).view(dtype)
            if np.dtype(dtype).itemsize <= 40
            else np.zeros(5, dtype),
            np.zeros((0, 3), dtype),
            np.array(1, dtype=dtype),
        ]
        if dtype.startswith("float"):
            bits = np.array([0, 0x7FFF, 1], dtype=f"uint{np.dtype(dtype).itemsize * 8}")
            specials = np.array([np.nan, -np.inf, np.inf, -0.0, 0.1, 1e-7], dtype)
            arrays += [specials, bits.view(dtype), np.array(-0.0, dtype), np.array([0.1], dtype)]
    bb = BlockBuilder()
    with bb.function("main", []):
        last = None
        for i, a in enumerate(arrays):
            last = bb.emit(Constant(a), f"c{i}")
        bb.emit_func_output(last)
    mod = bb.get()
    text = roundtrip(mod)
    parsed = [b.value.data for b in bindings(parse(text))]
    for a, p in zip(arrays, parsed):
        assert a.dtype == p.dtype and a.shape == p.shape and a.tobytes() == p.tobytes()


def test_constant_text_is_inline_when_small_and_finite():
    assert const_text(np.array(1.5, "float32")) == 'const(1.5, "float32")'
    assert const_text(np.array([[1, 2], [3, 4]], "int8")) == 'const([[1, 2], [3, 4]], "int8")'
    assert const_text(np.array(-0.0, "float64")) == 'const(-0.0, "float64")'
    assert const_text(np.array(0.1, "float32")) == 'const(0.1, "float32")'
    assert const_text(np.array([True, False])) == 'const([True, False], "bool")'
    assert "base64=" in const_text(np.array(np.nan, "float32"))
    assert "base64=" in const_text(np.zeros(100, "float32"))
    assert "shape=(0, 2)" in const_text(np.zeros((0, 2), "int32"))


def test_prim_values_and_strings_round_trip():
    bb = BlockBuilder()
    with bb.function("main", []):
        vals = [
            PrimValue(3, "int64"),
            PrimValue(2.5, "float32"),
            PrimValue(True, "bool"),
            PrimValue(math.inf, "float64"),
            PrimValue(-0.0, "float64"),
            PrimValue(math.nan, "float32"),
            StringImm('quote " and \\ and \n'),
            StringImm("é ünïcode"),
            ShapeExpr((1, "n", 0)),
            ShapeExpr(()),
        ]
        last = None
        for v in vals:
            last = bb.emit(v, "v")
        bb.emit_func_output(last)
    roundtrip(bb.get())


def test_names_are_valid_unique_and_never_collide():
    bb = BlockBuilder()
    x = Var("relu", F32)  # an op name
    with bb.function("main", [x]):
        a = bb.emit(make_call("relu", x), "lv")
        b = bb.emit(make_call("relu", a), "lv")
        c = bb.emit(make_call("relu", b), "shape")  # a word of the format
        d = bb.emit(make_call("relu", c), "class")  # a keyword
        e = bb.emit(make_call("relu", d), "conv1/out:0")  # not an identifier
        f = bb.emit(make_call("relu", e), "1st")
        g = bb.emit(make_call("relu", f), "lv1")
        bb.emit_func_output(g)
    text = roundtrip(bb.get())
    names = [ln.split(" = ")[0].strip() for ln in text.splitlines() if " = " in ln]
    assert names == ["lv", "lv1", "shape_", "class_", "conv1_out_0", "v_1st", "lv11"]
    assert "def main(relu_: Tensor" in text


def test_dotted_and_escaped_op_names():
    names = ["plaittest.scale", "plaittest-odd name", "shape"]
    for n in names:
        register_op(n, inputs=("x",), infer_type=infer_unary, override=True, doc="test op")
    try:
        bb = BlockBuilder()
        x = Var("x", F32)
        with bb.function("main", [x]):
            a = bb.emit(make_call("plaittest.scale", x))
            b = bb.emit(make_call("plaittest-odd name", a))
            c = bb.emit(make_call("shape", b))
            bb.emit_func_output(c)
        text = roundtrip(bb.get())
        assert "plaittest.scale(x)" in text
        assert 'ops["plaittest-odd name"](lv)' in text
        assert 'ops["shape"](lv1)' in text
    finally:
        for n in names:
            Op.definitions.pop(n, None)


def test_module_without_functions_and_standalone_functions():
    empty = IRModule({}, {"target": "c"})
    assert roundtrip(empty).splitlines()[-1].strip() == "pass"
    mod = parse(
        textwrap.dedent(
            """
            @function
            def f(x: Tensor((2,), "int32")) -> Tensor((2,), "int32"):
                return x

            @function
            def g(x: Tensor((2,), "int32")) -> Tensor((2,), "int32"):
                y = cls.f(x)
                return y
            """
        )
    )
    assert list(mod) == ["f", "g"]


def test_untyped_parameters_and_unknown_shapes():
    text_roundtrip(
        """
        @module
        class M:
            @function
            def main(x, y: Tensor(None, None), z: Tensor(shape=None, dtype="int8")) -> Object:
                a = relu(y)
                return a
        """
    )


def test_parse_spans_point_at_the_source():
    mod = plait.parse(GUIDE_EXAMPLE, "model.plait")
    z, out = bindings(mod)
    assert (z.value.span.source, z.value.span.line, z.value.span.col) == ("model.plait", 6, 17)
    assert (out.var.span.line, out.var.span.col) == (7, 19)
    assert mod["main"].params[1].span.line == 4


def test_gc_state_is_restored_after_parse():
    import gc

    assert gc.isenabled()
    plait.parse(GUIDE_EXAMPLE)
    assert gc.isenabled()
    with pytest.raises(ParseError):
        plait.parse("class")
    assert gc.isenabled()


# ---------------------------------------------------------------- node_repr


def test_node_repr_is_short_and_readable():
    x = Var("x", F32)
    call = Call(Op.get("add"), (x, Constant(np.array(1.0, "float32"))))
    assert repr(call) == 'add(x, const(1.0, "float32"))'
    assert repr(x) == 'x: Tensor((2, 3), "float32")'
    assert repr(Op.get("relu")) == "relu"
    assert repr(TupleGetItem(Tuple((x, x)), 1)) == "(x, x)[1]"
    y = Var("y")
    assert repr(VarBinding(y, call)) == 'y = add(x, const(1.0, "float32"))'
    typed = VarBinding(Var("t", F32), call)  # the variable's type differs from the value's
    assert repr(typed) == 't: Tensor((2, 3), "float32") = add(x, const(1.0, "float32"))'
    assert repr(BindingBlock((VarBinding(y, call),))).startswith("y = add(")
    func = Function((x,), SeqExpr((), x), F32)
    assert repr(func).splitlines()[-1].strip() == "return x"
    cond = Var("c", TensorType((), "bool"))
    text = repr(If(cond, SeqExpr((), x), SeqExpr((), y)))
    assert "if c:" in text and "else:" in text
    deep = x
    for _ in range(5000):  # deep nesting is printed without recursion
        deep = Call(Op.get("relu"), (deep,))
    assert repr(deep).count("relu(") == 5000


# ---------------------------------------------------------------- the kernel hook


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class _Blob(BaseFunc):
    """A stand-in for a kernel: a module entry that is not a graph function."""

    payload: str = ""


def test_function_printer_and_parser_hooks():
    def print_blob(name: str, func: _Blob, printer) -> str:
        return f"@blob(size={printer.value_text(len(func.payload))})\ndef {name}():\n    return {func.payload!r}"

    def parse_blob(node: ast.FunctionDef, ctx) -> _Blob:
        ret = node.body[-1]
        if not isinstance(ret, ast.Return) or not isinstance(ret.value.value, str):
            ctx.error(node, "a blob returns a string")
        size = ctx.literal(node.decorator_list[0].keywords[0].value)
        assert size == len(ret.value.value)
        assert "def" in ctx.source_line(node) and ctx.span(node).line > 0
        return _Blob(payload=ret.value.value, ty=FuncType((F32,), F32))

    register_func_printer(_Blob, print_blob)
    register_func_parser("blob", parse_blob)
    try:
        bb = BlockBuilder()
        gv = bb.add_func(_Blob(payload="bits", ty=FuncType((F32,), F32)), "k")
        x = Var("x", F32)
        with bb.function("main", [x]):
            y = bb.emit(make_call("call_kernel", gv, Tuple((x,)), out=F32))
            bb.emit_func_output(y)
        text = roundtrip(bb.get())
        assert "    @blob(size=4)\n    def k():\n        return 'bits'" in text
        with pytest.raises(ParseError, match=r"<string>:4:5: a blob returns a string"):
            parse(text.replace("return 'bits'", "return 1"))
        with pytest.raises(TypeError):
            register_func_printer(int, print_blob)
        with pytest.raises(ValueError):
            register_func_parser("function", parse_blob)
    finally:
        _FUNC_PRINTERS.pop(_Blob, None)
        from plait.ir import parser as parser_module

        parser_module._FUNC_PARSERS.pop("blob", None)
    with pytest.raises(ParseError, match="unknown decorator; expected one of @function"):
        parse(text)
    assert "opaque" in print_module(bb.get())


# ---------------------------------------------------------------- @module in Python files


def test_script_module_decorator_on_a_python_class():
    from plait.script import Tensor, dataflow, function, module, output, relu

    @module(attrs={"target": "c"})
    class Model:
        @function
        def main(x: Tensor((1, "n"), "float32")) -> Tensor((1, "n"), "float32"):
            with dataflow():
                y = relu(x)
                output(y)
            return y

    assert isinstance(Model, IRModule) and Model.attrs["target"] == "c"
    expected = parse(
        """
@module
class M:
    @function
    def main(a: Tensor((1, n), "float32")) -> Tensor((1, n), "float32"):
        with dataflow():
            b = relu(a)
            output(b)
        return b
"""
    )
    assert structural_equal(Model, expected.with_attrs(target="c"))


def test_script_errors_point_at_the_python_file():
    from plait.script import Tensor, function, module

    with pytest.raises(ParseError) as info:

        @module
        class Bad:
            @function
            def main(x: Tensor((2,), "float32")) -> Tensor((2,), "float32"):
                y = rleu(x)  # noqa: F821
                return y

    err = info.value
    assert err.source.endswith("test_printer_parser.py")
    with open(err.source) as f:
        lines = f.read().splitlines()
    assert lines[err.line - 1].strip() == "y = rleu(x)  # noqa: F821"
    assert err.col == 21  # the column in this file, not in the dedented class
    assert "unknown operator 'rleu'; did you mean relu?" in str(err)
    assert "y = rleu(x)" in str(err)


def test_script_markers_are_inert_and_ops_importable():
    import plait.script as script

    assert script.relu(1, 2) is script.relu
    assert script.Tensor((1, 2), "float32") is script.Tensor
    assert script.cls.anything is script.cls
    with script.dataflow():
        pass
    with pytest.raises(AttributeError):
        script.not_an_op_name  # noqa: B018
    with pytest.raises(ValueError, match="use plait.parse"):
        script.module(type("Dynamic", (), {}))


# ---------------------------------------------------------------- errors


def parse_error(text: str, *fragments: str, line: int | None = None, col: int | None = None):
    with pytest.raises(ParseError) as info:
        parse(textwrap.dedent(text).lstrip("\n"))
    err = info.value
    msg = str(err)
    assert msg.startswith(f"<string>:{err.line}:{err.col}: ")
    for f in fragments:
        assert f in msg, msg
    if line is not None:
        assert err.line == line, msg
    if col is not None:
        assert err.col == col, msg
    assert isinstance(err, ValueError)
    return err


HEADER = """\
@module
class M:
    @function
    def main(x: Tensor((2, 3), "float32"), y: Tensor((2, 3), "int32"), c: Tensor((), "bool")) -> Tensor((2, 3), "float32"):
"""


def body_error(body: str, *fragments: str, line: int | None = None, col: int | None = None):
    text = HEADER + textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8) + "\n"
    with pytest.raises(ParseError) as info:
        parse(text)
    err = info.value
    msg = str(err)
    for f in fragments:
        assert f in msg, msg
    if line is not None:
        assert err.line == line, msg
    if col is not None:
        assert err.col == col, msg
    return err


def test_error_message_shows_line_and_caret():
    err = body_error("a = rleu(x)\nreturn a", "unknown operator 'rleu'; did you mean relu?")
    assert (err.line, err.col) == (5, 13)
    lines = str(err).splitlines()
    assert lines[0].startswith("<string>:5:13: unknown operator")
    assert lines[1] == "    a = rleu(x)"
    assert lines[2] == "        ^"


def test_syntax_error():
    parse_error("@module\nclass M:\n    def f(:\n", "<string>:3:", "syntax error")
    parse_error("x = (" * 300 + "1" + ")" * 300, "syntax error")


def test_unknown_attribute_points_at_the_keyword():
    body_error(
        "a = concat((x, x), axs=1)\nreturn a",
        "in function 'main', binding 'a'",
        "op 'concat' has no attribute 'axs'; did you mean axis?",
        line=5,
        col=28,
    )


def test_ill_typed_attribute():
    body_error("a = sum(x, keepdims=1)\nreturn a", "attribute 'keepdims' of op 'sum'", col=20)


def test_type_error_from_the_builder_names_function_binding_and_argument():
    err = body_error(
        "a = relu(x)\nb = add(a, y)\nreturn b",
        "in function 'main', binding 'b'",
        "argument 1 (y) has dtype int32, expected float32",
        line=6,
        col=20,
    )
    assert "b = add(a, y)" in str(err)


def test_type_error_in_a_nested_call_points_at_the_inner_call():
    body_error("a = relu(add(x, y))\nreturn a", "dtype int32", line=5, col=25)
    body_error("a = relu(relu(1))\nreturn a", "a bare int", line=5, col=23)


def test_undefined_variable_suggests_close_names():
    body_error("a = relu(xx)\nreturn a", "undefined variable 'xx'; did you mean x", col=18)
    body_error("a = relu(main)\nreturn a", "the module function is cls.main")
    body_error("a = add(x, relu)\nreturn a", "'relu' is an operator, not a variable")


def test_dataflow_local_is_not_visible_after_the_block():
    body_error(
        "with dataflow():\n    a = relu(x)\n    b = relu(a)\n    output(b)\nreturn a",
        "'a' is local to the dataflow block at line 5; list it in that block's output(...)",
        line=9,
    )


def test_dataflow_and_output_misuse():
    body_error("with dataflow():\n    a = relu(x)\nreturn a", "must end with output(...)", line=6)
    body_error(
        "a = relu(x)\noutput(a)\nreturn a", "output(...) must be the last statement of a with"
    )
    body_error(
        "with dataflow():\n    a = relu(x)\n    output(b)\nreturn a",
        "output(b): 'b' is not bound in this dataflow block",
    )
    body_error(
        "with dataflow():\n    a = relu(x)\n    output(a, a)\nreturn a",
        "output(...) lists 'a' twice",
    )
    body_error(
        "with dataflow():\n    with dataflow():\n        output()\n    output()\nreturn x",
        "dataflow blocks cannot be nested",
    )
    body_error(
        "if c:\n    with dataflow():\n        output()\n    r = x\nelse:\n    r = x\nreturn r",
        "only allowed at the top level of a function body",
    )
    body_error(
        "with dataflow():\n    if c:\n        r = x\n    else:\n        r = x\n    output()\nreturn x",
        "if is not allowed in a dataflow block",
    )
    body_error("with open(x):\n    output()\nreturn x", "the only with-statement of the format")
    body_error(
        "with dataflow():\n    a = relu(x)\n    output(a)\n    b = relu(a)\nreturn x",
        "must end with output(...)",
    )


def test_if_misuse():
    body_error("if c:\n    r = x\nreturn r", "an if needs an else")
    body_error(
        "if c:\n    r = x\nelse:\n    s = x\nreturn r",
        "the then-branch assigns 'r', the else-branch 's'",
    )
    body_error("if c:\n    relu(x)\nelse:\n    r = x\nreturn r", "must end by assigning the result")
    body_error("r: Object\na = relu(x)\nreturn a", "a bare annotation must be followed by an if")
    body_error(
        "r: Object\nif c:\n    s = x\nelse:\n    s = x\nreturn s",
        "declares 'r', but the if assigns 's'",
    )
    body_error(
        "if x:\n    r = x\nelse:\n    r = x\nreturn r", "the condition of if must be a scalar"
    )


def test_return_misuse():
    body_error("return x\na = relu(x)", "must end with a return")
    body_error("return x\nreturn x", "return must be the last statement")
    body_error("a = relu(y)\nreturn a", 'returns Tensor((2, 3), "int32")', "declared return type")
    body_error("return", "return needs a value")


def test_annotation_checked_against_inference():
    body_error(
        'a: Tensor((3, 2), "float32") = relu(x)\nreturn a',
        'the value has type Tensor((2, 3), "float32"), but the binding declares Tensor((3, 2)',
        line=5,
    )
    body_error(
        'a: Tensor((2, 3), "int8") = match_cast(x, Tensor((2, 3), "float32"))\nreturn x',
        "differs from the match_cast type",
    )


def test_expression_errors():
    body_error("a = relu(1.5)\nreturn a", "a bare float is not a value", 'const(1.5, "float32")')
    body_error(
        "a = x + x\nreturn a", "Python operators are not part of the format; write add(a, b)"
    )
    body_error("a = [x]\nreturn x", "write a tuple")
    body_error("a = relu(*x)\nreturn x", "* is not allowed in a call")
    body_error("a = x[i]\nreturn x", "a tuple index must be an integer literal")
    body_error("a = x.y\nreturn x", "only module functions (cls.name)")
    body_error("a = cls.mian(x)\nreturn a", "the module has no function 'mian'; did you mean main?")
    body_error(
        "a = x(x)\nreturn a",
        "'x' is a variable of type Tensor((2, 3), \"float32\"), not a function",
    )
    body_error("relu = relu(x)\nb = relu(relu)\nreturn b", "it shadows the operator 'relu'")
    body_error("shape = relu(x)\nreturn x", "'shape' is a word of the text format")
    body_error("a = match_cast(x)\nreturn x", "match_cast takes a value and a type")
    body_error("a = relu(match_cast(x, Object))\nreturn x", "must be the whole value of a binding")
    body_error('a = Tensor((2,), "float32")\nreturn x', "is a type, not a value")
    body_error("a, b = x\nreturn x", "a binding assigns a single name")
    body_error("relu(x)\nreturn x", "an expression statement has no effect")
    body_error("for i in x:\n    pass\nreturn x", "unsupported statement (For)")
    body_error("a = extern(1)\nreturn x", "extern takes the symbol as a string")
    body_error("a = sum(x, axis=n)\nreturn a", "bare name 'n' in a value")
    body_error('a = sum(x, axis=opaque("obj"))\nreturn a', "opaque(...) marks a value")
    body_error('a = sum(x, axis=float("x"))\nreturn a', "float('x') is not a number")


def test_constant_errors():
    body_error('a = const(1.5, "int32")\nreturn x', "needs whole numbers")
    body_error('a = const(300, "uint8")\nreturn x', "out of range for uint8")
    body_error('a = const(1, "float128")\nreturn x', "unknown dtype 'float128'")
    body_error("a = const(1)\nreturn x", "const(...) needs a dtype")
    body_error('a = const(base64="AAAA", dtype="float32")\nreturn x', "needs shape=")
    body_error(
        'a = const(base64="AAAA", shape=(2,), dtype="float32")\nreturn x',
        "holds 3 bytes, but shape (2,) of float32 needs 8",
    )
    body_error('a = const(base64="!!", shape=(1,), dtype="int8")\nreturn x', "not valid base64")
    body_error('a = const([[1], [2, 3]], "int32")\nreturn x', "equal lengths")
    body_error('a = prim("s", "int64")\nreturn x', "prim(...) takes a number")


def test_type_errors_in_annotations():
    parse_error(
        '@module\nclass M:\n    @function\n    def f(x: Tensr((2,), "float32")) -> Object:\n        return x\n',
        "unknown type 'Tensr'; did you mean Tensor?",
        line=4,
        col=14,
    )
    parse_error(
        '@module\nclass M:\n    @function\n    def f(x: Tensor((2,), "float31")) -> Object:\n        return x\n',
        "unknown dtype 'float31'",
    )
    parse_error(
        '@module\nclass M:\n    @function\n    def f(x: Tensor((-2,), "float32")) -> Object:\n        return x\n',
        "a dimension is a non-negative int or a symbolic size name",
    )
    parse_error(
        '@module\nclass M:\n    @function\n    def f(x: Tensor(2, "float32")) -> Object:\n        return x\n',
        "a shape is a tuple of sizes",
    )
    parse_error(
        "@module\nclass M:\n    @function\n    def f(x: Callable(Object, Object)) -> Object:\n        return x\n",
        "Callable((param types...), result type)",
    )
    parse_error(
        "@module\nclass M:\n    @function\n    def f(x=1) -> Object:\n        return x\n",
        "must be plain names",
    )
    parse_error(
        '@module\nclass M:\n    @function\n    def f(x: Tensor((9223372036854775808,), "int8"))'
        " -> Object:\n        return x\n",
        "tensor dimension 9223372036854775808 does not fit in int64",
    )


def test_duplicate_parameter_names_are_refused():
    parse_error(
        "@module\nclass M:\n    @function\n    def f(x: Object, y: Object, x: Object) -> Object:"
        "\n        return x\n",
        "'f' has more than one parameter named 'x': parameter names must be unique",
        line=4,
        col=33,
    )


def test_module_structure_errors():
    parse_error("x = 1\n", "expected a @module class")
    parse_error("", "no @module class and no @function")
    parse_error(
        "@module\nclass A:\n    pass\n@module\nclass B:\n    pass\n", "more than one @module class"
    )
    parse_error("class A:\n    pass\n", "must be decorated with @module")
    parse_error("@module(target=1)\nclass A:\n    pass\n", "@module has no argument 'target'")
    parse_error('@module(attrs={"phase": "nope"})\nclass A:\n    pass\n', "unknown phase 'nope'")
    parse_error("@module\nclass A:\n    x = 1\n", "holds only @function")
    parse_error(
        "@module\nclass A:\n    @kernl\n    def f():\n        return 1\n",
        "unknown decorator; expected one of @function",
        line=3,
    )
    parse_error(
        "@module\nclass A:\n    @function\n    def f(x):\n        return x\n"
        "    @function\n    def f(x):\n        return x\n",
        "the module defines 'f' twice",
    )
    parse_error(
        "@module\nclass A:\n    @function(inline=True)\n    def f(x):\n        return x\n",
        "@function has no argument 'inline'",
    )
    parse_error(
        "@module\nclass A:\n    @function(pure=1)\n    def f(x):\n        return x\n",
        "pure= must be True or False",
    )


def test_a_lone_surrogate_is_a_parse_error():
    parse_error('@module\nclass M:\n    x = "a\udc80"\n', "character '\\udc80' cannot be "
                "encoded as UTF-8", line=3, col=11)


def test_non_ascii_source_columns():
    err = body_error('s = "héllo"\na = rleu(x)\nreturn a', "unknown operator")
    assert err.col == 13


# ---------------------------------------------------------------- docs and examples


def test_docs_examples_parse_and_round_trip():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "ir.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    modules = [b for b in blocks if b.startswith("@module")]
    modules += [b.split("parse('''", 1)[1].split("''')")[0] for b in blocks if "parse('''" in b]
    assert len(modules) >= 2
    for block in modules:
        roundtrip(parse(block, "docs/ir.md"))
    example = (root / "examples" / "mlp.plait.py").read_text()
    mod = parse(example, "examples/mlp.plait.py")
    assert list(mod) == ["main", "predict"]
    roundtrip(mod)
