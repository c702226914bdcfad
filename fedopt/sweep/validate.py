"""Checking a sweep before it starts, and estimating how long it will take.

:func:`validate` does, once per distinct value, what every run would do first: build the method
(``fedopt.algorithms.make``), the regularizer, the data set and the problem, and check that they
go together (``method.check_problem`` and ``method.check``, the prox step of ``metric_gamma``, the
network of a decentralized method, the clients drawn per round (``clients_per_round``) and for the
evaluations (``eval_clients``), the divergence rule). A value that would make runs fail is
reported with its key, how many runs have it and the reason, before any run starts and before the
store is touched.

:func:`estimate` counts the runs, those already stored and those left, and times a few short
runs (after one that compiles) to extrapolate the wall time of the rest.
"""

from __future__ import annotations

import json
import os
import re

#: Groups timed by :func:`estimate` (the largest ones), the rounds of the first timed run and the time it should last.
CALIBRATION_GROUPS = 3
CALIBRATION_ROUNDS = 3
CALIBRATION_SECONDS = 0.2
#: Problems listed in one error.
SHOWN_PROBLEMS = 5


# ------------------------------------------------------------------------------------------ validate
def validate(specs) -> None:
    """Raise one :class:`~fedopt.sweep.config.ConfigError` listing the values that would make runs fail.

    ``specs`` are the :class:`~fedopt.sweep.config.RunSpec` of an expanded experiment. Each
    distinct algorithm, regularizer, data set + problem and their combinations are checked once
    (data sets are loaded once each), so a grid of 250 000 runs is checked in seconds plus the
    time to build its distinct problems. Returns None when every run can start.
    """
    from fedopt import algorithms, regularizers
    from fedopt.run import Divergence, check_eval_clients, metric_step
    from fedopt.sweep.execute import make_regularizer

    runs = list({spec.key: spec for spec in specs}.values())
    text = _Texts()
    methods, regs, problems, triples, rules = {}, {}, {}, {}, {}
    for spec in runs:
        config = spec.config
        a, r = text(config["algorithm"]), text(config["regularizer"])
        p = (text(config["dataset"]), text(config["problem"]), config.get("backend", "auto"))
        d = text(config.get("divergence", True))
        for groups, key, value in ((methods, a, config["algorithm"]), (regs, r, config["regularizer"]),
                                   (problems, p, config), (rules, d, config.get("divergence", True))):
            if key in groups:
                groups[key][1] += 1
            else:
                groups[key] = [value, 1]
        triple = (a, r, p, config.get("metric_gamma"), config.get("eval_clients"))
        triples[triple] = triples.get(triple, 0) + 1

    found = _Problems(len(runs))
    for key, (table, count) in methods.items():
        options = {k: v for k, v in table.items() if k != "name"}
        try:
            methods[key] = algorithms.make(table["name"], **options)
        except Exception as err:  # every reason a run would fail is reported
            methods[key] = None
            found.add("algorithm", table, err, count)
    for key, (table, count) in regs.items():
        try:
            regs[key] = make_regularizer(table)  # a block is placed on each problem below
        except Exception as err:
            regs[key] = None
            found.add("regularizer", table, err, count)
    for value, count in rules.values():
        try:
            Divergence.parse(value)
        except Exception as err:
            found.add_path("divergence", value, err, count)

    by_problem: dict = {}
    for triple, count in triples.items():
        by_problem.setdefault(triple[2], []).append((triple, count))
    datasets: dict = {}
    for p in sorted(problems, key=lambda p: p[0]):  # runs on one data set are consecutive: load it once
        config, count = problems[p]
        problem = _problem(config, datasets, found, count)
        if problem is None:
            continue
        for (a, r, _, metric_gamma, eval_clients), n in by_problem[p]:
            method, reg = methods[a], regs[r]
            if method is None or reg is None:
                continue
            block = json.loads(r).get("block")
            try:
                if block is not None:
                    reg = regularizers.on_block(reg, problem, block)
                reg.check_problem(problem)
            except Exception as err:
                if block is None:  # (the message may suggest a block: blame the regularizer's own options)
                    options = {k: v for k, v in json.loads(r).items() if k != "block"}
                    found.add("regularizer", options, err, n, fallback="name")
                else:
                    found.add_path("regularizer.block", block, err, n)
                continue
            try:
                method.check_problem(problem)
                method.check(problem, reg)
                if hasattr(method, "network"):  # decentralized: the graph must fit the clients
                    method.network(problem)
            except Exception as err:
                found.add("algorithm", json.loads(a), err, n, fallback="name")
                continue
            if eval_clients is not None:
                try:
                    check_eval_clients(method, problem, eval_clients)
                except Exception as err:
                    found.add_path("eval_clients", eval_clients, err, n)
            try:
                metric_step(method, reg, metric_gamma)
            except Exception as err:
                if metric_gamma is None and hasattr(method, "gamma"):  # metric_gamma defaults to the method's gamma
                    found.add_path("algorithm.gamma", method.gamma, err, n)
                else:
                    found.add_path("metric_gamma", metric_gamma, err, n)
    found.raise_if_any()


