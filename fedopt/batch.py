"""``fedopt.run_batch``: R runs of one method as one computation, on a leading run axis.

A batch keeps the layout of one run with a run axis in front: the server's arrays (``x``, ``z``,
the server's own state) are ``(R, 1, p)``, the clients' arrays ``(R, n, p)``, and hyperparameters
that differ between runs are ``(R, 1, 1)`` arrays (:meth:`~fedopt.algorithms.base.Algorithm.stack`),
so that a method's round reads as for one run and broadcasting does the rest. The pieces that
know about the axis:

* :class:`BatchProblem`: the oracles and the fused local loops run on the ``R n`` client rows as
  one flat ``(R n, p)`` array over the shared data (:meth:`~fedopt.problems.base.Problem.client_rows`:
  client row ``r n + i`` is client ``i``); the server's average is a weighted sum per run; each
  run draws its minibatches from its own generator, and the draws are concatenated in run order,
  so run ``r`` sees the rows that :func:`fedopt.run` with its seed sees.
* :class:`BatchVIProblem`: the same for the variational inequalities of :mod:`fedopt.problems.vi`:
  the operator's matrix products stack over the runs, and each run's oracle noise comes from its
  own generator.
* :class:`BatchRegularizer`: each run's own ``phi`` and prox step, one prox call per group of
  runs that share both (one call for a plain seed sweep).
* :func:`run_batch`: the rounds, one history per run, and each run's stop (divergence, ``tol``)
  on its own: a stopped run leaves the batch, which goes on with the others.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import fields, replace

import numpy as np

from fedopt import algorithms
from fedopt.algorithms.base import Algorithm, Env, Start, State
from fedopt.kernels.cpu.sampling import minibatch_rows
from fedopt.metrics import evaluate_runs
from fedopt.run import (
    History,
    Result,
    blas_beside_kernels,
    check_run_arguments,
    divergence_error,
    history_columns,
    metric_step,
    nonfinite_metrics,
    nonfinite_runs,
    run_generator,
)
from fedopt.run import _run_start as run_start  # a batch's runs start where each alone would


class BatchSplitWarning(UserWarning):
    """A batch of runs was split because it would not fit in memory at once."""


class _RunAxis:
    """What the batch problems share: the problems of ``R`` runs (one object repeated, or one per run),
    their common sizes, and the ``(R, n, p)`` client arrays."""

    #: Whether the methods' states hold server arrays only (then ``(R, 1, p)`` is one even for n = 1).
    server_state: bool = False

    def __init__(self, problems):
        self.problems = list(problems)
        self.problem = first = self.problems[0]
        self.n_runs, self.backend, self.dtype = len(self.problems), first.backend, first.dtype
        self.n_clients, self.n_params = first.n_clients, first.n_params
        weights = np.stack([problem.weights for problem in self.problems])
        #: The client weights ``w_i``: ``(n,)`` when the runs share them, else each run's ``(R, n)``
        #: (other partitions with ``weights="samples"`` and other client sizes).
        self.weights = first.weights if (weights == first.weights).all() else weights

    def take(self, keep):
        return type(self)([self.problems[i] for i in keep])

    @property
    def client_shape(self) -> tuple[int, int, int]:
        return self.n_runs, self.n_clients, self.n_params

    def per_client(self, v):
        """``(R, n, p)``: each run's server vector ``v[r]`` (``(R, 1, p)``) in every client row."""
        out = self.backend.xp.empty(self.client_shape, dtype=v.dtype)
        out[...] = v
        return out

    def client_zeros(self):
        return self.backend.xp.zeros(self.client_shape, dtype=self.dtype)

    def node_mean(self, X):
        """Each run's plain mean over its client rows: ``(R, n, p)`` to ``(R, 1, p)``."""
        return X.mean(axis=1, keepdims=True)


