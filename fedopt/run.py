"""``fedopt.run``: drive the rounds of a method, record the history, stop on divergence.

A run stops with :class:`DivergenceError` when its model, or the pre-prox point ``z`` of a normal-map
method (it can run to inf while a constraint's prox keeps ``x`` finite), becomes NaN or inf (always) and, before
that, when a :class:`Divergence` rule fires at an evaluation. The default rule stops a run whose
objective (``f + phi``, or the gap measure of a VI method) exceeds ``1000`` times its value at
round 0, floored at 1: ``|F_t| > 1000 * max(|F_0|, 1)``. Healthy runs stay far below (those of
the built-in experiments, at full size, peak at 1.04 times ``max(|F_0|, 1)``), while a too large
step is caught at its first evaluation, long before inf. ``divergence=`` tunes or switches off the
rule in :func:`run`, ``[run.divergence]`` or ``[run] divergence = false`` in an experiment file.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import sys
import time
from dataclasses import asdict, dataclass, fields, replace

import numpy as np

from fedopt import algorithms
from fedopt._checks import count, real
from fedopt.algorithms.base import Algorithm, Env, Start, State, cohort_size, undo_round
from fedopt.kernels.reference import array_module

COLUMNS = ("round", "stationarity", "normal_map", "objective", "test_accuracy", "nnz", "hoyer", "grad_evals",
           "prox_evals", "floats_up", "floats_down", "seconds")
#: The columns of :data:`COLUMNS` measured at the pre-prox server point ``z``: only the runs of
#: methods that keep one (``state.z``, the normal-map methods) record them, with the method's own
#: prox parameter of ``z`` (its ``pre_prox_gamma``: ``x = prox_{g phi}(z)``), not ``metric_gamma``.
PRE_PROX_COLUMNS = ("normal_map",)
#: The columns of the last row that ``repr(result)`` shows (``test_accuracy`` only where defined).
SUMMARY_COLUMNS = ("objective", "stationarity", "test_accuracy")


def history_columns(method: Algorithm, state: State) -> tuple[str, ...]:
    """The history columns of a run of ``method`` from ``state`` (its initial state): :data:`COLUMNS`,
    without :data:`PRE_PROX_COLUMNS` when the state has no pre-prox point ``z`` (they would be NaN by
    construction: decentralized methods, VI methods, FedAvg, ...), then the method's ``extra_columns``."""
    base = tuple(c for c in COLUMNS if state.z is not None or c not in PRE_PROX_COLUMNS)
    return base + tuple(c for c in method.extra_columns if c not in base)


