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
from fedopt.kernels.cpu._jit import REDUCTION_MATH, function, inline, kernel
from fedopt.kernels.cpu.elementwise import _prox_block
from fedopt.kernels.cpu.models import _momentum_step, _node_parameters, _row_thetas, _row_value, _track

#: Rows per pass of a full local gradient: bounds the buffers (a client may hold all the data).
CHUNK = 256
#: Passes over at most this many rows do their forward product ``A W1^T`` with loops, longer ones
#: with BLAS. Measured on one Zen 5 core, ``(8, 64) @ (64, 32)``: loops 0.44 us, BLAS 1.2 us; at 32
#: rows of 784 features they are even, at 64 BLAS is 1.2x faster (float64; float32 alike).
LOOP_ROWS = 32
#: The same for the gradient product ``dA^T A``, whose loops lose from 16 rows of 784 features on
#: (8 rows: loops 0.54 us against 1.0 us at 64 features, 15 us against 19 us at 784).
BACKWARD_LOOP_ROWS = 12


# ---------------------------------------------------------------------------- small products
@function(fastmath=REDUCTION_MATH)
def _times_transpose(A, B, C, zero):
    """``C = A B^T`` for ``A (m, n)``, ``B (r, n)``, ``C (m, r)``: blocks of four rows of ``A``
    against two rows of ``B``, so that every element loaded serves several sums."""
    m, r = A.shape[0], B.shape[0]
    blocked = m - m % 4
    for t in range(0, blocked, 4):
        _four_rows_times_transpose(A, B, C, t, zero)
    for t in range(blocked, m):  # the last rows, one at a time
        a = A[t]
        for u in range(r):
            b = B[u]
            s = zero
            for j in range(a.shape[0]):
                s += a[j] * b[j]
            C[t, u] = s


@inline
def _four_rows_times_transpose(A, B, C, t, zero):
    """Rows ``t .. t + 3`` of ``C = A B^T``."""
    a0, a1, a2, a3 = A[t], A[t + 1], A[t + 2], A[t + 3]
    r = B.shape[0]
    for u in range(0, r - 1, 2):
        b0, b1 = B[u], B[u + 1]
        s0 = s1 = s2 = s3 = q0 = q1 = q2 = q3 = zero
        for j in range(a0.shape[0]):
            x0, x1, x2, x3, y0, y1 = a0[j], a1[j], a2[j], a3[j], b0[j], b1[j]
            s0 += x0 * y0
            s1 += x1 * y0
            s2 += x2 * y0
            s3 += x3 * y0
            q0 += x0 * y1
            q1 += x1 * y1
            q2 += x2 * y1
            q3 += x3 * y1
        C[t, u], C[t + 1, u], C[t + 2, u], C[t + 3, u] = s0, s1, s2, s3
        C[t, u + 1], C[t + 1, u + 1], C[t + 2, u + 1], C[t + 3, u + 1] = q0, q1, q2, q3
    if r % 2:  # the last row of B
        b0 = B[r - 1]
        s0 = s1 = s2 = s3 = zero
        for j in range(a0.shape[0]):
            y0 = b0[j]
            s0 += a0[j] * y0
            s1 += a1[j] * y0
            s2 += a2[j] * y0
            s3 += a3[j] * y0
        C[t, r - 1], C[t + 1, r - 1], C[t + 2, r - 1], C[t + 3, r - 1] = s0, s1, s2, s3


@function(fastmath=REDUCTION_MATH)
def _add_transpose_times(S, A, G):
    """``G += S^T A`` for ``S (m, r)``, ``A (m, n)``, ``G (r, n)``: two rows of ``G`` at a time,
    each updated once per eight rows of ``A``."""
    m, r = S.shape
    for u in range(0, r - 1, 2):
        g, f = G[u], G[u + 1]
        blocked = m - m % 8
        for t in range(0, blocked, 8):
            _add_eight_rows(S, A, t, u, g, f)
        for t in range(blocked, m):
            v, w, a = S[t, u], S[t, u + 1], A[t]
            for j in range(a.shape[0]):
                g[j] += v * a[j]
                f[j] += w * a[j]
    if r % 2:  # the last row of G
        g = G[r - 1]
        for t in range(m):
            v, a = S[t, r - 1], A[t]
            for j in range(a.shape[0]):
                g[j] += v * a[j]


