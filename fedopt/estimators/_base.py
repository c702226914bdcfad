"""What the federated estimators share: parameter checks, the client split, the run, the linear fit."""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import _check_sample_weight

from fedopt import regularizers as R
from fedopt.algorithms import ALGORITHMS, Start, canonical, make
from fedopt.algorithms import hyperparameters as _accepted
from fedopt.algorithms.base import SAMPLING, clients_count
from fedopt.algorithms.decentralized import DecentralizedMethod
from fedopt.algorithms.vi import VIMethod
from fedopt.datasets import from_client_ids, partition
from fedopt.datasets.partition import LABEL_SCHEMES, SCHEMES
from fedopt.estimators._gap import CenteredRows, dot_transposed, float64_chunks
from fedopt.metrics import natural_map
from fedopt.problems import LeastSquares
from fedopt.problems.base import WEIGHTS, client_weights, kernel_sample_weights
from fedopt.run import run, state_fits

#: The input dtypes the estimators keep: float32 data is fitted in float32 end to end.
FLOATS = (np.float64, np.float32)
#: The smallest ``tol`` of a float32 fit: float32 arithmetic leaves the duality gap of the
#: diabetes Lasso at about ``3e-6`` times its yardstick, so a smaller ``tol`` could never stop.
FLOAT32_TOL = 1e-5
#: The methods the estimators run: those with a server (a decentralized method needs a graph, a VI method a game).
SERVER_METHODS = tuple(name for name, cls in ALGORITHMS.items() if not issubclass(cls, DecentralizedMethod | VIMethod))
#: The server methods without a prox step: they take no penalty (their ``check`` refuses any regularizer but Zero).
SMOOTH_METHODS = tuple(name for name in SERVER_METHODS if ALGORITHMS[name].smooth_only)
#: The server methods that take ``clients_per_round`` and ``sampling`` (partial participation).
COHORT_METHODS = tuple(name for name in SERVER_METHODS if "clients_per_round" in _accepted(name))
#: The partitions of :func:`fedopt.datasets.partition`, and those that split by class label (classifiers only).
PARTITIONS, LABEL_PARTITIONS = SCHEMES, LABEL_SCHEMES