def _problem(config: dict, datasets: dict, found, count: int):
    """The problem of ``config`` (its data set loaded once per distinct one), or None after reporting why not."""
    from fedopt.sweep.execute import load_dataset, make_problem

    dataset = None
    if config.get("dataset") is not None:
        key = json.dumps(config["dataset"], sort_keys=True, default=str)
        if key not in datasets:
            datasets.clear()  # keep one data set in memory
            try:
                datasets[key] = load_dataset(config)
            except Exception as err:
                datasets[key] = err
        dataset = datasets[key]
        if isinstance(dataset, Exception):
            found.add("dataset", config["dataset"], dataset, count, fallback="name")
            return None
    try:
        return make_problem(config, dataset)
    except Exception as err:
        if re.search(r"\bbackend\b|gpu|cuda|device", str(err), re.IGNORECASE):
            found.add_path("backend", config.get("backend", "auto"), err, count)
        else:
            found.add("problem", config["problem"], err, count, fallback="name")
        return None


class _Texts:
    """Canonical JSON of configuration values, computed once per table object (the seeds of a grid
    point share their tables) and once per scalar (``True``, None, a number)."""

    SCALARS = (bool, int, float, str, type(None))

    def __init__(self):
        self.cache: dict = {}

    def __call__(self, value) -> str:
        if isinstance(value, self.SCALARS):
            key = (type(value), value)
        elif isinstance(value, dict):
            key = id(value)
        else:
            return json.dumps(value, sort_keys=True, default=str)
        entry = self.cache.get(key)
        if entry is None or (isinstance(key, int) and entry[0] is not value):  # an id reused by another table
            entry = self.cache[key] = (value, json.dumps(value, sort_keys=True, default=str))
        return entry[1]


class _Problems:
    """The problems found by :func:`validate`: key path, value, runs, reason."""

    def __init__(self, total: int):
        self.total = total
        self.items: dict = {}

    def add(self, section: str, table: dict, err: Exception, count: int, fallback: str | None = None) -> None:
        """A problem with ``table`` of ``section``; the option named by the message (or ``fallback``) is blamed."""
        option = "path" if isinstance(err, OSError) and "path" in table else _blame(table, str(err)) or fallback
        if option is None:
            self.add_path(section, dict(table), err, count)
        else:
            self.add_path(f"{section}.{option}", table.get(option), err, count)

    def add_path(self, path: str, value, err: Exception, count: int) -> None:
        reason = _reason(err)
        key = (path, json.dumps(value, sort_keys=True, default=str), reason)
        if key in self.items:
            self.items[key][1] += count
        else:
            self.items[key] = [value, count]

    def raise_if_any(self) -> None:
        from fedopt.sweep.config import ConfigError

        if not self.items:
            return
        lines = [f"{path} = {_show(value)} in {count} of {self.total} runs: {reason}"
                 for (path, _, reason), (value, count) in self.items.items()]
        shown = lines[:SHOWN_PROBLEMS]
        if len(lines) > len(shown):
            shown.append(f"... and {len(lines) - len(shown)} more")
        fix = "in the experiment file (or with --set KEY=VALUE); no run was started"
        if len(lines) == 1:
            message = f"{shown[0]}; fix it {fix}"
        else:
            message = (f"{len(lines)} problems would make runs fail; fix them {fix}:\n" +
                       "\n".join(f"    {line}" for line in shown))
        error = ConfigError(message)
        error.key = next(iter(self.items))[0]
        raise error


