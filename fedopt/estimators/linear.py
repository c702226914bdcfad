"""``FederatedLasso`` and ``FederatedLogisticRegression``: penalized linear models with a free intercept."""

from __future__ import annotations

import numpy as np
from scipy.special import expit, softmax
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fedopt import regularizers as R
from fedopt.estimators._base import _elastic_net, _FederatedLinear
from fedopt.estimators._gap import lasso_gap, lasso_scale, logistic_gap, logistic_scale
from fedopt.problems import LeastSquares, Logistic, Softmax

PENALTIES = ("l1", "l2", "elasticnet", "mcp", "scad")


class FederatedLasso(RegressorMixin, _FederatedLinear):
    """The Lasso fitted by federated optimization: scikit-learn's :class:`~sklearn.linear_model.Lasso` objective.

    Minimises ``(1 / (2 n_samples)) ||y - X w - b||^2 + alpha ||w||_1``, the same scaling as
    scikit-learn's ``Lasso(alpha)``: :class:`~fedopt.problems.LeastSquares` with sample-count
    weights and ``L1(alpha)``. The intercept ``b`` (``fit_intercept=True``) is one more
    coordinate of the model, which the penalty skips (:class:`~fedopt.regularizers.Masked`).
    For dense ``X`` the features are also centered on their pooled mean, as scikit-learn does: a
    change of coordinates that leaves the solution as it is and keeps the intercept from slowing
    the method down when the features have large means. Sparse ``X`` is not centered (that
    would make it dense), so there an intercept with uncentered features can take many more
    rounds; scale such features (e.g. ``MaxAbsScaler``) in a :class:`~sklearn.pipeline.Pipeline`.

    Parameters
    ----------
    alpha : float, default 1.0
        Strength of the l1 penalty, as in scikit-learn's ``Lasso``.
    algorithm : str, default "fednmap"
        A method of :func:`fedopt.algorithms.available`; it gets those of ``local_steps``,
        ``lr_local``, ``lr_server``, ``gamma`` and ``batch_size`` it takes.
    n_clients : int, default 10
        Clients of the simulated split when ``fit`` gets no ``clients`` (at most one per sample).
    partition : {"iid", "sorted", "dirichlet", "shards"}, default "iid"
        The scheme of :func:`fedopt.datasets.partition` for that split.
    fit_intercept : bool, default True
    local_steps : int, default 10
        Local steps per round (Q).
    lr_local, lr_server, gamma : float or None
        Client step, server step and prox parameter. Defaults: ``lr_local = 1 / L`` with ``L``
        the largest client smoothness constant, ``gamma = local_steps / L`` (the effective step
        ``lr_local * lr_server * local_steps``) and ``lr_server = 1``.
    batch_size : int or None, default None
        Samples per local gradient; None uses each client's full data (exact convergence).
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
        ``1e-7``, 0.0006 from it, after about 2600 rounds (4 clients). With ``alpha = 0`` (no
        dual bound) the rule is relative stationarity: ``||F_nat(x)||^2 <= tol *
        ||F_nat(x_0)||^2`` (see the module docstring).
    eval_every : int, default 10
        Rounds between two evaluations of the stopping rule (and rows of ``history_``).
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

    def __init__(self, alpha=1.0, *, algorithm="fednmap", n_clients=10, partition="iid", fit_intercept=True,
                 local_steps=10, lr_local=None, lr_server=1.0, gamma=None, batch_size=None, max_rounds=10000,
                 tol=1e-7, eval_every=10, backend="auto", random_state=None):
        self.alpha = alpha
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.fit_intercept = fit_intercept
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.backend = backend
        self.random_state = random_state

    def fit(self, X, y, clients=None):
        """Fit on ``(X, y)``; ``clients[j]`` (optional) is the client id of sample ``j``."""
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64, y_numeric=True)
        coef, intercept = self._fit_linear(LeastSquares, X, y, clients, "regression", R.L1(self.alpha))
        self.coef_, self.intercept_ = coef[0], float(intercept[0])
        return self

    def _duality_gap(self, X, y):
        """The Lasso gap and scikit-learn's yardstick ``||y - mean(y)||^2 / n`` (none for ``alpha = 0``)."""
        if self.alpha == 0:
            return None
        alpha, fit_intercept = self.alpha, self.fit_intercept
        return (lambda coef, b: lasso_gap(X, y, coef[0], b[0], alpha, fit_intercept)), lasso_scale(y, fit_intercept)

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return safe_sparse_dot(X, self.coef_) + self.intercept_