class _FederatedEstimator(BaseEstimator):
    """What the estimators share: parameter checks, the client split, the run and its warning."""

    _sparse = True  # whether fit accepts sparse X

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._sparse
        return tags

    # ---- parameters ----------------------------------------------------------------------------
    def _check_params(self):
        self._check_number("alpha", 0)
        for name in ("n_clients", "local_steps", "max_rounds", "eval_every"):
            self._check_number(name, 1, integer=True)
        self._check_number("batch_size", 1, integer=True, none=True)
        self._check_number("tol", 0)
        for name in ("lr_local", "lr_server", "gamma"):
            self._check_number(name, 0, none=True, strict=True)
        if hasattr(self, "l1_ratio"):
            self._check_number("l1_ratio", 0, high=1)
        for name in ("fit_intercept", "warm_start"):
            if hasattr(self, name) and not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(map(repr, PARTITIONS))}, got {self.partition!r}")
        if self.client_weights not in WEIGHTS:
            raise ValueError(f"client_weights must be one of {', '.join(map(repr, WEIGHTS))}, "
                             f"got {self.client_weights!r}")
        if canonical(self.algorithm) not in SERVER_METHODS:  # canonical(): a ValueError for an unknown name
            raise ValueError(f"algorithm={self.algorithm!r} has no server: the estimators run "
                             f"{', '.join(SERVER_METHODS)}; run a decentralized or VI method with fedopt.run")
        if canonical(self.algorithm) in SMOOTH_METHODS and self.alpha != 0:
            raise ValueError(f"algorithm={self.algorithm!r} has no prox step, so it fits no penalty: it needs "
                             f"alpha=0, got alpha={self.alpha!r}; use a composite method such as "
                             "algorithm='fednmap' for a penalized fit")
        clients_count(self.clients_per_round, "clients_per_round")
        if self.sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLING))}, got {self.sampling!r}")
        for name, default in (("clients_per_round", None), ("sampling", "uniform")):
            if canonical(self.algorithm) not in COHORT_METHODS and getattr(self, name) != default:
                raise ValueError(f"algorithm={self.algorithm!r} draws no cohorts (every client takes part in every "
                                 f"round), so it cannot take {name}={getattr(self, name)!r}: leave {name}={default!r}, "
                                 f"or use a method that samples clients: {', '.join(COHORT_METHODS)}")

        if self.lr_server not in (None, 1) and "lr_server" not in _accepted(self.algorithm):
            takers = ", ".join(m for m in SERVER_METHODS if "lr_server" in _accepted(m))
            raise ValueError(f"algorithm={self.algorithm!r} has no server step size, so it cannot take "
                             f"lr_server={self.lr_server!r}: leave lr_server=1.0, or use one of {takers}")

    def _check_number(self, name, low, *, integer=False, none=False, strict=False, high=None):
        """Refuse the parameter ``name`` unless it is a finite number (an integer) ``>= low`` (``> low``
        when ``strict``) and ``<= high``, or None where ``none``; booleans are refused."""
        value = getattr(self, name)
        if none and value is None:
            return
        kind = numbers.Integral if integer else numbers.Real
        if isinstance(value, kind) and not isinstance(value, bool) and np.isfinite(value) and \
                (value > low if strict else value >= low) and (high is None or value <= high):
            return
        bound = f"in [{low}, {high}]" if high is not None else f"{'>' if strict else '>='} {low}"
        raise ValueError(f"{name} must be {'an integer' if integer else 'a finite number'} {bound}"
                         f"{' or None' if none else ''}, got {value!r}")

    # ---- fitting ---------------------------------------------------------------------------------
    def _split(self, X, y, clients, task, seed, sample_weight=None, n_classes=None):
        """The federated data set: by the given client ids, or the configured partition.

        Dense features keep their dtype (float32 stays float32). ``n_classes`` fixes the class
        codes ``0..n_classes-1`` of a classifier even when ``y`` lacks some (a ``partial_fit`` batch).
        """
        dtype = None if sp.issparse(X) else X.dtype
        if clients is not None:
            clients = _checked_clients(clients, X.shape[0])
        sample_weight = _checked_weights(sample_weight, X)
        if sample_weight is not None and not (sample_weight > 0).all():  # rows of weight 0 add nothing: drop them
            keep = np.flatnonzero(sample_weight > 0)
            X, y, sample_weight = X[keep], y[keep], sample_weight[keep]
            clients = None if clients is None else clients[keep]
        if clients is not None:
            data = from_client_ids(X, y, clients, task=task, dtype=dtype, sample_weight=sample_weight)
        else:
            data = self._partition(X, y, task, seed, dtype, sample_weight)
        if n_classes is not None and len(data.classes) < n_classes:  # codes relative to the batch's classes
            data = dataclasses.replace(data, y=data.classes[data.y], classes=np.arange(n_classes))
        self.n_clients_ = data.n_clients
        return data

    def _partition(self, X, y, task, seed, dtype, sample_weight):
        """The configured ``partition`` of ``n_clients`` clients (at most one per sample on tiny data)."""
        # checked here, not with the parameters: a fit given clients does not use the partition
        if self.partition in LABEL_PARTITIONS and isinstance(self, RegressorMixin):
            raise ValueError(f"partition={self.partition!r} splits the samples by class label, and a regressor's "
                             f"targets have none: {type(self).__name__} takes partition='iid' or 'sorted', or "
                             "fit(X, y, clients=ids)")
        n_samples = X.shape[0]
        if self.partition == "shards" and 2 * self.n_clients > n_samples:  # partition()'s 2 shards a client
            raise ValueError(f"partition='shards' deals every client 2 shards of at least one sample: "
                             f"n_clients={self.n_clients} needs {2 * self.n_clients} samples, got {n_samples}; "
                             f"use n_clients <= {n_samples // 2} or partition='iid' or 'sorted'")
        try:
            return partition(X, y, min(self.n_clients, n_samples), self.partition, seed=seed, task=task,
                             dtype=dtype, sample_weight=sample_weight)
        except ValueError as error:
            if self.partition != "dirichlet":
                raise
            raise ValueError(f"partition='dirichlet' found no split of the {n_samples} samples that gives each of "
                             f"n_clients={self.n_clients} clients enough of them; use fewer clients (n_clients) "
                             "or partition='iid' or 'sorted'") from error

    def _previous(self, partial):
        """Whether this fit starts from the fitted model: ``partial_fit`` or ``warm_start`` after a fit."""
        return (partial or self.warm_start) and hasattr(self, "n_iter_")

    def _run(self, problem, regularizer, gamma, lr_local, seed, gap=None, previous=None, partial=False, floor=0.0,
             center=None, start=None):
        """Run the method to ``tol`` or ``max_rounds``; set ``n_iter_`` (``n_rounds_``) and ``history_``; return x.

        ``gap`` (None, or ``(gap(x) -> float, scale)``) selects the stopping rule: the duality gap
        at most ``tol * scale``, or else the squared natural-map residual at most ``tol`` times
        its value at the initial model of a fit from scratch (for a warm start too), or ``floor``
        (the rounding level of that residual) when larger. ``previous`` (a flat parameter vector)
        starts the run at ``prox_{gamma phi}(x - gamma grad f(x))``, the natural-map step from the
        fitted model (the model itself once it is stationary). ``partial`` runs ``eval_every``
        rounds without a stopping rule (``partial_fit``): it continues the last run's state where
        :meth:`_resumable` allows, else restarts the method at ``previous`` (:meth:`_restart`).
        ``center`` is the features' mean ``mu`` where the parameters hold an intercept of the
        centered features ``X - mu`` (None: no such intercept). ``start`` (a flat parameter vector)
        replaces ``problem.init(seed)`` as the initial model of a fit from scratch.
        """
        # no client draws more samples per step than the largest client holds (tiny data sets)
        batch = None if self.batch_size is None else min(self.batch_size, int(problem.dataset.client_sizes.max()))
        # checked before the prox below or the method's check, so that the error names the estimator's parameters
        if gamma >= regularizer.step_limit:
            penalty, bound = _weakly_convex(regularizer)
            raise ValueError(f"gamma={gamma:g} is too large for {penalty}: its prox needs gamma < {bound}; lower "
                             "gamma, or leave gamma=None for the default, which is capped at half that bound")
        lr_server = 1.0 if self.lr_server is None else self.lr_server
        steps = {"local_steps": self.local_steps, "comm_prob": 1 / self.local_steps,  # Scaffnew's mean steps 1/p
                 "lr_local": lr_local, "lr_server": lr_server,
                 "gamma": gamma, "batch_size": batch, "clients_per_round": self.clients_per_round,
                 "sampling": self.sampling}
        accepted = _accepted(self.algorithm)
        steps = {name: value for name, value in steps.items() if name in accepted}
        key = (steps, regularizer, center)  # what the state's arrays were made with
        resume = self._resumable(problem, key) if partial else None
        if resume is None and partial and previous is not None:
            resume = self._restart(problem, regularizer, steps, gamma, previous, seed)
        if resume is not None:
            x0 = None  # the run continues the state
        elif previous is None:
            x0 = _initial(problem, seed, start)
        else:
            x = problem.backend.asarray(previous, dtype=problem.dtype)
            x0 = x - problem.dtype.type(gamma) * problem.grad(x)
        relative = max(self.tol, FLOAT32_TOL) if problem.dtype == np.float32 else self.tol
        stop = tol = None
        if gap is not None and not partial:
            stop = _GapStop(gap[0], relative * gap[1], problem.backend)
        elif not partial:
            # the scale is the residual where a fit from scratch starts, a warm fit's too: measured from
            # its own start, a warm fit at a converged model would have to shrink the residual tol times more
            def residual(point):  # at the model run() reports at round 0 from ``point``
                first = Start.prox_of(regularizer, point, gamma).x
                return float(problem.backend.xp.sum(natural_map(problem, regularizer, first, gamma) ** 2))

            scale = residual(x0 if previous is None else _initial(problem, seed, start))
            if previous is not None and relative * scale <= floor:  # a stationary scratch start sets no scale:
                scale = residual(x0)  # the warm start's own residual does
            tol = max(relative * scale, floor)
        try:  # a continued run draws new minibatches: its generator is seeded past the rounds already run
            result = run(self.algorithm, problem, regularizer, rounds=self.eval_every if partial else self.max_rounds,
                         seed=seed if resume is None else seed + resume.round, x0=x0, eval_every=self.eval_every,
                         metric_gamma=gamma, tol=tol, stop=stop, progress=False, resume=resume, **steps)
        except ValueError as error:  # a method's prox step too large for the penalty: named in the estimator's terms
            if regularizer.weak_convexity > 0 and f"too large for {regularizer!r}" in str(error):
                raise ValueError(str(error).replace(repr(regularizer), _weakly_convex(regularizer)[0])) from None
            raise
        self._state = dataclasses.replace(result.state, env=None)  # what partial_fit continues (no data kept)
        self._state_key = key
        self.n_iter_ = self.n_rounds_ = int(result.state.round - (0 if resume is None else resume.round))
        self.history_ = result.history
        if gap is not None:
            self.dual_gap_ = stop.last if stop is not None else gap[0](result.x)
        if not (result.converged or partial):
            tol_text = f"tol={relative:g}" + ("" if relative == self.tol else f" (from {self.tol:g}, for float32)")
            last = result.history["stationarity"][-1]
            reached = (f"the duality gap is {stop.last:.3g} > {tol_text} * {gap[1]:.3g} = {stop.limit:.3g}"
                       if stop is not None else
                       f"the relative stationarity is {last / scale:.3g} > {tol_text}" if scale > 0 else
                       f"||F_nat||^2 is {last:.3g} > its rounding level {tol:.3g}")
            bias = ALGORITHMS[canonical(self.algorithm)].fixed_point_bias
            advice = [f"{self.algorithm} may settle short of the solution: {bias}. fednmap, zhang, feddr and fedadmm "
                      "reach it; a smaller lr_local shrinks the bias" if bias else
                      "Raise max_rounds or tol, or check the step sizes",
                      *_conditioning(problem, regularizer, gamma, self.local_steps)]
            if batch is not None and batch < int(problem.dataset.client_sizes.max()):
                advice.append(f"Minibatches of batch_size={batch} leave a noise floor that may lie above tol; "
                              "batch_size=None uses each client's full data")
            warnings.warn(f"{type(self).__name__} did not converge in max_rounds={self.max_rounds} rounds: "
                          f"{reached}. {'. '.join(advice)}.", ConvergenceWarning, stacklevel=2)
        return result.x

    def _resumable(self, problem, key):
        """The last run's state when the same method can continue it on ``problem``, else None.

        It needs the same shapes, the same dtype (float32 data is fitted in float32) and the same
        ``key``: the steps, the penalty and the center. The state's points hold the intercept of
        ``X - mu`` for the last batch's ``mu``, and its pre-prox points and corrections are made
        with its steps (FedNMap's ``z`` with ``gamma``, whose default ``local_steps / L`` follows
        the batch): read with another center or step, they place the model elsewhere before any
        round runs.
        """
        state = getattr(self, "_state", None)
        if state is None or state.method != canonical(self.algorithm) or not _same_key(key, self._state_key):
            return None
        return state if state_fits(state, problem) and state.x.dtype == problem.dtype else None

    def _restart(self, problem, regularizer, steps, gamma, previous, seed):
        """The method's initial state at the fitted model ``previous`` (the problem's flat vector),
        numbered (and timed) on from the last run, for a ``partial_fit`` that cannot continue the last state.

        It starts at the pre-prox point ``previous + gamma s``, ``s`` a subgradient of the penalty
        there, so its round-0 model is ``previous`` itself: the rounds move the model, the restart
        does not. The method's other arrays (corrections, duals) start afresh.
        """
        method = make(self.algorithm, **steps)
        pre_prox = previous + gamma * _subgradient(regularizer, previous)
        start = Start.prox_of(regularizer, problem.backend.asarray(pre_prox, dtype=problem.dtype), gamma)
        state = method.restart(problem, regularizer, np.random.default_rng(seed), start, self._state.round)
        return dataclasses.replace(state, env=None, method=method.name, costs=self._state.costs,
                                   seconds=self._state.seconds)

    def _backend(self, X):
        return "numba" if self.backend == "auto" and sp.issparse(X) else self.backend

    def _seed(self):
        return int(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))


