"""The graph IR: types, expressions, functions, modules, builder, traversal, text."""

from .attrs import Attrs
from .builder import BlockBuilder, IRTypeError, infer_type, is_atom, normalize_module
from .expr import (
    BaseFunc,
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Node,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Span,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    const,
)
from .module import PHASES, IRModule
from .structural import (
    StructuralMismatch,
    assert_structural_equal,
    structural_equal,
    structural_hash,
)
from .types import (
    DTYPES,
    FuncType,
    ObjectType,
    PrimType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
    tensor,
)

__all__ = [
    "Attrs", "BlockBuilder", "IRTypeError", "infer_type", "is_atom", "normalize_module",
    "BaseFunc", "Binding", "BindingBlock", "Call", "Constant", "DataflowBlock", "DataflowVar",
    "Expr", "ExternFunc", "Function", "GlobalVar", "If", "MatchCast", "Node", "Op", "PrimValue",
    "SeqExpr", "ShapeExpr", "Span", "StringImm", "Tuple", "TupleGetItem", "Var", "VarBinding",
    "const", "PHASES", "IRModule", "StructuralMismatch", "assert_structural_equal",
    "structural_equal", "structural_hash", "DTYPES", "FuncType", "ObjectType", "PrimType",
    "ShapeType", "TensorType", "TupleType", "Type", "tensor",
]
