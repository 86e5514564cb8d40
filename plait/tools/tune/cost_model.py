"""The tuner's cost model: which unmeasured point of a call to try next.

A gradient-boosted regression (LightGBM: fast on a few hundred rows, small, and its
trees take the categorical choices and the shape sizes as they are) learns the time of
a point relative to its call's default point, ``log(seconds / default seconds)``, from
every measurement so far, over features of the call (its op, the log of each size of
its descriptor) and of the point (each choice's value: a number as it is, a name by its
index in its space).  The
calls of one model share the model, so a layout that paid on one depthwise shape is
tried first on the next.  Without LightGBM (``pip install plait[tune]``), or before it
has enough measurements (:data:`MIN_ROWS`), candidates are tried in the space's order.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ...target.c.tuning.space import CHOICE_NAMES

MIN_ROWS = 8
"""The measurements the model needs before it ranks candidates."""

OPS = ("conv2d", "linear", "matmul", "dwconv2d")
DESC_FIELDS = ("N", "C", "H", "W", "O", "G", "KH", "KW", "SH", "SW", "OH", "OW", "M", "K",
               "batch")
CHOICES = CHOICE_NAMES
"""The choices the model knows (of every family's space): a number as it is (a thread
count, a block size; 0 the kernel's rule), a name by its index in the call's space."""


def features(call: str, space: dict[str, Any], point: dict[str, Any]) -> list[float]:
    """The feature row of ``point`` of ``call`` (its key) in ``space`` (as data)."""
    body = json.loads(call)
    desc = body.get("desc", {})
    row = [float(OPS.index(body["op"])) if body.get("op") in OPS else -1.0]
    for f in DESC_FIELDS:
        v = desc.get(f)
        row.append(math.log2(1 + v) if isinstance(v, (int, float)) else -1.0)
    for c in CHOICES:
        values = space["choices"].get(c)
        if not values or c not in point:
            row.append(-1.0)
        elif isinstance(point[c], int):
            row.append(float(point[c]))
        else:
            row.append(float(list(values).index(point[c])))
    return row


class CostModel:
    """Learns relative times of points (see the module docstring)."""

    def __init__(self) -> None:
        self.rows: list[list[float]] = []
        self.targets: list[float] = []
        self.model: Any = None
        self.why = ""
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            self.why = ("LightGBM is not installed (pip install plait[tune]): candidates "
                        "are tried in their space's order")

    @property
    def available(self) -> bool:
        return not self.why

    def add(self, call: str, space: dict[str, Any], point: dict[str, Any], seconds: float,
            default_seconds: float) -> None:
        """One measurement (both times positive)."""
        if seconds > 0 and default_seconds > 0:
            self.rows.append(features(call, space, point))
            self.targets.append(math.log(seconds / default_seconds))

    def fit(self) -> bool:
        """Refit on every measurement; False while there are too few (or no LightGBM)."""
        if not self.available or len(self.rows) < MIN_ROWS:
            return False
        import lightgbm as lgb
        import numpy as np

        params = {"objective": "regression", "learning_rate": 0.2, "num_leaves": 7,
                  "min_data_in_leaf": 1, "min_data_in_bin": 1, "verbose": -1, "seed": 0,
                  "deterministic": True, "num_threads": 1}
        data = lgb.Dataset(np.asarray(self.rows), np.asarray(self.targets), params=params)
        self.model = lgb.train(params, data, num_boost_round=60)
        return True

    def rank(self, call: str, space: dict[str, Any], points: list[dict[str, Any]]
             ) -> list[dict[str, Any]]:
        """``points`` best predicted first (unchanged without a fitted model)."""
        if self.model is None or not points:
            return list(points)
        import numpy as np

        pred = self.model.predict(np.asarray([features(call, space, p) for p in points]))
        order = sorted(range(len(points)), key=lambda i: (float(pred[i]), i))
        return [points[i] for i in order]


__all__ = ["CostModel", "MIN_ROWS", "features"]
