"""``FederatedMLPClassifier`` and ``FederatedMLPRegressor``: FedNMap's one-hidden-layer sigmoid network
with an elastic net."""

from __future__ import annotations

import numpy as np
from scipy.special import expit, softmax
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fedopt import regularizers as R
from fedopt.estimators._base import (
    FLOATS,
    _class_codes,
    _Classifier,
    _elastic_net,
    _FederatedEstimator,
    _Regressor,
    _row_shares,
)
from fedopt.problems import MLP


class _FederatedMLP(_FederatedEstimator):
    """The network's fit: the problem, the paper's steps, the layers in scikit-learn's layout."""

    _sparse = False
    _local_step = 1.0  # the default lr_local times local_steps

    def _check_params(self):
        super()._check_params()
        self._check_number("hidden_layer_size", 1, integer=True)

    def _fit_network(self, X, targets, clients, sample_weight, partial, loss, n_classes=None):
        seed = self._seed()
        task = "regression" if loss == "squared" else "classification"
        problem = MLP(self._split(X, targets, clients, task, seed, sample_weight, n_classes),
                      hidden=self.hidden_layer_size, weights=self.client_weights, backend=self.backend, loss=loss)
        # alpha = 0: Zero, the one regularizer that the methods without a prox (scaffold, scaffnew) take
        regularizer = R.Zero() if self.alpha == 0 else _elastic_net(self.alpha, self.l1_ratio)
        lr_local = self._local_step / self.local_steps if self.lr_local is None else self.lr_local
        gamma = 4.0 if self.gamma is None else self.gamma
        previous = self._previous_vector(problem) if self._previous(partial) else None
        # where a fit from scratch starts, and what a warm fit's stopping rule measures from (partial_fit has none)
        start = _centered_start(problem, seed) if loss == "squared" and (previous is None or not partial) else None
        W1, b1, W2, b2 = problem.unpack(self._run(problem, regularizer, gamma, lr_local, seed, previous=previous,
                                                  partial=partial, start=start))
        self.coefs_ = [W1.T.copy(), W2.T.copy()]
        self.intercepts_ = [b1.copy(), b2.copy()]

    def _previous_vector(self, problem):
        """The fitted layers as the problem's flat vector ``[W1, b1, W2, b2]``."""
        shapes = [shape for _, shape in problem.blocks().values()]
        layers = [self.coefs_[0].T, self.intercepts_[0], self.coefs_[1].T, self.intercepts_[1]]
        if [np.shape(layer) for layer in layers] != shapes:
            raise ValueError(f"warm_start and partial_fit continue from layers of shapes "
                             f"{[np.shape(layer) for layer in layers]}, which do not fit {shapes}; fit again with "
                             "warm_start=False")
        return np.concatenate([np.ravel(layer) for layer in layers]).astype(np.float64)

    def _outputs(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=FLOATS, reset=False)
        hidden = expit(X @ self.coefs_[0] + self.intercepts_[0])
        return hidden @ self.coefs_[1] + self.intercepts_[1]


def _centered_start(problem, seed):
    """PyTorch's initial layers (``problem.init(seed)``) with the output bias moved so that the
    initial outputs have the targets' mean under the objective's row weights.

    At a start whose outputs are off by a constant, the squared error's gradient is dominated by
    that offset (every output weight sees it through hidden units near 1/2): the residual that
    relative stationarity measures against would then scale with the targets' mean, not with the
    function to fit, and ``tol`` would end the fit on the plateau of the linear part.
    """
    x = np.array(problem.backend.to_numpy(problem.init(seed)), dtype=np.float64)
    W1, b1, W2, b2 = problem.unpack(x)
    data = problem.dataset
    outputs = expit(data.scale * np.asarray(data.X, dtype=np.float64) @ W1.T + b1) @ W2[0] + b2[0]
    b2 += _row_shares(data, problem.weights) @ (np.asarray(data.y, dtype=np.float64) - outputs)
    return x


