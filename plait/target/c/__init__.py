"""The ``c`` target: native code generated from the model.

* **dispatch** — :data:`FoldPadIntoConv` (with ``gemm``) folds a zero pad read only by a
  ``conv2d`` into its padding, :class:`DispatchDecode` sends products of few (or
  symbolic) rows by constant weights and attention over a language model's key/value
  cache to the ``decode`` family (docs/llm.md), :class:`DispatchAttention` makes
  attention one fused call,
  :class:`Conv1dAsConv2d` makes float32 ``conv1d`` a ``conv2d`` of height 1,
  :class:`SplitConcatConv` a 1x1 convolution of a concatenation with upsampled parts
  the sum of its parts' convolutions, each before its upsampling,
  :class:`DispatchSqueezeExcite` makes a squeeze-and-excite gate one native call,
  :class:`DispatchGemm` sends float32 ``matmul``, ``linear`` and ``conv2d`` (with their
  epilogues) to plait's own matrix product, :class:`DispatchDepthwise` grouped and
  depthwise ``conv2d`` (with their epilogues) to its own kernel, :class:`DispatchPool`
  max pooling to its pooling, and :class:`DispatchLibrary` what is left of ``matmul``,
  ``linear`` and ``conv2d`` to BLAS-backed library functions (``blas.*``,
  :mod:`plait.runtime.blas_ops`);
* **legalize** — ``FuseOps`` and ``FuseKernels`` (unless ``fuse=False``) turn groups of
  fusable ops into single kernels composed from the ops' computes; then every other op
  becomes a kernel generated from its compute
  (:mod:`plait.target.c.compute`), added to the module and called with
  ``call_kernel``; an op without a compute (or a call its compute declines) becomes
  the numpy library call (:func:`coverage`, :func:`library_calls`);
* **link** (the end of the build stage, after memory planning) — :class:`SingleEntry`
  gives every function whose shapes are all static and whose calls are all native
  one entry point, its calls in one native function (:mod:`.entry`); then
  :class:`CompileKernels` compiles all the module's kernels (and user C sources,
  :func:`add_c_source`, and the entry points) with one compiler run into one shared
  library that the executable embeds.

Native kernels come in one copy per instruction set of the machine (AVX-512, AVX2+FMA,
baseline; NEON on aarch64), one chosen per kernel family when the library is loaded:
:func:`cpu_features` says which and why, :func:`use_isa` (or ``PLAIT_ISA``) forces one
(:mod:`plait.target.c.kernels`, docs/kernels.md).

Target attributes: ``gemm`` (default True: plait's own matrix product, convolution and
pooling, :mod:`.gemm`, :mod:`.pool`), ``attention`` (default True, with ``gemm``: fused
attention, :mod:`.attention`), ``winograd`` ("auto": F(4x4), F(2x2) or the direct
product, chosen by shape; 4, 2 or False force one), ``depthwise`` (default True, with
``gemm``: grouped and depthwise convolutions on :mod:`.depthwise`, and squeeze-and-excite,
:mod:`.squeeze_excite`), ``decode`` ("auto", with ``gemm``: the ``decode`` family,
:mod:`.dispatch.decode`, for products of at most 4 static rows by weights of at least
``decode_min_weights`` (65536) elements and a language model's cache attention; True
also products of symbolic rows, as :func:`plait.llm.build_causal_lm` asks; False
none), ``blas`` (default
True; False keeps
matmul/linear/conv2d as generated kernels), ``fuse`` (default True: kernel fusion),
``single_entry`` (default True: :class:`SingleEntry`), ``step_timing`` (default False:
the entry points time each call, ``VirtualMachine.profile_steps``), ``opt_level`` (3), ``threads``
(None: when available), ``march_native`` (False), ``isas`` (None: ``PLAIT_BUILD_ISAS``,
else "all": every ISA copy of the architecture; "host": only those this CPU runs,
:func:`build_isas`), ``out_of_range_indices`` ("raise":
an index out of range in ``take``/``gather_elements`` fails the call with a
``NativeCallError``, as numpy does; "clamp": clamped, no check).  Derive a target of your own with
``register_target_kind("mycpu", parent="c", dispatch=[...])``; see
docs/targets.md.
"""

from __future__ import annotations

from typing import Any

from plait.runtime import blas_ops as _blas_ops  # noqa: F401  (registers blas.*)
from plait.transform.activation_rules import RecognizeActivations
from plait.transform.fuse_kernels import fusion_passes, register_kernel_fusion
from plait.transform.legalize import register_legalize

