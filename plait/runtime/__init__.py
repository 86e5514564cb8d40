"""The plait runtime: executables, the virtual machine and packed functions.

Depends on numpy only, so a built model runs without the compiler::

    from plait.runtime import Executable, VirtualMachine

    vm = VirtualMachine(Executable.load("model.plx"))
    y = vm["main"](x)
"""

import plait.runtime.blas_ops  # noqa: F401  (blas.* library functions of the c target)
import plait.runtime.native  # noqa: F401  (loads native libraries embedded in executables)
import plait.runtime.numpy_ops  # noqa: F401  (numpy.* library functions)
from plait.runtime.builtins import BUILTINS
from plait.runtime.executable import (
    FORMAT_VERSION,
    INSTRUCTIONS,
    PARAM_KINDS,
    AllocStorage,
    AllocTensor,
    Arg,
    Call,
    Const,
    Executable,
    ExecutableFormatError,
    Goto,
    If,
    Imm,
    Instr,
    Move,
    ParamSig,
    Reg,
    Ret,
    VMFunction,
)
from plait.runtime.external import (
    ExternalFunction,
    ExternalModule,
    ExternalModuleError,
    TensorSig,
    external_functions,
    register_external_loader,
)
from plait.runtime.packed import (
    PackedFuncNotFoundError,
    get_func,
    has_func,
    list_funcs,
    register_func,
    register_native_loader,
    unregister_native_loader,
)
from plait.runtime.vm import (
    ProfileEntry,
    VirtualMachine,
    VMCallDepthError,
    VMError,
    VMFunctionNotFoundError,
    VMInputError,
)

__all__ = [
    "BUILTINS",
    "ExternalFunction",
    "ExternalModule",
    "ExternalModuleError",
    "TensorSig",
    "external_functions",
    "register_external_loader",
    "FORMAT_VERSION",
    "INSTRUCTIONS",
    "PARAM_KINDS",
    "AllocStorage",
    "AllocTensor",
    "Arg",
    "Call",
    "Const",
    "Executable",
    "ExecutableFormatError",
    "Goto",
    "If",
    "Imm",
    "Instr",
    "Move",
    "PackedFuncNotFoundError",
    "ParamSig",
    "ProfileEntry",
    "Reg",
    "Ret",
    "VMCallDepthError",
    "VMError",
    "VMFunction",
    "VMFunctionNotFoundError",
    "VMInputError",
    "VirtualMachine",
    "get_func",
    "has_func",
    "list_funcs",
    "register_func",
    "register_native_loader",
    "unregister_native_loader",
]
