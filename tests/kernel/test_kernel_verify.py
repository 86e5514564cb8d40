"""The kernel verifier catches each class of error with a message naming the kernel,
the statement and the buffer or variable."""

import pytest

from plait.kernel import (
    Buffer,
    BufferStore,
    Call,
    For,
    IfThenElse,
    Kernel,
    KernelVerifyError,
    Let,
    Var,
    check_kernel,
    parse_kernel_source,
    verify_kernel,
)


def errors_of(text: str) -> list[str]:
    return verify_kernel(parse_kernel_source(text), "k")


def test_valid_kernel_has_no_errors() -> None:
    assert errors_of('''
@kernel
def k(a: Buffer((4, n), "float32"), out: Buffer((4, n), "float32", output=True)):
    for i in parallel(4):
        for j in range(n):
            out[i, j] = a[i, j] * 2.0
''') == []


def test_out_of_bounds_static() -> None:
    (msg,) = errors_of('''
@kernel
def k(a: Buffer((4,), "float32"), out: Buffer((4,), "float32", output=True)):
    for i in range(4):
        out[i] = a[i + 1]
''')
    assert msg.startswith("kernel 'k': `out[i] = a[i + 1]` (line 5): ")
    assert "index 0 (`i + 1`) of buffer 'a' reaches 4, out of bounds for dimension 0 of size 4" \
        in msg


def test_out_of_bounds_symbolic() -> None:
    (msg,) = errors_of('''
@kernel
def k(a: Buffer((n,), "float32"), out: Buffer((n,), "float32", output=True)):
    for i in range(n):
        out[i] = a[i] + a[i + 1]
''')
    assert "buffer 'a' reaches n, out of bounds for dimension 0 of size n" in msg


def test_negative_index_and_affine_2d() -> None:
    errs = errors_of('''
@kernel
def k(a: Buffer((8,), "float32"), out: Buffer((2, 4), "float32", output=True)):
    for i in range(2):
        for j in range(4):
            out[i, j] = a[i * 4 + j] + a[j - 1] + a[i * 4 + j + 1]
''')
    assert len(errs) == 2
    assert any("(`j - 1`) of buffer 'a' goes down to -1, below 0" in e for e in errs)
    assert any("(`i * 4 + j + 1`) of buffer 'a' reaches 8" in e for e in errs)


def test_guarded_access_is_not_flagged() -> None:
    assert errors_of('''
@kernel
def k(a: Buffer((n,), "float32"), out: Buffer((n,), "float32", output=True)):
    for i in range(n):
        out[i] = select(i > 0, a[i - 1], 0.0)
        if i + 1 < n:
            out[i] = a[i + 1]
''') == []


def test_undefined_variable_and_buffer() -> None:
    a = Buffer("a", (4,), "float32")
    scratch = Buffer("scratch", (4,), "float32")
    i, j = Var("i"), Var("j")
    k = Kernel((a,), For(i, 4, BufferStore(a, (i,), scratch[j])), 1)
    errs = verify_kernel(k, "bad")
    assert any("variable 'j' is used but not defined" in e for e in errs)
    assert any("buffer 'scratch' is used but not defined" in e for e in errs)
    assert all(e.startswith("kernel 'bad': `a[i] = scratch[j]`") for e in errs)


def test_rank_mismatch() -> None:
    a = Buffer("a", (4, 4), "float32")
    i = Var("i")
    k = Kernel((a,), For(i, 4, BufferStore(a, (i,), a[i, i])), 1)
    (msg,) = verify_kernel(k, "k")
    assert "store to buffer 'a' with 1 index(es); it has rank 2" in msg


def test_dtype_errors() -> None:
    errs = errors_of('''
@kernel
def k(
    a: Buffer((4,), "float32"),
    b: Buffer((4,), "int32"),
    out: Buffer((4,), "float64", output=True),
):
    for i in range(4):
        out[i] = a[i]
        out[i] = float64(a[i]) + float64(b[i])
        if b[i]:
            out[i] = 1.0
''')
    assert any("stores a float32 value into float64 buffer 'out'" in e for e in errs)
    assert any("the condition must be bool, got int32" in e for e in errs)
    assert len(errs) == 2


def test_binary_dtype_mismatch_and_bad_index_dtype() -> None:
    a = Buffer("a", (4,), "float32")
    out = Buffer("out", (4,), "float32")
    i = Var("i")
    from plait.kernel import Add, Cast

    k = Kernel((a, out), For(i, 4, BufferStore(out, (i,), Add(a[i], Cast("float64", a[i])))), 1)
    errs = verify_kernel(k, "k")
    assert any("dtype mismatch in `a[i] + float64(a[i])`: float32 vs float64" in e for e in errs)
    k2 = Kernel((a, out), For(i, 4, BufferStore(out, (Cast("float32", i),), a[i])), 1)
    assert any("index 0 of buffer 'out' is float32; indices must be integers" in e
               for e in verify_kernel(k2, "k"))


def test_outputs_written_inputs_read_only() -> None:
    errs = errors_of('''
@kernel
def k(a: Buffer((4,), "float32"), out: Buffer((4,), "float32", output=True)):
    for i in range(4):
        a[i] = 0.0
''')
    assert any("stores into input buffer 'a'; inputs are read-only" in e for e in errs)
    assert any("output buffer 'out' is never written" in e for e in errs)


def test_defined_twice_and_unknown_intrinsic() -> None:
    a = Buffer("a", (4,), "float32")
    i = Var("i")
    t = Var("t", "float32")
    inner = For(i, 4, Let(t, Call("nope", (a[i],), "float32"), BufferStore(a, (i,), t)))
    k = Kernel((a,), For(i, 4, inner), 1)
    errs = verify_kernel(k, "k")
    assert any("loop variable 'i' is defined twice" in e for e in errs)
    assert any("unknown intrinsic 'nope'" in e for e in errs)


def test_check_kernel_raises_with_all_errors() -> None:
    a = Buffer("a", (4,), "float32")
    i = Var("i")
    k = Kernel((a,), IfThenElse(i < 4, BufferStore(a, (i,), a[i + 9])), 1)
    with pytest.raises(KernelVerifyError) as info:
        check_kernel(k, "oops")
    assert "variable 'i' is used but not defined" in str(info.value)
    assert info.value.errors