class History:
    """The recorded rows of a run, one per evaluation; ``history["stationarity"]`` is a NumPy column.

    The columns are those of :func:`history_columns`: :data:`COLUMNS` (``normal_map`` only for
    methods with a pre-prox point, measured with their own prox parameter of it) followed by the
    method's ``extra_columns`` (the consensus error of decentralized methods, the gap measures of
    VI methods, ...). ``seconds`` is the training time up to the row: the time of the rounds,
    without the evaluations' own time nor that of ``callback``, ``stop`` and the checks. The
    first run of a kind in a process also pays for compiling or loading its kernels; ``fedopt
    sweep`` and ``fedopt run`` run one untimed round of each kind first, so their ``seconds`` do not.

    Like a pandas DataFrame, a history is a table of named columns: ``"objective" in history``,
    ``history.keys()`` and ``iter(history)`` (hence ``list(history)`` and ``dict(history)``) go
    over the column names, while ``len(history)`` counts the rows. :meth:`to_pandas` makes the
    DataFrame itself, :meth:`as_dict` a dict of NumPy columns. ``estimated`` names the columns
    measured on a sample of clients (``fedopt.run(eval_clients=...)``), with the sample.
    """

    def __init__(self, columns=COLUMNS):
        self.columns = tuple(columns)
        self.rows: list[dict] = []
        #: ``{column: how}`` for the columns estimated on a sample of clients (``fedopt.run``'s
        #: ``eval_clients``); the others are exact.
        self.estimated: dict[str, str] = {}

    def append(self, row: dict) -> None:
        self.rows.append({name: row[name] for name in self.columns})

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, column) -> bool:
        return column in self.columns

    def __iter__(self):
        return iter(self.columns)

    def keys(self) -> tuple[str, ...]:
        """The column names, in order."""
        return self.columns

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self.columns:
            raise KeyError(f"history has no column {column!r}; columns are {', '.join(self.columns)}")
        return np.array([row[column] for row in self.rows])

    def last(self) -> dict:
        return dict(self.rows[-1]) if self.rows else {}

    def as_dict(self) -> dict[str, np.ndarray]:
        return {name: self[name] for name in self.columns}

    def to_pandas(self):
        """A pandas DataFrame of the rows, one column per history column, in order (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("History.to_pandas needs pandas: pip install pandas (or use as_dict())") from exc
        frame = pd.DataFrame(self.rows, columns=list(self.columns))
        frame.attrs["estimated"] = dict(self.estimated)
        return frame

    def __repr__(self) -> str:
        last = self.last()
        tail = f", last round {last['round']}: stationarity {last['stationarity']:.3g}" if last else ""
        sample = f", {', '.join(self.estimated)} on {next(iter(self.estimated.values()))}" if self.estimated else ""
        return f"History({len(self)} rows{tail}{sample})"


@dataclass(repr=False)
class Result:
    """What :func:`run` returns: the final model ``x`` (NumPy), the ``history``, and how it was made.

    ``repr(result)`` is one short line, never the arrays: the method, the rounds done, the shape
    and dtype of ``x``, the last row's :data:`SUMMARY_COLUMNS`, whether it converged and the
    error's type and rule (``result.history`` holds every row).
    """

    x: np.ndarray
    history: History
    algorithm: Algorithm
    state: State
    seed: int | None
    metric_gamma: float
    converged: bool = False
    #: None for a run that finished; else the :class:`DivergenceError` that stopped it, which
    #: :func:`run` raises (``error.result.error is error``) and :func:`fedopt.run_batch` returns
    #: here (its history kept).
    error: DivergenceError | None = None

    @property
    def z(self) -> np.ndarray | None:
        """The final pre-prox server point of normal-map methods (None for the others)."""
        return None if self.state.z is None else self.state.env.problem.backend.to_numpy(self.state.z)

    @property
    def start(self) -> Start:
        """The final model as where another run starts (``fedopt.run(..., x0=result.start)``), whose
        round 0 then reports ``x`` itself: with the subgradient ``(z - x) / g`` of phi at ``x`` that
        the pre-prox point of a normal-map method holds (``g`` its ``pre_prox_gamma``), from which
        a normal-map method of any prox parameter starts. Without one (the other methods), a
        normal-map method starts its pre-prox point at ``x`` and reports ``prox(x)``, ``x`` itself for
        phi = 0 or a constraint's feasible ``x``."""
        x, z, g = self.x.copy(), self.z, self.algorithm.pre_prox_gamma
        return Start(x) if z is None or g is None else Start(x, (z - x) / g)

    def _summary(self) -> dict[str, float]:
        """The last row's :data:`SUMMARY_COLUMNS` that the run defines (``test_accuracy`` not when NaN)."""
        last = self.history.last()
        return {c: last[c] for c in SUMMARY_COLUMNS
                if c in last and not (c == "test_accuracy" and math.isnan(last[c]))}

    def __repr__(self) -> str:
        x = f"array(shape={tuple(np.shape(self.x))}, {getattr(self.x, 'dtype', type(self.x).__name__)})"
        final = "{" + ", ".join(f"{c!r}: {v:.4g}" for c, v in self._summary().items()) + "}"
        error = self.error
        if error is not None:
            error = f"{type(error).__name__}(rule={getattr(error, 'rule', None)!r})"
        return (f"Result(algorithm={self.algorithm.name!r}, rounds={self.state.round}, x={x}, final={final}, "
                f"converged={self.converged}, error={error})")


#: Evaluations in the second half of a run that the stall rule needs to call it still descending.
STEADY_EVALUATIONS = 5
#: The verdict in the message of a run the stall rule stopped (reports find those runs by it).
STALLED = "did not converge"