class _Regressor(RegressorMixin):
    """``fit`` and ``partial_fit`` of the regressors, which define ``_fit(X, y, clients, sample_weight, partial)``."""

    def fit(self, X, y, clients=None, sample_weight=None):
        """Fit on ``(X, y)``; ``clients[j]`` (optional) is sample ``j``'s client id, ``sample_weight[j]`` its weight."""
        return self._fit(X, y, clients, sample_weight, partial=False)

    def partial_fit(self, X, y, clients=None, sample_weight=None):
        """``eval_every`` more rounds from the fitted model on ``(X, y)`` (online training; no stopping rule).

        The rounds continue the last run's state (its corrections and pre-prox point) when that
        state holds for this batch: the same steps, penalty, dtype and, for a fitted intercept,
        feature means. A batch with another mean or dtype, or another smoothness where it sets the
        default ``gamma``, restarts the method's state from the current model instead, so that the
        model moves by the rounds only.
        """
        return self._fit(X, y, clients, sample_weight, partial=True)


class _Classifier(ClassifierMixin):
    """``fit``, ``partial_fit`` and ``predict_log_proba`` of the classifiers, which define
    ``_fit(X, y, classes, clients, sample_weight, partial)`` and ``predict_proba``."""

    def fit(self, X, y, clients=None, sample_weight=None):
        """Fit on ``(X, y)``; ``clients[j]`` (optional) is sample ``j``'s client id, ``sample_weight[j]`` its weight."""
        return self._fit(X, y, None, clients, sample_weight, partial=False)

    def partial_fit(self, X, y, classes=None, clients=None, sample_weight=None):
        """``eval_every`` more rounds from the fitted model on ``(X, y)`` (online training; no stopping rule).

        The first call needs ``classes``, every label that the batches may hold.
        The rounds continue the last run's state (its corrections and pre-prox point) when that
        state holds for this batch: the same steps, penalty, dtype and, for a fitted intercept,
        feature means. A batch with another mean or dtype, or another smoothness where it sets the
        default ``gamma``, restarts the method's state from the current model instead, so that the
        model moves by the rounds only.
        """
        return self._fit(X, y, classes, clients, sample_weight, partial=True)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))


