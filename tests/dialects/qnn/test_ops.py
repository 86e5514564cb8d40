"""The qnn ops: registration, type inference and its errors, the text format, folding."""

from __future__ import annotations

import pytest
from qnn_helpers import assert_same, case_module, op_cases

import plait
from plait.ir import TensorType, TupleType, assert_structural_equal
from plait.ir.printer import print_module
from plait.op import OpTypeError, get_op, list_ops
from plait.op.infer import infer_op_type
from plait.transform import make_pass

T = TensorType

REQUIRED_OPS = {
    "quantize", "dequantize", "requantize", "conv2d", "matmul", "add", "mul", "concat",
    "avg_pool2d", "global_avg_pool2d", "max_pool2d", "sigmoid", "leaky_relu", "softmax",
    "layer_norm",
}


def test_every_required_op_is_registered_with_a_reference_and_a_doc() -> None:
    ops = {d.name.split(".", 1)[1]: d for d in list_ops("qnn")}
    assert REQUIRED_OPS <= set(ops)
    for d in ops.values():
        assert d.namespace == "qnn" and d.reference is not None and d.doc


def test_type_inference() -> None:
    f32, u8, i8 = "float32", "uint8", "int8"
    q = infer_op_type("qnn.quantize", T((2, 5), f32), T((5,), f32), T((5,), i8), axis=1)
    assert q == T((2, 5), i8)
    assert infer_op_type("qnn.dequantize", T((2, 5), u8), T((), f32), T((), u8)) == T((2, 5), f32)
    acc = infer_op_type("qnn.conv2d", T((1, 6, 9, 9), u8), T((6, 1, 3, 3), i8), T((), u8),
                        T((6,), i8), groups=6, padding=1)
    assert acc == T((1, 6, 9, 9), "int32")
    r = infer_op_type("qnn.requantize", T((1, 6, 9, 9), "int32"), T((6,), f32),
                      T((), "int32"), T((), f32), T((), u8), axis=1)
    assert r == T((1, 6, 9, 9), u8)
    mm = infer_op_type("qnn.matmul", T((4, 2, 7), u8), T((7, 3), i8), T((), u8), T((3,), i8))
    assert mm == T((4, 2, 3), "int32")
    add = infer_op_type("qnn.add", T((2, 1, 5), u8), T((), f32), T((), u8), T((3, 5), u8),
                        T((), f32), T((), u8), T((), f32), T((), u8))
    assert add == T((2, 3, 5), u8)
    cat = infer_op_type("qnn.concat", TupleType((T((2, 3), i8), T((2, 4), i8))),
                        TupleType((T((), f32), T((), f32))), TupleType((T((), i8), T((), i8))),
                        T((), f32), T((), i8), axis=1)
    assert cat == T((2, 7), i8)
    pool = infer_op_type("qnn.avg_pool2d", T((1, 3, 9, 7), u8), T((), f32), T((), u8),
                         T((), f32), T((), u8), pool_size=3, strides=2, ceil_mode=True)
    assert pool == T((1, 3, 4, 3), u8)
    gap = infer_op_type("qnn.global_avg_pool2d", T((1, 3, 9, 7), u8), T((), f32), T((), u8),
                        T((), f32), T((), u8))
    assert gap == T((1, 3, 1, 1), u8)
    dq = infer_op_type("qnn.dynamic_quantize", T((3, 4), f32))
    assert dq == TupleType((T((3, 4), u8), T((), f32), T((), u8)))


@pytest.mark.parametrize("args,attrs,message", [
    (("qnn.quantize", T((2, 5), "float32"), T((4,), "float32"), T((4,), "uint8")), {"axis": 1},
     "has 4 values but axis 1 of x"),
    (("qnn.quantize", T((2, 5), "float32"), T((), "float64"), T((), "uint8")), {},
     "scale must be a float32 scale"),
    (("qnn.quantize", T((2, 5), "int32"), T((), "float32"), T((), "uint8")), {},
     "floating-point"),
    (("qnn.dequantize", T((2, 5), "uint8"), T((), "float32"), T((), "int8")), {},
     "zero_point has dtype int8, expected uint8"),
    (("qnn.conv2d", T((1, 4, 5, 5), "float32"), T((2, 4, 3, 3), "int8"), T((), "uint8"),
      T((), "int8")), {}, "data must be an 8-bit tensor"),
    (("qnn.conv2d", T((1, 4, 5, 5), "uint8"), T((2, 3, 3, 3), "int8"), T((), "uint8"),
      T((), "int8")), {}, "qnn.conv2d: data has 4 channels"),
    (("qnn.add", T((2, 5), "uint8"), T((), "float32"), T((), "uint8"), T((2, 5), "int8"),
      T((), "float32"), T((), "int8"), T((), "float32"), T((), "uint8")), {},
     "b has dtype int8, expected uint8"),
    (("qnn.sigmoid", T((2, 5), "uint8"), T((5,), "float32"), T((), "uint8"), T((), "float32"),
      T((), "uint8")), {}, "must be a scalar"),
])
def test_type_errors_name_the_op_and_the_argument(args: tuple, attrs: dict,
                                                  message: str) -> None:
    with pytest.raises(OpTypeError, match=message):
        infer_op_type(*args, **attrs)


def test_unknown_attribute_is_refused() -> None:
    with pytest.raises(Exception, match="has no attribute 'axes'"):
        plait.op.make_call("qnn.quantize", *[plait.ir.Var("x")] * 3, axes=1)


def test_text_format_round_trip() -> None:
    mod = case_module(op_cases("int8"))
    text = print_module(mod)
    assert "qnn.conv2d(" in text and "qnn.concat((" in text
    assert_structural_equal(plait.parse(text), mod)


def test_fold_constant_uses_the_reference() -> None:
    """qnn calls on constants fold to their reference values."""
    cases = op_cases("uint8")
    mod = make_pass("LambdaLift")(make_pass("Normalize")(case_module(cases, constant_data=True)))
    folded = make_pass("FoldConstant")(mod)
    assert "qnn." not in print_module(folded)
    out = folded["main"].body.body
    block = folded["main"].body.blocks[-1]
    values = {b.var: b.value for b in block.bindings}
    while not isinstance(out, plait.ir.Tuple):
        out = values[out]
    for c, field in zip(cases, out.fields):
        got = values.get(field, field)
        got = [f.data for f in got.fields] if isinstance(got, plait.ir.Tuple) else got.data
        assert_same(got, c.expected(), c.name)


def test_reference_docs_name_onnxruntime_kernels() -> None:
    for name in ("qnn.add", "qnn.mul", "qnn.sigmoid", "qnn.softmax", "qnn.concat"):
        assert "QLinear" in get_op(name).doc
