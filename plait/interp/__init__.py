"""The numpy reference path: run an IRModule in any phase, without building it.

    from plait.interp import run, random_inputs, compare_outputs

    out = run(mod, x)                       # mod in ingestion ... build phase

:func:`run` interprets graph functions (op calls through their numpy references,
``call_kernel`` through the kernel IR's reference interpreter
:func:`plait.kernel.interp.run_kernel`, ``call_extern`` through packed functions, the
module's native libraries and the extern providers of targets and codegens, the build
phase's explicit memory as views of storage).  :class:`~plait.transform.NumericCheck`
runs it after every pass; ``plait bisect`` and ``plait report`` use it too.
"""

from .compare import Difference, compare_outputs, flatten_outputs, random_inputs
from .externs import (
    ExternProvider,
    ExternResolver,
    register_extern_provider,
    unregister_extern_provider,
)
from .graph import POISON_BYTE, Interpreter, InterpreterError, run

__all__ = [
    "POISON_BYTE",
    "Difference",
    "ExternProvider",
    "ExternResolver",
    "Interpreter",
    "InterpreterError",
    "compare_outputs",
    "flatten_outputs",
    "random_inputs",
    "register_extern_provider",
    "run",
    "unregister_extern_provider",
]