def _initial(problem, seed, start):
    """The initial model of a fit from scratch: ``start`` (a flat parameter vector), or ``problem.init(seed)``."""
    return problem.init(seed) if start is None else problem.backend.asarray(start, dtype=problem.dtype)


class _GapStop:
    """:func:`fedopt.run`'s ``stop``: the duality gap at the evaluated model is at most ``limit``."""

    def __init__(self, gap, limit, backend):
        self.gap, self.limit, self.backend = gap, limit, backend
        self.last = float("inf")  # the gap at the last evaluation

    def __call__(self, state, row):
        self.last = self.gap(self.backend.to_numpy(state.x))
        return self.last <= self.limit


def _same_key(key, last):
    """Whether two ``(steps, regularizer, center)`` keys of :meth:`_FederatedEstimator._run` agree."""
    (steps, regularizer, center), (last_steps, last_regularizer, last_center) = key, last
    return steps == last_steps and regularizer == last_regularizer and np.array_equal(center, last_center)


def _subgradient(regularizer, x):
    """A subgradient ``s`` of an estimator's penalty at the float64 vector ``x`` (0 where ``x_j = 0``).

    ``prox_{gamma phi}(x + gamma s) = x`` for every ``gamma`` with ``gamma rho < 1``: the pre-prox
    point that reports ``x``. The penalties are those the estimators build: Zero, L1, ElasticNet,
    MCP and SCAD, Masked or not.
    """
    if isinstance(regularizer, R.Masked):
        s = np.zeros_like(x)
        s[regularizer.mask] = _subgradient(regularizer.base, x[regularizer.mask])
        return s
    sign, t = np.sign(x), np.abs(x)
    if isinstance(regularizer, R.L1):
        return regularizer.lam * (1.0 if regularizer.weights is None else regularizer.weights) * sign
    if isinstance(regularizer, R.ElasticNet):
        return regularizer.l1 * sign + regularizer.l2 * x
    if isinstance(regularizer, R.MCP):
        return sign * np.maximum(regularizer.lam - t / regularizer.gamma, 0.0)
    if isinstance(regularizer, R.SCAD):
        lam, a = regularizer.lam, regularizer.a
        return sign * np.where(t <= lam, lam, np.maximum(a * lam - t, 0.0) / (a - 1))
    if isinstance(regularizer, R.Zero):
        return np.zeros_like(x)
    raise TypeError(f"no subgradient for {type(regularizer).__name__}")


