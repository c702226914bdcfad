"""Linear-model oracles and fused local steps as Numba kernels: ``prange`` over clients.

Each row is read from memory once: its margins (forward) and its share of the gradient
(backward) are computed while it sits in L1, so the floor is streaming the sampled rows of ``X``
once. Dense rows may be stored as uint8 and are scaled on the fly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels import LEAST_SQUARES, LOGISTIC
from fedopt.kernels.cpu._jit import REDUCTION_MATH, inline, kernel
from fedopt.kernels.cpu.elementwise import _prox_block


@inline
def _residual(kind, M, n_out, target, want_loss):
    """Replace the margins ``M[:n_out]`` of one sample by ``dloss/dM``; return the sample's loss (0 unless ``want_loss``)."""
    if kind == LEAST_SQUARES:
        r = M[0] - target
        M[0] = r
        return 0.5 * r * r
    if kind == LOGISTIC:
        t = -target * M[0]
        e = math.exp(-abs(t))  # one exp serves the sigmoid and the loss, without overflow
        M[0] = -target * (1 / (1 + e) if t >= 0 else e / (1 + e))
        return max(t, 0) + math.log1p(e) if want_loss else 0.0  # log(1 + exp(t))
    code = int(target)  # SOFTMAX: loss = logsumexp(M) - M[code]
    picked = M[code]
    top = M[0]
    for c in range(1, n_out):
        top = M[c] if M[c] > top else top
    total = 0.0
    for c in range(n_out):
        M[c] = math.exp(M[c] - top)
        total += M[c]
    for c in range(n_out):
        M[c] = M[c] / total - (1 if c == code else 0)
    return math.log(total) + top - picked if want_loss else 0.0


@inline
def _dense_pair(X, r1, r2, d, y, w, kind, n_out, scale, fit_intercept, M, g, inv_count, want_loss, want_grad):
    """Two dense rows at once: two independent streams keep more memory reads in flight.

    ``M[:n_out]`` and ``M[n_out:2 n_out]`` hold the two rows' margins, then their residuals.
    Returns the sum of the two losses.
    """
    zero = scale - scale
    x1, x2 = X[r1], X[r2]
    M1, M2 = M[:n_out], M[n_out : 2 * n_out]
    for c in range(n_out):
        coef = w[c * d : c * d + d]  # slices: plain induction indices vectorize
        s1 = zero
        s2 = zero
        for j in range(d):
            s1 += x1[j] * coef[j]
            s2 += x2[j] * coef[j]
        bias = w[n_out * d + c] if fit_intercept else zero
        M1[c] = s1 * scale + bias
        M2[c] = s2 * scale + bias
    loss = _residual(kind, M1, n_out, y[r1], want_loss) + _residual(kind, M2, n_out, y[r2], want_loss)
    if want_grad:
        for c in range(n_out):
            a1, a2 = M1[c] * (scale * inv_count), M2[c] * (scale * inv_count)
            grad = g[c * d : c * d + d]
            for j in range(d):
                grad[j] += a1 * x1[j] + a2 * x2[j]
            if fit_intercept:
                g[n_out * d + c] += (M1[c] + M2[c]) * inv_count
    return loss


