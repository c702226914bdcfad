"""Penalized linear models with a free intercept: the Lasso, the elastic net, MCP/SCAD regression and
logistic regression."""

from __future__ import annotations

import numpy as np
from scipy.special import expit, softmax
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fedopt import regularizers as R
from fedopt.estimators._base import (
    FLOATS,
    _checked_weights,
    _class_codes,
    _Classifier,
    _concave,
    _elastic_net,
    _FederatedLinear,
    _l1_l2,
    _Regressor,
)
from fedopt.estimators._gap import least_squares_gap, least_squares_scale, logistic_gap, logistic_scale
from fedopt.problems import LeastSquares, Logistic, Softmax

PENALTIES = ("l1", "l2", "elasticnet", "mcp", "scad")


class _FederatedRegressor(_Regressor, _FederatedLinear):
    """Least squares ``sum_j s_j (y_j - x_j w - b)^2 / 2`` plus the subclass's ``_penalty()`` on ``w``."""

    def _fit(self, X, y, clients, sample_weight, partial):
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=FLOATS, y_numeric=True,
                             reset=not self._previous(partial))
        coef, intercept = self._fit_linear(LeastSquares, X, y, clients, "regression", self._penalty(), sample_weight,
                                           partial)
        self.coef_, self.intercept_ = coef[0], intercept[0]
        return self

    def _gap_function(self, X, y, parts, shares, fit_intercept):
        """The least-squares gap and scikit-learn's yardstick ``||y - mean(y)||^2 / n`` (weighted)."""
        l1, l2 = parts
        return ((lambda coef, b: least_squares_gap(X, y, coef[0], b[0], l1, l2, fit_intercept, shares)),
                least_squares_scale(y, fit_intercept, shares))

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=FLOATS, reset=False)
        return safe_sparse_dot(X, self.coef_) + self.intercept_