@inline
def _add_eight_rows(S, A, t, u, g, f):
    """``g += S[t:t+8, u] A[t:t+8]`` and ``f += S[t:t+8, u+1] A[t:t+8]`` in one pass over ``g, f``."""
    a0, a1, a2, a3, a4, a5, a6, a7 = A[t], A[t + 1], A[t + 2], A[t + 3], A[t + 4], A[t + 5], A[t + 6], A[t + 7]
    v0, v1, v2, v3 = S[t, u], S[t + 1, u], S[t + 2, u], S[t + 3, u]
    v4, v5, v6, v7 = S[t + 4, u], S[t + 5, u], S[t + 6, u], S[t + 7, u]
    w0, w1, w2, w3 = S[t, u + 1], S[t + 1, u + 1], S[t + 2, u + 1], S[t + 3, u + 1]
    w4, w5, w6, w7 = S[t + 4, u + 1], S[t + 5, u + 1], S[t + 6, u + 1], S[t + 7, u + 1]
    for j in range(g.shape[0]):
        x0, x1, x2, x3, x4, x5, x6, x7 = a0[j], a1[j], a2[j], a3[j], a4[j], a5[j], a6[j], a7[j]
        g[j] += (v0 * x0 + v1 * x1 + v2 * x2 + v3 * x3) + (v4 * x4 + v5 * x5 + v6 * x6 + v7 * x7)
        f[j] += (w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3) + (w4 * x4 + w5 * x5 + w6 * x6 + w7 * x7)


# -------------------------------------------------------------------------------- one client
@function(fastmath=REDUCTION_MATH)
def _client_loss_grad(X, y, sample_weight, rows, first, count, w, h, k, kind, scale, g, want_grad, A, H, S, T,
                      G1):
    """Mean loss of one client at ``w`` (its minibatch ``rows``, or its ``count`` rows from
    ``first`` when ``rows`` is empty); with ``want_grad`` the gradient goes to ``g``. ``kind`` is
    SOFTMAX (``k`` classes) or LEAST_SQUARES (``k = 1``). ``sample_weight`` (by global row, in the
    parameters' dtype) multiplies each row's loss and output residual; None for no weights.

    ``A``, ``H``, ``S``, ``T`` are ``(chunk, d)``, ``(chunk, h)``, ``(chunk, k)``, ``(chunk, h)``
    buffers, ``G1`` an ``(h, d)`` one used when the rows take more than one chunk.
    """
    d = X.shape[1]
    hd = h * d
    W1, b1 = w[:hd].reshape(h, d), w[hd : hd + h]
    W2 = w[hd + h : hd + h + k * h].reshape(k, h)
    zero = scale - scale  # 0 and 1 in the parameters' dtype: float32 stays float32
    one = zero + 1
    inv_count = one / count
    chunk = A.shape[0]
    loss = 0.0
    if want_grad:
        g[:] = 0
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        a, hidden, out, slope = A[:m], H[:m], S[:m], T[:m]
        _gather(X, rows, first, start, scale, a)
        if m <= LOOP_ROWS:
            _times_transpose(a, W1, hidden, zero)
        else:
            np.dot(a, W1.T, hidden)
        for t in range(m):
            for u in range(h):
                hidden[t, u] = one / (one + np.exp(-(hidden[t, u] + b1[u])))
        _times_transpose(hidden, W2, out, zero)
        b2 = w[hd + h + k * h :]
        if kind == SOFTMAX:  # one branch per pass: the loops below and above are the same for both losses
            loss += _softmax_residual(y, sample_weight, rows, first, start, b2, inv_count, out)
        else:
            loss += _squared_residual(y, sample_weight, rows, first, start, b2, inv_count, out)
        if want_grad:
            _backward(a, hidden, out, slope, W2, g, G1, m == count, one)
    return loss * inv_count


@function(fastmath=REDUCTION_MATH)
def _gather(X, rows, first, start, scale, a):
    """``a[t] = scale * X[row]`` for the pass's rows ``start .. start + len(a) - 1`` of the client."""
    for t in range(a.shape[0]):
        r = rows[start + t] if rows.shape[0] > 0 else first + start + t
        for c in range(a.shape[1]):
            a[t, c] = scale * X[r, c]


