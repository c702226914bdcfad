"""``fedopt.run``: drive the rounds of a method, record the history, stop on divergence."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, fields

import numpy as np

from fedopt import algorithms
from fedopt.algorithms.base import Algorithm, State

COLUMNS = ("round", "stationarity", "normal_map", "objective", "test_accuracy", "nnz", "hoyer", "grad_evals",
           "prox_evals", "floats_up", "floats_down", "seconds")


class History:
    """The recorded rows of a run, one per evaluation; ``history["stationarity"]`` is a NumPy column.

    The columns are :data:`COLUMNS` followed by the method's ``extra_columns`` (the consensus
    error of decentralized methods, the gap measures of VI methods, ...).
    """

    def __init__(self, columns=COLUMNS):
        self.columns = tuple(columns)
        self.rows: list[dict] = []

    def append(self, row: dict) -> None:
        self.rows.append({name: row[name] for name in self.columns})

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self.columns:
            raise KeyError(f"history has no column {column!r}; columns are {', '.join(self.columns)}")
        return np.array([row[column] for row in self.rows])

    def last(self) -> dict:
        return dict(self.rows[-1]) if self.rows else {}

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: self[name] for name in self.columns}

    def to_pandas(self):
        """A pandas DataFrame of the rows (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("History.to_pandas needs pandas: pip install pandas (or use as_dict())") from exc
        return pd.DataFrame(self.rows, columns=list(self.columns))

    def __repr__(self) -> str:
        last = self.last()
        tail = f", last round {last['round']}: stationarity {last['stationarity']:.3g}" if last else ""
        return f"History({len(self)} rows{tail})"


@dataclass
class Result:
    """What :func:`run` returns: the final model ``x`` (NumPy), the ``history``, and how it was made."""

    x: np.ndarray
    history: History
    algorithm: Algorithm
    state: State
    seed: int | None
    metric_gamma: float
    converged: bool = False

    @property
    def z(self) -> np.ndarray | None:
        """The final pre-prox server point of normal-map methods (None for the others)."""
        return None if self.state.z is None else self.state.env.problem.backend.to_numpy(self.state.z)


class DivergenceError(FloatingPointError):
    """The iterates became NaN or inf. ``result`` keeps the history up to the last finite round."""

    def __init__(self, message: str, result: Result):
        super().__init__(message)
        self.result = result


def run(algorithm, problem, regularizer=None, *, rounds: int = 100, seed=0, backend=None, eval_every: int = 1,
        x0=None, metric_gamma: float | None = None, tol: float | None = None, progress: bool | None = None,
        callback=None, **hyperparameters) -> Result:
    """Run ``rounds`` rounds of ``algorithm`` on ``problem + regularizer`` and record the history.

    Parameters
    ----------
    algorithm : str or Algorithm
        A name from :func:`fedopt.algorithms.available` (then ``hyperparameters`` build it) or an
        instance.
    problem : fedopt.problems.Problem
    regularizer : fedopt.regularizers.Regularizer, default Zero()
    rounds : int
    seed : int or None
        Seeds the one generator that draws every minibatch on the host, so that every backend
        follows the same trajectory; also seeds ``problem.init`` when ``x0`` is None.
    backend : str or None
        Move the problem to this backend first (default: keep the problem's).
    eval_every : int
        Evaluate the metrics every this many rounds (and always at round 0 and at the end).
    x0 : array or None
        The initial model (default ``problem.init(seed)``).
    metric_gamma : float or None
        The prox parameter of the stationarity measures; default the method's ``gamma`` when it
        has one, else 1. Pass the same value to compare methods.
    tol : float or None
        Stop at the first evaluation where ``stationarity <= tol`` (``result.converged`` is then
        True); None runs all ``rounds``.
    progress : bool or None
        A one-line progress report on stderr; default on for a terminal and at least 100 rounds.
    callback : callable or None
        ``callback(state, row)`` after every evaluation.

    Returns
    -------
    Result

    Raises
    ------
    DivergenceError
        When the model becomes NaN or inf; its ``result`` holds the history so far.
    """
    from fedopt.regularizers import Zero

    regularizer = Zero() if regularizer is None else regularizer
    method = algorithms.make(algorithm, **hyperparameters)
    rounds = _count("rounds", rounds, minimum=0)
    eval_every = _count("eval_every", eval_every, minimum=1)
    if tol is not None and not (float(tol) >= 0 and math.isfinite(float(tol))):
        raise ValueError(f"tol must be a finite number >= 0 or None, got {tol!r}")
    if backend is not None:
        problem = problem.on(backend)
    method.check(problem, regularizer)
    gamma = float(metric_gamma if metric_gamma is not None else getattr(method, "gamma", 1.0))
    regularizer.check_step(gamma, "metric_gamma")
    if x0 is None:
        x0 = problem.init(seed)
    rng = np.random.default_rng(seed)
    state = method.init(problem, regularizer, rng, x0)
    history = History(COLUMNS + tuple(c for c in method.extra_columns if c not in COLUMNS))
    show = sys.stderr.isatty() and rounds >= 100 if progress is None else bool(progress)
    start = time.perf_counter()

    def record(state):
        row = {"round": state.round, **method.evaluate(state, gamma),
               **{f.name: getattr(state.costs, f.name) for f in fields(state.costs)},
               "seconds": time.perf_counter() - start}
        if not (math.isfinite(row["objective"]) and math.isfinite(row["stationarity"])):
            diverged(f"the objective is {row['objective']} at round {state.round}")
        history.append(row)
        if callback is not None:
            callback(state, row)
        if show:
            print(f"\r{method.name}: round {state.round}/{rounds}  stationarity {row['stationarity']:.3e}  "
                  f"objective {row['objective']:.6g}", end="", file=sys.stderr, flush=True)

    def diverged(what):
        if show:
            print(file=sys.stderr)
        raise DivergenceError(
            f"{method.name} diverged: {what}. Reduce the step sizes (lr_local, lr_server) or check the data; "
            "error.result holds the history so far.", result(last_finite))

    def result(state, converged=False):
        return Result(problem.backend.to_numpy(state.x).copy(), history, method, state, seed, gamma, converged)

    def converged():
        return tol is not None and history.rows[-1]["stationarity"] <= tol

    last_finite = state
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, once
        record(state)
        for t in range(1, rounds + 1):
            if converged():
                break
            state = method.round(state)
            if not bool(problem.backend.xp.isfinite(state.x).all()):
                diverged(f"the model has NaN or inf entries after round {t}")
            if t % eval_every == 0 or t == rounds:
                record(state)
            last_finite = state
    if show:
        print(file=sys.stderr)
    return result(state, converged())


def _count(name, value, minimum):
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


__all__ = ["COLUMNS", "DivergenceError", "History", "Result", "run"]
