"""Sweeps: expand a grid of runs from a TOML file, execute them, keep every result, report.

* :mod:`fedopt.sweep.config`: the TOML schema, validation (errors name the key and the line),
  expressions such as ``lr_local = "1/Q"``, and the expansion into runs keyed by a hash.
* :mod:`fedopt.sweep.validate`: the checks every run would do, on the whole grid before the first
  run; the size and time of a sweep from a short calibration.
* :mod:`fedopt.sweep.store`: the SQLite store: every sweep kept, one committed row per finished
  run, leases that let several processes share a grid.
* :mod:`fedopt.sweep.execute`: serial, local process-pool and Dask executors.
* :mod:`fedopt.sweep.report`: tables over seeds, PNG figures, fitted slopes, the rows as data.
* :mod:`fedopt.sweep.claims`: the papers' claims (``[[claim]]`` tables) checked against a sweep.

>>> from fedopt import sweep
>>> exp = sweep.load_experiment("speedup_demo")            # or a path to a TOML file
>>> with sweep.Store("results/demo.db") as store:           # doctest: +SKIP
...     print(sweep.run_sweep(exp, store, workers=2))
...     sweep.report(store, out="results/demo_report")
"""

from fedopt.sweep.config import (
    ConfigError,
    Experiment,
    RunSpec,
    builtin_experiments,
    evaluate_expression,
    load_experiment,
    parse_experiment,
)
from fedopt.sweep.execute import SweepInterrupted, SweepSummary, execute_run, run_sweep
from fedopt.sweep.report import check_claims, export, fit_slope, report
from fedopt.sweep.store import Store, StoreError
from fedopt.sweep.validate import estimate, validate

__all__ = ["ConfigError", "Experiment", "RunSpec", "Store", "StoreError", "SweepInterrupted", "SweepSummary",
           "builtin_experiments", "check_claims", "estimate", "evaluate_expression", "execute_run", "export",
           "fit_slope", "load_experiment", "parse_experiment", "report", "run_sweep", "validate"]
