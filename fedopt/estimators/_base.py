"""What the federated estimators share: parameter checks, the client split, the run, the linear fit."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_consistent_length, column_or_1d

from fedopt import regularizers as R
from fedopt.algorithms import Start
from fedopt.algorithms import hyperparameters as _accepted
from fedopt.datasets import from_client_ids, partition
from fedopt.metrics import natural_map
from fedopt.run import run


class _FederatedEstimator(BaseEstimator):
    """What the three estimators share: parameter checks, the client split, the run and its warning."""

    _sparse = True  # whether fit accepts sparse X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._sparse
        return tags

    # ---- parameters ----------------------------------------------------------------------------
    def _check_params(self):
        def check(name, low, integer=False, none=False, strict=False):
            value = getattr(self, name)
            if none and value is None:
                return
            kind = numbers.Integral if integer else numbers.Real
            if not isinstance(value, kind) or isinstance(value, bool) or not np.isfinite(value) or \
                    (value <= low if strict else value < low):
                raise ValueError(f"{name} must be {'an integer' if integer else 'a finite number'} "
                                 f"{'>' if strict else '>='} {low}{' or None' if none else ''}, got {value!r}")

        check("alpha", 0)
        for name in ("n_clients", "local_steps", "max_rounds", "eval_every"):
            check(name, 1, integer=True)
        check("batch_size", 1, integer=True, none=True)
        check("tol", 0)
        for name in ("lr_local", "lr_server", "gamma"):
            check(name, 0, none=True, strict=True)
        if self.partition not in ("iid", "sorted", "dirichlet", "shards"):
            raise ValueError(f"partition must be 'iid', 'sorted', 'dirichlet' or 'shards', got {self.partition!r}")
        _accepted(self.algorithm)  # a ValueError naming the methods for an unknown one

    # ---- fitting ---------------------------------------------------------------------------------
    def _split(self, X, y, clients, task, seed):
        """The federated data set: by the given client ids, or the configured partition."""
        if clients is not None:
            clients = column_or_1d(clients)
            check_consistent_length(X, clients)
            return from_client_ids(X, y, clients, task=task)
        n_clients = min(self.n_clients, X.shape[0])  # no empty clients on tiny data
        return partition(X, y, n_clients, self.partition, seed=seed, task=task)

    def _run(self, problem, regularizer, gamma, lr_local, seed, gap=None):
        """Run the method to ``tol`` or ``max_rounds``; set ``n_iter_`` (``n_rounds_``) and ``history_``; return x.

        ``gap`` (None, or ``(gap(x) -> float, scale)``) selects the stopping rule: the duality gap
        at most ``tol * scale``, or else the squared natural-map residual at most ``tol`` times
        its value at the initial model.
        """
        # no client draws more samples per step than the largest client holds (tiny data sets)
        batch = None if self.batch_size is None else min(self.batch_size, int(problem.dataset.client_sizes.max()))
        steps = {"local_steps": self.local_steps, "lr_local": lr_local, "lr_server": self.lr_server,
                 "gamma": gamma, "batch_size": batch}
        accepted = _accepted(self.algorithm)
        steps = {name: value for name, value in steps.items() if name in accepted}
        x0 = problem.init(seed)
        first = Start.prox_of(regularizer, x0, gamma).x  # the model run() reports at round 0
        start = float(problem.backend.xp.sum(natural_map(problem, regularizer, first, gamma) ** 2))
        stop = None if gap is None else _GapStop(gap[0], self.tol * gap[1], problem.backend)
        result = run(self.algorithm, problem, regularizer, rounds=self.max_rounds, seed=seed, x0=x0,
                     eval_every=self.eval_every, metric_gamma=gamma, tol=self.tol * start if stop is None else None,
                     stop=stop, progress=False, **steps)
        self.n_iter_ = self.n_rounds_ = int(result.state.round)  # n_iter_: scikit-learn's name
        self.history_ = result.history
        if stop is not None:
            self.dual_gap_ = stop.last
        if not result.converged:
            reached = (f"the duality gap is {stop.last:.3g} > tol * {gap[1]:.3g} = {stop.limit:.3g}"
                       if stop is not None else
                       f"the relative stationarity is {result.history['stationarity'][-1] / start:.3g} > "
                       f"tol={self.tol:g}")
            warnings.warn(f"{type(self).__name__} did not converge in max_rounds={self.max_rounds} rounds: "
                          f"{reached}. Raise max_rounds or tol, or check the step sizes.", ConvergenceWarning,
                          stacklevel=2)
        return result.x

    def _backend(self, X):
        return "numba" if self.backend == "auto" and sp.issparse(X) else self.backend

    def _seed(self):
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))


class _GapStop:
    """:func:`fedopt.run`'s ``stop``: the duality gap at the evaluated model is at most ``limit``."""

    def __init__(self, gap, limit, backend):
        self.gap, self.limit, self.backend = gap, limit, backend
        self.last = float("inf")  # the gap at the last evaluation

    def __call__(self, state, row):
        self.last = self.gap(self.backend.to_numpy(state.x))
        return self.last <= self.limit