class FederatedLasso(_FederatedRegressor):
    """The Lasso fitted by federated optimization: scikit-learn's :class:`~sklearn.linear_model.Lasso` objective.

    Minimises ``(1 / (2 n_samples)) ||y - X w - b||^2 + alpha ||w||_1``, the same scaling as
    scikit-learn's ``Lasso(alpha)``: :class:`~fedopt.problems.LeastSquares` with sample-count
    weights and ``L1(alpha)``; with ``sample_weight`` the squared errors are averaged with those
    weights, as in scikit-learn (integer weights equal repeated rows). With ``fit_intercept=True``,
    ``X`` and ``y`` are centered on their means under the objective's weights (one more aggregate
    from the clients), as scikit-learn does: the best intercept is then ``b = mean(y) - mean(X)
    w`` for every ``w``, so the method fits ``w`` alone, on a problem whose step size the
    intercept no longer sets (its curvature, 1, is often far above that of the features: on the
    diabetes data, 60-70 rounds instead of about 2 560). Sparse ``X`` is centered implicitly
    (:class:`~fedopt.problems.LeastSquares`' ``center``) and stays sparse: it takes the rounds
    of its dense array (one-hot features shaped like a9a, 11 % nonzero, in
    ``bench/bench_estimators.py``: 2 140 rounds either way, in 0.7x the dense fit's time). Dense
    float32 ``X`` is fitted in float32 (the kernels run in float32 and ``coef_`` is float32).

    Parameters
    ----------
    alpha : float, default 1.0
        Strength of the l1 penalty, as in scikit-learn's ``Lasso``.
    algorithm : str, default "fednmap"
        The federated method, a name of :func:`fedopt.algorithms.available` that runs on a
        server: ``"fednmap"``, ``"fedcanon"``, ``"scaffold"``, ``"fedavg"``, ``"fedmid"``,
        ``"fedda"``, ``"feddr"``, ``"fedadmm"``, ``"scaffnew"``, ... It gets those of
        ``local_steps``, ``lr_local``, ``lr_server``, ``gamma`` and ``batch_size`` it takes
        (``clients_per_round`` and ``sampling``: see below).
        ``"scaffold"`` and ``"scaffnew"`` have no prox step: they fit ``alpha = 0`` only (no
        penalty; the intercept is free) and refuse another ``alpha``.
        The fixed points of ``"fedcanon"``, ``"fedavg"``, ``"fedmid"`` and ``"fedda"`` miss the
        solution under a penalty or with clients that differ, by an amount that shrinks with
        ``lr_local`` (their docstrings): they stop short of ``tol`` and warn, naming the bias.
    n_clients : int, default 10
        Clients of the simulated split when ``fit`` gets no ``clients`` (at most one per sample).
    partition : {"iid", "sorted", "dirichlet", "shards"}, default "iid"
        The scheme of :func:`fedopt.datasets.partition` for that split; ``"dirichlet"`` and
        ``"shards"`` split by class label, so only the classifiers take them.
    client_weights : {"samples", "uniform"}, default "samples"
        ``w_i`` of ``sum_i w_i f_i``: ``"samples"`` weighs client ``i`` by its share of the samples
        (of the sample weights), so the objective is the pooled one and the answer scikit-learn's;
        ``"uniform"`` weighs every client ``1 / n`` (the papers' setting).
    fit_intercept : bool, default True
        Fit an intercept (unpenalized); False: the model passes through the origin.
    local_steps : int, default 10
        Local steps per round (Q); for ``"scaffnew"``, whose step count is random, their mean
        ``1 / comm_prob``.
    lr_local, lr_server, gamma : float or None
        Client step, server step and prox parameter. Defaults: ``lr_local = 1 / L`` with ``L``
        the largest client smoothness constant, ``gamma = local_steps / L`` (the effective step
        ``lr_local * lr_server * local_steps``) and ``lr_server = 1`` (also for ``lr_server=None``),
        the only value of the methods without a server step (``"feddr"``, ``"fedadmm"``,
        ``"scaffnew"``).
    batch_size : int or None, default None
        Samples per local gradient; None uses each client's full data (exact convergence).
    clients_per_round : int, float or None, default None
        Partial participation, an extension beyond the papers: the clients that take part in a
        round, a count or a fraction of ``n_clients``, drawn anew each round; None: all of them.
        The others keep their corrections; the method then stalls at a sampling noise floor, as
        with minibatches. A method that draws no cohorts (``"scaffnew"``) refuses any other
        value than None.
    sampling : {"uniform", "weighted"}, default "uniform"
        How a round's clients are drawn: distinct and equally likely, or with replacement in
        proportion to their weights (see :meth:`fedopt.algorithms.LocalStepsMethod.next_round`);
        a method that draws no cohorts takes ``"uniform"`` only.
    max_rounds : int, default 10000
        Most communication rounds; ending there before ``tol`` is met warns with
        :class:`~sklearn.exceptions.ConvergenceWarning`.
    tol : float, default 1e-7
        scikit-learn's ``Lasso`` criterion: stop at the first evaluation where the duality gap
        (``dual_gap_``, an upper bound on the objective's distance to its minimum) is at most
        ``tol * ||y - mean(y)||^2 / n_samples`` (``||y||^2 / n_samples`` without intercept).
        The default is below scikit-learn's ``1e-4`` because its coordinate descent ends far
        below its bound: on the diabetes data it stops at a gap of ``8.5e-6 ||y - mean(y)||^2
        / n_samples``, with coefficients 0.03 from the exact solution; this default stops at
        ``1e-7``, 0.0002 from it, after 60-70 rounds (4 clients). With ``alpha = 0`` (no
        dual bound) the rule is relative stationarity: ``||F_nat(x)||^2 <= tol *
        ||F_nat(x_0)||^2`` at the zero coefficients ``x_0`` where a fit from scratch starts, for
        a ``warm_start`` too (see the module docstring), or at most its rounding level where that
        is larger (a constant ``y``, say). A float32 fit uses ``max(tol, 1e-5)``:
        float32 arithmetic leaves the gap at about ``3e-6`` of the yardstick.
    eval_every : int, default 10
        Rounds between two evaluations of the stopping rule (and rows of ``history_``); also
        the rounds of one ``partial_fit`` call.
    warm_start : bool, default False
        Start ``fit`` from the fitted model (e.g. along a path of ``alpha``) instead of zero.
    backend : {"auto", "numba", "numpy", "gpu"}, default "auto"
    random_state : int, RandomState or None
        Seeds the partition, the minibatches and the initial model.

    Attributes
    ----------
    coef_ : ndarray (n_features,)
    intercept_ : float
    n_features_in_, feature_names_in_ : as in scikit-learn
    n_iter_ : int
        Rounds run (scikit-learn's name; ``n_rounds_`` is the same number).
    n_clients_ : int
        Clients of the last fit.
    dual_gap_ : float
        The duality gap at the last evaluation (NaN with ``alpha = 0``), as scikit-learn's
        ``Lasso.dual_gap_``.
    history_ : fedopt.run.History
        The per-round records: one row per evaluation (round 0, every ``eval_every`` rounds and
        the last round) with the round, the objective, the squared natural-map residual
        (``stationarity``), the gradient and prox evaluations, the floats sent each way and the
        training time; ``history_["objective"]`` is a NumPy column, ``history_.to_pandas()`` a
        DataFrame.
    """

    def __init__(self, alpha=1.0, *, algorithm="fednmap", n_clients=10, partition="iid", client_weights="samples",
                 fit_intercept=True, local_steps=10, lr_local=None, lr_server=1.0, gamma=None, batch_size=None,
                 clients_per_round=None, sampling="uniform", max_rounds=10000, tol=1e-7, eval_every=10,
                 warm_start=False, backend="auto", random_state=None):
        self.alpha = alpha
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.client_weights = client_weights
        self.fit_intercept = fit_intercept
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.clients_per_round = clients_per_round
        self.sampling = sampling
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.backend = backend
        self.random_state = random_state

    def _penalty(self):
        return R.L1(self.alpha)

    def _penalty_parts(self):
        return None if self.alpha == 0 else (self.alpha, 0.0)