def _conditioning(problem, regularizer, gamma, local_steps) -> list[str]:
    """What sets a first-order method's rounds on a linear model, for the ConvergenceWarning: its
    smoothness ``L``, over the penalty's ridge strength ``l2`` where it has one (a ``Masked`` one's
    too), and the features' scales where they spread over more than 10x (nothing for other models):
    scales that differ stretch the loss's curvature along some directions only, while the step
    ``1 / L`` is set by the steepest one. Where a weakly convex penalty's cap ``1 / (2 rho)`` holds
    the prox parameter ``gamma`` below the ``local_steps / L`` that ``L`` allows, the cap sets the
    rounds instead: a round moves about ``gamma`` times the gradient, whatever ``L``."""
    if not hasattr(problem, "smoothness"):
        return []
    L, l2 = float(problem.smoothness().max()), getattr(getattr(regularizer, "base", regularizer), "l2", 0.0)
    rho = regularizer.weak_convexity
    if rho > 0 and math.isclose(gamma, 0.5 / rho) and gamma * L < local_steps:
        penalty, bound = _weakly_convex(regularizer)
        return [f"The rounds grow with 1 / gamma, and the weakly convex {penalty} caps gamma at {gamma:.3g} (half "
                f"of {bound}), {local_steps / (gamma * L):.3g} times below the local_steps / L = "
                f"{local_steps / L:.3g} that the smoothness L = {L:.3g} allows. Features on a larger scale "
                "(StandardScaler; then choose alpha anew) give each round's gamma more curvature to act on, and a "
                "larger concavity raises the cap"]
    measure = f"the condition number L / l2 = {L / l2:.3g}" if l2 > 0 else f"the smoothness L = {L:.3g}"
    advice = f"The rounds grow with {measure}"
    scales = _feature_scales(problem.dataset.X) * problem.dataset.scale
    varying = scales[scales > 1e-12 * scales.max()]
    if len(varying) and varying.max() > 10 * varying.min():
        advice += (f", which features on a common scale (StandardScaler) usually lower: these have standard "
                   f"deviations from {varying.min():.3g} to {varying.max():.3g}")
    return [advice]


