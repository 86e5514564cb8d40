"""Text format of kernels: print -> parse -> structurally equal, standalone and inside
``@module`` classes; parse errors name the line and column."""

import textwrap

import pytest

import plait.kernel  # noqa: F401  (registers the @kernel text hooks)
from plait.ir import assert_structural_equal, structural_equal
from plait.ir.parser import ParseError, parse
from plait.kernel import (
    Buffer,
    BufferStore,
    FloatImm,
    For,
    IntImm,
    Kernel,
    KernelParseError,
    Let,
    Seq,
    Var,
    dsl,
    parse_kernel_source,
    print_kernel,
)

CANONICAL = [
    '''
@kernel
def add(
    a: Buffer((4, n), "float32"),
    b: Buffer((4, n), "float32"),
    out: Buffer((4, n), "float32", output=True),
):
    for i in parallel(4):
        for j in vectorized(n):
            out[i, j] = a[i, j] + b[i, j]
''',
    '''
@kernel(attrs={"op": "pad", "axes": (0, 1)})
def pad(x: Buffer((n,), "float64"), y: Buffer((n + 2,), "float64", output=True)):
    pass
'''.replace("(n + 2,)", "(m,)"),
    '''
@kernel
def mix(
    x: Buffer((n, 3), "float64"),
    idx: Buffer((n,), "int32"),
    y: Buffer((n,), "float64", output=True),
    flags: Buffer((n,), "bool", output=True),
):
    acc = alloc((1,), "float64")
    for i in range(n):
        t = x[i, 0] * 2.0 + float64(idx[i])
        acc[0] = max(t, -inf)
        if isnan(t) or t > 1e+30:
            y[i] = nan
            flags[i] = True
        elif not t < 0.5:
            y[i] = select(idx[i] % 2 == 0, exp(t), -1.5)
            flags[i] = False
        else:
            with scope():
                u = idx[i] // 3 - 7
                y[i] = float64(u)
            flags[i] = idx[i] != 0 and i >= 1
    for k in unrolled(3):
        y[0] = y[0] + pow(x[0, k], 2.0) + cast(1, "float64") + float64(float32(x[0, k]))
''',
]


@pytest.mark.parametrize("text", CANONICAL, ids=["add", "attrs", "mix"])
def test_canonical_text_round_trips_exactly(text: str) -> None:
    text = text.strip("\n")
    k = parse_kernel_source(text)
    name = text.split("def ", 1)[1].split("(", 1)[0]
    printed = print_kernel(name, k)
    assert printed == text
    assert_structural_equal(parse_kernel_source(printed), k)


def test_typed_literals_round_trip() -> None:
    x = Buffer("x", (4,), "int32")
    y = Buffer("y", (4,), "float64")
    i = Var("i")
    t = Var("t", "int32")
    body = For(i, 4, Let(t, x[i] * IntImm(3, "int32"), Seq((
        BufferStore(y, (i,), FloatImm(2.5, "float64")),
        BufferStore(x, (i,), t + IntImm(-1, "int32")),
    ))))
    k = Kernel((y, x), body, 1)
    text = print_kernel("k", k)
    assert "t = x[i] * 3" in text and "x[i] = t + -1" in text and "y[i] = 2.5" in text
    assert_structural_equal(parse_kernel_source(text), k)
    # a literal with no typed context prints with its dtype
    k2 = Kernel((x,), For(i, 4, Let(t, IntImm(7, "int32"), BufferStore(x, (i,), t))), 1)
    text2 = print_kernel("k2", k2)
    assert "t = int32(7)" in text2
    assert_structural_equal(parse_kernel_source(text2), k2)


def test_non_tail_let_prints_with_scope() -> None:
    a = Buffer("a", (2,), "float32")
    t = Var("t", "float32")
    body = Seq((Let(t, a[0] + 1.0, BufferStore(a, (0,), t)), BufferStore(a, (1,), a[0])))
    k = Kernel((a,), body, 1)
    text = print_kernel("k", k)
    assert "with scope():" in text
    assert_structural_equal(parse_kernel_source(text), k)


