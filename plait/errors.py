"""The base of plait's errors.

Every exception class plait raises for people derives from :class:`PlaitError` (as well
as from the builtin class that fits it: ``ValueError``, ``TypeError``, ``RuntimeError``
...), so a caller can tell plait's refusals from its own bugs with one ``except``, and
the ``plait`` command prints each as one clean line (``plait: error: ...``) instead of
an internal error to report.  A few exceptions are signals between the parts of one
pass, caught where they are raised and never seen by a caller: they are listed in
:data:`INTERNAL_SIGNALS` with the reason.  ``tests/test_errors.py`` walks every
exception class of the package and checks that it is one or the other.
"""

from __future__ import annotations


class PlaitError(Exception):
    """An error plait raises for people: bad input, a refused file or model, a failed
    build or run; its message names the place and what to do."""


INTERNAL_SIGNALS: dict[str, str] = {
    "plait.kernel.interp._Conflict": "the kernel interpreter's fast path gives up",
    "plait.ir.structural._Unsupported": "structural hashing falls back to another path",
    "plait.transform.convert_layout._Unmovable": "ConvertLayout leaves a value in place",
    "plait.target.c.dispatch.decode_attention._Fail": "c.DispatchDecode's attention matcher "
                                                      "gives up on a candidate",
    "plait.transform.fuse_kernels.NotFusable": "FuseKernels leaves a group unfused",
    "plait.target.c.entry.NotQualified": "c.SingleEntry records why a function has no "
                                         "single entry point",
    "plait.target.c.compute.registry.ComputeUnsupported": "a compute rule declines an op "
                                                          "(the default kernel is used)",
    "plait.codegen.c.sizes.UnboundSize": "a dispatch rule declines a call whose sizes its "
                                         "buffers do not bind (c.DispatchGemm...)",
}
"""Exception classes that are control flow inside one part of plait (qualified name ->
where it is caught), not errors a caller sees."""


__all__ = ["INTERNAL_SIGNALS", "PlaitError"]