class FederatedMLPClassifier(_Classifier, _FederatedMLP):
    """FedNMap's one-hidden-layer network: sigmoid hidden units, softmax output, elastic net on every weight.

    :class:`~fedopt.problems.MLP` with sample-count client weights: the mean cross-entropy over
    all samples (weighted by ``sample_weight``) plus ``alpha (l1_ratio ||x||_1 + (1 - l1_ratio)
    / 2 ||x||^2)`` on the whole parameter vector, biases included, as in the FedNMap paper (its
    ``nu1 ||x||_1 + nu2 ||x||^2`` is ``alpha = nu1 + 2 nu2``, ``l1_ratio = nu1 / alpha``; its MNIST
    setting ``nu1 = 1e-3``, ``nu2 = 1e-2`` is ``alpha = 0.021``, ``l1_ratio = 1/21``, which is too
    strong for a network on 64 pixels: about 70% test accuracy on scikit-learn's digits, against
    about 95% with the default ``alpha = 1e-4``, ``l1_ratio = 0.5``). The steps are the paper's
    practical ones, ``gamma = 4``, ``lr_local = 1 / local_steps``, ``lr_server = 1``, with
    minibatches of 32 (never more than the largest client holds). Two classes are fitted as two
    softmax outputs. Scale the features (e.g. to [0, 1]) first: the steps assume inputs of order
    one. Dense ``X`` only; float32 ``X`` is fitted in float32.

    On the digits (features / 16, 80% for training, 10 clients holding sorted labels), the
    defaults stop after 300 to 500 rounds (a few seconds) at 95-96% test accuracy.

    Parameters
    ----------
    hidden_layer_size : int, default 64
    alpha : float, default 1e-4
    l1_ratio : float in [0, 1], default 0.5
    algorithm, n_clients, partition, client_weights, local_steps, lr_server, clients_per_round, sampling, \
eval_every, warm_start, backend, random_state
        As in :class:`~fedopt.estimators.FederatedLasso` (``random_state`` also draws the
        initial weights, PyTorch's default initialisation).
    lr_local : float or None
        Default ``1 / local_steps``.
    gamma : float, default 4.0 (None also means 4)
    batch_size : int or None, default 32
    max_rounds : int, default 500
    tol : float, default 3e-3
        Relative stationarity: stop at the first evaluation where the squared natural-map
        residual ``||F_nat(x)||^2`` is at most ``tol`` times its value at the initial model of a
        fit from scratch, also with ``warm_start`` (the objective is nonconvex: no duality gap
        bounds its suboptimality, and a stationary point is the most a method can promise), so a
        warm start at a converged model stops within a few rounds. The default makes the
        residual's norm fall about 20-fold. The stochastic residual is noisy and a network fits
        slowly, so a much smaller ``tol`` runs up to ``max_rounds`` (and warns with
        :class:`~sklearn.exceptions.ConvergenceWarning`).

    Attributes
    ----------
    coefs_ : list of two ndarrays
        ``(n_features, hidden_layer_size)`` and ``(hidden_layer_size, n_classes)``, the layout of
        scikit-learn's ``MLPClassifier``.
    intercepts_ : list of two ndarrays
    classes_ : ndarray
    n_features_in_, feature_names_in_, n_iter_, n_clients_ : as in :class:`~fedopt.estimators.FederatedLasso`
    history_ : fedopt.run.History
        The per-round records (one row per evaluation), as in :class:`~fedopt.estimators.FederatedLasso`;
        with minibatches its ``stationarity`` is the residual of the full objective.
    """

    def __init__(self, hidden_layer_size=64, alpha=1e-4, l1_ratio=0.5, *, algorithm="fednmap", n_clients=10,
                 partition="iid", client_weights="samples", local_steps=10, lr_local=None, lr_server=1.0, gamma=4.0,
                 batch_size=32, clients_per_round=None, sampling="uniform", max_rounds=500, tol=3e-3, eval_every=10,
                 warm_start=False, backend="auto", random_state=None):
        self.hidden_layer_size = hidden_layer_size
        self.alpha = alpha
        self.l1_ratio = l1_ratio
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

    def _fit(self, X, y, classes, clients, sample_weight, partial):
        self._check_params()
        X, y = validate_data(self, X, y, dtype=FLOATS, reset=not self._previous(partial))
        check_classification_targets(y)
        self.classes_, codes = _class_codes(self, y, classes, partial)
        self._fit_network(X, codes, clients, sample_weight, partial, "cross_entropy", n_classes=len(self.classes_))
        return self

    def predict_proba(self, X):
        return softmax(self._outputs(X), axis=1)

    def predict(self, X):
        best = self.predict_proba(X).argmax(axis=1)
        return self.classes_[best]