@function(fastmath=REDUCTION_MATH)
def _softmax_residual(y, sample_weight, rows, first, start, b2, inv_count, out):
    """Summed cross-entropy of the scores ``out + b2``; ``out`` becomes ``dloss/dO / count``, both
    times the rows' ``sample_weight`` unless it is None (then the weighted lines are compiled out)."""
    loss = 0.0
    k = out.shape[1]
    for t in range(out.shape[0]):
        r = rows[start + t] if rows.shape[0] > 0 else first + start + t
        label = int(y[r])
        top = -np.inf
        for c in range(k):
            out[t, c] += b2[c]
            top = max(top, out[t, c])
        picked = top - out[t, label]
        total = 0.0
        for c in range(k):
            e = np.exp(out[t, c] - top)
            out[t, c] = e
            total += e
        if sample_weight is None:
            loss += picked
            loss += np.log(total)
            step = inv_count
        else:
            weight = sample_weight[r]
            loss += weight * (picked + np.log(total))
            step = weight * inv_count
        for c in range(k):
            out[t, c] *= step / total
        out[t, label] -= step
    return loss


@function(fastmath=REDUCTION_MATH)
def _squared_residual(y, sample_weight, rows, first, start, b2, inv_count, out):
    """Summed ``(o - y)^2 / 2`` of the single output ``o = out + b2``; ``out`` becomes ``(o - y) / count``,
    both times the rows' ``sample_weight`` unless it is None (then the weighted lines are compiled out)."""
    loss = 0.0
    for t in range(out.shape[0]):
        row = rows[start + t] if rows.shape[0] > 0 else first + start + t
        r = out[t, 0] + b2[0] - y[row]
        if sample_weight is None:
            loss += 0.5 * r * r
            out[t, 0] = r * inv_count
        else:
            weight = sample_weight[row]
            loss += weight * (0.5 * r * r)
            out[t, 0] = r * (weight * inv_count)
    return loss


@function(fastmath=REDUCTION_MATH)
def _backward(a, hidden, out, slope, W2, g, G1, single, one):
    """Adds one pass's gradient to ``g``: ``dW2 = dO^T H``, ``db2``, ``dA = (dO W2) H (1 - H)``
    (into ``slope``), ``db1`` and ``dW1 = dA^T a`` (straight into ``g`` for a ``single`` pass)."""
    m, d = a.shape
    k, h = W2.shape
    hd = h * d
    db1, db2 = g[hd : hd + h], g[hd + h + k * h :]
    _add_transpose_times(out, hidden, g[hd + h : hd + h + k * h].reshape(k, h))
    for t in range(m):
        for c in range(k):
            db2[c] += out[t, c]
    _times(out, W2, slope)
    for t in range(m):
        for u in range(h):
            slope[t, u] *= hidden[t, u] * (one - hidden[t, u])
            db1[u] += slope[t, u]
    if m <= BACKWARD_LOOP_ROWS:
        _add_transpose_times(slope, a, g[:hd].reshape(h, d))
    elif single:  # g[:hd] is still zero: the product goes straight into it
        np.dot(slope.T, a, g[:hd].reshape(h, d))
    else:
        np.dot(slope.T, a, G1)
        g[:hd] += G1.ravel()


@function(fastmath=REDUCTION_MATH)
def _times(A, B, C):
    """``C = A B`` for ``A (m, k)``, ``B (k, n)``, ``C (m, n)``: each row of ``C`` as ``k`` scaled
    rows of ``B`` added up (``k`` is small: the outputs)."""
    for t in range(A.shape[0]):
        row = C[t]
        v, b = A[t, 0], B[0]
        for j in range(row.shape[0]):
            row[j] = v * b[j]
        for c in range(1, A.shape[1]):
            v, b = A[t, c], B[c]
            for j in range(row.shape[0]):
                row[j] += v * b[j]


@function
def _buffers(count, d, h, k, like):
    """The work buffers of :func:`_client_loss_grad` for ``count`` rows, in the dtype of ``like``."""
    chunk = min(count, CHUNK)
    G1 = np.empty((h if count > chunk else 0, d), dtype=like.dtype)
    return (np.empty((chunk, d), dtype=like.dtype), np.empty((chunk, h), dtype=like.dtype),
            np.empty((chunk, k), dtype=like.dtype), np.empty((chunk, h), dtype=like.dtype), G1)