class BatchProblem(_RunAxis):
    """``R`` runs of federated problems: the oracles of :class:`~fedopt.problems.base.Problem` on
    ``(R, n, p)`` client arrays and ``(R, 1, p)`` server arrays. The runs may have problems of their
    own (other partitions of the data: :meth:`~fedopt.problems.base.Problem.client_rows` stacks
    their data sets) with the same sizes, each with its own client weights."""

    def __init__(self, problems):
        super().__init__(problems)
        self.rows = self.problem.client_rows(self.problems)
        self._weights_device = (self.problem._weights_device if self.weights.ndim == 1 else
                                self.backend.xp.asarray(self.weights[:, None, :], dtype=self.dtype))

    def average(self, per_client):
        """``sum_i w_{r,i} v_{r,i}`` for every run ``r``: ``(R, n, p)`` to ``(R, 1, p)``."""
        if self._weights_device.ndim == 1:
            return (self._weights_device @ per_client)[:, None, :]
        return self._weights_device @ per_client  # each run's own weights: (R, 1, n) @ (R, n, p)

    population_sum = average  # every client of a batched run takes part in every round

    def updated_sum(self, total, new, old):
        """Every client takes part: ``sum_i w_i new_i`` (:meth:`~fedopt.problems.Problem.updated_sum`)."""
        return self.average(new)

    def sample_rows(self, rngs, batch_size: int, steps: int | None = None) -> np.ndarray:
        """Every run's minibatch rows from its own generator: ``(R n, b)`` or ``(steps, R n, b)``."""
        shape = (self.n_clients, int(batch_size)) if steps is None else (int(steps), self.n_clients, int(batch_size))
        u = np.empty((*shape[:-2], self.n_runs, *shape[-2:]))
        for r, rng in enumerate(rngs):  # assigned one run at a time: np.stack's strided copy is 4x slower
            u[..., r, :, :] = rng.random(shape)
        u = u.reshape(*shape[:-2], self.n_runs * self.n_clients, shape[-1])
        return minibatch_rows(u, self.rows._client_sizes, self.rows._starts)

    def client_grad(self, W, rows=None, out=None):
        G = self.rows.client_grad(_flat(W), rows, out=None if out is None else _flat(out))
        return G.reshape(self.client_shape)

    def fused_local_steps(self, rows, D, lr, prox_kind, thetas, w, Z, P) -> bool:
        if D.size and D.shape != Z.shape:  # a broadcast copied (a read-only view compiles kernels anew)
            D = self.backend.xp.ascontiguousarray(self.backend.xp.broadcast_to(D, Z.shape))
        return self.rows.fused_local_steps(rows, _flat(D), self._per_row(lr), prox_kind, self._per_row(thetas, axis=1),
                                           w, _flat(Z), _flat(P))

    def fused_tracking_steps(self, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                             P, NU, MU, Y, G, adapt_first=True, adapt_after=False) -> bool:
        if theta.ndim == 2:  # per-run prox parameters (R, k): one row per node
            theta = np.repeat(theta, self.n_clients, axis=0)
        scale = np.broadcast_to(self.backend.to_numpy(node_scale), (self.n_runs, self.n_clients)).reshape(-1)
        return self.rows.fused_tracking_steps(rows, scale, *map(self._per_row, (gamma, alpha, beta)), nesterov,
                                              tracking, prox_kind, theta, w, *map(_flat, (P, NU, MU, Y, G)),
                                              adapt_first=adapt_first, adapt_after=adapt_after)

    def _per_step_rows(self, rows, steps: int):
        return self.rows._per_step_rows(rows, steps)

    def _per_row(self, values, axis=0):
        """Per-run values (``(R, 1, 1)`` hyperparameters, or ``(Q, R, k)`` prox parameters) repeated for
        each run's ``n`` client rows, on the host; a scalar or shared ``(Q, k)`` array stays as it is."""
        if np.ndim(values) == 0 or (axis == 1 and np.ndim(values) == 2):
            return values
        host = self.backend.to_numpy(values)
        return np.repeat(host.reshape(-1) if axis == 0 else host, self.n_clients, axis=axis)

    def loss_grad(self, X):
        """Each run's ``(f(x_r), grad f(x_r))`` at the server points ``X`` ``(R, 1, p)``: R floats, ``(R, 1, p)``."""
        losses, grads = self.rows.client_loss_grad(_flat(self.per_client(X)))
        shape = self.n_runs, self.n_clients
        weights = self.backend.xp.broadcast_to(self._weights_device.reshape(-1, self.n_clients), shape)
        return ([float(w @ run) for w, run in zip(weights, losses.reshape(shape), strict=True)],
                self.average(grads.reshape(self.client_shape)))

    def grad(self, X):
        return self.average(self.client_grad(self.per_client(X)))