@dataclass(frozen=True)
class Divergence:
    """When :func:`run` stops a run as diverged, besides NaN or inf (which always stop it).

    Checked at every evaluation (every ``eval_every`` rounds) against the first one (round 0):

    * objective: ``|F_t| > objective_factor * max(|F_0|, objective_floor)``, with ``F`` the
      history's ``objective`` (``f + phi``; for a VI method its gap measure, ``gap`` or
      ``gap_bound``). The floor keeps a run that starts at its solution (``F_0 = 0``) from
      stopping at the first rounding error; it is absolute, so it suits objectives of order one
      (averaged losses) and a problem whose losses are in the millions starts far above it.
    * stationarity (off by default): ``||F_nat(x_t)||^2 > stationarity_factor *
      max(||F_nat(x_0)||^2, stationarity_floor)`` and growing, at ``patience`` evaluations in a
      row. Healthy runs started at ``x0 = 0`` can see their stationarity grow by orders of
      magnitude early on, hence the floor, the patience and the default off.
    * stalled (off by default; checked once, after the last round): ``||F_nat(x_T)||^2 >
      stall_factor * ||F_nat(x_0)||^2`` while the run no longer descends: its objective fell at
      fewer than nine in ten of the evaluations of the second half of the run. Such a run neither blew
      up nor converged: it oscillates, typically with a step too large to settle, and must not pass
      as done. A run above the factor whose objective still falls steadily is slow, not stalled,
      and stays done with its values. ``stall_factor = 1e-2`` asks the run to end two orders of
      magnitude below its start. A run stopped by ``tol`` has converged and is not checked.
      A run that starts at a stationary point (``||F_nat(x_0)||^2 = 0``: ``x0 = 0`` with an l1
      weight above ``||grad f(0)||_inf``, say) has no start to fall from, and its rounding errors
      alone would exceed any multiple of 0: it is stalled only when it left that point uphill
      (its objective ended above its start by more than rounding, ``1e-12`` relative, as
      :func:`objective_rose` tells) and no longer descends; one that stays there stays done.
      A run of no rounds (``rounds=0``: its round-0 row only) is not checked.

    ``None`` as a factor switches that rule off.
    """

    objective_factor: float | None = 1e3
    objective_floor: float = 1.0
    stationarity_factor: float | None = None
    stationarity_floor: float = 1.0
    patience: int = 3
    stall_factor: float | None = None

    def __post_init__(self):
        for name in ("objective_factor", "stationarity_factor"):
            value = getattr(self, name)
            if value is not None and not (_number(value) and math.isfinite(value) and value > 1):
                raise ValueError(f"divergence {name} must be a finite number > 1 or None (off), got {value!r}")
        stall = self.stall_factor
        if stall is not None and not (_number(stall) and 0 < stall < 1):
            raise ValueError(f"divergence stall_factor must be a number in (0, 1) or None (off), got {stall!r}")
        for name in ("objective_floor", "stationarity_floor"):
            value = getattr(self, name)
            if not (_number(value) and math.isfinite(value) and value > 0):
                raise ValueError(f"divergence {name} must be a finite number > 0, got {value!r}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise ValueError(f"divergence patience must be an integer >= 1, got {self.patience!r}")

    @classmethod
    def parse(cls, value) -> Divergence | None:
        """The rule a ``divergence=`` argument names: a :class:`Divergence`, a dict of some of its
        fields (the others keep their defaults; False as a factor switches that rule off, for TOML,
        which has no None), True or ``"default"`` (the default rule), or None, False or ``"off"``
        (no rule: only NaN or inf stop the run)."""
        if value is None or value is False or value == "off":
            return None
        if value is True or value == "default":
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            names = [f.name for f in fields(cls)]
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise ValueError(f"divergence has no field {', '.join(map(repr, unknown))}; its fields are "
                                 f"{', '.join(names)}")
            return cls(**{k: None if v is False and k.endswith("_factor") else v for k, v in value.items()})
        raise ValueError(f"divergence must be a Divergence, a dict of its fields ({', '.join(asdict(cls()))}), "
                         f"True or 'default' (the default rule), or None, False or 'off' (no rule), got {value!r}")

    def check(self, history: History) -> tuple[str, str] | None:
        """``(rule, sentence with the numbers)`` when a rule fires on the last row of ``history``, else None."""
        first, last = history.rows[0], history.rows[-1]
        if self.objective_factor is not None:
            limit = self.objective_factor * max(abs(first["objective"]), self.objective_floor)
            if abs(last["objective"]) > limit:
                return "objective", (
                    f"objective {last['objective']:.4g} at round {last['round']} > {limit:.4g} = objective_factor "
                    f"{self.objective_factor:g} x max(|objective at round {first['round']}| "
                    f"{abs(first['objective']):.4g}, objective_floor {self.objective_floor:g})")
        if self.stationarity_factor is not None and len(history) > self.patience:
            limit = self.stationarity_factor * max(first["stationarity"], self.stationarity_floor)
            tail = [row["stationarity"] for row in history.rows[-self.patience - 1:]]
            if all(b > limit and b > a for a, b in itertools.pairwise(tail)):
                return "stationarity", (
                    f"||F_nat||^2 {tail[-1]:.4g} at round {last['round']} grew over {self.patience} evaluations in a "
                    f"row above {limit:.4g} = stationarity_factor {self.stationarity_factor:g} x max(||F_nat||^2 at "
                    f"round {first['round']} {first['stationarity']:.4g}, stationarity_floor "
                    f"{self.stationarity_floor:g})")
        return None

    def check_end(self, history: History) -> str | None:
        """The sentence with the numbers when the finished run in ``history`` stalled, else None."""
        first, last = history.rows[0], history.rows[-1]
        if self.stall_factor is None or len(history) < 2:  # no rounds run: nothing to judge
            return None
        if not last["stationarity"] > self.stall_factor * first["stationarity"]:
            return None
        rose = None
        if first["stationarity"] == 0:  # started stationary: no scale, judge by whether it left uphill
            rose = objective_rose(history)
            if rose is None:
                return None
        tail = [row["objective"] for row in history.rows[len(history) // 2:]]
        falls = sum(b < a for a, b in itertools.pairwise(tail))
        if len(tail) >= STEADY_EVALUATIONS and falls >= 0.9 * (len(tail) - 1):
            return None  # still descending steadily: slow, not stalled
        if rose is None:
            above = (f"is {last['stationarity'] / first['stationarity']:.3g} x its round-{first['round']} value "
                     f"{first['stationarity']:.4g}, above stall_factor {self.stall_factor:g}")
        else:
            above = (f"left the stationary point it started from at round {first['round']} (||F_nat||^2 0) uphill, "
                     f"from objective {rose[0]:.6g} to {rose[1]:.6g}")
        return (f"||F_nat||^2 {last['stationarity']:.4g} at its last round {last['round']} {above}, and its "
                f"objective fell at only {falls} of the last {len(tail) - 1} evaluations")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def objective_rose(history) -> tuple[float, float] | None:
    """``(first, last)`` finite objective of a history (a :class:`History` or a dict of columns) that
    ended above where it started, else None. The divergence rule lets such a run finish (it fires
    at 1000 times the start), but it usually took too large a step: reports and ``fedopt run`` say so.
    Not for VI methods (a ``gap`` column): their objective is a gap measure, whose bound can grow
    while the ergodic average leaves the start point even with small steps."""
    if "gap" in history:
        return None
    values = [float(v) for v in history["objective"] if v is not None and math.isfinite(v)]
    if len(values) >= 2 and values[-1] > values[0] + 1e-12 * abs(values[0]):
        return values[0], values[-1]
    return None


class DivergenceError(FloatingPointError):
    """A run diverged. ``result`` keeps the history: up to the last finite round when the model or
    the metrics became NaN or inf (``rule`` is ``"nonfinite"``), including the row that fired a
    :class:`Divergence` rule otherwise (``rule`` is ``"objective"``, ``"stationarity"`` or
    ``"stalled"``: the run ended without converging)."""

    def __init__(self, message: str, result: Result, rule: str = "nonfinite"):
        super().__init__(message)
        self.result = result
        self.rule = rule

    def __reduce__(self):  # an exception pickles only its args: a run that diverged in a worker process comes back
        return type(self), (str(self), self.result, self.rule)


def round_context(backend):
    """The context that the backend's rounds run in: on Numba's threads, BLAS on one thread
    (``one_blas_thread`` of :mod:`fedopt.kernels.cpu`), else none."""
    limit = getattr(getattr(backend, "kernels", None), "one_blas_thread", None)
    return contextlib.nullcontext() if limit is None else limit()


def blas_beside_kernels(func):
    """``func`` (:func:`run`, :func:`fedopt.run_batch`) in :func:`round_context`, from before the
    set-up, whose BLAS calls (a topology's spectrum) would leave BLAS's threads spinning on the
    cores through the first rounds."""

    @functools.wraps(func)
    def wrapped(algorithm, problem, *args, backend=None, **kwargs):
        from fedopt._backend import get_backend

        first = problem[0] if isinstance(problem, (list, tuple)) else problem
        # no backend on what is not a problem (func refuses it, with the reason): no context
        with round_context(getattr(first, "backend", None) if backend is None else get_backend(backend)):
            return func(algorithm, problem, *args, backend=backend, **kwargs)

    return wrapped


@blas_beside_kernels
def run(algorithm, problem, regularizer=None, *, rounds: int = 100, seed=0, backend=None, eval_every: int = 1,
        x0=None, metric_gamma: float | None = None, tol: float | None = None, progress: bool | None = None,
        callback=None, stop=None, divergence=True, resume: State | None = None, eval_clients=None,
        **hyperparameters) -> Result:
    """Run ``rounds`` rounds of ``algorithm`` on ``problem + regularizer`` and record the history.

    Parameters
    ----------
    algorithm : str or Algorithm
        A name from :func:`fedopt.algorithms.available` (then ``hyperparameters`` build it) or an
        instance.
    problem : fedopt.problems.Problem
    regularizer : fedopt.regularizers.Regularizer or None
        Default: the problem's own (the l1 of :class:`~fedopt.problems.vi.L1BilinearGame`), else Zero().
    rounds : int
    seed : int or None
        Seeds the one generator that draws every minibatch on the host, so that every backend
        follows the same trajectory; also seeds ``problem.init`` when ``x0`` is None.
    backend : str or None
        Move the problem to this backend first (default: keep the problem's).
    eval_every : int
        Evaluate the metrics at the rounds that are multiples of this (and always at the first
        round and at the end); a resumed run counts from round 0 too, so its rows fall where one
        uninterrupted run's would.
    x0 : array, Start or None
        The initial weights ``w_0`` (default ``problem.init(seed)``). Every method reports the same
        model ``x_0 = prox_{metric_gamma phi}(w_0)`` at round 0: normal-map methods start from the
        pre-prox point whose prox with their own parameter is ``x_0`` (see :class:`~fedopt.algorithms.base.Start`).
        A :class:`~fedopt.algorithms.base.Start` is taken as it is, its ``x`` the round-0 model:
        ``x0=result.start`` starts from another run's model (:attr:`Result.start`), where
        ``x0=result.x`` would start from its prox.
    metric_gamma : float or None
        The prox parameter of ``stationarity`` (and of the round-0 model, see ``x0``); default the
        method's ``gamma`` when it has one, else 1 (``1 / (2 rho)`` for a ``rho``-weakly convex
        regularizer with ``rho >= 1``, whose prox needs ``metric_gamma * rho < 1``). Pass the same
        value to compare methods. ``normal_map`` does not use it: it is ``||grad f(x) + (z - x) /
        g||^2`` with the method's own ``g`` (``x = prox_{g phi}(z)``; Zhang's ``eta_hat``).
    tol : float or None
        Stop at the first evaluation where ``stationarity <= tol`` (``result.converged`` is then
        True); None runs all ``rounds``.
    progress : bool or None
        A one-line progress report on stderr; default on for a terminal and at least 100 rounds.
    callback : callable or None
        ``callback(state, row)`` after every evaluation. The state shares its arrays with the rounds
        after it (a round on a cohort writes its clients' rows into the per-client arrays in place,
        rather than copying ``n x p`` arrays every round): copy what you keep
        (``state.vars["c"].copy()``), or keep ``result.state``, the final one.
    stop : callable or None
        A stopping criterion of the caller's own (a duality gap, say): ``stop(state, row)`` after
        every evaluation that no divergence rule stopped; True ends the run as converged, like
        ``tol``. With both, the first to hold stops the run.
    divergence : Divergence, dict, bool, str or None
        The rule that stops a run as diverged before its values reach inf (see
        :class:`Divergence`). Default (True or ``"default"``): the objective above ``1000 *
        max(|objective at round 0|, 1)``. A dict sets some fields of :class:`Divergence`
        (``{"objective_factor": 1e6}``); None, False or ``"off"`` keep only the NaN/inf check.
    eval_clients : int, float or None
        Evaluate the server methods' ``objective``, ``stationarity`` and ``normal_map`` on a fixed
        sample of this many clients (a count or a fraction), drawn once from ``seed`` on a stream
        of its own (the training draws are unchanged): ``sum_S w_i f_i / sum_S w_i`` and its
        gradient, a ratio estimate of the full sums, for populations too large to evaluate every
        ``eval_every`` rounds; without a test split, ``test_accuracy`` (then on the training rows)
        is the sample's too. The history's ``estimated`` names those columns and the sample.
        None (default) evaluates exactly, on every client.
    resume : State or None
        Continue a run instead of starting one: ``rounds`` more rounds from this state (a
        :class:`Result`'s ``state``, of the same method), with its model, pre-prox point and the
        method's own arrays (corrections, control variates), on ``problem`` (the same number of
        clients and parameters; its data may be new) and a generator seeded by ``seed``. The
        history's rounds, costs and ``seconds`` go on from the state's; ``x0`` is ignored. The
        hyperparameters are this call's, as for a fresh run: new steps take effect, a normal-map
        method's pre-prox point moves to its new prox parameter ``g`` (``z = x + g (z - x) / g_0``,
        keeping the model and the subgradient ``(z - x) / g_0`` of phi it holds, as a fresh start
        does; FedDR's and FedADMM's, a sum of their clients' messages, stays), and a decentralized
        method gossips over the ``topology``, ``mixing``, ``edge_prob`` and ``topology_seed`` given
        here, its nodes keeping their iterates (DEPOSITUM's tracker and momentum taking a new
        ``tracking_rate`` and ``momentum_type``).

    Returns
    -------
    Result

    Raises
    ------
    DivergenceError
        When the model, the pre-prox point ``z`` (checked every round) or its metrics (``normal_map``
        included, at evaluations) become NaN or inf, or the ``divergence`` rule fires; its ``result``
        holds the history so far and ``rule`` says which check stopped the run. On NaN or inf,
        ``result.state`` is the last finite round as it was (a cohort round's rows undone), so
        ``resume=`` goes on from there.
    """
    from fedopt.regularizers import as_regularizer

    regularizer = as_regularizer(regularizer, problem)
    method = algorithms.make(algorithm, **hyperparameters)
    rounds, eval_every, tol, rule = check_run_arguments(rounds, eval_every, tol, divergence)
    method.check_problem(problem)
    if backend is not None:
        problem = problem.on(backend)
    regularizer.check_problem(problem)
    method.check(problem, regularizer)
    gamma = metric_step(method, regularizer, metric_gamma)
    rng = run_generator(seed)
    if resume is not None:
        state = _resumed(resume, method, problem, regularizer, rng)
    else:
        state = replace(method.init(problem, regularizer, rng, _run_start(x0, problem, regularizer, gamma, seed)),
                        method=method.name)
    state = replace(state, pre_prox_gamma=None if state.z is None else method.pre_prox_gamma)
    history = History(history_columns(method, state))
    evaluated = _evaluation_view(method, problem, eval_clients, seed, history)
    show = sys.stderr.isatty() and rounds >= 100 if progress is None else bool(progress)
    clock = {"start": time.perf_counter() - state.seconds, "evaluating": 0.0}  # a resumed run's clock goes on
    last_round = state.round + rounds  # a resumed run's progress counts on to it

    def record(state):
        problem.backend.synchronize()  # the round's device work belongs to its training time
        begun = time.perf_counter()
        training = begun - clock["start"] - clock["evaluating"]  # the paper's training time: evaluations excluded
        on = state if evaluated is None else replace(state, env=replace(state.env, problem=evaluated))
        row = {"round": state.round, **method.evaluate(on, gamma),
               **{f.name: getattr(state.costs, f.name) for f in fields(state.costs)}, "seconds": training}
        bad = nonfinite_metrics(row, history.columns)
        if bad:
            rejected(f"{bad} at round {state.round}", state)
        history.append(row)
        if callback is not None:
            callback(state, row)
        if show:
            print(f"\r{method.name}: round {state.round}/{last_round}  stationarity {row['stationarity']:.3e}  "
                  f"objective {row['objective']:.6g}", end="", file=sys.stderr, flush=True)
        fired = rule.check(history) if rule is not None else None
        if fired:
            diverged(fired[1], state, fired[0])
        status["converged"] = (tol is not None and row["stationarity"] <= tol) or \
            (stop is not None and bool(stop(state, row)))
        clock["evaluating"] += time.perf_counter() - begun  # the callback, checks and stop are not training either

    def diverged(what, state, kind="nonfinite"):
        if show:
            print(file=sys.stderr)
        raise divergence_error(method.name, what, kind, result(state))

    def rejected(what, new):
        """Stop at ``last_finite``, the round before ``new``: ``new``'s round rewrote cohort rows of
        arrays they share, which go back first, so that ``last_finite`` is that round as it was."""
        if new is not last_finite:
            undo_round(new)
        diverged(what, last_finite)

    def result(state, converged=False):
        last = history.last()  # the state's own row, else (a round after the last evaluation) the clock
        seconds = last["seconds"] if last.get("round") == state.round else \
            time.perf_counter() - clock["start"] - clock["evaluating"]
        state = replace(state, seconds=seconds)
        return Result(problem.backend.to_numpy(state.x).copy(), history, method, state, seed, gamma, converged)

    status = {"converged": False}  # whether the last evaluation met tol or stop

    def converged():
        return status["converged"]

    last_finite = state
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, once
        record(state)
        for t in range(1, rounds + 1):
            if converged():
                break
            state = method.next_round(state)
            for _, part in nonfinite_runs(state):
                rejected(f"{part} has NaN or inf entries after round {t}", state)
            if state.round % eval_every == 0 or t == rounds:  # a resumed run's rows fall where one run's would
                record(state)
            last_finite = state
    stalled = rule.check_end(history) if rule is not None and not converged() else None
    if stalled:
        diverged(stalled, state, "stalled")
    if show:
        print(file=sys.stderr)
    return result(state, converged())


def metric_step(method, regularizer, metric_gamma) -> float:
    """The prox parameter of the stationarity measures: ``metric_gamma``, else the method's ``gamma``,
    else 1, or ``1 / (2 rho)`` for a regularizer whose prox needs a step below 1 (``rho >= 1``)."""
    if metric_gamma is None:
        metric_gamma = getattr(method, "gamma", None)
    if metric_gamma is None:
        rho = regularizer.weak_convexity
        metric_gamma = 1.0 if rho < 1 else 0.5 / rho
    return regularizer.check_step(metric_gamma, "metric_gamma")


def nonfinite_runs(state: State, runs: int = 1) -> list[tuple[int, str]]:
    """``(run, what)`` for each of the state's ``runs`` (a batch's leading axis) whose model ``x``
    (``"the model"``) or pre-prox point ``z`` (``"the pre-prox point z"``) has NaN or inf entries:
    a constraint's prox (Box, L1Ball, ...) keeps ``x`` finite while ``z`` and the corrections run to
    inf. Called every round: one transfer to the host while all are finite."""
    backend = state.env.problem.backend
    xp = backend.xp
    x_ok = xp.isfinite(state.x).reshape(runs, -1).all(axis=1)
    ok = backend.to_numpy(x_ok if state.z is None else x_ok & xp.isfinite(state.z).reshape(runs, -1).all(axis=1))
    if ok.all():
        return []
    x_ok = backend.to_numpy(x_ok)
    return [(r, "the model" if not x_ok[r] else "the pre-prox point z") for r in np.flatnonzero(~ok)]


def nonfinite_metrics(row: dict, columns) -> str | None:
    """The clause for a history row whose objective, ``||F_nat||^2`` or ``||F_nor(z)||^2`` (where
    ``columns`` has it: it is NaN by construction elsewhere) is NaN or inf, else None."""
    values = {"the objective is": row["objective"], "||F_nat||^2": row["stationarity"]}
    if "normal_map" in columns:
        values["||F_nor(z)||^2"] = row["normal_map"]
    if all(math.isfinite(v) for v in values.values()):
        return None
    *head, tail = (f"{name} {value:.4g}" for name, value in values.items())
    return f"{', '.join(head)} and {tail}"


#: The columns that ``eval_clients`` estimates on its sample of clients (the others are exact).
SAMPLED_COLUMNS = ("stationarity", "normal_map", "objective")


def check_eval_clients(method, problem, eval_clients) -> int:
    """The size of the sample that ``eval_clients`` asks for, after checking that ``method`` evaluates
    a server model and that the sample fits the problem's clients of positive weight."""
    if type(method).evaluate is not Algorithm.evaluate:
        raise ValueError(f"eval_clients evaluates a server model on a sample of clients; {method.name} evaluates "
                         "per-node or per-operator measures: leave eval_clients at None")
    size = cohort_size(eval_clients, problem.n_clients, "eval_clients")
    problem.check_cohort(size, "eval_clients", eval_clients)
    return size


def _evaluation_view(method, problem, eval_clients, seed, history):
    """None (evaluate on every client), or the cohort view of ``eval_clients`` clients that
    :func:`run` evaluates on; notes the estimated columns in ``history.estimated``."""
    if eval_clients is None:
        return None
    n, size = problem.n_clients, check_eval_clients(method, problem, eval_clients)
    rng = np.random.default_rng(_evaluation_seed(seed))
    clients, weights = problem.draw_cohort(rng, size, "uniform")
    note = f"{size} of {n} clients"
    sampled = SAMPLED_COLUMNS + (() if problem.dataset.X_test is not None else ("test_accuracy",))
    history.estimated = {c: note for c in sampled if c in history.columns}
    return problem.cohort(clients, weights)


_EVAL_STREAM = 0x6576616C  # "eval": the sample's stream, apart from the training draws


def _evaluation_seed(seed) -> np.random.SeedSequence:
    """The stream of ``eval_clients``' sample from the run's ``seed`` (None, an int, a sequence of them, a
    SeedSequence or a Generator), apart from the training draws."""
    if isinstance(seed, np.random.Generator):
        seed = seed.bit_generator.seed_seq
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, _EVAL_STREAM))
    if isinstance(seed, np.random.bit_generator.ISeedSequence):  # a generator built from a state, not a seed
        raise ValueError("eval_clients draws its sample from the run's seed: pass seed as an int, a sequence of "
                         "them, a SeedSequence, or a Generator made by np.random.default_rng")
    return np.random.SeedSequence([*np.atleast_1d(0 if seed is None else seed).tolist(), _EVAL_STREAM])


def state_fits(state: State, problem) -> bool:
    """Whether ``state`` can go on on ``problem``: a model of ``n_params`` and client arrays of
    ``n_clients`` rows, on the problem's backend (its dtype: :func:`_resumed` refuses that apart)."""
    clients = [v for v in state.vars.values() if getattr(v, "ndim", 0) == 2]
    return (tuple(state.x.shape) == (problem.n_params,) and all(v.shape[0] == problem.n_clients for v in clients)
            and array_module(state.x) is problem.backend.xp)


def _run_start(x0, problem, regularizer, gamma: float, seed) -> Start:
    """Where a fresh run starts: ``x0`` itself when it is a :class:`Start` (its arrays checked as ``x0``),
    else the prox of the weights ``x0`` (``problem.init(seed)`` for None) with parameter ``gamma``."""
    if isinstance(x0, Start):
        s = x0.subgradient
        return Start(problem.start_point(x0.x, seed), None if s is None else problem.start_point(s))
    return Start.prox_of(regularizer, problem.start_point(x0, seed), gamma)


def _resumed(state: State, method: Algorithm, problem, regularizer, rng) -> State:
    """``state`` of ``method`` on ``problem``, checked with :func:`state_fits`, then made ready for
    ``method``'s hyperparameters by its :meth:`~fedopt.algorithms.base.Algorithm.resume`."""
    name = method.name
    if not isinstance(state, State):
        raise TypeError(f"resume takes a run's state (result.state), got {type(state).__name__}")
    if state.method not in (None, name):
        raise ValueError(f"resume holds a state of {state.method}, whose arrays {name} cannot go on from: resume a "
                         f"run with the method that made it, or start {name} from its model with x0=result.start")
    if not state_fits(state, problem):
        raise ValueError(f"resume holds a model of shape {tuple(state.x.shape)} and client arrays of rows "
                         f"{[v.shape[0] for v in state.vars.values() if getattr(v, 'ndim', 0) == 2]} on "
                         f"{array_module(state.x).__name__}; the problem has {problem.n_params} parameters and "
                         f"{problem.n_clients} clients on {problem.backend.name}")
    # the model's dtype is the run's (a method may keep a wider accumulator: a VI method's float64 sum)
    held = state.x.dtype
    if held != problem.dtype or (state.z is not None and state.z.dtype != held):  # else it runs in the state's
        raise ValueError(f"resume holds a {held} state, the problem is {problem.dtype}: resume on a {held} problem "
                         f"(its data set built with dtype={held}), or start a {problem.dtype} run from the model "
                         f"with x0=result.start")
    # a copy: the rounds update client arrays in place (a cohort's rows), and the state resumed from stays as it was
    arrays = {k: v.copy() for k, v in state.vars.items() if getattr(v, "ndim", 0)}  # not the topology, say
    return method.resume(replace(state, env=Env(problem, regularizer, rng), x=state.x.copy(),
                                 z=None if state.z is None else state.z.copy(), vars={**state.vars, **arrays},
                                 undo=None))


def run_generator(seed) -> np.random.Generator:
    """The generator of a run's draws, from ``seed``; a seed NumPy refuses is a ValueError naming ``seed``."""
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as err:
        raise ValueError(f"seed must be an integer >= 0, a sequence of them, or None; got {seed!r} ({err})") from None


def check_run_arguments(rounds, eval_every, tol, divergence) -> tuple[int, int, float | None, Divergence | None]:
    """``(rounds, eval_every, tol, rule)`` after checking the arguments that :func:`run` and
    :func:`fedopt.run_batch` share; ``tol`` as a float (``"1e-3"`` too, as ``metric_gamma``) or None."""
    if tol is not None:
        tol = real("tol", tol, hint=" (or None: no tolerance)")
    rule = Divergence.parse(divergence)
    return count("rounds", rounds, minimum=0), count("eval_every", eval_every), tol, rule


def _step_sizes(name: str) -> str:
    """The step-size hyperparameters of method ``name`` (those named ``lr...``) as the advice lists them,
    `` (lr_local, lr_server)``; empty for a method outside :mod:`fedopt.algorithms`."""
    try:
        own = algorithms.hyperparameters(name)
    except ValueError:
        return ""
    steps = [k for k in own if k.startswith("lr")]
    return f" ({', '.join(steps)})" if steps else ""


def divergence_error(name: str, what: str, kind: str, result: Result) -> DivergenceError:
    """The error that stops run ``result`` of method ``name`` (``what`` happened, by check ``kind``),
    also set as ``result.error``."""
    if kind == "nonfinite":
        advice = "error.result holds the history up to the last finite round."
    else:
        advice = ("error.result holds the history including this round. If the run is healthy, loosen the "
                  "rule: divergence={...} or divergence=None in fedopt.run, [run.divergence] or "
                  "[run] divergence = false in an experiment file, --set divergence=false on the command line.")
    if kind == "stalled":
        verdict, fix = STALLED, "change the step sizes (too large oscillates, too small crawls), run more rounds"
    else:
        verdict, fix = "diverged", f"reduce the step sizes{_step_sizes(name)}"
    error = DivergenceError(f"{name} {verdict}: {what}. To fix it, {fix} or check the data; {advice}", result, kind)
    result.error = error
    return error


__all__ = ["COLUMNS", "PRE_PROX_COLUMNS", "STALLED", "Divergence", "DivergenceError", "History", "Result",
           "history_columns", "run"]
