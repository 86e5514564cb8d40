"""Tuning the ``c`` target's calls: search spaces as data (:mod:`.space`), the tuning
database (:mod:`.db`) and the choice of each call's point at build time
(:mod:`.choose`).  The tuner that measures points inside a model is
``plait tune`` (:mod:`plait.tools.tune`); docs/tuning.md."""

from .choose import TUNING_ATTR, Chooser, current_machine, database_path, thread_count
from .db import ENV_VAR, Machine, Record, TuningDB, TuningDBError, TuningDBWarning
from .space import (
    CONV2D_ALGORITHMS,
    DWCONV_LAYOUTS,
    Choice,
    Point,
    SearchSpace,
    call_key,
    conv2d_space,
    dwconv_space,
    gemm_space,
    point_text,
)

__all__ = ["CONV2D_ALGORITHMS", "DWCONV_LAYOUTS", "ENV_VAR", "TUNING_ATTR", "Choice",
           "Chooser", "Machine", "Point", "Record", "SearchSpace", "TuningDB",
           "TuningDBError", "TuningDBWarning", "call_key", "conv2d_space",
           "current_machine", "database_path", "dwconv_space", "gemm_space",
           "point_text", "thread_count"]
