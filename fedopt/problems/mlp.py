"""``MLP``: one hidden sigmoid layer and softmax cross-entropy (FedNMap's MNIST model)."""

from __future__ import annotations

import math

import numpy as np

from fedopt.problems.base import Problem
from fedopt.problems.linear import Softmax


class MLP(Problem):
    """A one-hidden-layer network: ``H = sigmoid(A W1^T + b1)``, ``O = H W2^T + b2``, softmax cross-entropy.

    ``f_i(x) = mean_j logsumexp(O_j) - O_j[y_j]`` over client ``i``'s samples. The parameters are
    one flat vector ``x = [W1 (h, d), b1 (h), W2 (k, h), b2 (k)]``, each block in C order, so
    ``p = h (d + 1) + k (h + 1)`` (795 h + 10 for MNIST). A regularizer acts on all of it,
    biases included (FedNMap's setting). :meth:`init` draws PyTorch's default initialisation,
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for every weight and bias, from ``seed``.
    """

    name = "mlp"

    def __init__(self, dataset, hidden: int = 64, weights="uniform", backend="auto"):
        hidden = int(hidden)
        if hidden < 1:
            raise ValueError(f"hidden must be an integer >= 1, got {hidden}")
        self.hidden = hidden
        if getattr(dataset, "is_sparse", False):
            raise ValueError("the MLP takes dense features; pass a dataset with X.toarray(), "
                             "or use Softmax for sparse X")
        super().__init__(dataset, weights, backend)
        self._options["hidden"] = hidden

    @property
    def n_classes(self) -> int:
        return self.dataset.n_classes

    @property
    def n_params(self) -> int:
        h, d, k = self.hidden, self.n_features, self.n_classes
        return h * (d + 1) + k * (h + 1)

    _targets = Softmax._targets

    def blocks(self) -> dict:
        """The layers' weights and biases ``W1 (h, d)``, ``b1 (h,)``, ``W2 (k, h)``, ``b2 (k,)``."""
        h, d, k = self.hidden, self.n_features, self.n_classes
        return {"W1": (0, (h, d)), "b1": (h * d, (h,)), "W2": (h * d + h, (k, h)), "b2": (h * d + h + k * h, (k,))}

    def unpack(self, x):
        """``(W1 (h, d), b1 (h,), W2 (k, h), b2 (k,))`` views of a flat parameter vector."""
        return tuple(x[start : start + math.prod(shape)].reshape(shape) for start, shape in self.blocks().values())

    def init(self, seed=None):
        """PyTorch's default ``nn.Linear`` initialisation of both layers, drawn from ``seed``."""
        rng = np.random.default_rng(seed)
        h, d, k = self.hidden, self.n_features, self.n_classes
        bound1, bound2 = 1 / np.sqrt(d), 1 / np.sqrt(h)
        x = np.concatenate([rng.uniform(-bound1, bound1, h * d + h), rng.uniform(-bound2, bound2, k * h + k)])
        return self.backend.asarray(x.astype(self.dtype))

    def _oracle(self, W, rows, loss_out, grad_out):
        self.backend.kernels.mlp_oracle(self._X, self._y, self._offsets, W, rows, self.hidden, self.n_classes,
                                        self.dataset.scale, loss_out, grad_out)

    def fused_local_steps(self, rows, D, lr, prox_kind, thetas, w, Z, P) -> bool:
        """All local steps in one ``local_steps_mlp`` call where the backend has that kernel (the CPU)."""
        kernel = getattr(self.backend.kernels, "local_steps_mlp", None)
        if kernel is None:
            return False
        kernel(self._X, self._y, self._offsets, self._per_step_rows(rows, len(thetas)), self.hidden, self.n_classes,
               self.dataset.scale, D, lr,
               prox_kind, thetas, w, Z, P)
        return True

    def fused_tracking_steps(self, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                             P, NU, MU, Y, G) -> bool:
        """DEPOSITUM's iterations without gossip in one ``tracking_steps_mlp`` call where the backend
        has that kernel (the CPU)."""
        kernel = getattr(self.backend.kernels, "tracking_steps_mlp", None)
        if kernel is None:
            return False
        kernel(self._X, self._y, self._offsets, rows, self.hidden, self.n_classes, self.dataset.scale, node_scale,
               gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w, P, NU, MU, Y, G)
        return True

    def decision_function(self, x, X=None):
        """Output-layer scores ``O``, shape ``(m, n_classes)``."""
        W1, b1, W2, b2 = self.unpack(self._vector(x))
        X = self._X if X is None else X
        xp = self.backend.xp
        H = 1 / (1 + xp.exp(-(self._features(X) @ W1.T + b1)))
        return H @ W2.T + b2
