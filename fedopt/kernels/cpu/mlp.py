"""The MLP oracle and local loop on the CPU: one ``prange`` task per client, BLAS per layer.

Each client gathers its minibatch rows into a buffer that stays in cache and does both large
products (``A W1^T`` forward, ``dA^T A`` for the gradient) on it with one single-threaded BLAS
call each; the sigmoid, the softmax and the small output layer are loops over the same cached
buffers. Both cores then work on whole clients instead of splitting each small product, and
nothing of size ``(n, b, d)`` is written to memory. The caller limits BLAS to one thread while
these kernels run (see :func:`fedopt.kernels.cpu.mlp_oracle`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from fedopt.kernels.cpu._jit import REDUCTION_MATH, function, kernel
from fedopt.kernels.cpu.elementwise import _prox_block
from fedopt.kernels.cpu.models import _row_thetas, _row_value

#: Rows per pass of a full local gradient: bounds the buffers (a client may hold all the data).
CHUNK = 256


@function(fastmath=REDUCTION_MATH)
def _client_loss_grad(X, y, rows, first, count, w, h, k, scale, g, want_grad, A, H, S, G1):
    """Mean loss of one client at ``w`` (its minibatch ``rows``, or its ``count`` rows from
    ``first`` when ``rows`` is empty); with ``want_grad`` the gradient goes to ``g``.

    ``A``, ``H``, ``S`` are ``(chunk, d)``, ``(chunk, h)``, ``(chunk, k)`` buffers, ``G1`` an
    ``(h, d)`` one used when the rows take more than one chunk.
    """
    d = X.shape[1]
    hd = h * d
    W1, b1 = w[:hd].reshape(h, d), w[hd : hd + h]
    W2, b2 = w[hd + h : hd + h + k * h].reshape(k, h), w[hd + h + k * h :]
    one = scale - scale + 1  # 1 in the parameters' dtype: float32 stays float32
    inv_count = one / count
    chunk = A.shape[0]
    loss = 0.0
    if want_grad:
        g[:] = 0
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        a, hidden, out = A[:m], H[:m], S[:m]
        for t in range(m):
            r = rows[start + t] if rows.shape[0] > 0 else first + start + t
            for c in range(d):
                a[t, c] = scale * X[r, c]
        np.dot(a, W1.T, hidden)
        for t in range(m):
            for u in range(h):
                hidden[t, u] = one / (one + np.exp(-(hidden[t, u] + b1[u])))
        np.dot(hidden, W2.T, out)
        # softmax cross-entropy; out becomes dloss/dO divided by the row count
        for t in range(m):
            label = int(y[rows[start + t] if rows.shape[0] > 0 else first + start + t])
            top = -np.inf
            for c in range(k):
                out[t, c] += b2[c]
                top = max(top, out[t, c])
            loss += top - out[t, label]
            total = 0.0
            for c in range(k):
                e = np.exp(out[t, c] - top)
                out[t, c] = e
                total += e
            loss += np.log(total)
            for c in range(k):
                out[t, c] *= inv_count / total
            out[t, label] -= inv_count
        if not want_grad:
            continue
        for c in range(k):  # output layer: dW2 = dO^T H, db2 = sum dO
            for u in range(h):
                s = 0.0
                for t in range(m):
                    s += out[t, c] * hidden[t, u]
                g[hd + h + c * h + u] += s
            s = 0.0
            for t in range(m):
                s += out[t, c]
            g[hd + h + k * h + c] += s
        slope = np.dot(out, W2)  # dA = (dO W2) * H (1 - H)
        for t in range(m):
            for u in range(h):
                slope[t, u] *= hidden[t, u] * (one - hidden[t, u])
        for u in range(h):
            s = 0.0
            for t in range(m):
                s += slope[t, u]
            g[hd + u] += s
        if m == count:  # one chunk: the product goes straight into the gradient
            np.dot(slope.T, a, g[:hd].reshape(h, d))
        else:
            np.dot(slope.T, a, G1)
            g[:hd] += G1.ravel()
    return loss * inv_count


@function
def _buffers(count, d, h, k, like):
    """The work buffers of :func:`_client_loss_grad` for ``count`` rows, in the dtype of ``like``."""
    chunk = min(count, CHUNK)
    G1 = np.empty((h if count > chunk else 0, d), dtype=like.dtype)
    return (np.empty((chunk, d), dtype=like.dtype), np.empty((chunk, h), dtype=like.dtype),
            np.empty((chunk, k), dtype=like.dtype), G1)


@kernel(fastmath=REDUCTION_MATH)
def mlp_oracle_kernel(X, y, starts, ends, W, rows, h, k, scale, loss_out, grad_out):
    """Loss and gradient of every client (rows ``starts[i]:ends[i]`` or ``rows[i]``): one task per
    client (see :mod:`fedopt.kernels`)."""
    n = starts.shape[0]
    want_grad = grad_out.shape[0] > 0
    for i in prange(n):
        client = np.int64(i)  # the parallel variant's loop index is unsigned
        first = starts[client]
        count = rows.shape[1] if rows.shape[1] > 0 else ends[client] - first
        A, H, S, G1 = _buffers(count, X.shape[1], h, k, W[0])
        g = grad_out[client] if want_grad else W[0]  # W[0]: a placeholder of the same type, never written
        loss = _client_loss_grad(X, y, rows[client], first, count, W[client if W.shape[0] > 1 else 0], h, k, scale,
                                 g, want_grad, A, H, S, G1)
        if loss_out.shape[0] > 0:
            loss_out[client] = loss


@kernel(fastmath=REDUCTION_MATH)
def local_steps_mlp_kernel(X, y, starts, ends, rows, h, k, scale, D, lr, prox_kind, thetas, w, Z, P):
    """All of a round's local steps, client by client: for ``l < Q``, ``g = grad f_i(P[i]; rows[l, i])``,
    ``Z[i] -= lr_i * (g + D[i])``, ``P[i] = prox_l(Z[i])`` at ``thetas[l, i]``; a client's state stays in
    cache for its Q steps. ``lr`` is ``(1,)`` or ``(n,)``, ``thetas`` ``(Q, 1, k)`` or ``(Q, n, k)``."""
    n, p = Z.shape
    for i in prange(n):
        client = np.int64(i)
        first = starts[client]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[client] - first
        rate, theta = _row_value(lr, client), _row_thetas(thetas, client)
        A, H, S, G1 = _buffers(count, X.shape[1], h, k, Z[0])
        g = np.empty(p, dtype=Z.dtype)
        z = Z[client]
        for step in range(rows.shape[0]):
            _client_loss_grad(X, y, rows[step, client], first, count, P[client], h, k, scale, g, True, A, H, S, G1)
            if D.shape[0] > 0:
                shift = D[client]
                for j in range(p):
                    z[j] -= rate * (g[j] + shift[j])
            else:
                for j in range(p):
                    z[j] -= rate * g[j]
            _prox_block(prox_kind, theta[step], w, Z, client, 0, p, P)
