"""Linear models: ``LeastSquares`` (Lasso's datafit), ``Logistic`` (binary) and ``Softmax`` (multinomial)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from fedopt import kernels as K
from fedopt.problems.base import Problem, kernel_sample_weights


class LinearModel(Problem):
    """A linear model with ``n_out`` outputs: ``M = X @ coef.T + intercept`` per sample.

    Parameters are one flat vector of length ``p = n_out * (d + fit_intercept)``: the
    ``(n_out, d)`` coefficients in C order (scikit-learn's ``coef_`` layout), then, with
    ``fit_intercept``, the ``n_out`` intercepts. A regularizer acts on the whole vector
    (intercepts included), as in the papers; give the intercept a zero weight
    (``L1(lam, weights=...)``) to leave it unpenalized.

    ``center`` (``d`` feature means ``mu``, or None) centers the rows implicitly: the margins are
    ``scale * (X - mu) @ coef.T + intercept``, while ``X`` itself, sparse CSR say, stays as it is.
    Each oracle call then runs the kernels of ``X`` on the intercepts ``intercept - scale * coef
    @ mu`` and takes ``scale * mu * dF/dintercept`` off the coefficients' gradient (the chain rule
    of that change of variables; ``O(n p)`` a call). The CPU's fused local and tracking steps do the
    same inside the kernel for CSR ``X``; dense ``X`` with ``center`` steps array-wise.
    Centered features decouple the intercept from the coefficients, which a federated method's
    step size feels: the estimators center sparse features this way.
    """

    kind: int = K.LEAST_SQUARES
    supports_sample_weight = True

    def __init__(self, dataset, weights="uniform", fit_intercept: bool = False, backend="auto", center=None):
        self.fit_intercept = bool(fit_intercept)
        super().__init__(dataset, weights, backend)
        self._options["fit_intercept"] = self.fit_intercept
        self.center = self._center = None
        if center is not None:
            mu = np.asarray(center, dtype=np.float64)
            if mu.shape != (self.n_features,) or not np.isfinite(mu).all():
                raise ValueError(f"center must hold one finite mean per feature, shape ({self.n_features},), "
                                 f"got shape {mu.shape}")
            self.center = mu
            self._center = self.backend.asarray(mu, dtype=self.dtype)
        self._options["center"] = self.center

    @property
    def n_out(self) -> int:
        return 1

    @property
    def n_params(self) -> int:
        return self.n_out * (self.n_features + self.fit_intercept)

    def blocks(self) -> dict:
        """``coef (n_out, d)``, and ``intercept (n_out,)`` with ``fit_intercept``."""
        coef = {"coef": (0, (self.n_out, self.n_features))}
        return {**coef, "intercept": (self.n_out * self.n_features, (self.n_out,))} if self.fit_intercept else coef

    def unpack(self, x):
        """``(coef (n_out, d), intercept (n_out,))`` views of a flat parameter vector."""
        d = self.n_features
        coef = x[: self.n_out * d].reshape(self.n_out, d)
        intercept = x[self.n_out * d :] if self.fit_intercept else self.backend.xp.zeros(self.n_out, dtype=x.dtype)
        return coef, intercept

    def _oracle(self, W, rows, loss_out, grad_out):
        if self.center is not None:
            return self._centered_oracle(W, rows, loss_out, grad_out)
        self.backend.kernels.linear_oracle(self._X, self._y, self._offsets, W, rows, self.kind, self.n_out,
                                           self.dataset.scale, self.fit_intercept, self._sample_weights, loss_out,
                                           grad_out)

    def _centered_oracle(self, W, rows, loss_out, grad_out):
        """The oracle of the rows ``X - mu`` from the kernels of ``X``: they run with an intercept slot
        that holds ``intercept - scale * coef @ mu`` (0 for the intercept without ``fit_intercept``)."""
        xp, k, d = self.backend.xp, self.n_out, self.n_features
        scale = self.dtype.type(self.dataset.scale)
        coef = W[:, : k * d]  # W has a row per client, or one row for all of them
        shifted = xp.empty((W.shape[0], k * (d + 1)), dtype=self.dtype)
        shifted[:, : k * d] = coef
        shifted[:, k * d :] = -scale * (coef.reshape(W.shape[0], k, d) @ self._center)
        if self.fit_intercept:
            shifted[:, k * d :] += W[:, k * d :]
        n = grad_out.shape[0]
        want_grad = n > 0
        inner = xp.empty((n, k * (d + 1)), dtype=self.dtype) if want_grad else grad_out
        self.backend.kernels.linear_oracle(self._X, self._y, self._offsets, shifted, rows, self.kind, k,
                                           self.dataset.scale, True, self._sample_weights, loss_out, inner)
        if want_grad:
            slope = inner[:, k * d :]  # dF/dintercept, per client and output
            grad_out[:, : k * d] = inner[:, : k * d] - scale * (slope[:, :, None] * self._center).reshape(n, k * d)
            if self.fit_intercept:
                grad_out[:, k * d :] = slope

    def fused_local_steps(self, rows, D, lr, prox_kind, thetas, w, Z, P) -> bool:
        """All local steps in one ``local_steps_linear`` call; False when the backend has no such
        kernel, or its kernel returns None for this model (the GPU kernel declines CSR features,
        SOFTMAX and ``center``, the CPU kernel ``center`` on dense features), and the caller then
        steps array-wise.

        Also False with sample weights: the fused kernels take none, and the array-wise steps
        (one weighted oracle call per step) compute the same iterates."""
        kernel = getattr(self.backend.kernels, "local_steps_linear", None)
        if kernel is None or self.has_sample_weight:
            return False
        done = kernel(self._X, self._y, self._offsets, self._per_step_rows(rows, len(thetas)), self.kind, self.n_out,
                      self.dataset.scale, self.fit_intercept, D, lr, prox_kind, thetas, w, Z, P,
                      center=self._center)
        return done is not None

    def fused_tracking_steps(self, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                             P, NU, MU, Y, G, adapt_first=True, adapt_after=False) -> bool:
        """DEPOSITUM's iterations without gossip in one ``tracking_steps`` call (the CPU backends);
        False with sample weights (the fused kernel takes none) or when the kernel declines (``center``
        on dense features), and the caller steps array-wise."""
        kernel = getattr(self.backend.kernels, "tracking_steps", None)
        if kernel is None or self.has_sample_weight:
            return False
        done = kernel(self._X, self._y, self._offsets, rows, self.kind, self.n_out, self.dataset.scale,
                      self.fit_intercept, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w, P,
                      NU, MU, Y, G, adapt_first=adapt_first, adapt_after=adapt_after, center=self._center)
        return done is not None

    def decision_function(self, x, X=None):
        """Margins ``scale * (X - mu) @ coef.T + intercept``, shape ``(m, n_out)`` (``mu = 0`` without ``center``)."""
        coef, intercept = self.unpack(self._vector(x))
        X = self._X if X is None else X
        if self.center is not None:
            intercept = intercept - self.dtype.type(self.dataset.scale) * (coef @ self._center)
        return self._features(X) @ coef.T + intercept

    def smoothness(self) -> np.ndarray:
        """A Lipschitz constant ``L_i`` of each ``grad f_i``: ``c * ||X_i||_2^2 / m_i``.

        ``c`` is 1 for least squares, 1/4 for the logistic loss and 1/2 for softmax; ``X_i`` gets a
        column of ones with ``fit_intercept``, and its rows are scaled by ``sqrt(s'_j)`` with
        sample weights (see :class:`~fedopt.problems.base.Problem`); with ``center``, ``X_i - mu``,
        and 0 where ``X_i - mu`` is rounding noise (the rows equal the mean, a constant feature's rows
        say): the oracle of such rows is noise, and ``1 / L_i`` steps would magnify it.
        """
        factor = {K.LEAST_SQUARES: 1.0, K.LOGISTIC: 0.25, K.SOFTMAX: 0.5}[self.kind]
        result = np.empty(self.n_clients)
        weights = kernel_sample_weights(self.dataset)
        for i in range(self.n_clients):
            X_i = self.dataset.client(i)[0]
            X_i = (X_i * self.dataset.scale) if sp.issparse(X_i) else X_i.astype(np.float64) * self.dataset.scale
            if self.center is not None:
                rows = weights[self.dataset.offsets[i] : self.dataset.offsets[i + 1]] if len(weights) else None
                shift = self.dataset.scale * self.center
                top = _top_singular_value(_centered(X_i, shift, self.fit_intercept, rows))
                noise = _centering_noise(X_i, shift, self.dtype, rows)
                result[i] = factor * top**2 / X_i.shape[0] if top > noise else 0.0
                continue
            if self.fit_intercept:
                X_i = sp.hstack([X_i, np.ones((X_i.shape[0], 1))], format="csr") if sp.issparse(X_i) else \
                    np.hstack([X_i, np.ones((X_i.shape[0], 1))])
            if len(weights):
                root = np.sqrt(weights[self.dataset.offsets[i] : self.dataset.offsets[i + 1]])
                X_i = sp.diags(root) @ X_i if sp.issparse(X_i) else root[:, None] * X_i
            result[i] = factor * _top_singular_value(X_i) ** 2 / X_i.shape[0]
        return result


def _centered(X, shift, intercept: bool, weights=None):
    """``diag(sqrt(weights)) [X - 1 shift^T, 1]`` as a scipy ``LinearOperator``: sparse ``X`` stays
    sparse (no ones column without ``intercept``, no row scaling without ``weights``)."""
    from scipy.sparse.linalg import LinearOperator  # imported here, as svds below: 0.1 s of ``import fedopt``

    m, d = X.shape
    root = np.ones(m) if weights is None else np.sqrt(weights)

    def matvec(v):
        v = np.ravel(v)
        out = X @ v[:d] - shift @ v[:d] + (v[d] if intercept else 0.0)
        return root * np.ravel(out)

    def rmatvec(u):
        u = root * np.ravel(u)
        top = np.ravel(X.T @ u) - shift * u.sum()
        return np.r_[top, u.sum()] if intercept else top

    return LinearOperator((m, d + intercept), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)


def _centering_noise(X, shift, dtype, weights=None) -> float:
    """The rounding level of ``||diag(sqrt(weights)) (X - 1 shift^T)||_2`` in ``dtype``: each row
    ``x_j - shift`` comes out within about ``sqrt(d) eps (||x_j|| + ||shift||)`` (``d`` features),
    whatever its true size."""
    from scipy.sparse.linalg import norm  # imported here, as in _centered

    root = np.ones(X.shape[0]) if weights is None else np.sqrt(weights)
    norms = norm(X, axis=1) if sp.issparse(X) else np.linalg.norm(X, axis=1)
    size = np.linalg.norm(root * (norms + np.linalg.norm(shift)))
    return float(np.sqrt(X.shape[1]) * np.finfo(dtype).eps * size)


def _top_singular_value(A) -> float:
    """``||A||_2`` of a dense or sparse matrix or an operator: by ARPACK, 0 for a zero block, or
    from the dense matrix where ARPACK cannot (``min(shape) <= 2``)."""
    if min(A.shape) <= 2:  # ARPACK needs k < min(shape)
        dense = A.toarray() if sp.issparse(A) else A if isinstance(A, np.ndarray) else A @ np.eye(A.shape[1])
        return float(np.linalg.norm(dense, 2))
    if _is_zero(A):  # a client whose rows are all zero (or all the mean): ARPACK finds no start vector
        return 0.0
    from scipy.sparse.linalg import ArpackError, svds

    try:
        return float(svds(A, k=1, return_singular_vectors=False, random_state=0)[0])
    except ArpackError as error:
        # rows that equal the mean to rounding: the operator maps some vectors to exact zeros, ARPACK's start too
        if "Starting vector is zero" not in str(error):
            raise
        return 0.0


def _is_zero(A) -> bool:
    """Whether ``A`` has no nonzero entry; an operator is tested on a random vector (``A v = 0``
    for a random ``v`` only when ``A = 0``, almost surely)."""
    if sp.issparse(A):
        return A.count_nonzero() == 0
    if isinstance(A, np.ndarray):
        return not A.any()
    probe = np.random.default_rng(0).standard_normal(A.shape[1])
    return not np.any(A.matvec(probe))


class LeastSquares(LinearModel):
    """Least squares: ``f_i(x) = (1 / (2 m_i)) ||A_i x - b_i||^2`` (the datafit of scikit-learn's ``Lasso``).

    With ``weights="samples"``, ``f`` is the pooled ``(1 / (2 m)) ||A x - b||^2``. Class labels
    are used as numbers when they are numbers.
    """

    name = "least_squares"
    kind = K.LEAST_SQUARES
    is_classifier = False

    def _targets(self, y):
        return numeric_targets(self.dataset, y, "LeastSquares")

    def _score(self, outputs, y):
        """R^2, scikit-learn's regression score: on constant targets, 1 for a perfect fit and 0 otherwise."""
        residual = ((y - outputs[:, 0]) ** 2).sum()
        spread = ((y - y.mean()) ** 2).sum()
        if spread == 0:
            return 1.0 if residual == 0 else 0.0
        return 1 - residual / spread


class Logistic(LinearModel):
    """Binary logistic regression: ``f_i(x) = mean_j log(1 + exp(-y_j (a_j^T x + b)))``, ``y_j = +-1``.

    Labels may be any two values; the second in sorted order (1 of 0/1, +1 of -1/+1) is the
    positive class, as in scikit-learn.
    """

    name = "logistic"
    kind = K.LOGISTIC

    def _targets(self, y):
        if self.dataset.n_classes != 2:
            hint = "use Softmax for more classes" if self.dataset.n_classes > 2 else "it needs two class labels"
            raise ValueError(f"Logistic is binary, but the dataset has {self.dataset.n_classes or 'no'} classes; "
                             f"{hint}")
        return 2.0 * y - 1.0

    def _score(self, outputs, y):
        xp = self.backend.xp
        return xp.mean(xp.where(outputs[:, 0] > 0, 1.0, -1.0) == y)


class Softmax(LinearModel):
    """Multinomial logistic regression: ``f_i(x) = mean_j logsumexp(W a_j + b) - (W a_j + b)[y_j]``.

    ``W`` has one row per class (``coef`` of shape ``(n_classes, d)``).
    """

    name = "softmax"
    kind = K.SOFTMAX

    @property
    def n_out(self) -> int:
        return self.dataset.n_classes

    def _targets(self, y):
        return class_targets(self.dataset, y, "Softmax")


def numeric_targets(dataset, y, model: str, hint: str = ""):
    """Regression targets: ``y`` itself, or the numeric labels a classification dataset stores as
    codes; class names raise an error naming ``model`` (and ``hint``, the fix)."""
    if dataset.classes is None:
        return y
    if dataset.classes.dtype.kind not in "biuf":
        raise ValueError(f"{model} needs numeric targets; this dataset's labels are {dataset.classes.dtype} class "
                         f"names{hint}")
    return dataset.classes[y].astype(np.float64)


def class_targets(dataset, y, model: str, hint: str = ""):
    """Class codes as float64 targets; a dataset of regression targets (``hint``, the fix, ends that
    error) or of a single class raises an error naming ``model``."""
    if dataset.n_classes == 1:
        raise ValueError(f"{model} needs at least two classes, but this dataset has only one class, "
                         f"{dataset.classes.tolist()[0]!r}; use data that holds samples of two or more classes")
    if dataset.n_classes < 2:
        raise ValueError(f"{model} needs class labels (at least two classes); this dataset holds regression "
                         f"targets{hint}")
    return y.astype(np.float64)
