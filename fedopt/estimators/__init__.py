"""scikit-learn estimators fitted by federated optimization over simulated clients.

Regressors: :class:`FederatedLasso`, :class:`FederatedElasticNet` (scikit-learn's objectives),
:class:`FederatedSparseRegressor` (MCP or SCAD, skglm's ``MCPRegression`` objective) and
:class:`FederatedMLPRegressor`; classifiers: :class:`FederatedLogisticRegression` and
:class:`FederatedMLPClassifier`. Each splits the training data among clients
(``fit(X, y, clients=None, sample_weight=None)``: given client ids, or the estimator's
``partition`` of ``n_clients`` clients) and runs a federated method (:func:`fedopt.run`, FedNMap
by default; ``algorithm`` picks another) on ``sum_i w_i f_i(x) + phi(x)``. The client weights
are ``w_i = S_i / S`` (``client_weights="samples"``: client ``i``'s share of the samples, or of
the sample weights), so the federated objective is the pooled one: the (weighted) mean loss over
all samples plus the penalty, whatever the partition. The partition changes the path that the
method takes, not the answer (the MLP's answer is one local minimum among many).

Stopping: ``tol`` is scikit-learn's. The convex models (the Lasso, the elastic net, logistic
regression with l1, l2 or elastic-net penalties) stop at the first evaluation (every
``eval_every`` rounds) where the duality gap of the federated objective, computed on the host
from the training data, is at most ``tol`` times a fixed yardstick (``||y - mean(y)||^2 /
n_samples`` for least squares, as scikit-learn's ``Lasso``); the gap bounds the distance of the
objective to its minimum. Where no gap exists (the MLPs, MCP and SCAD, which are nonconvex, and
``alpha = 0``) the rule is relative stationarity: the squared natural-map residual
``||F_nat(x)||^2`` (the history's ``stationarity``, with the prox parameter ``gamma``) at most
``tol`` times its value at the initial model of a fit from scratch, a warm start's too (for the
linear models, or its rounding level where that is larger). Ending ``max_rounds`` rounds first warns with
:class:`~sklearn.exceptions.ConvergenceWarning`. With minibatches (``batch_size`` set) the
method stalls at a noise floor, so a small ``tol`` is then rarely reached.

Continuing: ``warm_start=True`` starts ``fit`` from the fitted model, and ``partial_fit`` runs
``eval_every`` more rounds from it on the data it is given (online federated training). Both
start from ``prox(x - gamma grad f(x))``, the natural-map step at the fitted model ``x``, which
is ``x`` itself once it is stationary; the method's own state (control variates, momentum)
starts afresh.

Data: dense float32 ``X`` is fitted in float32 end to end (the kernels run in float32 and the
coefficients are float32); everything else in float64. ``backend="auto"`` picks the GPU when one
works and Numba on the CPU otherwise (sparse ``X`` always stays on the CPU). ``clients`` and
``sample_weight`` are ``fit`` parameters, so scikit-learn's metadata routing carries them
through a search: ``est.set_fit_request(clients=True)`` with
``sklearn.set_config(enable_metadata_routing=True)``, then ``GridSearchCV(est, ...,
cv=GroupKFold()).fit(X, y, clients=ids, groups=ids)``.
"""

from fedopt.estimators.linear import (
    PENALTIES,
    FederatedElasticNet,
    FederatedLasso,
    FederatedLogisticRegression,
    FederatedSparseRegressor,
)
from fedopt.estimators.mlp import FederatedMLPClassifier, FederatedMLPRegressor

__all__ = ["PENALTIES", "FederatedElasticNet", "FederatedLasso", "FederatedLogisticRegression",
           "FederatedMLPClassifier", "FederatedMLPRegressor", "FederatedSparseRegressor"]
