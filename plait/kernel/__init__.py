"""The kernel IR (loop level): kernels over buffers, statements, scalar expressions; the
verifier, the simplifier, the text format and the compute DSL (:mod:`plait.kernel.dsl`).

See ``docs/kernels.md``.
"""

from . import dsl
from .intrin import (
    INTRINSICS,
    IntrinsicDef,
    call_intrin,
    cast,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    select,
)
from .ir import (
    EQ,
    GE,
    GT,
    LE,
    LOOP_KINDS,
    LT,
    NE,
    Add,
    Allocate,
    And,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    CmpOp,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Sub,
    Var,
    as_expr,
    const,
    make_kernel,
    seq,
)
from .rewrite import replace_body, rewrite_expr, rewrite_stmt, substitute
from .simplify import simplify_expr, simplify_kernel, simplify_stmt
from .text import (
    KernelParseError,
    parse_kernel,
    parse_kernel_source,
    parse_kernels,
    print_kernel,
    register_text_hooks,
)
from .verify import KernelVerifyError, check_kernel, register_phase_check_hook, verify_kernel

register_text_hooks()
register_phase_check_hook()

__all__ = [
    "dsl", "INTRINSICS", "IntrinsicDef", "call_intrin", "cast", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "select", "EQ", "GE", "GT", "LE", "LOOP_KINDS", "LT",
    "NE", "Add", "Allocate", "And", "BinaryOp", "Buffer", "BufferLoad", "BufferStore", "Call",
    "Cast", "CmpOp", "Div", "Evaluate", "FloatImm", "FloorDiv", "FloorMod", "For",
    "IfThenElse", "IntImm", "Kernel", "Let", "Max", "Min", "Mul", "Not", "Or", "PrimExpr",
    "Select", "Seq", "Stmt", "Sub", "Var", "as_expr", "const", "make_kernel", "seq",
    "replace_body", "rewrite_expr", "rewrite_stmt", "substitute", "simplify_expr",
    "simplify_kernel", "simplify_stmt", "KernelParseError", "parse_kernel",
    "parse_kernel_source", "parse_kernels", "print_kernel", "KernelVerifyError",
    "check_kernel", "verify_kernel",
]