def _weakly_convex(regularizer) -> tuple[str, str]:
    """The estimators' MCP or SCAD penalty in ``regularizer`` (``Masked`` or not) in their own parameters,
    and the bound ``1 / rho`` on a prox parameter in them: ``rho = 1 / concavity`` for MCP,
    ``1 / (concavity - 1)`` for SCAD."""
    base = getattr(regularizer, "base", regularizer)
    if isinstance(base, R.MCP):
        return f"penalty='mcp' with concavity={base.gamma:g}", f"concavity = {base.gamma:g}"
    return f"penalty='scad' with concavity={base.a:g}", f"concavity - 1 = {base.a - 1:g}"


def _feature_scales(X) -> np.ndarray:
    """The standard deviation of each feature (column) of dense or sparse ``X``, in float64."""
    m = X.shape[0]
    if sp.issparse(X):
        means, squares = (np.asarray(Y.mean(axis=0)).ravel() for Y in (X, X.multiply(X)))
    else:
        means = dot_transposed(X, np.full(m, 1 / m))
        squares = sum(np.einsum("ij,ij->j", chunk, chunk) for _, chunk in float64_chunks(X)) / m
    return np.sqrt(np.maximum(squares - means * means, 0.0))


def _linear_steps(L, regularizer, gamma, lr_local, local_steps):
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
    if gamma is None:
        gamma = local_steps / L if L > 0 else 1.0
        if regularizer.weak_convexity > 0:
            gamma = min(gamma, 0.5 / regularizer.weak_convexity)
    if lr_local is None:
        lr_local = min(1 / L, gamma / local_steps) if L > 0 else gamma / local_steps
    return gamma, lr_local


def _l1_l2(alpha, l1_ratio):
    """``(l1, l2)`` of ``alpha * (l1_ratio ||x||_1 + (1 - l1_ratio) / 2 ||x||^2)``."""
    return alpha * l1_ratio, alpha * (1 - l1_ratio)


def _elastic_net(alpha, l1_ratio):
    """``alpha * (l1_ratio ||x||_1 + (1 - l1_ratio) / 2 ||x||^2)`` (``L1`` for ``l1_ratio = 1``: fused kernels)."""
    l1, l2 = _l1_l2(alpha, l1_ratio)
    return R.L1(alpha) if l1_ratio == 1 else R.ElasticNet(l1, l2)


def _concave(penalty, alpha, concavity):
    """MCP ``(lam=alpha, gamma=concavity)`` or SCAD ``(lam=alpha, a=concavity)``; the defaults 3 and 3.7.

    Checks ``concavity`` under the estimator's name: MCP's ``gamma`` must be ``> 0``, SCAD's ``a`` ``> 2``."""
    low = 0 if penalty == "mcp" else 2
    if concavity is not None and not (isinstance(concavity, numbers.Real) and not isinstance(concavity, bool)
                                      and np.isfinite(concavity) and concavity > low):
        raise ValueError(f"concavity must be a finite number > {low} for penalty={penalty!r} (its "
                         f"{'gamma' if penalty == 'mcp' else 'a'}), or None for the default "
                         f"{3 if penalty == 'mcp' else 3.7}, got {concavity!r}")
    options = {} if concavity is None else {"gamma" if penalty == "mcp" else "a": concavity}
    return (R.MCP if penalty == "mcp" else R.SCAD)(alpha, **options)


def _unpenalized(base, n_params, free):
    if len(free) == 0:
        return base
    mask = np.ones(n_params, dtype=bool)
    mask[list(free)] = False
    return R.Masked(base, mask)