def _blame(table: dict, message: str) -> str | None:
    """The option of ``table`` that ``message`` is about: named in it, or whose (string) value it quotes."""
    options = sorted((k for k in table if k != "name"), key=len, reverse=True)
    for option in options:
        if re.search(rf"(?<![\w.]){re.escape(option)}(?!\w)", message):
            return option
    for option in options:
        value = table[option]
        if isinstance(value, str) and value and repr(value) in message:
            return option
    return None


def _reason(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    text = lines[-1].strip() if lines else type(err).__name__
    return text if isinstance(err, (ValueError, TypeError)) else f"{type(err).__name__}: {text}"


def _show(value) -> str:
    return repr(value) if not isinstance(value, dict) else json.dumps(value, sort_keys=True, default=str)


# ------------------------------------------------------------------------------------------ estimate
def estimate(specs, store=None, workers: int | None = None, retry_failed: bool = False) -> dict:
    """How many runs there are, how many are stored and to run, and about how long the rest takes.

    Parameters
    ----------
    specs : list of RunSpec
    store : Store or None
        Read only (``statuses``); None counts nothing as stored.
    workers : int or None
        The workers that will share the runs (default: the cores).
    retry_failed : bool
        Count the stored failed runs as to run.

    Returns
    -------
    dict
        ``runs``, ``distinct``, ``stored``, ``failed_stored``, ``to_run``, ``seconds`` (the
        estimate, None when nothing could be timed), ``seconds_per_run``, ``timed`` (calibration
        runs) and ``text``, one line saying all of it.

    A timed run is one spec of each of the (at most :data:`CALIBRATION_GROUPS`) largest groups of
    runs sharing a method and a problem, shortened: once to compile and load, then timed with 0
    rounds and with enough rounds to last :data:`CALIBRATION_SECONDS`. The time of a run is
    extrapolated from its rounds, local steps and evaluations, the total divided among the workers
    and the set-up (compiling, loading the data) added once. It is rough (the runs compete for
    memory bandwidth and the machine may be busy), meant to tell minutes from days.
    """
    workers = max(1, int(workers or os.cpu_count() or 1))
    runs = list({spec.key: spec for spec in specs}.values())
    stored = store.statuses() if store is not None else {}
    failed_stored = sum(stored.get(spec.key) == "failed" for spec in runs)
    todo = [spec for spec in runs
            if spec.key not in stored or (retry_failed and stored[spec.key] == "failed")]
    groups: dict = {}
    for spec in todo:
        c = spec.config
        group = json.dumps([c["algorithm"]["name"], c["dataset"], c["problem"], c.get("backend", "auto")],
                           sort_keys=True, default=str)
        groups.setdefault(group, []).append(spec)
    timings = {}
    for group, members in sorted(groups.items(), key=lambda item: -len(item[1]))[:CALIBRATION_GROUPS]:
        timing = _time_one(members[0].config, workers)
        if timing is not None:
            timings[group] = timing
    seconds = per_run = None
    if timings:
        mean = tuple(sum(t[i] for t in timings.values()) / len(timings) for i in range(3))
        total = 0.0
        for group, members in groups.items():
            evaluation, round_ = timings.get(group, mean)[:2]
            for spec in members:
                rounds, every = spec.config["rounds"], spec.config["eval_every"]
                evaluations = rounds // every + 1 + (rounds % every != 0)
                total += evaluation * evaluations + round_ * _steps(spec.config) * rounds
        per_run = total / max(len(todo), 1)
        setup = max(max(t[2] for t in timings.values()), 0.0)
        seconds = total / min(workers, max(len(todo), 1)) + setup
    done = len(runs) - len(todo)
    text = f"{len(specs)} runs ({len(runs)} distinct): {done} already stored"
    if failed_stored and not retry_failed:
        text += f" ({failed_stored} of them failed; --retry-failed runs them again)"
    text += f", {len(todo)} to run"
    if not todo:
        text += "; nothing to do"
    elif seconds is None:
        text += "; no time estimate (the calibration runs failed: see the errors with a short sweep, --quick)"
    else:
        text += (f"; {_duration(seconds)} with {workers} worker{'s' * (workers > 1)} "
                 f"({_duration(per_run)} per run, timed on {len(timings)} short run{'s' * (len(timings) > 1)})")
    return {"runs": len(specs), "distinct": len(runs), "stored": done, "failed_stored": failed_stored,
            "to_run": len(todo), "seconds": seconds, "seconds_per_run": per_run, "timed": len(timings), "text": text}


def _time_one(config: dict, workers: int):
    """``(seconds per evaluation, seconds per round and local step, set-up seconds)`` of ``config`` (the set-up:
    compiling and loading the data, once per worker), or None when the short runs fail.

    The timed run grows tenfold from :data:`CALIBRATION_ROUNDS` rounds until it lasts
    :data:`CALIBRATION_SECONDS` (or reaches the run's own rounds), so that timer noise stays small.
    """
    from fedopt.sweep.execute import execute_run

    rounds = min(CALIBRATION_ROUNDS, config["rounds"])
    short = {**config, "rounds": rounds, "eval_every": max(rounds, 1), "tol": None}
    warm = execute_run(short)  # compiles the kernels and builds the problem (cached), as each worker does once
    if warm["status"] == "failed":
        return None
    with _one_thread(workers > 1):  # each of several workers runs on one thread
        first = timed = execute_run({**short, "rounds": 0})
        while rounds and timed["status"] != "failed":
            timed = execute_run({**short, "rounds": rounds, "eval_every": rounds})
            if timed["run_seconds"] >= CALIBRATION_SECONDS or rounds >= config["rounds"]:
                break
            rounds = min(10 * rounds, config["rounds"])
    if "failed" in (first["status"], timed["status"]):
        return None
    evaluation = first["run_seconds"] or 0.0
    per_round = max(timed["run_seconds"] - 2 * evaluation, 0.0) / rounds if rounds else 0.0
    setup = warm["wall_seconds"] - 2 * evaluation - per_round * short["rounds"]
    return evaluation, per_round / _steps(config), setup


def _steps(config: dict) -> int:
    """The local steps of a run's rounds (DEPOSITUM's ``comm_period``): a round's time grows with them.
    The rule of :func:`fedopt.sweep.batching._work`, which orders the batches."""
    algorithm = config["algorithm"]
    steps = algorithm.get("local_steps") or algorithm.get("comm_period")
    return steps if isinstance(steps, int) and steps > 0 else 1


class _one_thread:
    """Within the block, Numba and BLAS run on one thread (as in a pool of several workers)."""

    def __init__(self, enabled: bool):
        self.enabled, self.restore = enabled, []

    def __enter__(self):
        if not self.enabled:
            return self
        try:
            from threadpoolctl import threadpool_limits

            self.restore.append(threadpool_limits(1).restore_original_limits)
        except ImportError:  # pragma: no cover - scikit-learn brings threadpoolctl
            pass
        try:
            import numba

            threads = numba.get_num_threads()
            numba.set_num_threads(1)
            self.restore.append(lambda: numba.set_num_threads(threads))
        except ImportError:  # pragma: no cover
            pass
        return self

    def __exit__(self, *exc):
        for undo in self.restore:
            undo()


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"about {seconds / 3600:.1f} h"
    return f"about {seconds / 86400:.1f} days"


__all__ = ["estimate", "validate"]