@inline
def _client_pass(X, data, indices, indptr, dense, d, y, rows, first, count, w, kind, n_out, scale, fit_intercept, M,
                 g, want_loss, want_grad):
    """Mean loss of one client over ``count`` rows (when ``want_loss``), and its gradient into ``g`` (when ``want_grad``).

    The rows are ``rows[:count]`` (global indices) when ``rows`` is not empty, else the client's
    contiguous rows ``first, ..., first + count - 1``. ``X`` is dense when ``dense``, else
    ``data, indices, indptr`` hold CSR rows; ``d`` is the number of features. ``M`` is scratch
    of length ``2 n_out + 1``. Each row is read once for its margins and its gradient share;
    dense rows go in pairs.
    """
    M[2 * n_out] = 1 / count
    inv_count = M[2 * n_out]  # 1/count in the parameters' dtype: float32 stays float32 below
    zero = scale - scale
    if want_grad:
        g[:] = zero
    total = 0.0
    t = 0
    if dense:
        while t + 1 < count:
            r1 = rows[t] if rows.shape[0] > 0 else first + t
            r2 = rows[t + 1] if rows.shape[0] > 0 else first + t + 1
            total += _dense_pair(X, r1, r2, d, y, w, kind, n_out, scale, fit_intercept, M, g, inv_count, want_loss,
                                 want_grad)
            t += 2
    for t in range(t, count):  # CSR rows, or the last dense row of an odd count
        r = rows[t] if rows.shape[0] > 0 else first + t
        for c in range(n_out):
            s = zero
            if dense:
                x, coef = X[r], w[c * d : c * d + d]
                for j in range(d):
                    s += x[j] * coef[j]
            else:
                for k in range(indptr[r], indptr[r + 1]):
                    s += data[k] * w[c * d + indices[k]]
            M[c] = s * scale + (w[n_out * d + c] if fit_intercept else zero)
        total += _residual(kind, M, n_out, y[r], want_loss)
        if want_grad:
            for c in range(n_out):
                step = M[c] * (scale * inv_count)
                if dense:
                    x, grad = X[r], g[c * d : c * d + d]
                    for j in range(d):
                        grad[j] += step * x[j]
                else:
                    for k in range(indptr[r], indptr[r + 1]):
                        g[c * d + indices[k]] += step * data[k]
                if fit_intercept:
                    g[n_out * d + c] += M[c] * inv_count
    return total * inv_count


@kernel(fastmath=REDUCTION_MATH)
def linear_oracle_kernel(X, data, indices, indptr, dense, d, y, offsets, W, rows, kind, n_out, scale, fit_intercept,
                         loss_out, grad_out):
    """Per client: ``M = scale * X_r @ coef.T + b``, ``loss_out[i] = mean(loss(M))``, ``grad_out[i] = [scale * R.T @ X_r, R.sum(0)] / m``."""
    n = offsets.shape[0] - 1
    want_loss, want_grad = loss_out.shape[0] > 0, grad_out.shape[0] > 0
    for i in prange(n):
        w = W[0] if W.shape[0] == 1 else W[i]
        first = offsets[i]
        count = rows.shape[1] if rows.shape[1] > 0 else offsets[i + 1] - first
        M = np.empty(2 * n_out + 1, dtype=W.dtype)
        g = grad_out[i] if want_grad else M
        loss = _client_pass(X, data, indices, indptr, dense, d, y, rows[i], first, count, w, kind, n_out, scale,
                            fit_intercept, M, g, want_loss, want_grad)
        if want_loss:
            loss_out[i] = loss


@kernel(fastmath=REDUCTION_MATH)
def local_steps_kernel(X, data, indices, indptr, dense, d, y, offsets, rows, kind, n_out, scale, fit_intercept, D,
                       lr, prox_kind, thetas, w, Z, P):
    """All of a round's local steps, client by client: for ``l < Q``, ``g = grad f_i(P[i]; rows[l, i])``,
    ``Z[i] -= lr * (g + D[i])``, ``P[i] = prox_l(Z[i])`` (separable prox of code ``prox_kind``
    with parameters ``thetas[l]``; IDENTITY copies). ``D`` may be empty (no shift)."""
    n, p = Z.shape
    steps = rows.shape[0]
    for i in prange(n):
        first = offsets[i]
        count = rows.shape[2] if rows.shape[2] > 0 else offsets[i + 1] - first
        M = np.empty(2 * n_out + 1, dtype=Z.dtype)
        g = np.empty(p, dtype=Z.dtype)
        z = Z[i]
        for step in range(steps):
            _client_pass(X, data, indices, indptr, dense, d, y, rows[step, i], first, count, P[i], kind, n_out, scale,
                         fit_intercept, M, g, False, True)
            if D.shape[0] > 0:
                shift = D[i]
                for j in range(p):
                    z[j] -= lr * (g[j] + shift[j])
            else:
                for j in range(p):
                    z[j] -= lr * g[j]
            _prox_block(prox_kind, thetas[step], w, Z, i, 0, p, P)