class _FederatedLinear(_FederatedEstimator):
    def _penalty_parts(self):
        """``(l1, l2)`` of a convex penalty on the coefficients, whose duality gap is the stopping
        rule; None for a nonconvex one or ``alpha = 0`` (relative stationarity then)."""
        return None

    def _fit_linear(self, model, X, targets, clients, task, base, sample_weight, partial, n_classes=None):
        """Fit ``model`` (a linear problem class) with the penalty ``base`` on the coefficients only.

        With ``fit_intercept``, the features are centered on their mean ``mu`` under the objective's
        row weights ``s_j`` first (one more aggregate from the clients): ``X w + b = (X - mu) w +
        (b + mu w)`` changes the coordinates, not the solution, and spares the method the
        ill-conditioning that features with large means give the intercept. Dense ``X`` is
        centered in place; sparse ``X`` implicitly (the problem's ``center``), so that it stays
        sparse. Least squares centers ``y`` on its mean ``ybar`` too, as scikit-learn does: the
        best intercept is then ``ybar - mu w`` for every ``w``, the method fits ``w`` alone, and the
        intercept's curvature (1, often far above the features') no longer sets the step size.
        Returns ``(coef (n_out, d), intercept (n_out,))``.
        """
        seed = self._seed()
        data = self._split(X, targets, clients, task, seed, sample_weight, n_classes)
        offset, y_offset, center = np.zeros(X.shape[1], dtype=X.dtype), 0.0, None
        closed_form = self.fit_intercept and model is LeastSquares  # the best intercept is ybar - mu w
        if self.fit_intercept:
            shares = _row_shares(data, self.client_weights)
            offset = _column_means(data.X, shares).astype(X.dtype)
            if sp.issparse(data.X):
                center = offset
            else:
                data = dataclasses.replace(data, X=_minus(data.X, offset, X))
            if closed_form:
                y_offset = float(shares @ data.y)
                data = dataclasses.replace(data, y=data.y - y_offset)
        problem = model(data, weights=self.client_weights, fit_intercept=self.fit_intercept and not closed_form,
                        backend=self._backend(X), center=center)
        n_out, d = problem.n_out, X.shape[1]
        free = range(n_out * d, n_out * (d + 1)) if problem.fit_intercept else ()
        # alpha = 0: Zero, the one regularizer that the methods without a prox (SMOOTH_METHODS) take
        regularizer = R.Zero() if self.alpha == 0 else _unpenalized(base, problem.n_params, free)
        L = float(problem.smoothness().max())
        gamma, lr_local = _linear_steps(L, regularizer, self.gamma, self.lr_local, self.local_steps)
        previous = self._previous_vector(n_out, d, offset, problem.fit_intercept) if self._previous(partial) else None
        self.dual_gap_ = float("nan")  # set by _run where the objective has a duality gap
        x = self._run(problem, regularizer, gamma, lr_local, seed, self._gap(problem, n_out), previous, partial,
                      floor=_rounding_floor(data, y_offset, L, problem, model is LeastSquares),
                      center=offset if problem.fit_intercept else None)
        coef = x[: n_out * d].reshape(n_out, d).copy()
        intercept = x[n_out * d :] if problem.fit_intercept else np.full(n_out, y_offset, dtype=x.dtype)
        intercept = intercept - coef @ offset if self.fit_intercept else np.zeros(n_out, dtype=x.dtype)
        if n_out > 1 and self.fit_intercept:  # softmax: only intercept differences matter; sum 0 as in scikit-learn
            intercept = intercept - intercept.mean()
        return coef, intercept

    def _previous_vector(self, n_out, d, offset, with_intercept):
        """The fitted ``coef_`` (and ``intercept_`` where the problem has it) as the centered problem's flat vector."""
        coef = np.asarray(self.coef_, dtype=np.float64)
        if coef.size != n_out * d:
            raise ValueError(f"warm_start and partial_fit continue from coef_ of shape {coef.shape}, which does not "
                             f"fit {n_out} output(s) of {d} features; fit again with warm_start=False")
        coef = coef.reshape(n_out, d)
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64)) + coef @ offset
        return np.concatenate([coef.ravel(), intercept]) if with_intercept else coef.ravel()

    def _gap(self, problem, n_out):
        """None, or ``(gap(x) -> float, scale)``: the duality gap of the federated objective at the
        flat vector ``x`` and the yardstick of ``tol`` (see :mod:`fedopt.estimators._gap`), on the
        clients' rows with each row's share ``s_j`` of the objective."""
        parts = self._penalty_parts()
        if parts is None:
            return None
        data = problem.dataset
        X = data.X if problem.center is None else CenteredRows(data.X, problem.center)
        gap, scale = self._gap_function(X, data.y, parts, _row_shares(data, problem.weights), problem.fit_intercept)
        d = data.n_features

        def of_vector(x):
            x = np.asarray(x, dtype=np.float64)
            intercept = x[n_out * d :] if problem.fit_intercept else np.zeros(n_out)
            return gap(x[: n_out * d].reshape(n_out, d), intercept)

        return of_vector, scale