from ..target import Target, register_target_kind
from .build import (
    C_SOURCES_ATTR,
    LIBRARY_NAME,
    CompileKernels,
    add_c_source,
    c_sources,
    module_kernels,
    out_of_range_indices,
)
from .compute import (
    ComputeUnsupported,
    compute_note,
    get_compute,
    list_computes,
    register_compute,
)
from .cpu import cpu_features, library_isas, use_isa
from .dispatch import (
    Conv1dAsConv2d,
    DispatchAttention,
    DispatchDecode,
    DispatchDepthwise,
    DispatchGemm,
    DispatchLibrary,
    DispatchPool,
    DispatchSqueezeExcite,
    FoldPadIntoConv,
    RewriteFn,
    SplitConcatConv,
    dispatch_attention,
    dispatch_depthwise,
    dispatch_gemm,
    dispatch_pool,
    dispatch_squeeze_excite,
    library_rewrite,
    rewrite_ops,
)
from .dispatch.decode import MIN_WEIGHTS as DECODE_MIN_WEIGHTS
from .entry import SingleEntry
from .isas import build_isas, isas_choice
from .legalize import (
    KERNEL_DTYPES,
    add_kernel,
    coverage,
    coverage_table,
    extern_calls,
    flatten_args,
    legalize_to_kernel,
    library_call,
    library_calls,
    op_kernel,
)
from .reference import c_source_provider


def _dispatch(target: Target) -> list[Any]:
    out_of_range_indices(target.attrs)   # a bad value is refused before any pass runs
    isas_choice(target.attrs.get("isas"))
    passes: list[Any] = []
    if target.attrs.get("gemm", True):
        passes.append(RecognizeActivations)   # silu/gelu as ops: they fuse into epilogues
        passes.append(FoldPadIntoConv)
        decode = target.attrs.get("decode", "auto")
        if decode not in (True, False, "auto"):
            raise ValueError(f"Target('c'): decode must be 'auto' (few static rows and the "
                             f"cache attention), True (also symbolic rows: language "
                             f"models) or False, got {decode!r}")
        if decode:
            passes.append(DispatchDecode(
                int(target.attrs.get("decode_min_weights", DECODE_MIN_WEIGHTS)),
                symbolic_rows=decode is True))
        if target.attrs.get("attention", True):
            passes.append(DispatchAttention())
        passes.append(Conv1dAsConv2d())
        passes.append(SplitConcatConv())
        if target.attrs.get("depthwise", True):
            passes.append(DispatchSqueezeExcite())
        tuning = target.attrs.get("tuning_db")   # else PLAIT_TUNING_DB, read when it runs
        tuned = {"tuning_db": str(tuning)} if tuning else {}
        passes.append(DispatchGemm(winograd=target.attrs.get("winograd", "auto"), **tuned))
        if target.attrs.get("depthwise", True):
            passes.append(DispatchDepthwise(winograd=target.attrs.get("winograd", "auto"),
                                            **tuned))
        passes.append(DispatchPool())
    if target.attrs.get("blas", True):
        passes.append(DispatchLibrary())
    return passes


def _link(target: Target) -> list[Any]:
    return [SingleEntry(), CompileKernels()]


def _legalize(target: Target) -> list[Any]:
    return fusion_passes(target)  # FuseOps, FuseKernels (none with fuse=False)


register_target_kind(
    "c",
    defaults={"gemm": True, "attention": True, "winograd": "auto", "depthwise": True,
              "decode": "auto", "decode_min_weights": DECODE_MIN_WEIGHTS,
              "blas": True, "fuse": True,
              "single_entry": True, "step_timing": False, "opt_level": 3,
              "march_native": False, "isas": None, "out_of_range_indices": "raise"},
    doc="generated C kernels compiled by the system C compiler; plait's own GEMM/conv2d",
    dispatch=_dispatch,
    legalize=_legalize,
    link=_link,
)
register_legalize("*", "c", legalize_to_kernel)
register_kernel_fusion("c", get_compute, dtypes=KERNEL_DTYPES)

__all__ = [
    "C_SOURCES_ATTR", "CompileKernels", "ComputeUnsupported", "DispatchAttention",
    "DispatchDecode",
    "Conv1dAsConv2d", "DispatchDepthwise", "DispatchGemm", "DispatchLibrary", "DispatchPool",
    "DispatchSqueezeExcite", "FoldPadIntoConv",
    "LIBRARY_NAME", "RewriteFn", "SplitConcatConv",
    "add_c_source", "add_kernel", "c_source_provider", "c_sources", "compute_note",
    "build_isas", "coverage", "coverage_table", "cpu_features", "library_isas", "use_isa",
    "dispatch_attention", "dispatch_depthwise", "dispatch_gemm", "dispatch_pool",
    "dispatch_squeeze_excite", "extern_calls", "flatten_args",
    "get_compute", "legalize_to_kernel", "library_call", "library_calls", "library_rewrite",
    "list_computes", "module_kernels", "op_kernel", "register_compute", "rewrite_ops",
    "SingleEntry",
]
