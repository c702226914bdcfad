"""``MLP``: one hidden sigmoid layer, softmax cross-entropy (FedNMap's MNIST model) or squared error."""

from __future__ import annotations

import math

import numpy as np

from fedopt import kernels as K
from fedopt._checks import count
from fedopt.problems.base import Problem
from fedopt.problems.linear import LeastSquares, class_targets, numeric_targets

#: The output losses of :class:`MLP` and their kernel codes.
LOSSES = {"cross_entropy": K.SOFTMAX, "squared": K.LEAST_SQUARES}


class MLP(Problem):
    """A one-hidden-layer network: ``H = sigmoid(A W1^T + b1)``, ``O = H W2^T + b2``.

    ``loss="cross_entropy"`` (classification, ``k`` = the number of classes outputs):
    ``f_i(x) = mean_j logsumexp(O_j) - O_j[y_j]``; the targets must be class labels.
    ``loss="squared"`` (regression, one output, scikit-learn's ``MLPRegressor`` loss):
    ``f_i(x) = mean_j (O_j - y_j)^2 / 2``; the targets are floats, and class labels that are
    numbers (integer targets read as classes by :func:`fedopt.datasets.partition`) count as
    their values, as ``MLPRegressor`` takes them. :meth:`score` is then R^2, and there is no
    accuracy.

    The parameters are one flat vector ``x = [W1 (h, d), b1 (h), W2 (k, h), b2 (k)]``, each
    block in C order, so ``p = h (d + 1) + k (h + 1)`` (795 h + 10 for MNIST; ``h (d + 1) + h + 1``
    for regression). A regularizer acts on all of it, biases included (FedNMap's setting).
    :meth:`init` draws PyTorch's default initialisation, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``
    for every weight and bias, from ``seed``.

    With the dataset's ``sample_weight`` each sample's loss is weighted: ``f_i`` is the weighted
    mean ``sum_j s_j l_j / S_i`` (see :class:`~fedopt.problems.base.Problem`).
    """

    name = "mlp"
    supports_sample_weight = True

    def __init__(self, dataset, hidden: int = 64, weights="uniform", backend="auto", loss: str = "cross_entropy"):
        hidden = count("hidden", hidden)
        if loss not in LOSSES:
            raise ValueError(f"loss={loss!r} is unknown; choose 'cross_entropy' (class labels) or 'squared' "
                             "(regression targets)")
        self.hidden = hidden
        self.kind = LOSSES[loss]  # the kernels' loss code; set before the base class reads the targets
        if getattr(dataset, "is_sparse", False):
            raise ValueError("the MLP takes dense features; pass a dataset with X.toarray(), "
                             "or use Softmax for sparse X")
        super().__init__(dataset, weights, backend)
        self._options.update(hidden=hidden, loss=loss)

    @property
    def is_classifier(self) -> bool:
        """True for the cross-entropy, False for the squared error (a regression)."""
        return self.kind == K.SOFTMAX

    @property
    def n_classes(self) -> int:
        """The data set's number of classes (0 for regression targets)."""
        return self.dataset.n_classes

    @property
    def n_out(self) -> int:
        """``k``, the outputs: one per class for the cross-entropy, one for the squared error."""
        return self.dataset.n_classes if self.is_classifier else 1

    @property
    def n_params(self) -> int:
        h, d, k = self.hidden, self.n_features, self.n_out
        return h * (d + 1) + k * (h + 1)

    def _targets(self, y):
        if self.is_classifier:
            return class_targets(self.dataset, y, "MLP(loss='cross_entropy')", ": use loss='squared'")
        return numeric_targets(self.dataset, y, "MLP(loss='squared')", ": use loss='cross_entropy'")

    def blocks(self) -> dict:
        """The layers' weights and biases ``W1 (h, d)``, ``b1 (h,)``, ``W2 (k, h)``, ``b2 (k,)``."""
        h, d, k = self.hidden, self.n_features, self.n_out
        return {"W1": (0, (h, d)), "b1": (h * d, (h,)), "W2": (h * d + h, (k, h)), "b2": (h * d + h + k * h, (k,))}

    def unpack(self, x):
        """``(W1 (h, d), b1 (h,), W2 (k, h), b2 (k,))`` views of a flat parameter vector."""
        return tuple(x[start : start + math.prod(shape)].reshape(shape) for start, shape in self.blocks().values())

    def init(self, seed=None):
        """PyTorch's default ``nn.Linear`` initialisation of both layers, drawn from ``seed``."""
        rng = np.random.default_rng(seed)
        h, d, k = self.hidden, self.n_features, self.n_out
        bound1, bound2 = 1 / np.sqrt(d), 1 / np.sqrt(h)
        x = np.concatenate([rng.uniform(-bound1, bound1, h * d + h), rng.uniform(-bound2, bound2, k * h + k)])
        return self.backend.asarray(x.astype(self.dtype))

    def _oracle(self, W, rows, loss_out, grad_out):
        self.backend.kernels.mlp_oracle(self._X, self._y, self._offsets, W, rows, self.hidden, self.n_out, self.kind,
                                        self.dataset.scale, self._sample_weights, loss_out, grad_out)

    def fused_local_steps(self, rows, D, lr, prox_kind, thetas, w, Z, P) -> bool:
        """All local steps in one ``local_steps_mlp`` call where the backend has that kernel (the CPU).

        False with sample weights: the fused kernels take none, and the array-wise steps (one
        weighted oracle call per step) compute the same iterates."""
        kernel = getattr(self.backend.kernels, "local_steps_mlp", None)
        if kernel is None or self.has_sample_weight:
            return False
        kernel(self._X, self._y, self._offsets, self._per_step_rows(rows, len(thetas)), self.hidden, self.n_out,
               self.kind, self.dataset.scale, D, lr, prox_kind, thetas, w, Z, P)
        return True

    def fused_tracking_steps(self, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                             P, NU, MU, Y, G, adapt_first=True, adapt_after=False) -> bool:
        """DEPOSITUM's iterations without gossip in one ``tracking_steps_mlp`` call where the backend
        has that kernel (the CPU); False with sample weights (the fused kernel takes none) and the
        caller steps array-wise."""
        kernel = getattr(self.backend.kernels, "tracking_steps_mlp", None)
        if kernel is None or self.has_sample_weight:
            return False
        kernel(self._X, self._y, self._offsets, rows, self.hidden, self.n_out, self.kind, self.dataset.scale,
               node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w, P, NU, MU, Y, G,
               adapt_first=adapt_first, adapt_after=adapt_after)
        return True

    def decision_function(self, x, X=None):
        """Output-layer values ``O``, shape ``(m, k)``: class scores, or ``(m, 1)`` predictions for regression."""
        W1, b1, W2, b2 = self.unpack(self._vector(x))
        X = self._X if X is None else X
        xp = self.backend.xp
        H = 1 / (1 + xp.exp(-(self._features(X) @ W1.T + b1)))
        return H @ W2.T + b2

    def _score(self, outputs, y):
        """Accuracy for the cross-entropy, R^2 (scikit-learn's regression score) for the squared error."""
        return super()._score(outputs, y) if self.is_classifier else LeastSquares._score(self, outputs, y)
