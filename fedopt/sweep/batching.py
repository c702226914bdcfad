"""Which runs of a sweep execute together, as one :func:`fedopt.run_batch`.

Two runs are **compatible** when their configurations are equal except for the ``seed``, the
``metric_gamma``, the real-valued hyperparameters of the method (those that set no round's shape:
not the method's ``shared`` ones), the numeric parameters of the regularizer (same name and
block) and the data set's partition seed (other partitions of the same samples, each run with
its own client weights when ``weights = "samples"`` and the client sizes differ), and when the
method can run batched (``batch_refusal()`` is None): Scaffnew with ``random_steps`` runs alone,
and so does every run that a claim on wall time compares (:func:`timed_alone`).
The compatible runs form a *group*, in the order of the sweep; each group is cut into batches by
the ``batch`` option:

* ``"off"``: every run alone (through :func:`fedopt.run`);
* ``N`` (an integer >= 1): batches of at most ``N`` runs;
* ``"auto"`` (the default): batches of at most ``ceil(runs / tasks)`` runs, never more than
  :data:`AUTO_LIMIT`, where ``runs`` counts the whole sweep and ``tasks`` is ``2 * workers`` (one
  for the serial executor): enough tasks to keep every worker busy to the end, each as large as
  that allows (``workers`` is the pool's processes for ``local``, the cluster's threads for
  ``dask``). A grid of many small groups keeps its groups whole; one large group is cut.

A group is cut into as few batches as that size allows, of sizes that differ by at most one
(7 runs at most 3 per batch: 3, 2, 2). The executors start the batches :func:`largest_first`, so
that a long one does not start last and leave the other workers idle at the end.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from functools import lru_cache

#: The most runs in one batch of ``--batch auto``.
AUTO_LIMIT = 64
#: Stands for a value that may differ between the runs of a batch.
_PER_RUN = "<per run>"


def batch_option(value):
    """``"auto"``, ``"off"`` or an integer >= 1 from ``value`` (a string from the command line, or
    those values); ValueError otherwise."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("auto", "off"):
            return text
        if text.isdecimal() and int(text) >= 1:
            return int(text)
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(f"batch must be 'auto', 'off' or an integer >= 1 (the most runs in one batch), got {value!r}")


def signature(config: dict) -> str | None:
    """What the runs of one batch share, as a string (equal for compatible configurations), or None
    for a run that runs alone: its method cannot batch, or its hyperparameters are invalid (the run
    then fails alone, with its own error)."""
    if config.get("eval_clients") is not None:  # fedopt.run_batch evaluates every client
        return None
    rest = {k: v for k, v in config.items() if k not in ("seed", "metric_gamma", "algorithm", "regularizer")}
    if isinstance(rest.get("dataset"), dict) and "seed" in rest["dataset"]:  # another partition of the same data
        rest["dataset"] = {**rest["dataset"], "seed": _PER_RUN}
    method = _method_signature(json.dumps(config["algorithm"], sort_keys=True))
    if method is None:
        return None
    regularizer = {k: _PER_RUN if k not in ("name", "block") and _number(v) else v
                   for k, v in (config.get("regularizer") or {}).items()}
    return json.dumps({**rest, "algorithm": method, "regularizer": regularizer}, sort_keys=True, default=repr)


@lru_cache(maxsize=1024)
def _method_signature(table: str) -> dict | None:
    from fedopt import algorithms

    options = json.loads(table)
    name = options.pop("name")
    try:
        method = algorithms.make(name, **options)
    except Exception:  # an invalid configuration fails when it runs, alone
        return None
    if method.batch_refusal() is not None:
        return None
    out = {"name": method.name}
    for f in fields(method):
        value = getattr(method, f.name)
        out[f.name] = _PER_RUN if isinstance(value, float) and f.name not in type(method).shared else value
    return out


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def batch_size(runs: int, batch, workers: int = 1) -> int:
    """The most runs in one batch of a sweep of ``runs`` runs (see the module docstring)."""
    if batch == "off":
        return 1
    if batch == "auto":
        workers = max(1, int(workers))
        return max(1, min(AUTO_LIMIT, math.ceil(runs / (1 if workers == 1 else 2 * workers))))
    return int(batch)


def batches(specs, batch="auto", workers: int = 1, alone=frozenset()) -> list[list]:
    """The runs ``specs`` as batches (lists of specs): compatible runs together, cut by ``batch``
    (``"auto"``, ``"off"`` or an integer, see the module docstring) for ``workers`` workers; the
    runs whose keys are in ``alone`` run alone whatever ``batch`` says (see :func:`timed_alone`).

    The batches come in the order of their first run in ``specs``, and each keeps the order of its runs.
    """
    batch, specs = batch_option(batch), list(specs)
    groups: list[list] = []
    by_signature: dict = {}
    for spec in specs:
        key = None if batch == "off" or spec.key in alone else signature(spec.config)
        if key is None:
            groups.append([spec])
        elif key in by_signature:
            by_signature[key].append(spec)
        else:
            by_signature[key] = [spec]
            groups.append(by_signature[key])
    out = []
    most = batch_size(len(specs), batch, workers)
    for group in groups:
        count = math.ceil(len(group) / most)
        small, extra = divmod(len(group), count)
        start = 0
        for index in range(count):
            size = small + (index < extra)
            out.append(group[start:start + size])
            start += size
    return out


def timed_alone(experiment, specs) -> set:
    """The keys of the runs that a claim on their wall time (``metric = "seconds"``) compares: they
    run alone, since the runs of a batch share its time equally (identical seeds, a zero-width
    interval) and a batch's time per run is not a run's own time."""
    timed = {claim.grid for claim in experiment.claims if claim.metric == "seconds"}
    return {spec.key for spec in specs if spec.grid in timed}


def largest_first(units: list[list]) -> list[list]:
    """The batches ``units`` ordered by their estimated work, the largest first (a stable sort): the
    greedy schedule that keeps workers evenly busy when grid points cost very different times."""
    return sorted(units, key=lambda unit: -sum(_work(spec.config) for spec in unit))


def _work(config: dict) -> float:
    """A run's work, roughly: rounds x clients x local steps x minibatch rows."""
    algorithm = config.get("algorithm") or {}
    clients = (config.get("dataset") or {}).get("n_clients") or (config.get("problem") or {}).get("n_clients") or 1
    steps = algorithm.get("local_steps") or algorithm.get("comm_period") or 1
    rows = algorithm.get("batch_size") or 64  # full local gradients: the rows are unknown here
    return float(config.get("rounds") or 1) * clients * steps * rows


__all__ = ["AUTO_LIMIT", "batch_option", "batch_size", "batches", "largest_first", "signature", "timed_alone"]
