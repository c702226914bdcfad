"""Duality gaps of the linear estimators' pooled objectives: upper bounds on ``P(x) - min P``.

Both objectives are ``P(w, b) = F(X w + b) + g(w)`` with a weighted mean loss
``F(M) = sum_j s_j loss(M_j, y_j)`` over the samples (``s_j`` the sample weights divided by their
sum; ``1 / n`` without weights) and a penalty ``g = l1 ||w||_1 + (l2 / 2) ||w||^2`` on the
coefficients only. Fenchel duality gives, for every dual point ``v`` (one value per sample and
output),

    D(v) = -F*(v) - g*(-X^T v)   with   sum_j v_j = 0 when the intercept is free,

and ``D(v) <= min P <= P(w, b)``, so ``gap = P(w, b) - D(v)`` bounds the suboptimality of
``(w, b)``. The dual point is built from the residual ``v = grad F`` at the model, as
scikit-learn's coordinate descent does for the Lasso: centered (least squares) or with the
intercepts re-balanced (logistic) so that it sums to zero, then, without an l2 part, scaled
into the box ``||X^T v||_inf <= l1``. At the solution the gap is zero.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import xlogy
from sklearn.utils.extmath import safe_sparse_dot

#: Rows of float32 or uint8 features converted to float64 at a time by the gaps' products.
CHUNK_ROWS = 512


def float64_chunks(X):
    """``(rows, X[rows] in float64)`` for consecutive chunks of dense ``X``, in one reused buffer."""
    buffer = np.empty((min(CHUNK_ROWS, X.shape[0]), X.shape[1]))
    for start in range(0, X.shape[0], CHUNK_ROWS):
        rows = slice(start, min(start + CHUNK_ROWS, X.shape[0]))
        chunk = buffer[: rows.stop - start]
        chunk[...] = X[rows]
        yield rows, chunk


class CenteredRows:
    """The rows of ``X`` minus ``mu`` for the gaps' products, without forming them (sparse ``X`` stays sparse)."""

    def __init__(self, X, mu):
        self.X, self.mu, self.shape = X, np.asarray(mu, dtype=np.float64), X.shape


# NumPy's product of float32 or uint8 X with float64 operands first copies all of X to float64
# (X.T @ V on 60 000 x 784 float32 took 195 ms, 5x a float64 X's): the products below convert
# a chunk of rows at a time instead.
def _dot(X, W):
    """``X @ W`` in float64 (``W`` a vector or a matrix)."""
    if isinstance(X, CenteredRows):
        return _dot(X.X, W) - X.mu @ W
    if sp.issparse(X) or X.dtype == np.float64:
        return safe_sparse_dot(X, W)
    out = np.empty((X.shape[0], *W.shape[1:]))
    for rows, chunk in float64_chunks(X):
        out[rows] = chunk @ W
    return out


def dot_transposed(X, V):
    """``X.T @ V`` in float64 (``V`` a vector or a matrix with a row per row of ``X``)."""
    if isinstance(X, CenteredRows):
        return dot_transposed(X.X, V) - np.multiply.outer(X.mu, V.sum(axis=0))
    if sp.issparse(X) or X.dtype == np.float64:
        return safe_sparse_dot(X.T, V)
    out = np.zeros((X.shape[1], *V.shape[1:]))
    for rows, chunk in float64_chunks(X):
        out += chunk.T @ V[rows]
    return out


# scipy.special's logsumexp and softmax cost about 90 us a call in array-API checks; the gap
# calls them some 30 times per check, which made a tight logistic fit on tiny data mostly gap.
def logsumexp(Z, axis=1):
    """``log sum_k exp(Z_jk)`` per row, from the row maximum (no overflow)."""
    top = Z.max(axis=axis, keepdims=True)
    return np.log(np.exp(Z - top).sum(axis=axis, keepdims=True)).squeeze(axis) + top.squeeze(axis)


def softmax(Z, axis=1):
    """``exp(Z_jk) / sum_k exp(Z_jk)`` per row, from the row maximum."""
    E = np.exp(Z - Z.max(axis=axis, keepdims=True))
    return E / E.sum(axis=axis, keepdims=True)


def _penalty_conjugate(G, l1, l2):
    """``g*(G)`` for ``g = l1 ||w||_1 + (l2 / 2) ||w||^2`` after the scaling that keeps it finite.

    Returns ``(scale, value)``: the dual point must be multiplied by ``scale`` (``<= 1``, below 1
    only for a pure l1 penalty whose box ``||G||_inf <= l1`` the point leaves), and ``value`` is
    ``g*`` at the scaled point.
    """
    if l2 > 0:
        return 1.0, float(np.sum(np.maximum(np.abs(G) - l1, 0.0) ** 2) / (2 * l2))
    top = float(np.abs(G).max()) if G.size else 0.0
    return (min(1.0, l1 / top) if top > 0 else 1.0), 0.0


def _penalty(coef, l1, l2):
    return l1 * float(np.abs(coef).sum()) + 0.5 * l2 * float(np.sum(coef**2))


