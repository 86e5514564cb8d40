"""The ``c`` target's dispatch rules: which op calls become native kernel calls.

Each module holds the rules of one concern — a pattern of the pattern language and a
plan that checks the call and describes it for a kernel family of
:mod:`plait.target.c.kernels` — and the pass that applies them: :class:`FoldPadIntoConv`
(:mod:`.fold_pad`), :class:`DispatchDecode` (:mod:`.decode`: products of few or
symbolic rows by constant weights, and attention over a language model's key/value
cache, for the ``decode`` family), :class:`DispatchAttention` (:mod:`.attention`),
:class:`Conv1dAsConv2d` (:mod:`.conv1d`), :class:`SplitConcatConv` (:mod:`.concat_conv`:
a 1x1 convolution of a concatenation with upsampled parts as the sum of the parts'
convolutions, each before its upsampling), :class:`DispatchSqueezeExcite`
(:mod:`.squeeze_excite`), :class:`DispatchGemm` (:mod:`.gemm`: products and
convolutions with their epilogues), :class:`DispatchDepthwise` (:mod:`.depthwise`),
:class:`DispatchPool` (:mod:`.pool`) and :class:`DispatchLibrary` (:mod:`.library`: what
is left of matmul, linear and conv2d to BLAS-backed library functions; and
:func:`rewrite_ops`, the tool target-specific dispatch passes are made of).  The c
target's dispatch hook runs them in that order.
"""

from __future__ import annotations

from .attention import DispatchAttention, dispatch_attention
from .concat_conv import SplitConcatConv, split_concat_conv
from .conv1d import Conv1dAsConv2d
from .decode import DispatchDecode, dispatch_decode
from .depthwise import DispatchDepthwise, dispatch_depthwise
from .fold_pad import FoldPadIntoConv
from .gemm import DispatchGemm, dispatch_gemm
from .library import DispatchLibrary, RewriteFn, library_rewrite, rewrite_ops
from .pool import DispatchPool, dispatch_pool
from .squeeze_excite import DispatchSqueezeExcite, dispatch_squeeze_excite

__all__ = ["Conv1dAsConv2d", "DispatchAttention", "DispatchDecode", "DispatchDepthwise",
           "DispatchGemm", "DispatchLibrary", "DispatchPool", "DispatchSqueezeExcite",
           "FoldPadIntoConv", "RewriteFn", "SplitConcatConv", "dispatch_attention",
           "dispatch_decode", "dispatch_depthwise", "dispatch_gemm", "dispatch_pool",
           "dispatch_squeeze_excite", "library_rewrite", "rewrite_ops", "split_concat_conv"]