def _flat(A):
    """An ``(R, n, p)`` array as its ``(R n, p)`` rows (a view); 2-D arrays stay as they are."""
    return A if A.ndim == 2 else A.reshape(-1, A.shape[-1])


class BatchVIProblem(_RunAxis):
    """``R`` runs of a variational inequality (:class:`~fedopt.problems.vi.VIProblem`): its oracles on
    ``(R, n, p)`` client arrays and ``(R, 1, p)`` server arrays.

    The operator's matrix products stack over the run axis (one product per run, of the shape a
    single run multiplies), the averages and the drift reduce each run's rows in the order of one
    run, and each run's noise comes from its own generator with the shape of one run's draw, so
    that run ``r`` computes what :func:`fedopt.run` with its seed computes, bit for bit on the CPU.
    """

    #: The VI methods keep the synchronised iterate only: their ``(R, 1, p)`` arrays are server arrays.
    server_state: bool = True

    def __init__(self, problems):
        super().__init__(problems)
        if any(problem is not self.problem for problem in self.problems):
            raise ValueError("the runs of a batch of variational inequalities share one game (one problem object); "
                             "run other games in other batches")
        self.sigma = self.problem.sigma

    @property
    def lipschitz(self) -> float:
        return self.problem.lipschitz

    def server_zeros(self, dtype=None):
        return self.backend.xp.zeros((self.n_runs, 1, self.n_params), dtype=self.dtype if dtype is None else dtype)

    def average(self, per_client):
        """Each run's ``avg_m v_m``: ``(R, n, p)`` to ``(R, 1, p)``; a server array ``(R, 1, p)`` is its own average."""
        return self.node_mean(per_client)

    def drift(self, per_client, mean):
        """Each run's ``avg_m ||v_m - mean||^2``: an ``(R,)`` array (a float per run in the run's view)."""
        return ((per_client - mean) ** 2).sum(axis=2).mean(axis=1)

    def per_run(self, fn, value):
        """``fn`` of each run's value of a hyperparameter (one value, or ``(R, 1, 1)``), as one run computes it."""
        if np.ndim(value) == 0:
            return fn(value)
        host = self.backend.to_numpy(value)
        values = [fn(v) for v in host.reshape(-1).tolist()]
        return self.backend.xp.asarray(values, dtype=value.dtype).reshape(value.shape)

    def client_operator(self, W, noise=None):
        """``Vt_m`` at every run's client rows ``W`` (``(R, n, p)``, or ``(R, 1, p)``: one point per run)."""
        problem = self.problem
        V = problem._apply(self.backend.xp, problem._device, W)
        if problem._device_shifts is not None:
            V = V + problem._device_shifts
        elif V.shape[1] != self.n_clients:
            V = self.backend.xp.broadcast_to(V, self.client_shape)
        return V + noise if noise is not None else V

    def sample_noise(self, rngs, calls: int, batch: int = 1):
        """Every run's oracle noise from its own generator: ``(calls, R, n, p)``; None if sigma = 0."""
        draws = [self.problem.sample_noise(rng, calls, batch) for rng in rngs]
        return None if draws[0] is None else self.backend.xp.stack(draws, axis=1)

    def standard_normal(self, rngs, shape):
        """Every run's ``N(0, 1)`` draws of one run's ``shape`` (``(..., n, p)``): ``(..., R, n, p)``."""
        return self.backend.xp.stack([self.problem.standard_normal(rng, shape) for rng in rngs], axis=-3)


def batch_problem(problems):
    """The batch of the runs of ``problems`` (one per run): a :class:`BatchVIProblem` for variational
    inequalities, else a :class:`BatchProblem`."""
    from fedopt.problems.vi import VIProblem

    return (BatchVIProblem if isinstance(problems[0], VIProblem) else BatchProblem)(problems)


