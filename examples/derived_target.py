"""A target of your own, derived from ``c``: custom kernels and C for chosen ops.

``mycpu`` derives from the ``c`` target and adds one dispatch pass, ``mycpu.Dispatch``,
which runs before the ``c`` target's own dispatch and before LegalizeOps:

* ``concat`` of two float32 matrices along their last axis becomes ``call_kernel`` of
  ``concat_cols``, a kernel written by hand in the text format (``@kernel``) and added
  to the module;
* ``gelu`` (tanh form) of a float32 matrix becomes ``call_extern("mycpu_gelu")``, a
  function of hand-written C source that the module records (``add_c_source``) and the
  ``c`` build hook compiles and links into the executable's library.

Everything else is lowered the ``c`` way (plait's own matrix product for float32
matmul/linear/conv2d, taking the symbolic ``n`` at run time; generated kernels for the
rest).  Run it: ``python examples/derived_target.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import plait
from plait.codegen.c import CFunction, CSource
from plait.ir import BlockBuilder, Call, Expr, ExternFunc, IRModule, TensorType, Tuple
from plait.kernel import parse_kernel_source
from plait.op import make_call
from plait.runtime import VirtualMachine
from plait.target import TARGET_KINDS, register_target_kind
from plait.target.c import add_c_source, add_kernel, extern_calls, flatten_args, rewrite_ops
from plait.transform import module_pass

CONCAT_COLS = '''
@kernel
def concat_cols(a: Buffer((n, k), "float32"), b: Buffer((n, m), "float32"),
                out: Buffer((n, p), "float32", output=True)):
    for i in parallel(n):
        for j in range(p):
            out[i, j] = select(j < k, a[i, j], b[i, j - k])
'''
"""``out = concat((a, b), axis=1)`` for matrices: p must be k + m (the caller's type
says so); the ``select`` guards the loads, so neither runs out of its buffer."""

GELU_C = CSource(
    r'''
#include <math.h>
#include <stdint.h>

/* y = x * Phi(x), tanh approximation, over n * d contiguous floats */
void mycpu_gelu(const float* x, float* y, int64_t n, int64_t d) {
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t i = 0; i < n * d; ++i) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}
''',
    (CFunction("mycpu_gelu", ((("n", "d"), "float32"), (("n", "d"), "float32"))),),
    "mycpu_gelu.c",
)


def _matrix_f32(e: Expr) -> bool:
    t = e.ty
    return isinstance(t, TensorType) and t.dtype == "float32" and t.shape is not None \
        and len(t.shape) == 2


def _concat(bb: BlockBuilder, call: Call, target: Any) -> Expr | None:
    """concat((a, b), axis=1 or -1) of float32 matrices -> the hand-written kernel."""
    parts = flatten_args(bb, call.args)
    if len(parts) != 2 or call.attrs["axis"] not in (1, -1) or not all(map(_matrix_f32, parts)):
        return None  # left to the c target's generated kernel
    gv = add_kernel(bb, parse_kernel_source(CONCAT_COLS), "concat_cols")
    return make_call("call_kernel", gv, Tuple(tuple(parts)), out=call.ty)


def _gelu(bb: BlockBuilder, call: Call, target: Any) -> Expr | None:
    """gelu(x, approximate="tanh") of a float32 matrix -> the user C function."""
    (x,) = call.args
    if call.attrs["approximate"] != "tanh" or not _matrix_f32(x):
        return None
    return make_call("call_extern", ExternFunc("mycpu_gelu"), Tuple((x,)), out=call.ty)


@module_pass(name="mycpu.Dispatch", phases=("optimization",))
def mycpu_dispatch(mod: IRModule) -> IRModule:
    """concat -> hand-written kernel; gelu -> user C function (mycpu target)."""
    out = rewrite_ops(mod, {"concat": _concat, "gelu": _gelu})
    # the C source goes into the module (all state lives there) when a call uses it
    return add_c_source(out, GELU_C) if "mycpu_gelu" in extern_calls(out) else out


if "mycpu" not in TARGET_KINDS:
    register_target_kind("mycpu", parent="c", dispatch=[mycpu_dispatch],
                         doc="the c target with a hand-written concat and a C gelu")

MODEL = """
@module
class Model:
    @function
    def main(x: Tensor((n, 16), "float32"), y: Tensor((n, 8), "float32"),
             w: Tensor((24, 24), "float32")) -> Tensor((n, 24), "float32"):
        with dataflow():
            z = concat((x, y), axis=1)
            h = matmul(z, w)
            out = gelu(h, approximate="tanh")
            output(out)
        return out
"""


def reference(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The model in numpy."""
    h = np.concatenate([x, y], axis=1) @ w
    return 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))


def main() -> None:
    print(plait.default_pipeline("mycpu"))
    mod = plait.parse(MODEL)
    exe = plait.build(mod, "mycpu")
    print("\nVM code of main:")
    for instr in exe.functions["main"].instructions:
        print("   ", instr)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 16), np.float32), rng.standard_normal((3, 8), np.float32)
    w = (rng.standard_normal((24, 24)) * 0.2).astype(np.float32)
    got = VirtualMachine(exe)["main"](x, y, w)
    err = float(np.max(np.abs(got - reference(x, y, w))))
    print(f"\nmax |mycpu - numpy| = {err:.2e}")


if __name__ == "__main__":
    main()