def test_names_are_uniquified() -> None:
    a = Buffer("a", (4,), "float32")
    i1, i2 = Var("i"), Var("i")
    k = Kernel((a,), Seq((For(i1, 4, a.store(i1, 0.0)), For(i2, 2, a.store(i2 + 1, 1.0)))), 1)
    text = print_kernel("k", k)
    assert "for i in range(4)" in text and "for i_1 in range(2)" in text
    assert structural_equal(parse_kernel_source(text), k)


def test_dsl_kernels_round_trip() -> None:
    x = dsl.placeholder(("n", 8), "float32", "x")
    w = dsl.placeholder((8, 3), "float32", "w")
    r = dsl.reduce_axis(8, "r")
    y = dsl.compute(("n", 3), lambda i, j: dsl.sum(x[i, r] * w[r, j], axis=[r]), "y")
    z = dsl.compute(("n", 3), lambda i, j: dsl.maximum(y[i, j], 0.0), "z")
    k = dsl.create_kernel([x, w, z], "dense_relu")
    assert_structural_equal(parse_kernel_source(print_kernel("dense_relu", k)), k)


def test_module_round_trip_with_graph_function() -> None:
    text = textwrap.dedent('''
        @module
        class Module:
            @kernel
            def scale(a: Buffer((n,), "float32"), out: Buffer((n,), "float32", output=True)):
                for i in parallel(n):
                    out[i] = a[i] * 0.5

            @function
            def main(x: Tensor((n,), "float32")) -> Tensor((n,), "float32"):
                return x
    ''').strip("\n")
    mod = parse(text)
    assert isinstance(mod["scale"], Kernel)
    assert mod.script().strip("\n") == text
    assert structural_equal(parse(mod.script()), mod)


@pytest.mark.parametrize(
    ("body", "message", "line", "col"),
    [
        ("    out[i] = a[i]", "unknown name 'i'", 3, 9),
        ("    for i in range(1, 4):\n        out[i] = a[i]", "loops start at 0", 3, 20),
        ("    for i in range(4):\n        out[i] = b[i]", "unknown buffer 'b'", 4, 18),
        ("    for i in range(4):\n        out[i] = a[i] ** 2", "use pow(a, b)", 4, 18),
        ("    for i in range(4):\n        out[i] = frob(a[i])", "unknown function 'frob'", 4, 18),
        ("    for i in range(4):\n        out[i] = a[i] * 1", None, 0, 0),
        ("    for i in range(4):\n        out[i] = i * 0.5", "float literal", 4, 22),
        ("    x = 1\n    x += 2", "variables are immutable", 4, 5),
        ("    return 1", "a kernel returns nothing", 3, 5),
    ],
)
def test_parse_errors_name_line_and_column(body: str, message: str | None, line: int,
                                           col: int) -> None:
    text = ('@kernel\ndef k(a: Buffer((4,), "float32"), out: Buffer((4,), "float32", '
            'output=True)):\n' + body + "\n")
    if message is None:
        parse_kernel_source(text)
        return
    if message == "float literal":
        message = "literal 0.5 where int64 is expected"
    with pytest.raises(KernelParseError) as info:
        parse_kernel_source(text)
    err = info.value
    assert message in str(err)
    assert (err.line, err.col) == (line, col)
    assert f"line {line}, column {col}" in str(err)


def test_parse_error_inside_module_is_positioned() -> None:
    text = textwrap.dedent('''
        @module
        class Module:
            @kernel
            def k(a: Buffer((4,), "float32"), o: Buffer((4,), "float32", output=True)):
                for i in range(4):
                    o[i] = a[i, i]
    ''')
    # rank errors are the verifier's business; the parser accepts the text
    parse(text)
    with pytest.raises(ParseError, match=r"7:\d+: unknown name 'j'"):
        parse(text.replace("a[i, i]", "a[j]"))


def test_output_flags_must_be_trailing() -> None:
    with pytest.raises(KernelParseError, match="output buffers .* must come after all inputs"):
        parse_kernel_source('@kernel\ndef k(o: Buffer((4,), "float32", output=True), '
                            'a: Buffer((4,), "float32")):\n    pass\n')