def _linear_steps(problem, regularizer, gamma, lr_local, local_steps):
    """Default steps of a linear model: ``lr_local = 1 / L`` and ``gamma = local_steps / L``.

    ``L = max_i L_i`` bounds every client's smoothness
    (:meth:`~fedopt.problems.LinearModel.smoothness`), so each local step is a safe gradient
    step, and with ``lr_server = 1`` the effective step ``lr_local * lr_server * local_steps``
    equals ``gamma``: a round moves about as far as ``local_steps`` proximal gradient steps.
    On the test problems FedNMap diverged when the effective step exceeded ``gamma`` (the prox
    part of its local steps is frozen for the round), while ``gamma = 1 / L`` with ``lr_local =
    gamma / local_steps`` converged about ``local_steps`` times slower. A ``rho``-weakly convex
    penalty caps ``gamma`` at ``1 / (2 rho)`` (and ``lr_local`` at ``gamma / local_steps``).
    """
    L = float(problem.smoothness().max())
    if gamma is None:
        gamma = local_steps / L if L > 0 else 1.0
        if regularizer.weak_convexity > 0:
            gamma = min(gamma, 0.5 / regularizer.weak_convexity)
    if lr_local is None:
        lr_local = min(1 / L, gamma / local_steps) if L > 0 else gamma / local_steps
    return gamma, lr_local


def _elastic_net(alpha, l1_ratio):
    """``alpha * (l1_ratio ||x||_1 + (1 - l1_ratio) / 2 ||x||^2)`` (``L1`` for ``l1_ratio = 1``: fused kernels)."""
    if not (isinstance(l1_ratio, numbers.Real) and 0 <= l1_ratio <= 1):
        raise ValueError(f"l1_ratio must be a number in [0, 1], got {l1_ratio!r}")
    return R.L1(alpha) if l1_ratio == 1 else R.ElasticNet(alpha * l1_ratio, alpha * (1 - l1_ratio))


def _unpenalized(base, n_params, free):
    if len(free) == 0:
        return base
    mask = np.ones(n_params, dtype=bool)
    mask[list(free)] = False
    return R.Masked(base, mask)


class _FederatedLinear(_FederatedEstimator):
    def _duality_gap(self, X, targets):
        """None, or ``(gap(coef, intercept) -> float, scale)`` of the pooled objective (see ``_gap``)."""
        return None

    def _fit_linear(self, model, X, targets, clients, task, base):
        """Fit ``model`` (a linear problem class) with the penalty ``base`` on the coefficients only.

        With ``fit_intercept`` and dense ``X``, the features are centered on their pooled mean
        ``mu`` first (one more aggregate from the clients): ``X w + b = (X - mu) w + (b + mu w)``,
        so with a free intercept this changes the coordinates, not the solution, and it spares
        the method the ill-conditioning that features with large means give the intercept.
        Sparse ``X`` stays as it is (centering would make it dense).
        Returns ``(coef (n_out, d), intercept (n_out,))``.
        """
        offset = np.zeros(X.shape[1])
        if self.fit_intercept and not sp.issparse(X):
            offset = X.mean(axis=0)
            X = X - offset
        seed = self._seed()
        problem = model(self._split(X, targets, clients, task, seed), weights="samples",
                        fit_intercept=self.fit_intercept, backend=self._backend(X))
        n_out, d = problem.n_out, X.shape[1]
        free = range(n_out * d, n_out * (d + 1)) if self.fit_intercept else ()
        regularizer = _unpenalized(base, problem.n_params, free)
        gamma, lr_local = _linear_steps(problem, regularizer, self.gamma, self.lr_local, self.local_steps)
        self.dual_gap_ = float("nan")  # set by _run where the objective has a duality gap
        x = self._run(problem, regularizer, gamma, lr_local, seed, self._gap_of_vector(X, targets, n_out))
        coef = x[: n_out * d].reshape(n_out, d).copy()
        intercept = x[n_out * d :] - coef @ offset if self.fit_intercept else np.zeros(n_out)
        if n_out > 1 and self.fit_intercept:  # softmax: only intercept differences matter; sum 0 as in scikit-learn
            intercept = intercept - intercept.mean()
        return coef, intercept

    def _gap_of_vector(self, X, targets, n_out):
        """:meth:`_duality_gap` as a function of the flat parameter vector (None when there is none)."""
        criterion = self._duality_gap(X, targets)
        if criterion is None:
            return None
        gap, scale = criterion
        d = X.shape[1]

        def of_vector(x):
            intercept = x[n_out * d :] if self.fit_intercept else np.zeros(n_out)
            return gap(x[: n_out * d].reshape(n_out, d), intercept)

        return of_vector, scale