class BatchRegularizer:
    """The regularizers ``phi_r`` of ``R`` runs (equal ones for a seed sweep, different strengths for
    a regularization path), applied to arrays with a run axis in front."""

    def __init__(self, regularizers, backend):
        self.regularizers, self.backend = list(regularizers), backend
        self._shared = all(reg == self.regularizers[0] for reg in self.regularizers)
        self._forms: dict = {}

    def take(self, keep) -> BatchRegularizer:
        return BatchRegularizer([self.regularizers[i] for i in keep], self.backend)

    def _groups(self, step) -> dict:
        """``{(phi, step): run positions}`` for the runs that share both."""
        if np.ndim(step) == 0 and self._shared:
            return {(self.regularizers[0], float(step)): slice(None)}
        steps = self._steps(step)
        groups: dict = {}
        for r, key in enumerate(zip(self.regularizers, steps, strict=True)):
            groups.setdefault(key, []).append(r)
        return groups

    def _steps(self, step) -> list[float]:
        if np.ndim(step) == 0:
            return [float(step)] * len(self.regularizers)
        return self.backend.to_numpy(step).reshape(-1).tolist()

    def prox(self, Z, step, out=None):
        """``prox_{step_r phi_r}`` of each run's rows of ``Z`` (``(R, k, p)``); ``step`` a float or ``(R, 1, 1)``."""
        xp, p = self.backend.xp, Z.shape[-1]
        out = xp.empty_like(Z) if out is None else out
        for (reg, s), runs in self._groups(step).items():
            if isinstance(runs, slice):
                reg.prox(_flat(Z), s, out=_flat(out))
            else:
                index = xp.asarray(runs)
                out[index] = reg.prox(_flat(Z[index]), s).reshape(len(runs), -1, p)
        return out

    def value(self, X) -> list[float]:
        """``phi_r(x_r)`` of each run's server point ``X[r]`` (``(R, 1, p)``)."""
        host = self.backend.to_numpy(X).reshape(len(self.regularizers), -1)
        return [reg.value(x) for reg, x in zip(self.regularizers, host, strict=True)]  # one run's own reduction

    def separable(self, steps, backend, dtype):
        """:meth:`fedopt.regularizers.Regularizer.separable` with per-run steps: thetas ``(Q, R, k)``,
        or None when a run's prox is row-wise or the runs' prox kinds or weights differ."""
        key = tuple(s if np.ndim(s) == 0 else backend.to_numpy(s).tobytes() for s in steps)
        if key not in self._forms:
            if len(self._forms) > 256:
                self._forms.clear()
            per_run = zip(self.regularizers, zip(*(self._steps(s) for s in steps), strict=True), strict=True)
            forms = {}
            runs = [forms.setdefault(k, k[0].separable(list(k[1]), backend, dtype)) for k in per_run]
            first = runs[0]
            uniform = first is not None and all(
                f is not None and f[0] == first[0] and _same(backend, f[2], first[2])
                for f in forms.values())
            self._forms[key] = (first[0], np.stack([f[1] for f in runs], axis=1), first[2]) if uniform else None
        return self._forms[key]


def _same(backend, a, b) -> bool:
    """Whether two prox weight arrays are the same (one object, or equal values)."""
    return a is b or (a.shape == b.shape and bool(backend.xp.array_equal(a, b)))