class FederatedMLPRegressor(_Regressor, _FederatedMLP):
    """The one-hidden-layer sigmoid network for regression: squared error, elastic net on every weight.

    :class:`~fedopt.problems.MLP` ``(loss="squared")`` with sample-count client weights: the mean
    of ``(o_j - y_j)^2 / 2`` over all samples (weighted by ``sample_weight``; scikit-learn's
    ``MLPRegressor`` loss with ``activation="logistic"``) plus ``alpha (l1_ratio ||x||_1 + (1 -
    l1_ratio) / 2 ||x||^2)`` on the whole parameter vector, biases included. One target.
    The steps are those of :class:`FederatedMLPClassifier` with half its local step (the squared
    error's curvature is about twice the cross-entropy's). The initial layers are PyTorch's, with
    the output bias set so that the initial outputs have the targets' (weighted) mean. Scale the
    features and the target (e.g. :class:`~sklearn.compose.TransformedTargetRegressor` with a
    ``StandardScaler``) first: the steps assume values of order one.

    Parameters
    ----------
    hidden_layer_size, alpha, l1_ratio, algorithm, n_clients, partition, client_weights, local_steps, lr_server, \
gamma, clients_per_round, sampling, eval_every, warm_start, backend, random_state
        As in :class:`FederatedMLPClassifier`.
    batch_size : int or None, default None
        Full local gradients: the run converges to a stationary point instead of stalling at a
        minibatch noise floor above ``tol``; set it for large clients.
    lr_local : float or None
        Default ``0.5 / local_steps``.
    max_rounds : int, default 2000
    tol : float, default 1e-4
        Relative stationarity, as in :class:`FederatedMLPClassifier`, from the start with centered
        outputs (a start off by a constant would make the rule depend on the targets' mean). A
        smooth regression fits on long after the classifier's ``3e-3``, which stops on the plateau
        where the network has fitted the linear part of the target. On ``sin(x1) + x2 x3 / 2``
        (400 samples in ``[-2, 2]^3``, 5 clients holding sorted targets, ``random_state`` 0 to 7):
        R^2 0.58-0.59 at ``3e-3`` (that plateau, after 30-40 rounds), 0.95-0.96 at ``1e-3``
        (260-310 rounds), 0.96-0.99 at ``1e-4`` (380-1140 rounds, about a second). On noisy data
        that the network keeps overfitting (standardized diabetes) the default runs
        ``max_rounds`` and warns.

    Attributes
    ----------
    coefs_ : list of two ndarrays
        ``(n_features, hidden_layer_size)`` and ``(hidden_layer_size, 1)``, the layout of
        scikit-learn's ``MLPRegressor``.
    intercepts_ : list of two ndarrays
    n_features_in_, feature_names_in_, n_iter_, n_clients_, history_ : as in :class:`FederatedMLPClassifier`
    """

    _local_step = 0.5

    def __init__(self, hidden_layer_size=64, alpha=1e-4, l1_ratio=0.5, *, algorithm="fednmap", n_clients=10,
                 partition="iid", client_weights="samples", local_steps=10, lr_local=None, lr_server=1.0, gamma=4.0,
                 batch_size=None, clients_per_round=None, sampling="uniform", max_rounds=2000, tol=1e-4, eval_every=10,
                 warm_start=False, backend="auto", random_state=None):
        self.hidden_layer_size = hidden_layer_size
        self.alpha = alpha
        self.l1_ratio = l1_ratio
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

    def _fit(self, X, y, clients, sample_weight, partial):
        self._check_params()
        X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=True, reset=not self._previous(partial))
        self._fit_network(X, y.astype(np.float64), clients, sample_weight, partial, "squared")
        return self

    def predict(self, X):
        return self._outputs(X)[:, 0]