def _rounding_floor(data, y_offset, L, problem, least_squares):
    """The rounding level of a linear model's squared natural-map residual: ``(eps sqrt(L) rms(y))^2``.

    The residual's terms ``X^T r / n`` carry rounding errors of about ``eps ||X|| ||y|| / n <= eps
    sqrt(L) rms(y)``, with ``y`` the targets before centering (``|p - y| <= 1`` for the log-loss).
    The relative rule needs this floor where its start is itself rounding noise: a constant ``y``
    centers to noise, the exact fit is 0 and ``tol`` times that noise is out of reach (the fit ran
    ``max_rounds`` and warned). Any fit whose centered targets are not noise starts far above it,
    about ``1 / eps^2`` times higher, so the floor does not end a fit that is still moving.

    With the problem's ``center`` ``mu`` the oracle forms ``X - mu`` itself, at the rounding of the
    uncentered rows: ``sqrt(L)`` becomes ``sqrt(L) + ||mu||``, which a constant feature needs (its
    ``L`` is 0, its gradient rounding noise).
    """
    size = 1.0
    if least_squares:
        y = np.asarray(data.y, dtype=np.float64) + y_offset
        size = float(_row_shares(data, problem.weights) @ y**2)
    reach = math.sqrt(L)
    if problem.center is not None:
        reach += problem.dataset.scale * float(np.linalg.norm(problem.center))
    return float(np.finfo(problem.dtype).eps) ** 2 * reach**2 * size


def _row_shares(data, weights):
    """``s_j``, each row's weight in ``f = sum_i w_i f_i`` (they sum to 1): ``w_i / m_i``, or ``w_i s_j / S_i``
    with sample weights; ``weights`` are the ``w_i`` or their rule (:func:`~fedopt.problems.base.client_weights`)."""
    sizes = data.client_sizes
    shares, s = np.repeat(client_weights(data, weights) / sizes, sizes), kernel_sample_weights(data)
    return shares * s if len(s) else shares


def _column_means(X, shares):
    """Each feature's mean under the row shares ``s_j``, within the feature's range: a constant
    feature's mean is then its value exactly (the shares' sum is 1 only to rounding), and its
    centered column exactly 0, dense or sparse."""
    low, high = (np.ravel(extreme(axis=0).toarray() if sp.issparse(X) else extreme(axis=0)) for extreme in
                 (X.min, X.max))
    return np.clip(dot_transposed(X, shares), low, high)


def _minus(X, offset, original):
    """``X - offset``, in place when ``X`` is the split's own copy (not the caller's ``original``)."""
    if np.shares_memory(X, original):
        return X - offset
    X -= offset
    return X


def _checked_clients(clients, n_samples):
    """``clients`` as a 1-D array of one client id per sample, or a ValueError naming it."""
    ids = np.asarray(clients)
    if ids.shape != (n_samples,):
        got = f"shape {ids.shape}" if ids.ndim else f"the scalar {clients!r}"
        raise ValueError(f"clients must be a 1-D array of one client id per sample, shape ({n_samples},) "
                         f"for these {n_samples} samples, got {got}")
    return ids


def _checked_weights(sample_weight, X):
    """``sample_weight`` as float64 weights ``>= 0``, not all zero (scikit-learn's checks), or None."""
    if sample_weight is None:
        return None
    return _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)


def _class_codes(estimator, y, classes, partial):
    """``(classes_, codes)``: the sorted classes and each label's index among them.

    ``fit`` takes the classes of ``y`` (with ``warm_start``, they must be those of the fitted
    model, whose output units it continues); the first ``partial_fit`` call takes ``classes``
    (every label that later batches may hold, scikit-learn's convention) and later calls keep
    the fitted model's.
    """
    name = type(estimator).__name__
    if partial and hasattr(estimator, "classes_"):
        known = estimator.classes_
        if classes is not None and not np.array_equal(np.unique(classes), known):
            raise ValueError(f"classes={classes!r} differs from the classes_ of the fitted model, {known!r}: "
                             "partial_fit keeps them; leave classes=None, or fit a new model with warm_start=False")
    elif partial:
        if classes is None:
            raise ValueError(f"{name}.partial_fit needs classes on its first call: every label that y may hold")
        known = np.unique(classes)
    else:
        known = np.unique(y)
        if estimator._previous(partial) and not np.array_equal(known, estimator.classes_):
            raise ValueError(f"warm_start=True continues the fitted model, whose classes_ are {estimator.classes_!r}, "
                             f"but y has the classes {known!r}: a warm start needs the same classes; fit with "
                             "warm_start=False to start a new model")
    if len(known) < 2:
        raise ValueError(f"{name} needs samples of at least 2 classes, but the data contains only one class: "
                         f"{known[0]!r}")
    codes = np.minimum(np.searchsorted(known, y), len(known) - 1)
    unknown = np.flatnonzero(known[codes] != y)
    if len(unknown):
        where, fix = (("the fitted model", "partial_fit keeps them; fit a new model with warm_start=False for "
                       "other classes") if hasattr(estimator, "classes_") else
                      ("the classes argument", "classes must hold every label that y may hold"))
        raise ValueError(f"y holds the label {y[unknown[0]]!r}, which is not among the classes {known!r} of {where}: "
                         f"{fix}")
    return known, codes