def least_squares_gap(X, y, coef, intercept, l1, l2, fit_intercept, shares):
    """The duality gap of ``sum_j s_j (y_j - x_j w - b)^2 / 2 + l1 ||w||_1 + (l2 / 2) ||w||^2``.

    ``F*(v) = sum_j (v_j y_j + v_j^2 / (2 s_j))``; the dual point is ``v = -t s r_c`` with ``r_c``
    the residual ``r = y - X w - b`` minus its weighted mean (so ``sum v = 0``) and ``t`` the box
    scaling: ``D = t sum s r_c y - (t^2 / 2) sum s r_c^2 - g*(t X^T (s r_c))``. Without weights
    (``s = 1 / n``) and ``l2 = 0`` this is scikit-learn's ``Lasso`` gap divided by ``n``.
    """
    r = y - _dot(X, coef) - intercept
    primal = 0.5 * float(shares @ (r * r)) + _penalty(coef, l1, l2)
    rc = r - float(shares @ r) if fit_intercept else r
    weighted = shares * rc
    scale, conjugate = _penalty_conjugate(dot_transposed(X, weighted), l1, l2)
    dual = scale * float(weighted @ y) - 0.5 * scale * scale * float(weighted @ rc) - conjugate
    return primal - dual


def least_squares_scale(y, fit_intercept, shares):
    """scikit-learn's yardstick of the Lasso gap: ``sum_j s_j (y_j - ybar)^2`` (``||y - mean(y)||^2 / n``)."""
    yc = y - float(shares @ y) if fit_intercept else y
    return float(shares @ (yc * yc))


def _logits(margins):
    """The full ``(n, K)`` logits: the binary model's one margin is class 1's, class 0's is 0."""
    return np.column_stack([np.zeros(len(margins)), margins]) if margins.shape[1] == 1 else margins


def _balanced_probabilities(Z, shares, totals, iterations=50):
    """``softmax(Z + delta)`` with the intercept shift ``delta`` whose weighted class totals are ``totals``.

    ``delta`` minimises the convex ``sum_j s_j logsumexp(Z_j + delta) - totals . delta``: Newton's
    method with backtracking (its Hessian is singular along ``1``, hence least squares). The
    backtracking test allows for the rounding of ``phi``: once the decrease a step promises is
    below it (gradients near 1e-10 on the digits), a strict test rejected even the full step,
    which would have met the 1e-12 tolerance, and halved it down to the 50-iteration cap. Each
    point costs one pass of ``exp``, for both ``phi`` and the probabilities that the next
    iteration starts from (three passes before: 60 % of a gap on MNIST-shaped data).
    """
    top = Z.max(axis=1, keepdims=True)

    def at(d):
        """``phi(d)`` and ``softmax(Z + d)``. Each row is shifted by its largest logit plus
        ``max(d)``, which keeps ``exp`` below 1 and the row's largest term above ``exp(-ptp(d))``."""
        shift = top + d.max() if np.ptp(d) < 500 else (Z + d).max(axis=1, keepdims=True)
        E = Z + d
        E -= shift
        np.exp(E, out=E)
        sums = E.sum(axis=1, keepdims=True)
        value = float(shares @ (np.log(sums[:, 0]) + shift[:, 0]) - totals @ d)
        E /= sums
        return value, E

    def rounding(value):
        return 64 * np.finfo(float).eps * (abs(value) + 1.0)

    delta = np.zeros(Z.shape[1])
    value, P = at(delta)
    for _ in range(iterations):
        SP = shares[:, None] * P
        grad = SP.sum(axis=0) - totals
        if np.abs(grad).max() <= 1e-12:
            break
        hess = np.diag(SP.sum(axis=0)) - P.T @ SP
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        t = 1.0
        while True:
            trial_value, trial_P = at(delta - t * step)
            if t <= 1e-10 or trial_value <= value - 0.25 * t * float(grad @ step) + rounding(value):
                break
            t /= 2
        delta, value, P = delta - t * step, trial_value, trial_P
    return P


def logistic_gap(X, codes, coef, intercept, l1, l2, fit_intercept, shares):
    """The duality gap of the weighted mean log-loss plus ``l1 ||W||_1 + (l2 / 2) ||W||^2``.

    ``coef`` is ``(1, d)`` (binary, class 1's margin) or ``(K, d)`` (multinomial). The loss
    conjugate is the negative entropy: ``D(v) = -sum_j s_j sum_k q_jk log q_jk - g*(-X^T v)``
    with ``q_j = e_{y_j} + v_j / s_j`` in the simplex and ``v = t s (p - e_y)`` built from the
    probabilities ``p`` of the model with re-balanced intercepts.
    """
    n = X.shape[0]
    margins = _dot(X, coef.T) + intercept
    Z = _logits(margins)
    Y = np.zeros_like(Z)
    Y[np.arange(n), codes] = 1.0
    primal = float(shares @ (logsumexp(Z, axis=1) - Z[np.arange(n), codes])) + _penalty(coef, l1, l2)
    P = _balanced_probabilities(Z, shares, shares @ Y) if fit_intercept else softmax(Z, axis=1)
    R = P - Y
    outputs = R[:, 1:] if coef.shape[0] == 1 else R  # the columns that coef parametrises
    G = dot_transposed(X, shares[:, None] * outputs).T
    scale, conjugate = _penalty_conjugate(G, l1, l2)
    Q = Y + scale * R
    return primal + float(shares @ xlogy(Q, Q).sum(axis=1)) + conjugate


def logistic_scale(codes, n_classes, fit_intercept, shares):
    """The logistic gap's yardstick: the mean log-loss of zero coefficients (best intercepts with ``fit_intercept``).

    With ``fit_intercept`` it is the entropy of the class shares, taken of shares normalized to sum to 1,
    so that it is exactly 0 when one class holds all the weight (shares summing to ``1 + 2e-16`` gave
    ``-4e-16``, a yardstick below any gap)."""
    if not fit_intercept:
        return float(np.log(n_classes))
    share = np.bincount(codes, weights=shares, minlength=n_classes)
    share /= share.sum()
    return float(-xlogy(share, share).sum())  # each share <= 1: every term >= 0