@blas_beside_kernels
def run_batch(algorithm, problem, regularizer=None, *, rounds: int = 100, seeds, backend=None, eval_every: int = 1,
              x0=None, metric_gamma=None, tol: float | None = None, progress: bool | None = None, divergence=True,
              max_batch: int | None = None, callback=None, stop=None, **hyperparameters) -> list[Result]:
    """Run ``len(seeds)`` runs of ``algorithm`` as one batch: result ``r`` is what :func:`fedopt.run`
    returns for ``seed=seeds[r]`` and the ``r``-th value of every argument given as a list.

    ``problem``, ``regularizer``, ``x0``, ``metric_gamma`` and any hyperparameter may be one value
    (all runs) or a list with one value per seed (a regularization path is a list of regularizers;
    a list of problems holds, say, other partitions of the same data, with the same client count
    and parameters; each keeps its own client weights). The runs share the values that set a
    round's shape (``local_steps``, ``batch_size``, ...); :func:`fedopt.sweep` groups runs accordingly.
    Runs whose proxes differ in form (an l1 and an MCP) run as separate batches. A run without a
    regularizer uses its problem's own, as :func:`fedopt.run` does.

    A run that diverges or stalls, or that reaches ``tol``, stops on its own and leaves the batch:
    its result keeps its history, and ``result.error`` holds the :class:`~fedopt.run.DivergenceError`
    that :func:`fedopt.run` would have raised (None for a run that finished). The history's
    ``seconds`` is each run's share of the batch's training time (a round's time divided among the
    runs in it). A batch that would not fit in half the free memory (host RAM, or device memory for
    ``backend="gpu"``) runs as several smaller ones, with a :class:`BatchSplitWarning`;
    ``max_batch`` caps the runs computed together. ``callback(state, rows)``, when given, follows
    every evaluation: the batch's state and the rows just recorded. ``stop(state, row)`` is
    :func:`fedopt.run`'s, called with each run's own state: True ends that run as converged.

    The VI methods batch on the games of :mod:`fedopt.problems.vi` (:class:`BatchVIProblem`).
    Methods whose rounds are not batched yet (Scaffnew with random step counts, and cohort runs:
    ``clients_per_round`` draws a cohort per run and round) raise ValueError naming the method.
    """
    from fedopt.regularizers import as_regularizer

    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise ValueError(f"seeds must be a list of seeds, one run per seed (seeds=[0, 1, 2]), got {seeds!r}")
    for name, why in _NOT_BATCHED.items():
        if name in hyperparameters:
            raise TypeError(f"run_batch takes no {name}= ({why}); run such runs with fedopt.run")
    seeds = list(seeds)
    generators = [run_generator(seed) for seed in seeds]  # a bad seed is refused before any work
    count = len(seeds)
    if count == 0:
        raise ValueError("seeds must list at least one seed: one run per seed")
    per_run = {name: _per_run(name, value, count) for name, value in hyperparameters.items()}
    methods = [algorithms.make(algorithm, **{name: values[r] for name, values in per_run.items()})
               for r in range(count)]
    refusal = methods[0].batch_refusal()
    if refusal:
        raise ValueError(f"{methods[0].name} cannot run batched: {refusal}; run it with fedopt.run "
                         "(a sweep runs them one at a time)")
    rounds, eval_every, tol, rule = check_run_arguments(rounds, eval_every, tol, divergence)
    problems = _per_run("problem", problem, count)
    for method, problem in zip(methods, problems, strict=True):
        method.check_problem(problem)
    problems = _same_shape(problems, backend)
    regularizers = [as_regularizer(reg, prob) for reg, prob in zip(_per_run("regularizer", regularizer, count),
                                                                    problems, strict=True)]
    gammas = []
    for method, problem, reg, gamma in zip(methods, problems, regularizers,
                                           _per_run("metric_gamma", metric_gamma, count), strict=True):
        reg.check_problem(problem)
        method.check(problem, reg)
        gammas.append(metric_step(method, reg, gamma))
    type(methods[0]).stack(methods, np, np.float64)  # refuse runs that cannot share a batch before any work
    starts = [run_start(x, problem, reg, gamma, seed) for problem, reg, gamma, x, seed in
              zip(problems, regularizers, gammas, _per_run("x0", x0, count, vector=True), seeds, strict=True)]
    size = _batch_size(problems[0], methods[0], count, max_batch)
    show = sys.stderr.isatty() and rounds >= 100 if progress is None else bool(progress)
    results = [None] * count
    for group in _prox_groups(regularizers, problems[0]):
        for first in range(0, len(group), size):
            part = group[first:first + size]
            per_run = [[values[r] for r in part] for values in (problems, methods, regularizers, seeds, generators,
                                                                 gammas, starts)]
            for r, result in zip(part, _Batch(*per_run, rule, tol, show, callback, stop).run(rounds, eval_every),
                                 strict=True):
                results[r] = result
    return results


