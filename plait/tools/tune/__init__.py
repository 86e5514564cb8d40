"""``plait tune``: measure each call's choices inside the whole model and keep the
best in a tuning database (docs/tuning.md).

* :mod:`.trial` — one trial: the model built with a point per call, each call timed
  by the entry point's step timer;
* :mod:`.search` — the search: candidates proposed by a cost model
  (:mod:`.cost_model`, LightGBM), the budget, the records;
* :mod:`.ray_runner` — trials as Ray tasks over a cluster, nodes grouped by machine.
"""

from .search import CallSummary, LocalExecutor, TuneReport, parse_budget, tune
from .trial import ModelRef, TrialResult, run_trial

__all__ = ["CallSummary", "LocalExecutor", "ModelRef", "TrialResult", "TuneReport",
           "parse_budget", "run_trial", "tune"]
