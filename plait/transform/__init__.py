"""The pass infrastructure and the passes.

A pass is an ``IRModule -> IRModule`` function with declarations (:class:`PassInfo`:
name, opt_level, the phases it accepts, the transition it makes, the passes it
requires before it).  Passes compose into :class:`Sequential` pipelines that are
checked against the module's phase before anything runs, print, edit by name and
round-trip through a textual form.  A :class:`PassContext` sets opt_level, required
and disabled passes, registered config keys and instruments; the instruments see
every pass.  Failures become :class:`PassError` s naming the pass, phase and function,
with an optional reproducer that :func:`replay` reruns.

Every module of this package is imported here, so a pass file registers its passes
just by being in the package (one file per pass or family).  See
``docs/writing_a_pass.md`` and ``docs/passes.md``.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from ..ir.well_formed import (
    Violation,
    WellFormedError,
    check_well_formed,
    register_phase_check,
    well_formed,
)
from .activation_rules import RecognizeActivations
from .codegens import (
    Codegen,
    CodegenError,
    get_codegen,
    list_codegens,
    register_codegen,
    unregister_codegen,
)
from .context import ConfigOption, PassContext, config_options, register_config
from .convert_layout import ConvertLayout
from .debug_counter import DebugCounter, allow_rewrite
from .errors import (
    ConfigError,
    ImmutabilityError,
    InstrumentError,
    PassCheckError,
    PassError,
    PassWellFormedError,
    PhaseError,
    PipelineError,
    ReplayError,
    TransformError,
)
from .external import (
    enabled_codegens,
    external_codegens,
    extract_external,
    merge_external,
    register_external_passes,
    unregister_external_passes,
)
from .fuse_by_pattern import FuseOpsByPattern
from .instruments import (
    DumpIR,
    ImmutabilityCheck,
    PassInstrument,
    PassTiming,
    PrintIfChanged,
    PrintIR,
    TimingEntry,
    WellFormedCheck,
)
from .lambda_lift import LambdaLift, LambdaLiftError, lambda_lift
from .normalize import Normalize
from .numeric_check import NumericCheck, NumericMismatchError, NumericRecord
from .partition import PartitionGraph
from .pass_base import (
    ANY_PHASE,
    DataflowBlockPass,
    FunctionPass,
    ModulePass,
    Pass,
    PassInfo,
    dataflow_block_pass,
    function_pass,
    module_pass,
)
from .pattern import (
    Match,
    Pattern,
    PatternError,
    is_const,
    is_op,
    is_tuple,
    match_block,
    wildcard,
)
from .pattern_rewrite import Rule, rewrite_function, rewrite_module, rewrite_pass
from .phases import describe_route, transition_route
from .registry import (
    get_pass_class,
    is_registered,
    list_passes,
    make_pass,
    pass_info,
    register_pass,
    unregister_pass,
)
from .replay import load_reproducer, replay
from .run_codegen import ForCodegen, RunCodegen
from .sequential import PlanStep, Sequential, parse_pipeline

for _m in sorted(m.name for m in _pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    _importlib.import_module(f"{__name__}.{_m}")

__all__ = [
    "RecognizeActivations",
    "ANY_PHASE",
    "Codegen",
    "CodegenError",
    "ConvertLayout",
    "ForCodegen",
    "FuseOpsByPattern",
    "PartitionGraph",
    "RunCodegen",
    "get_codegen",
    "list_codegens",
    "register_codegen",
    "unregister_codegen",
    "ConfigError",
    "ConfigOption",
    "DataflowBlockPass",
    "DebugCounter",
    "DumpIR",
    "FunctionPass",
    "ImmutabilityCheck",
    "ImmutabilityError",
    "InstrumentError",
    "LambdaLift",
    "LambdaLiftError",
    "Match",
    "ModulePass",
    "Normalize",
    "NumericCheck",
    "NumericMismatchError",
    "NumericRecord",
    "Pass",
    "PassCheckError",
    "PassContext",
    "PassError",
    "PassInfo",
    "PassInstrument",
    "PassTiming",
    "Pattern",
    "PatternError",
    "PassWellFormedError",
    "PhaseError",
    "PipelineError",
    "PlanStep",
    "PrintIR",
    "PrintIfChanged",
    "ReplayError",
    "Rule",
    "Sequential",
    "TimingEntry",
    "TransformError",
    "Violation",
    "WellFormedCheck",
    "WellFormedError",
    "allow_rewrite",
    "check_well_formed",
    "config_options",
    "dataflow_block_pass",
    "describe_route",
    "enabled_codegens",
    "external_codegens",
    "extract_external",
    "function_pass",
    "get_pass_class",
    "is_const",
    "is_op",
    "is_registered",
    "is_tuple",
    "lambda_lift",
    "list_passes",
    "load_reproducer",
    "make_pass",
    "match_block",
    "merge_external",
    "module_pass",
    "parse_pipeline",
    "pass_info",
    "register_config",
    "register_external_passes",
    "register_pass",
    "register_phase_check",
    "replay",
    "rewrite_function",
    "rewrite_module",
    "rewrite_pass",
    "transition_route",
    "unregister_external_passes",
    "unregister_pass",
    "well_formed",
    "wildcard",
]