def _prox_groups(regularizers, problem) -> list[list[int]]:
    """The runs by the form of their prox (its kind and weights, or row-wise), in order of first
    appearance. Runs of one form batch together; runs of other forms (l1 and MCP) batch apart, so that
    each run takes the fused kernels that fedopt.run takes (mixed, they would step array-wise: equal to
    rounding only, and slower)."""
    groups: dict = {}
    for run, reg in enumerate(regularizers):
        form = reg.separable([0.0], problem.backend, problem.dtype)  # the form does not depend on the step
        key = None if form is None else (form[0], form[2].shape, problem.backend.to_numpy(form[2]).tobytes())
        groups.setdefault(key, []).append(run)
    return list(groups.values())


def _same_shape(problems, backend) -> list:
    """The runs' problems (on ``backend`` when one is named), after checking that they can share a batch."""
    moved = {}  # each distinct problem moved once
    for p in problems:
        if id(p) not in moved:
            moved[id(p)] = p if backend is None else p.on(backend)
    problems = [moved[id(p)] for p in problems]
    first = problems[0]
    for problem in problems[1:]:
        for what in ("n_clients", "n_params", "dtype"):
            if getattr(problem, what) != getattr(first, what):
                raise ValueError(f"the problems of a batch must have one {what}, got {getattr(first, what)} and "
                                 f"{getattr(problem, what)}; run them in separate batches")
        if type(problem) is not type(first) or problem.backend.name != first.backend.name:
            raise ValueError("the problems of a batch must be of one class on one backend, got "
                             f"{first!r} and {problem!r}")
    return problems


#: fedopt.run's arguments that run_batch does not take, and why.
_NOT_BATCHED = {
    "seed": "each run's seed is an entry of seeds",
    "resume": "a batch starts its runs afresh",
    "eval_clients": "a batch evaluates every client",
}


def _per_run(name, value, count, vector=False) -> list:
    """One value per run: a list or tuple of ``count`` values, or one value repeated."""
    if isinstance(value, (list, tuple)) and not (vector and value and np.ndim(value[0]) == 0
                                                 and not isinstance(value[0], Start)):
        if len(value) != count:
            raise ValueError(f"{name} lists {len(value)} values for {count} seeds: give one value per seed, "
                             "or one value for all runs")
        return list(value)
    return [value] * count


