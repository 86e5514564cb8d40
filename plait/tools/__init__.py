"""Debugging tools behind the ``plait`` command: ``passes``, ``pipeline``, ``opt``,
``report`` and ``bisect`` (:mod:`plait.tools.cli`), the progress bar, the pipeline
report and bisection.  See docs/debugging.md."""