class FederatedElasticNet(_FederatedRegressor):
    """The elastic net fitted by federated optimization: :class:`~sklearn.linear_model.ElasticNet`'s objective.

    Minimises ``(1 / (2 n_samples)) ||y - X w - b||^2 + alpha l1_ratio ||w||_1 + (alpha / 2)
    (1 - l1_ratio) ||w||^2``, scikit-learn's ``ElasticNet(alpha, l1_ratio)``: ``l1_ratio = 1``
    is the Lasso, ``0`` ridge regression. ``tol`` bounds the duality gap as in
    :class:`FederatedLasso` (the elastic net's dual has no box: no scaling is needed).

    Parameters
    ----------
    alpha : float, default 1.0
    l1_ratio : float in [0, 1], default 0.5
    algorithm, n_clients, partition, client_weights, fit_intercept, local_steps, lr_local, lr_server, gamma, \
batch_size, clients_per_round, sampling, max_rounds, tol, eval_every, warm_start, backend, random_state
        As in :class:`FederatedLasso`.

    Attributes
    ----------
    coef_, intercept_, n_features_in_, feature_names_in_, n_iter_, n_clients_, dual_gap_, history_
        As in :class:`FederatedLasso`.
    """

    def __init__(self, alpha=1.0, *, l1_ratio=0.5, algorithm="fednmap", n_clients=10, partition="iid",
                 client_weights="samples", fit_intercept=True, local_steps=10, lr_local=None, lr_server=1.0,
                 gamma=None, batch_size=None, clients_per_round=None, sampling="uniform", max_rounds=10000, tol=1e-7,
                 eval_every=10, warm_start=False, backend="auto", random_state=None):
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.client_weights = client_weights
        self.fit_intercept = fit_intercept
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.clients_per_round = clients_per_round
        self.sampling = sampling
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.backend = backend
        self.random_state = random_state

    def _penalty(self):
        return _elastic_net(self.alpha, self.l1_ratio)

    def _penalty_parts(self):
        return None if self.alpha == 0 else _l1_l2(self.alpha, self.l1_ratio)


class FederatedSparseRegressor(_FederatedRegressor):
    """Least squares with the nonconvex MCP or SCAD penalty, fitted by federated optimization.

    Minimises ``(1 / (2 n_samples)) ||y - X w - b||^2 + sum_j P(w_j)``, skglm's
    ``MCPRegression(alpha, gamma)`` objective for ``penalty="mcp"``: ``P(t) = alpha |t| - t^2 /
    (2 gamma)`` up to ``|t| = gamma alpha`` and ``gamma alpha^2 / 2`` beyond
    (:class:`~fedopt.regularizers.MCP`); ``"scad"`` is :class:`~fedopt.regularizers.SCAD`
    ``(lam=alpha, a=concavity)``. Both penalize small weights like the Lasso and leave large
    ones unbiased, and both are weakly convex: the default ``gamma`` of the method is capped at
    ``1 / (2 rho)``, and a ``gamma >= 1 / rho`` (``concavity`` for MCP, ``concavity - 1`` for SCAD)
    is refused. The objective is nonconvex unless the design is well conditioned
    (``X^T X / n_samples`` above ``rho``), so the fit ends at a stationary point: ``tol`` is the
    relative natural-map residual ``||F_nat(x)||^2 <= tol * ||F_nat(x_0)||^2``, at the zero
    coefficients ``x_0`` where a fit from scratch starts (for a ``warm_start`` too).

    Parameters
    ----------
    alpha : float, default 1.0
    penalty : {"mcp", "scad"}, default "mcp"
    concavity : float or None
        MCP's ``gamma`` (``> 0``, default 3, skglm's) or SCAD's ``a`` (``> 2``, default 3.7).
    algorithm, n_clients, partition, client_weights, fit_intercept, local_steps, lr_local, lr_server, gamma, \
batch_size, clients_per_round, sampling, max_rounds, tol, eval_every, warm_start, backend, random_state
        As in :class:`FederatedLasso`.

    Attributes
    ----------
    coef_, intercept_, n_features_in_, feature_names_in_, n_iter_, n_clients_, history_
        As in :class:`FederatedLasso`.
    """

    def __init__(self, alpha=1.0, *, penalty="mcp", concavity=None, algorithm="fednmap", n_clients=10, partition="iid",
                 client_weights="samples", fit_intercept=True, local_steps=10, lr_local=None, lr_server=1.0,
                 gamma=None, batch_size=None, clients_per_round=None, sampling="uniform", max_rounds=10000, tol=1e-7,
                 eval_every=10, warm_start=False, backend="auto", random_state=None):
        self.alpha = alpha
        self.penalty = penalty
        self.concavity = concavity
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.client_weights = client_weights
        self.fit_intercept = fit_intercept
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.clients_per_round = clients_per_round
        self.sampling = sampling
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.backend = backend
        self.random_state = random_state

    def _penalty(self):
        if self.penalty not in ("mcp", "scad"):
            raise ValueError(f"penalty must be 'mcp' or 'scad', got {self.penalty!r}")
        return _concave(self.penalty, self.alpha, self.concavity)


