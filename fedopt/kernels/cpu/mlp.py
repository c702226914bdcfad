"""The MLP oracle and local loops on the CPU: one ``prange`` task per client, its work in cache.

Each client gathers its minibatch rows into a buffer that stays in cache and runs the whole
network on it: the two large products (``A W1^T`` forward, ``dA^T A`` for the gradient), the
sigmoid, the output loss (softmax cross-entropy, or squared error for a single regression output)
and the small output layer are loops over the same cached buffers. Per-sample weights scale each
row's loss and output residual; without them the kernels get None for the weights and Numba
compiles a variant whose loops are the unweighted ones (no branch or multiply per row). Both
cores then work on whole clients instead of splitting each small product, and nothing of size
``(n, b, d)`` is written to memory.

The large products of a pass over few rows (a minibatch: :data:`LOOP_ROWS`,
:data:`BACKWARD_LOOP_ROWS`) are register-blocked loops; longer passes (full local data, large
minibatches) call single-threaded BLAS, whose fixed cost per call (about 1 us) outweighs its
speed only on small products. The caller limits BLAS to one thread while these kernels run (see
:func:`fedopt.kernels.cpu.mlp_oracle`).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from fedopt.kernels import SOFTMAX
from fedopt.kernels.cpu._jit import REDUCTION_MATH, function, kernel
from fedopt.kernels.cpu.elementwise import prox_row
from fedopt.kernels.cpu.minibatch import (
    CHUNK,
    add_transpose_times,
    exp_in_place,
    gather,
    row_of,
    softmax_residual,
    times,
    times_transpose,
    visited,
)
from fedopt.kernels.cpu.models import _adapt, _node_parameters, _row_thetas, _row_value, _track

#: Passes over at most this many rows do their forward product ``A W1^T`` with loops, longer ones
#: with BLAS. Measured on one Zen 5 core, ``(8, 64) @ (64, 32)``: loops 0.44 us, BLAS 1.2 us; at 32
#: rows of 784 features they are even, at 64 BLAS is 1.2x faster (float64; float32 alike).
LOOP_ROWS = 32
#: The same for the gradient product ``dA^T A``, whose loops lose from 16 rows of 784 features on
#: (8 rows: loops 0.54 us against 1.0 us at 64 features, 15 us against 19 us at 784).
BACKWARD_LOOP_ROWS = 12


# -------------------------------------------------------------------------------- one client
@function(fastmath=REDUCTION_MATH, allocates=True)
def _client_loss_grad(X, y, sample_weight, rows, first, count, w, h, k, kind, scale, g, want_loss, want_grad, A, H,
                      S, T, G1):
    """Mean loss of one client at ``w`` (its minibatch ``rows``, or its ``count`` rows from
    ``first`` when ``rows`` is empty; 0 unless ``want_loss``); with ``want_grad`` the gradient
    goes to ``g``. ``kind`` is
    SOFTMAX (``k`` classes) or LEAST_SQUARES (``k = 1``). ``sample_weight`` (by global row, in the
    parameters' dtype) multiplies each row's loss and output residual; None for no weights.

    ``A``, ``H``, ``T`` are ``(chunk, d)``, ``(chunk, h)``, ``(chunk, h)`` buffers, ``S`` one of
    ``(k + 2) * chunk`` (the outputs, a row per output, then the softmax's work), ``G1`` an
    ``(h, d)`` one used when the rows take more than one chunk.
    """
    d = X.shape[1]
    hd = h * d
    W1, b1 = w[:hd].reshape(h, d), w[hd : hd + h]
    W2, b2 = w[hd + h : hd + h + k * h].reshape(k, h), w[hd + h + k * h :]
    zero = scale - scale  # 0, 1 and 1 / count in the parameters' dtype: float32 stays float32
    one = scale / scale  # scale > 0 (`zero + 1` or `one / count` would be float64: integers promote float32)
    A[0, 0] = 1 / count  # A is free until the first gather
    inv_count = A[0, 0]
    chunk = A.shape[0]
    loss = 0.0
    if want_grad:
        g[:] = 0
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        a, hidden, slope = A[:m], H[:m], T[:m]
        scores = S[: k * m].reshape(k, m)  # a row per output: see softmax_residual
        out = scores.T  # (rows, outputs)
        gather(X, rows, first, start, scale, a)
        if m <= LOOP_ROWS:
            times_transpose(a, W1, hidden, zero)
        else:
            np.dot(a, W1.T, hidden)
        _sigmoid(hidden, b1, one)
        times_transpose(hidden, W2, out, zero)
        if kind == SOFTMAX:  # one branch per pass: the loops below and above are the same for both losses
            work = S[k * chunk : k * chunk + 2 * m]
            loss += softmax_residual(y, sample_weight, rows, first, start, b2, inv_count, want_loss, scores, work)
        else:
            loss += _squared_residual(y, sample_weight, rows, first, start, b2, inv_count, want_loss, out)
        if want_grad:
            _backward(a, hidden, out, slope, W2, g, G1, m == count, one)
    return loss * inv_count


@function(fastmath=REDUCTION_MATH)
def _sigmoid(hidden, b1, one):
    """``hidden = 1 / (1 + exp(-(hidden + b1)))``, row by row, with one vectorized exp over the
    block (a scalar ``np.exp`` per entry took 0.95 us of a 4.1 us step at the sweep shape)."""
    m, h = hidden.shape
    for t in range(m):
        for u in range(h):
            hidden[t, u] = -(hidden[t, u] + b1[u])
    flat = hidden.reshape(m * h)
    exp_in_place(flat)
    for i in range(m * h):
        flat[i] = one / (one + flat[i])


@function(fastmath=REDUCTION_MATH)
def _squared_residual(y, sample_weight, rows, first, start, b2, inv_count, want_loss, out):
    """Summed ``(o - y)^2 / 2`` of the single output ``o = out + b2`` (0 unless ``want_loss``); ``out``
    becomes ``(o - y) / count``, both times the rows' ``sample_weight`` unless it is None (then the
    weighted lines are compiled out)."""
    loss = 0.0
    for t in range(out.shape[0]):
        row = row_of(rows, first, start + t)
        r = out[t, 0] + b2[0] - y[row]
        weight = inv_count if sample_weight is None else sample_weight[row] * inv_count
        if want_loss:
            loss += 0.5 * r * r if sample_weight is None else sample_weight[row] * (0.5 * r * r)
        out[t, 0] = r * weight
    return loss


@function(fastmath=REDUCTION_MATH, allocates=True)
def _backward(a, hidden, out, slope, W2, g, G1, single, one):
    """Adds one pass's gradient to ``g``: ``dW2 = dO^T H``, ``db2``, ``dA = (dO W2) H (1 - H)``
    (into ``slope``), ``db1`` and ``dW1 = dA^T a`` (straight into ``g`` for a ``single`` pass)."""
    m, d = a.shape
    k, h = W2.shape
    hd = h * d
    db1, db2 = g[hd : hd + h], g[hd + h + k * h :]
    add_transpose_times(out, hidden, g[hd + h : hd + h + k * h].reshape(k, h))
    for t in range(m):
        for c in range(k):
            db2[c] += out[t, c]
    times(out, W2, slope)
    for t in range(m):
        for u in range(h):
            slope[t, u] *= hidden[t, u] * (one - hidden[t, u])
            db1[u] += slope[t, u]
    if m <= BACKWARD_LOOP_ROWS:
        add_transpose_times(slope, a, g[:hd].reshape(h, d))
    elif single:  # g[:hd] is still zero: the product goes straight into it
        np.dot(slope.T, a, g[:hd].reshape(h, d))
    else:
        np.dot(slope.T, a, G1)
        g[:hd] += G1.ravel()


@function(allocates=True)
def _buffers(count, d, h, k, like):
    """The work buffers of :func:`_client_loss_grad` for ``count`` rows, in the dtype of ``like``."""
    chunk = min(count, CHUNK)
    G1 = np.empty((h if count > chunk else 0, d), dtype=like.dtype)
    return (np.empty((chunk, d), dtype=like.dtype), np.empty((chunk, h), dtype=like.dtype),
            np.empty((k + 2) * chunk, dtype=like.dtype), np.empty((chunk, h), dtype=like.dtype), G1)


# ------------------------------------------------------------------------------------ kernels
@kernel(fastmath=REDUCTION_MATH)
def mlp_oracle_kernel(X, y, starts, ends, order, W, rows, h, k, kind, scale, sample_weight, loss_out, grad_out):
    """Loss and gradient of every client (rows ``starts[i]:ends[i]`` or ``rows[i]``): one task per
    client, in ``order`` (see :func:`visited`). ``sample_weight`` is the per-row weights in the
    dtype of ``W``, or None for none."""
    n = starts.shape[0]
    want_loss, want_grad = loss_out.shape[0] > 0, grad_out.shape[0] > 0
    for i in prange(n):
        client = visited(order, i)
        first = starts[client]
        count = rows.shape[1] if rows.shape[1] > 0 else ends[client] - first
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, W[0])
        g = grad_out[client] if want_grad else W[0]  # W[0]: a placeholder of the same type, never written
        loss = _client_loss_grad(X, y, sample_weight, rows[client], first, count, W[client if W.shape[0] > 1 else 0],
                                 h, k, kind, scale, g, want_loss, want_grad, A, H, S, T, G1)
        if want_loss:
            loss_out[client] = loss


@kernel(fastmath=REDUCTION_MATH)
def local_steps_mlp_kernel(X, y, starts, ends, order, rows, h, k, kind, scale, D, lr, prox_kind, thetas, w, Z, P):
    """All of a round's local steps, client by client: for ``l < Q``, ``g = grad f_i(P[i]; rows[l, i])``,
    ``Z[i] -= lr_i * (g + D[i])``, ``P[i] = prox_l(Z[i])`` at ``thetas[l, i]``; a client's state stays in
    cache for its Q steps. ``lr`` is ``(1,)`` or ``(n,)``, ``thetas`` ``(Q, 1, k)`` or ``(Q, n, k)``.
    No sample weights (weighted problems step through :func:`mlp_oracle_kernel`). Clients in
    ``order`` (see :func:`visited`)."""
    n, p = Z.shape
    for i in prange(n):
        client = visited(order, i)
        first = starts[client]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[client] - first
        rate, theta = _row_value(lr, client), _row_thetas(thetas, client)
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, Z[0])
        g = np.empty(p, dtype=Z.dtype)
        z = Z[client]
        for step in range(rows.shape[0]):
            _client_loss_grad(X, y, None, rows[step, client], first, count, P[client], h, k, kind, scale, g, False,
                              True, A, H, S, T, G1)
            if D.shape[0] > 0:
                shift = D[client]
                for j in range(p):
                    z[j] -= rate * (g[j] + shift[j])
            else:
                for j in range(p):
                    z[j] -= rate * g[j]
            prox_row(prox_kind, theta[step], w, Z, client, P)


@kernel(fastmath=REDUCTION_MATH)
def tracking_steps_mlp_kernel(X, y, starts, ends, order, rows, h, k, kind, scale, node_scale, gammas, one_minus_gammas,
                              alphas, betas, nesterov, tracking, adapt_first, adapt_after, prox_kind, theta, w, P, NU,
                              MU, Y, G):
    """DEPOSITUM's iterations without gossip, node by node, for the MLP: the loop of
    ``tracking_steps_kernel`` in :mod:`fedopt.kernels.cpu.models` around :func:`_client_loss_grad`;
    a node's five vectors and its buffers stay in cache for its T iterations. No sample weights.
    Nodes in ``order`` (see :func:`visited`)."""
    n, p = P.shape
    for i in prange(n):
        node = visited(order, i)
        first = starts[node]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[node] - first
        gamma, one_minus_gamma, alpha, beta, prox_theta = _node_parameters(node, gammas, one_minus_gammas, alphas,
                                                                           betas, theta)
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, P[0])
        g = np.empty(p, dtype=P.dtype)
        x, tracker, last = P[node], Y[node], G[node]
        factor = node_scale[node]
        for step in range(rows.shape[0] + adapt_after):
            if step > 0 or adapt_first:
                _adapt(nesterov, gamma, one_minus_gamma, alpha, prox_kind, prox_theta, w, node, P, NU, MU, Y)
            if step == rows.shape[0]:
                break
            _client_loss_grad(X, y, None, rows[step, node], first, count, x, h, k, kind, scale, g, False, True, A, H,
                              S, T, G1)
            _track(g, factor, tracking, beta, tracker, last)
