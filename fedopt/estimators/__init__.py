"""scikit-learn estimators fitted by federated optimization over simulated clients.

:class:`FederatedLasso`, :class:`FederatedLogisticRegression` and :class:`FederatedMLPClassifier`
split the training data among clients (``fit(X, y, clients=None)``: given client ids, or the
estimator's ``partition`` of ``n_clients`` clients) and run a federated method
(:func:`fedopt.run`, FedNMap by default) on ``sum_i w_i f_i(x) + phi(x)``. The client weights
are ``w_i = m_i / m`` (sample counts), so the federated objective is the pooled one: the mean
loss over all samples plus the penalty, whatever the partition. The partition changes the path
that the method takes, not the answer (the MLP's answer is one local minimum among many).

Stopping: ``tol`` is scikit-learn's. :class:`FederatedLasso` and :class:`FederatedLogisticRegression`
(convex penalties) stop at the first evaluation (every ``eval_every`` rounds) where the duality
gap of the pooled objective, computed on the host from the training data, is at most ``tol``
times a fixed yardstick (``||y - mean(y)||^2 / n_samples`` for the Lasso, as scikit-learn's
``Lasso``); the gap bounds the distance of the objective to its minimum. Where no gap exists
(the MLP, MCP and SCAD, which are nonconvex, and ``alpha = 0``) the rule is relative
stationarity: the squared natural-map residual ``||F_nat(x)||^2`` (the history's
``stationarity``, with the prox parameter ``gamma``) at most ``tol`` times its value at the
initial model. Ending ``max_rounds`` rounds first warns with
:class:`~sklearn.exceptions.ConvergenceWarning`. With minibatches (``batch_size`` set) the
method stalls at a noise floor, so a small ``tol`` is then rarely reached.

Everything runs in float64; ``backend="auto"`` picks the GPU when one works and Numba on the CPU
otherwise (sparse ``X`` always stays on the CPU).
"""

from fedopt.estimators.linear import PENALTIES, FederatedLasso, FederatedLogisticRegression
from fedopt.estimators.mlp import FederatedMLPClassifier

__all__ = ["PENALTIES", "FederatedLasso", "FederatedLogisticRegression", "FederatedMLPClassifier"]