class FederatedLogisticRegression(_Classifier, _FederatedLinear):
    """Penalized logistic regression (binary or multinomial) fitted by federated optimization.

    Minimises the mean log-loss over all samples (weighted by ``sample_weight``) plus ``phi(w)``
    on the coefficients ``w`` (the intercepts are not penalized):

    * ``"l1"``: ``alpha ||w||_1``; ``"l2"``: ``(alpha / 2) ||w||^2``;
    * ``"elasticnet"``: ``alpha (l1_ratio ||w||_1 + (1 - l1_ratio) / 2 ||w||^2)`` (the scaling of
      scikit-learn's ``SGDClassifier`` and ``ElasticNet``);
    * ``"mcp"`` / ``"scad"``: :class:`~fedopt.regularizers.MCP` ``(lam=alpha, gamma=concavity)`` /
      :class:`~fedopt.regularizers.SCAD` ``(lam=alpha, a=concavity)``, weakly convex. These level
      off for large weights, so on separable classes the objective has no minimiser and the
      weights grow until ``max_rounds``.

    ``alpha`` is a per-sample strength. scikit-learn's ``LogisticRegression(C=C, l1_ratio=r)``
    minimises ``C * sum_j loss_j + r ||w||_1 + (1 - r) / 2 ||w||^2``, which is ``n_samples * C``
    times this objective with ``alpha = 1 / (C * n_samples)``: the two have the same solution for
    ``"l1"`` (``r = 1``), ``"l2"`` (``r = 0``) and ``"elasticnet"``. Two classes give the binary
    model (``coef_`` of shape ``(1, n_features)``, ``classes_[1]`` the positive class), more give
    the multinomial (softmax) one with a row per class, as in scikit-learn; its intercepts are
    only defined up to a common shift, and are returned with zero sum. ``X`` is centered on its
    weighted mean (the intercepts absorb it), sparse ``X`` implicitly so that it stays sparse:
    one-hot features shaped like a9a (11 % nonzero, in ``bench/bench_estimators.py``) take 840
    rounds as CSR or dense (4 280 as CSR when sparse ``X`` was not centered). With a fitted
    intercept, ``fit`` refuses a ``sample_weight`` that is zero on every sample of a class: that
    class's intercept would fall without bound, and the objective has no minimum.

    Parameters
    ----------
    alpha : float, default 1e-2
    penalty : {"l1", "l2", "elasticnet", "mcp", "scad"}, default "l1"
    l1_ratio : float in [0, 1], default 0.5
        The l1 share of ``"elasticnet"`` (ignored by the other penalties).
    concavity : float or None
        MCP's ``gamma`` (``> 0``, default 3) or SCAD's ``a`` (``> 2``, default 3.7).
    fit_intercept : bool, default True
    algorithm, n_clients, partition, client_weights, local_steps, lr_local, lr_server, gamma, batch_size, \
clients_per_round, sampling, max_rounds, eval_every, warm_start, backend, random_state
        As in :class:`FederatedLasso`; a ``rho``-weakly convex penalty (MCP, SCAD) caps the default
        ``gamma`` at ``1 / (2 rho)`` and refuses a ``gamma >= 1 / rho``.
    tol : float, default 1e-7
        Stop at the first evaluation where the duality gap of the objective (``dual_gap_``, an
        upper bound on its distance to the minimum; the Fenchel dual of the log-loss is the
        negative entropy) is at most ``tol`` times the mean log-loss of zero coefficients: the
        entropy of the class shares, or ``log(n_classes)`` without intercept. The default
        reaches the objective of scikit-learn's ``LogisticRegression`` at its defaults, or a
        lower one, on its breast cancer, iris and digits data (standardized). MCP and SCAD are
        nonconvex and ``alpha = 0`` has no dual bound: there the rule is relative stationarity,
        ``||F_nat(x)||^2 <= tol * ||F_nat(x_0)||^2`` at the zero coefficients ``x_0`` (see
        :class:`FederatedLasso`).

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    dual_gap_ : float
        The duality gap at the last evaluation (NaN for MCP, SCAD and ``alpha = 0``).
    n_features_in_, feature_names_in_, n_iter_, n_clients_ : as in :class:`FederatedLasso`
    history_ : fedopt.run.History
        The per-round records (one row per evaluation), as in :class:`FederatedLasso`.
    """

    def __init__(self, alpha=1e-2, *, penalty="l1", l1_ratio=0.5, concavity=None, fit_intercept=True,
                 algorithm="fednmap", n_clients=10, partition="iid", client_weights="samples", local_steps=10,
                 lr_local=None, lr_server=1.0, gamma=None, batch_size=None, clients_per_round=None, sampling="uniform",
                 max_rounds=10000, tol=1e-7, eval_every=10, warm_start=False, backend="auto", random_state=None):
        self.alpha = alpha
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.concavity = concavity
        self.fit_intercept = fit_intercept
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.client_weights = client_weights
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.clients_per_round = clients_per_round
        self.sampling = sampling
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.warm_start = warm_start
        self.backend = backend
        self.random_state = random_state

    def _penalty(self):
        """The regularizer of the coefficients."""
        if self.penalty not in PENALTIES:
            raise ValueError(f"penalty must be one of {', '.join(map(repr, PENALTIES))}, got {self.penalty!r}")
        if self.penalty in ("mcp", "scad"):
            return _concave(self.penalty, self.alpha, self.concavity)
        return _elastic_net(self.alpha, {"l1": 1.0, "l2": 0.0}.get(self.penalty, self.l1_ratio))

    def _penalty_parts(self):
        if self.penalty in ("mcp", "scad") or self.alpha == 0:
            return None
        return _l1_l2(self.alpha, {"l1": 1.0, "l2": 0.0}.get(self.penalty, self.l1_ratio))

    def _gap_function(self, X, codes, parts, shares, fit_intercept):
        """The logistic gap and the mean log-loss of zero coefficients."""
        l1, l2 = parts
        return ((lambda coef, b: logistic_gap(X, codes, coef, b, l1, l2, fit_intercept, shares)),
                logistic_scale(codes, len(self.classes_), fit_intercept, shares))

    def _fit(self, X, y, classes, clients, sample_weight, partial):
        self._check_params()
        penalty = self._penalty()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=FLOATS, reset=not self._previous(partial))
        check_classification_targets(y)
        self.classes_, codes = _class_codes(self, y, classes, partial)
        if self.fit_intercept and not partial and sample_weight is not None:
            totals = np.bincount(codes, weights=_checked_weights(sample_weight, X), minlength=len(self.classes_))
            if not totals.all():
                label = self.classes_[np.argmin(totals)].tolist()
                raise ValueError(f"{type(self).__name__} with fit_intercept=True needs positive sample_weight on every "
                                 f"class, but class {label!r} has weight 0 on all its samples: the log-loss then has "
                                 "no minimum (that class's intercept falls without bound); drop its samples, or set "
                                 "fit_intercept=False")
        model = Logistic if len(self.classes_) == 2 else Softmax
        coef, intercept = self._fit_linear(model, X, codes, clients, "classification", penalty, sample_weight,
                                           partial, n_classes=len(self.classes_))
        self.coef_, self.intercept_ = coef, intercept
        return self

    def decision_function(self, X):
        """Margins: ``(n_samples,)`` for two classes (positive: ``classes_[1]``), else ``(n_samples, n_classes)``."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=FLOATS, reset=False)
        scores = safe_sparse_dot(X, self.coef_.T) + self.intercept_
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1 - p, p])
        return softmax(scores, axis=1)

    def predict(self, X):
        scores = self.decision_function(X)
        return self.classes_[(scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)]
