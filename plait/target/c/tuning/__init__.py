"""Tuning the ``c`` target's calls: search spaces as data (:mod:`.space`), the tuning
database (:mod:`.db`) and the choice of each call's point at build time
(:mod:`.choose`).  The tuner that measures points inside a model is
``plait tune`` (:mod:`plait.tools.tune`); docs/tuning.md."""

from .choose import TUNING_ATTR, Chooser, current_machine, database_path, thread_count
from .db import ENV_VAR, Machine, Record, TuningDB, TuningDBError, TuningDBWarning
from .space import SPACES, Choice, Point, SearchSpace, call_key, point_text, register_space

__all__ = ["ENV_VAR", "SPACES", "TUNING_ATTR", "Choice", "Chooser", "Machine", "Point",
           "Record", "SearchSpace", "TuningDB", "TuningDBError", "TuningDBWarning",
           "call_key", "current_machine", "database_path", "point_text", "register_space",
           "thread_count"]