# ------------------------------------------------------------------------------------ kernels
@kernel(fastmath=REDUCTION_MATH)
def mlp_oracle_kernel(X, y, starts, ends, W, rows, h, k, kind, scale, sample_weight, loss_out, grad_out):
    """Loss and gradient of every client (rows ``starts[i]:ends[i]`` or ``rows[i]``): one task per
    client (see :mod:`fedopt.kernels`). ``sample_weight`` is the per-row weights in the dtype of
    ``W``, or None for none."""
    n = starts.shape[0]
    want_grad = grad_out.shape[0] > 0
    for i in prange(n):
        client = np.int64(i)  # the parallel variant's loop index is unsigned
        first = starts[client]
        count = rows.shape[1] if rows.shape[1] > 0 else ends[client] - first
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, W[0])
        g = grad_out[client] if want_grad else W[0]  # W[0]: a placeholder of the same type, never written
        loss = _client_loss_grad(X, y, sample_weight, rows[client], first, count, W[client if W.shape[0] > 1 else 0],
                                 h, k, kind, scale, g, want_grad, A, H, S, T, G1)
        if loss_out.shape[0] > 0:
            loss_out[client] = loss


@kernel(fastmath=REDUCTION_MATH)
def local_steps_mlp_kernel(X, y, starts, ends, rows, h, k, kind, scale, D, lr, prox_kind, thetas, w, Z, P):
    """All of a round's local steps, client by client: for ``l < Q``, ``g = grad f_i(P[i]; rows[l, i])``,
    ``Z[i] -= lr_i * (g + D[i])``, ``P[i] = prox_l(Z[i])`` at ``thetas[l, i]``; a client's state stays in
    cache for its Q steps. ``lr`` is ``(1,)`` or ``(n,)``, ``thetas`` ``(Q, 1, k)`` or ``(Q, n, k)``.
    No sample weights (weighted problems step through :func:`mlp_oracle_kernel`)."""
    n, p = Z.shape
    for i in prange(n):
        client = np.int64(i)
        first = starts[client]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[client] - first
        rate, theta = _row_value(lr, client), _row_thetas(thetas, client)
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, Z[0])
        g = np.empty(p, dtype=Z.dtype)
        z = Z[client]
        for step in range(rows.shape[0]):
            _client_loss_grad(X, y, None, rows[step, client], first, count, P[client], h, k, kind, scale, g, True, A,
                              H, S, T, G1)
            if D.shape[0] > 0:
                shift = D[client]
                for j in range(p):
                    z[j] -= rate * (g[j] + shift[j])
            else:
                for j in range(p):
                    z[j] -= rate * g[j]
            _prox_block(prox_kind, theta[step], w, Z, client, 0, p, P)


@kernel(fastmath=REDUCTION_MATH)
def tracking_steps_mlp_kernel(X, y, starts, ends, rows, h, k, kind, scale, node_scale, gammas, one_minus_gammas,
                              alphas, betas, nesterov, tracking, prox_kind, theta, w, P, NU, MU, Y, G):
    """DEPOSITUM's iterations without gossip, node by node, for the MLP: the loop of
    ``tracking_steps_kernel`` in :mod:`fedopt.kernels.cpu.models` around :func:`_client_loss_grad`;
    a node's five vectors and its buffers stay in cache for its T iterations. No sample weights."""
    n, p = P.shape
    for i in prange(n):
        node = np.int64(i)  # the parallel variant's loop index is unsigned
        first = starts[node]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[node] - first
        gamma, one_minus_gamma, alpha, beta, prox_theta = _node_parameters(node, gammas, one_minus_gammas, alphas,
                                                                           betas, theta)
        A, H, S, T, G1 = _buffers(count, X.shape[1], h, k, P[0])
        g = np.empty(p, dtype=P.dtype)
        x, nu, tracker, last = P[node], NU[node], Y[node], G[node]
        factor = node_scale[node]
        for step in range(rows.shape[0]):
            _momentum_step(nesterov, gamma, one_minus_gamma, alpha, MU[node] if nesterov else nu, nu, tracker, x)
            _prox_block(prox_kind, prox_theta, w, P, node, 0, p, P)
            _client_loss_grad(X, y, None, rows[step, node], first, count, x, h, k, kind, scale, g, True, A, H, S, T,
                              G1)
            _track(g, factor, tracking, beta, tracker, last)