class FederatedLogisticRegression(ClassifierMixin, _FederatedLinear):
    """Penalized logistic regression (binary or multinomial) fitted by federated optimization.

    Minimises the mean log-loss over all samples plus ``phi(w)`` on the coefficients ``w`` (the
    intercepts are not penalized):

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
    only defined up to a common shift, and are returned with zero sum.

    Parameters
    ----------
    alpha : float, default 1e-2
    penalty : {"l1", "l2", "elasticnet", "mcp", "scad"}, default "l1"
    l1_ratio : float in [0, 1], default 0.5
        The l1 share of ``"elasticnet"`` (ignored by the other penalties).
    concavity : float or None
        MCP's ``gamma`` (default 3) or SCAD's ``a`` (default 3.7).
    fit_intercept : bool, default True
    algorithm, n_clients, partition, local_steps, lr_local, lr_server, gamma, batch_size, \
max_rounds, eval_every, backend, random_state
        As in :class:`FederatedLasso`; a ``rho``-weakly convex penalty (MCP, SCAD) caps the default
        ``gamma`` at ``1 / (2 rho)``.
    tol : float, default 1e-7
        Stop at the first evaluation where the duality gap of the objective (``dual_gap_``, an
        upper bound on its distance to the minimum; the Fenchel dual of the log-loss is the
        negative entropy) is at most ``tol`` times the mean log-loss of zero coefficients: the
        entropy of the class shares, or ``log(n_classes)`` without intercept. The default
        reaches the objective of scikit-learn's ``LogisticRegression`` at its defaults, or a
        lower one, on its breast cancer, iris and digits data (standardized). MCP and SCAD are
        nonconvex and ``alpha = 0`` has no dual bound: there the rule is relative stationarity,
        ``||F_nat(x)||^2 <= tol * ||F_nat(x_0)||^2`` (see the module docstring).

    Attributes
    ----------
    coef_ : ndarray (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray (1,) or (n_classes,)
    classes_ : ndarray
    dual_gap_ : float
        The duality gap at the last evaluation (NaN for MCP, SCAD and ``alpha = 0``).
    n_features_in_, feature_names_in_, n_iter_ : as in :class:`FederatedLasso`
    history_ : fedopt.run.History
        The per-round records (one row per evaluation), as in :class:`FederatedLasso`.
    """

    def __init__(self, alpha=1e-2, *, penalty="l1", l1_ratio=0.5, concavity=None, fit_intercept=True,
                 algorithm="fednmap", n_clients=10, partition="iid", local_steps=10, lr_local=None, lr_server=1.0,
                 gamma=None, batch_size=None, max_rounds=10000, tol=1e-7, eval_every=10, backend="auto",
                 random_state=None):
        self.alpha = alpha
        self.penalty = penalty
        self.l1_ratio = l1_ratio
        self.concavity = concavity
        self.fit_intercept = fit_intercept
        self.algorithm = algorithm
        self.n_clients = n_clients
        self.partition = partition
        self.local_steps = local_steps
        self.lr_local = lr_local
        self.lr_server = lr_server
        self.gamma = gamma
        self.batch_size = batch_size
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.backend = backend
        self.random_state = random_state

    def _penalty(self):
        """The regularizer of the coefficients."""
        if self.penalty not in PENALTIES:
            raise ValueError(f"penalty must be one of {', '.join(map(repr, PENALTIES))}, got {self.penalty!r}")
        if self.penalty in ("mcp", "scad"):
            options = {} if self.concavity is None else {"gamma" if self.penalty == "mcp" else "a": self.concavity}
            return (R.MCP if self.penalty == "mcp" else R.SCAD)(self.alpha, **options)
        return _elastic_net(self.alpha, {"l1": 1.0, "l2": 0.0}.get(self.penalty, self.l1_ratio))

    def _duality_gap(self, X, codes):
        """The logistic gap and the mean log-loss of zero coefficients (none for MCP, SCAD or ``alpha = 0``)."""
        if self.penalty in ("mcp", "scad") or self.alpha == 0:
            return None
        share = {"l1": 1.0, "l2": 0.0}.get(self.penalty, self.l1_ratio)
        l1, l2, fit_intercept = self.alpha * share, self.alpha * (1 - share), self.fit_intercept
        return ((lambda coef, b: logistic_gap(X, codes, coef, b, l1, l2, fit_intercept)),
                logistic_scale(codes, len(self.classes_), fit_intercept))

    def fit(self, X, y, clients=None):
        """Fit on ``(X, y)``; ``clients[j]`` (optional) is the client id of sample ``j``."""
        self._check_params()
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes, but the data contains "
                             f"only one class: {self.classes_[0]!r}")
        model = Logistic if len(self.classes_) == 2 else Softmax
        coef, intercept = self._fit_linear(model, X, codes, clients, "classification", self._penalty())
        self.coef_, self.intercept_ = coef, np.asarray(intercept, dtype=np.float64)
        return self

    def decision_function(self, X):
        """Margins: ``(n_samples,)`` for two classes (positive: ``classes_[1]``), else ``(n_samples, n_classes)``."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        scores = safe_sparse_dot(X, self.coef_.T) + self.intercept_
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p = expit(scores)
            return np.column_stack([1 - p, p])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))

    def predict(self, X):
        scores = self.decision_function(X)
        return self.classes_[(scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)]
