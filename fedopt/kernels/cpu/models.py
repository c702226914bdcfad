"""Linear-model oracles as Numba kernels: ``prange`` over clients, one fused pass per sampled row.

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


@inline
def _sigmoid(t):
    """``1 / (1 + exp(-t))`` without overflow."""
    if t >= 0:
        return 1 / (1 + math.exp(-t))
    e = math.exp(t)
    return e / (1 + e)


@inline
def _residual(kind, M, n_out, target):
    """Replace the margins ``M[:n_out]`` of one sample by ``dloss/dM`` and return the sample's loss."""
    if kind == LEAST_SQUARES:
        r = M[0] - target
        M[0] = r
        return 0.5 * r * r
    if kind == LOGISTIC:
        t = -target * M[0]
        M[0] = -target * _sigmoid(t)
        return max(t, 0) + math.log1p(math.exp(-abs(t)))  # log(1 + exp(t)), stable
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
    return math.log(total) + top - picked


@kernel(fastmath=REDUCTION_MATH)
def linear_oracle_dense(X, y, offsets, W, rows, kind, n_out, scale, fit_intercept, loss_out, grad_out):
    """Per client: ``M = scale * X_r @ coef.T + b``, ``loss_out[i] = mean(loss(M))``, ``grad_out[i] = [scale * R.T @ X_r, R.sum(0)] / m``."""
    n, d = offsets.shape[0] - 1, X.shape[1]
    batch = rows.shape[1]
    shared = W.shape[0] == 1
    want_loss, want_grad = loss_out.shape[0] > 0, grad_out.shape[0] > 0
    zero = scale - scale  # 0 in the dtype of the parameters
    for i in prange(n):
        w = W[0] if shared else W[i]
        count = batch if batch > 0 else offsets[i + 1] - offsets[i]
        M = np.empty(n_out + 1, dtype=W.dtype)  # the margins, then 1/count in their dtype
        M[n_out] = 1 / count
        inv_count = M[n_out]  # float32 stays float32 in the loops below
        if want_grad:
            grad_out[i, :] = zero
        total = 0.0
        for t in range(count):
            x = X[rows[i, t] if batch > 0 else offsets[i] + t]
            for c in range(n_out):
                s = zero
                for j in range(d):
                    s += x[j] * w[c * d + j]
                M[c] = s * scale + (w[n_out * d + c] if fit_intercept else zero)
            total += _residual(kind, M, n_out, y[rows[i, t] if batch > 0 else offsets[i] + t])
            if want_grad:
                g = grad_out[i]
                for c in range(n_out):
                    step = M[c] * (scale * inv_count)
                    for j in range(d):
                        g[c * d + j] += step * x[j]
                    if fit_intercept:
                        g[n_out * d + c] += M[c] * inv_count
        if want_loss:
            loss_out[i] = total * inv_count


@kernel(fastmath=REDUCTION_MATH)
def linear_oracle_csr(data, indices, indptr, d, y, offsets, W, rows, kind, n_out, scale, fit_intercept, loss_out, grad_out):
    """:func:`linear_oracle_dense` on CSR rows ``data[indptr[r]:indptr[r+1]]`` at columns ``indices[...]``."""
    n = offsets.shape[0] - 1
    batch = rows.shape[1]
    shared = W.shape[0] == 1
    want_loss, want_grad = loss_out.shape[0] > 0, grad_out.shape[0] > 0
    zero = scale - scale
    for i in prange(n):
        w = W[0] if shared else W[i]
        count = batch if batch > 0 else offsets[i + 1] - offsets[i]
        M = np.empty(n_out + 1, dtype=W.dtype)  # the margins, then 1/count in their dtype
        M[n_out] = 1 / count
        inv_count = M[n_out]  # float32 stays float32 in the loops below
        if want_grad:
            grad_out[i, :] = zero
        total = 0.0
        for t in range(count):
            r = rows[i, t] if batch > 0 else offsets[i] + t
            k0, k1 = indptr[r], indptr[r + 1]
            for c in range(n_out):
                s = zero
                for k in range(k0, k1):
                    s += data[k] * w[c * d + indices[k]]
                M[c] = s * scale + (w[n_out * d + c] if fit_intercept else zero)
            total += _residual(kind, M, n_out, y[r])
            if want_grad:
                g = grad_out[i]
                for c in range(n_out):
                    step = M[c] * (scale * inv_count)
                    for k in range(k0, k1):
                        g[c * d + indices[k]] += step * data[k]
                    if fit_intercept:
                        g[n_out * d + c] += M[c] * inv_count
        if want_loss:
            loss_out[i] = total * inv_count