def _batch_size(problem, method, count: int, max_batch: int | None) -> int:
    """How many runs go in one batch: ``count``, unless ``max_batch`` or half the free memory caps it."""
    if max_batch is not None and (isinstance(max_batch, bool) or int(max_batch) != max_batch or max_batch < 1):
        raise ValueError(f"max_batch must be an integer >= 1 or None, got {max_batch!r}")
    size = count if max_batch is None else min(count, int(max_batch))
    per_run = _run_bytes(problem, method)
    free = _free_memory(problem.backend)
    fits = max(1, int(free // 2 // per_run)) if free else size
    if fits < size:
        warnings.warn(f"{count} runs need about {count * per_run / 2**30:.2f} GiB, more than half the free memory "
                      f"({free / 2**30:.2f} GiB): running them in batches of {fits}", BatchSplitWarning, stacklevel=3)
        size = fits
    return size


def _run_bytes(problem, method) -> int:
    """About the memory one run of a batch takes at once: ten client arrays (state, iterates, gradients,
    temporaries), the minibatch draws, and the noise a VI round draws up front (each run's draw and the
    batch's stacked copy)."""
    n, p, itemsize = problem.n_clients, problem.n_params, problem.dtype.itemsize
    samples = (getattr(method, "batch_size", None) or 0) * getattr(method, "local_steps", 1)
    return n * ((10 + 2 * method.round_draws(problem)) * p * itemsize + 16 * samples)


def _free_memory(backend) -> int | None:
    """Free bytes where the batch lives: device memory for the GPU backend, host RAM otherwise."""
    if backend.name == "gpu":
        return int(backend.xp.cuda.runtime.memGetInfo()[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not Linux: no check
        return None


class _Batch:
    """One batch's rounds; runs leave it as they stop."""

    def __init__(self, problems, methods, regularizers, seeds, generators, gammas, starts, rule, tol, show,
                 callback=None, stop=None):
        self.problems, self.methods, self.seeds, self.gammas = problems, methods, seeds, gammas
        self.regularizers, self.rule, self.tol, self.show, self.callback = regularizers, rule, tol, show, callback
        self.stop = stop
        count, backend = len(methods), problems[0].backend
        self.backend, self.xp, self.dtype = backend, backend.xp, problems[0].dtype
        self.method = type(methods[0]).stack(methods, self.xp, self.dtype)
        self.results: list[Result | None] = [None] * count
        self.active = list(range(count))  # the runs still in the batch, by position
        self.seconds = np.zeros(count)
        xs = [backend.asarray(start.x, dtype=self.dtype) for start in starts]
        subgradients = [self.xp.zeros_like(x) if s.subgradient is None else  # unknown: z_0 = x_0, as in init
                        backend.asarray(s.subgradient, dtype=self.dtype) for x, s in zip(xs, starts, strict=True)]
        start = Start(*(self.xp.stack(arrays)[:, None] for arrays in (xs, subgradients)))
        env = Env(batch_problem(problems), BatchRegularizer(regularizers, backend), generators)
        self.gamma = self._per_run_value(gammas)
        self.state = self.method.init(env.problem, env.regularizer, env.rng, start)
        # with one client an (R, 1, p) array is a server vector or the client's rows: one run's init tells which
        self.server_vars = frozenset()
        if problems[0].n_clients == 1 and not env.problem.server_state:
            single = methods[0].init(problems[0], regularizers[0], np.random.default_rng(0), starts[0]).vars
            self.server_vars = frozenset(name for name, value in single.items() if np.ndim(value) == 1)
        self.columns = history_columns(self.method, self.state)  # those of fedopt.run
        self.histories = [History(self.columns) for _ in range(count)]

    def _per_run_value(self, values):
        return values[0] if len(set(values)) == 1 else self.xp.asarray(values, dtype=self.dtype).reshape(-1, 1, 1)

    def run(self, rounds: int, eval_every: int) -> list[Result]:
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported per run, once
            self._record(self.state, self.state)
            self._leave()  # runs stopped at round 0 (tol, stop, NaN) keep what the record decided
            last_finite = self.state  # taken after _leave: the layout of the runs still in the batch
            for t in range(1, rounds + 1):
                if not self.active:
                    break
                begun = time.perf_counter()
                # round, not next_round: no cohorts in a batch, so nothing of last_finite is written in place
                self.state = self.method.round(self.state)
                self.backend.synchronize()
                self.seconds[self.active] += (time.perf_counter() - begun) / len(self.active)
                for position, part in nonfinite_runs(self.state, len(self.active)):
                    self._stop(position, last_finite, f"{part} has NaN or inf entries after round {t}", "nonfinite")
                if t % eval_every == 0 or t == rounds:
                    self._record(self.state, last_finite)
                self._leave()
                last_finite = self.state
                if self.show:
                    print(f"\r{self.method.name} x{len(self.methods)}: round {t}/{rounds}, "
                          f"{len(self.active)} runs going", end="", file=sys.stderr, flush=True)
            for position, run in enumerate(self.active):
                stalled = self.rule.check_end(self.histories[run]) if self.rule is not None else None
                if stalled:
                    self._stop(position, self.state, stalled, "stalled")
                else:
                    self._finish(position, self.state)
        if self.show:
            print(file=sys.stderr)
        return self.results

    def _record(self, state, last_finite):
        """Evaluate every run in the batch; stop those whose values are not finite, or that a rule or ``tol`` stops."""
        env = state.env
        if type(self.method).evaluate is Algorithm.evaluate:  # the model columns of every run in one pass
            rows = evaluate_runs(env.problem, env.regularizer, state.x, state.z, self.gamma, self.method.pre_prox_gamma)
        else:  # a method's own columns: its evaluate on each run's slice
            rows = [self.methods[run].evaluate(self._view(state, position), self.gammas[run])
                    for position, run in enumerate(self.active)]
        recorded = []
        for position, (run, row) in enumerate(zip(self.active, rows, strict=True)):
            if self.results[run] is not None:
                continue
            row = {"round": state.round, **row, **{f.name: getattr(state.costs, f.name) for f in fields(state.costs)},
                   "seconds": self.seconds[run]}
            bad = nonfinite_metrics(row, self.columns)
            if bad:
                self._stop(position, last_finite, f"{bad} at round {state.round}", "nonfinite")
                continue
            history = self.histories[run]
            history.append(row)
            recorded.append(row)
            fired = self.rule.check(history) if self.rule is not None else None
            if fired:
                self._stop(position, state, fired[1], fired[0])
            elif (self.tol is not None and row["stationarity"] <= self.tol) or \
                    (self.stop is not None and self.stop(self._view(state, position), row)):
                self._finish(position, state, converged=True)
        if self.callback is not None:
            self.callback(state, recorded)

    def _result(self, position, state, converged=False) -> Result:
        run = self.active[position]
        method = self.methods[run]
        view = replace(self._view(state, position), seconds=float(self.seconds[run]),  # as fedopt.run's state
                       pre_prox_gamma=None if state.z is None else method.pre_prox_gamma)
        return Result(view.env.problem.backend.to_numpy(view.x).copy(), self.histories[run], method, view,
                      self.seeds[run], self.gammas[run], converged)

    def _view(self, state, position) -> State:
        run = self.active[position]
        return _run_view(state, position, len(self.active), self.problems[run], self.regularizers[run],
                         self.methods[run].name, self.server_vars)

    def _finish(self, position, state, converged=False):
        self.results[self.active[position]] = self._result(position, state, converged)

    def _stop(self, position, state, what, kind):
        result = self._result(position, state)
        result.error = divergence_error(self.method.name, what, kind, result)
        self.results[self.active[position]] = result

    def _leave(self):
        """Drop the runs that stopped this round from the batch's arrays."""
        keep = [p for p, run in enumerate(self.active) if self.results[run] is None]
        if len(keep) == len(self.active) or not keep:
            self.active = [self.active[p] for p in keep]
            return
        index = self.xp.asarray(keep)
        count = len(self.active)
        state = self.state

        def pick(a):
            return a[index] if getattr(a, "ndim", 0) >= 1 and a.shape[0] == count else a

        env = Env(state.env.problem.take(keep), state.env.regularizer.take(keep), [state.env.rng[p] for p in keep])
        self.state = replace(state, env=env, x=pick(state.x), z=None if state.z is None else pick(state.z),
                             vars={name: pick(value) for name, value in state.vars.items()})
        self.method = self.method.take(index)
        self.gamma = self.gamma if np.ndim(self.gamma) == 0 else self.gamma[index]
        self.active = [self.active[p] for p in keep]


def _run_view(state, position, count, problem, regularizer, method: str, server_vars) -> State:
    """Run ``position``'s slice of a batch state, in the layout of one run: server arrays ``(p,)``,
    client arrays ``(n, p)``, per-run scalars ``(R,)`` as Python numbers. With one client the
    ``(R, 1, p)`` arrays are client arrays except ``server_vars``."""

    server = problem.n_clients > 1 or state.env.problem.server_state  # (R, 1, p): server arrays, not one client's

    def one(name, a):
        if getattr(a, "ndim", 0) < 1 or a.shape[0] != count:
            return a
        if a.ndim == 1:
            return a[position].item()
        return a[position, 0] if a.ndim == 3 and a.shape[1] == 1 and (server or name in server_vars) else a[position]

    x = state.x[position, 0]
    z = None if state.z is None else state.z[position, 0]
    return State(Env(problem, regularizer, state.env.rng[position]), x, z, state.round, state.costs,
                 {name: one(name, value) for name, value in state.vars.items()}, method)


__all__ = ["BatchProblem", "BatchRegularizer", "BatchSplitWarning", "BatchVIProblem", "batch_problem", "run_batch"]
