"""Linear-model oracles and fused local steps as Numba kernels: ``prange`` over clients.

Each row is read from memory once: its margins (forward) and its share of the gradient
(backward) are computed while it sits in L1, so the floor is streaming the sampled rows of ``X``
once. Dense rows may be stored as uint8 and are scaled on the fly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels import LEAST_SQUARES, SOFT, SOFTMAX
from fedopt.kernels.cpu._jit import REDUCTION_MATH, function, inline, kernel, prefetch
from fedopt.kernels.cpu.elementwise import _soft, prox_row
from fedopt.kernels.cpu.minibatch import (
    CHUNK,
    add_transpose_times,
    gather,
    row_of,
    softmax_residual,
    times_transpose,
    visited,
)


@inline
def _scalar_residual(kind, margin, target, want_loss):
    """``(dloss/dmargin, loss)`` of one sample of a single-output model (LEAST_SQUARES or LOGISTIC).

    The loss is 0 unless ``want_loss``."""
    if kind == LEAST_SQUARES:
        r = margin - target
        return r, 0.5 * r * r
    t = -target * margin
    e = math.exp(-abs(t))  # one exp serves the sigmoid and the loss, without overflow
    one = target * target  # labels are +-1: a 1 in the data's dtype (a literal 1 made float32 float64)
    r = -target * ((one if t >= 0 else e) / (one + e))
    return r, (max(t, 0) + math.log1p(e) if want_loss else 0.0)  # log(1 + exp(t))


@inline
def _residual(kind, M, n_out, target, want_loss):
    """Replace the margins ``M[:n_out]`` of one sample by ``dloss/dM``; return the sample's loss (0
    unless ``want_loss``)."""
    if kind != SOFTMAX:
        M[0], loss = _scalar_residual(kind, M[0], target, want_loss)
        return loss
    code = int(target)  # loss = logsumexp(M) - M[code]
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
def _weigh(M, n_out, weight, loss):
    """Scale one sample's residuals ``M[:n_out]`` by its weight; return its weighted loss."""
    for c in range(n_out):
        M[c] *= weight
    return loss * weight


@inline
def _row_value(values, i):
    """Row ``i``'s entry of a per-row parameter array (a value, or a row of prox parameters): ``values[0]``
    when one entry serves every row."""
    return values[0] if values.shape[0] == 1 else values[i]


@inline
def _row_thetas(thetas, i):
    """Row ``i``'s ``(Q, k)`` prox parameters of a ``(Q, 1, k)`` (shared) or ``(Q, n, k)`` array."""
    return thetas[:, 0] if thetas.shape[1] == 1 else thetas[:, i]


@function(fastmath=REDUCTION_MATH)
def _single_output_pass(X, d, y, sample_weight, rows, first, count, w, kind, scale, fit_intercept, g, inv_count,
                        want_loss, want_grad):
    """:func:`_client_pass` for dense rows and one output: four rows at a time.

    Four dot products share one loop over the features, their four residuals are independent
    (their exps overlap), and one loop adds the four rows to the gradient, so the rows are read
    from L1 while a step's latency is spread over four rows. A short last group repeats its last
    row with weight zero. Sample weights (or None) scale the residuals: see :func:`_client_pass`.
    """
    zero = scale - scale
    coef = w[:d]
    bias = w[d] if fit_intercept else zero
    total = 0.0
    for t in range(0, count, 4):
        last = count - 1
        r1, r2 = row_of(rows, first, t), row_of(rows, first, min(t + 1, last))
        r3, r4 = row_of(rows, first, min(t + 2, last)), row_of(rows, first, min(t + 3, last))
        x1, x2, x3, x4 = X[r1], X[r2], X[r3], X[r4]
        s1 = s2 = s3 = s4 = zero
        for j in range(d):
            s1 += x1[j] * coef[j]
            s2 += x2[j] * coef[j]
            s3 += x3[j] * coef[j]
            s4 += x4[j] * coef[j]
        e1, loss1 = _scalar_residual(kind, s1 * scale + bias, y[r1], want_loss)
        e2, loss2 = _scalar_residual(kind, s2 * scale + bias, y[r2], want_loss)
        e3, loss3 = _scalar_residual(kind, s3 * scale + bias, y[r3], want_loss)
        e4, loss4 = _scalar_residual(kind, s4 * scale + bias, y[r4], want_loss)
        if sample_weight is not None:
            e1, loss1 = e1 * sample_weight[r1], loss1 * sample_weight[r1]
            e2, loss2 = e2 * sample_weight[r2], loss2 * sample_weight[r2]
            e3, loss3 = e3 * sample_weight[r3], loss3 * sample_weight[r3]
            e4, loss4 = e4 * sample_weight[r4], loss4 * sample_weight[r4]
        if t + 1 > last:  # rows past the last one count for nothing
            e2, loss2 = zero, 0.0
        if t + 2 > last:
            e3, loss3 = zero, 0.0
        if t + 3 > last:
            e4, loss4 = zero, 0.0
        total += loss1 + loss2 + loss3 + loss4
        if want_grad:
            step = scale * inv_count
            a1, a2, a3, a4 = e1 * step, e2 * step, e3 * step, e4 * step
            for j in range(d):
                g[j] += a1 * x1[j] + a2 * x2[j] + a3 * x3[j] + a4 * x4[j]
            if fit_intercept:
                g[d] += (e1 + e2 + e3 + e4) * inv_count
    return total * inv_count


@function(fastmath=REDUCTION_MATH)
def _softmax_chunk(X, y, sample_weight, rows, first, start, scale, coef, intercepts, a, scores, work, grad,
                   grad_intercepts, inv_count, want_loss, want_grad, fit_intercept, zero):
    """One chunk of a client's dense softmax rows, ``start .. start + len(a) - 1``: the rows gathered
    into ``a``, the margins ``a coef^T`` into ``scores`` (a row per class: see softmax_residual), the
    residuals, and with ``want_grad`` ``grad += R^T a`` and the intercepts' sums; returns the
    chunk's summed loss (0 unless ``want_loss``). The products read the copy rather than the rows
    where they are in ``X``: a digits step's gradient product took 0.79 us on its 32 rows in ``X``
    against 0.54 us on the copy, more than the copy's 0.14 us (one Zen 5 core)."""
    gather(X, rows, first, start, scale, a)
    times_transpose(a, coef, scores.T, zero)
    loss = softmax_residual(y, sample_weight, rows, first, start, intercepts, inv_count, want_loss, scores, work)
    if want_grad:
        add_transpose_times(scores.T, a, grad)
        if fit_intercept:
            for c in range(scores.shape[0]):
                grad_intercepts[c] += scores[c].sum()
    return loss


@inline
def _softmax_buffers(scratch, chunk, d, k):
    """``(A, S, work)`` in ``scratch`` (:func:`_scratch` after its first ``k + 1`` values): the
    gathered rows ``(chunk, d)``, the scores (``k * chunk`` values) and the residual's work."""
    A = scratch[: chunk * d].reshape(chunk, d)
    return A, scratch[chunk * d : chunk * (d + k)], scratch[chunk * (d + k) : chunk * (d + k + 2)]


@function(fastmath=REDUCTION_MATH)
def _softmax_pass(X, y, sample_weight, rows, first, count, w, k, scale, fit_intercept, g, inv_count, want_loss,
                  want_grad, scratch):
    """:func:`_client_pass` for dense rows of a softmax model: the summed loss of the rows (not yet
    divided by ``count``). The rows go in chunks through a small buffer ``A``, and the margins
    ``A coef^T`` and the gradient ``R^T A`` are register-blocked products on it, as in the MLP,
    with a vectorized softmax between them (:func:`_softmax_chunk`). A local step on the digits
    (32 rows, 64 features, 10 classes) took 5.3 us with rows in pairs and one class at a time,
    then 2.6-2.8 us here (1.9-2.3 us in :func:`_softmax_steps`, whose step takes 1.8-1.9 us since
    the helpers compile without reference counts). ``scratch`` holds the buffers (:func:`_scratch`).
    """
    d = X.shape[1]
    coef, intercepts = w[: k * d].reshape(k, d), w[k * d :]  # no intercepts: empty
    chunk = min(count, CHUNK)
    zero = scale - scale
    A, S, work = _softmax_buffers(scratch, chunk, d, k)
    grad = g[: k * d].reshape(k, d) if want_grad else A[:0]  # g may be too short when no gradient is wanted
    total = 0.0
    for start in range(0, count, chunk):
        m = min(chunk, count - start)
        total += _softmax_chunk(X, y, sample_weight, rows, first, start, scale, coef, intercepts, A[:m],
                                S[: k * m].reshape(k, m), work, grad, g[k * d :], inv_count, want_loss, want_grad,
                                fit_intercept, zero)
    return total


@function(fastmath=REDUCTION_MATH)
def _csr_pass(data, indices, indptr, d, y, sample_weight, rows, first, count, w, kind, n_out, scale, fit_intercept,
              center, M, g, inv_count, want_loss, want_grad):
    """:func:`_client_pass` on CSR rows, into a zeroed ``g``. With ``center`` (``d`` means ``mu``, or
    None) the rows are ``X - mu`` without forming them (the problems' ``center`` option): the margins
    take ``b - scale * coef @ mu`` as their intercepts, and the coefficients' gradient loses ``scale *
    mu * dF/db`` (the chain rule of that change of variables), ``O(p)`` a pass.

    Indices are cast to unsigned, as in :mod:`fedopt.kernels.cpu.rows`: Numba then skips the
    wrap-around test of a negative index on every gather and scatter, which made a row of 14
    nonzeros about 3x slower (a9a-shaped one-hot rows, Emerald Rapids)."""
    zero = scale - scale
    intercepts, slopes = M[n_out + 1 : 2 * n_out + 1], M[2 * n_out + 1 : 3 * n_out + 1]
    for c in range(n_out):
        b = w[n_out * d + c] if fit_intercept else zero
        if center is not None:
            s = zero
            for j in range(d):
                s += w[c * d + j] * center[j]
            b -= scale * s
        intercepts[c] = b
        slopes[c] = zero
    total = 0.0
    for t in range(count):
        r = row_of(rows, first, t)
        k0, k1 = np.uint64(indptr[r]), np.uint64(indptr[r + 1])
        for c in range(n_out):
            offset = np.uint64(c * d)
            s = zero
            for k in range(k0, k1):
                s += data[k] * w[offset + np.uint64(indices[k])]
            M[c] = s * scale + intercepts[c]
        loss = _residual(kind, M, n_out, y[r], want_loss)
        if sample_weight is not None:
            loss = _weigh(M, n_out, sample_weight[r], loss)
        total += loss
        if want_grad:
            for c in range(n_out):
                offset, step = np.uint64(c * d), M[c] * (scale * inv_count)
                for k in range(k0, k1):
                    g[offset + np.uint64(indices[k])] += step * data[k]
                slopes[c] += M[c] * inv_count
    if want_grad:
        for c in range(n_out):
            if fit_intercept:
                g[n_out * d + c] = slopes[c]
            if center is not None:
                shift = scale * slopes[c]
                for j in range(d):
                    g[c * d + j] -= shift * center[j]
    return total * inv_count


@function(fastmath=REDUCTION_MATH)
def _client_pass(X, data, indices, indptr, dense, d, y, sample_weight, rows, first, count, w, kind, n_out, scale,
                 fit_intercept, center, M, g, want_loss, want_grad):
    """Mean loss of one client over ``count`` rows (when ``want_loss``), and its gradient into ``g``
    (when ``want_grad``).

    The rows are ``rows[:count]`` (global indices) when ``rows`` is not empty, else the client's
    contiguous rows ``first, ..., first + count - 1``. ``X`` is dense when ``dense``, else
    ``data, indices, indptr`` hold CSR rows (centered by ``center``, see :func:`_csr_pass`; None
    for dense rows); ``d`` is the number of features. ``sample_weight``
    (by global row) multiplies each row's loss and residuals; None for no weights, and then Numba
    compiles a variant without the branches that read it (the fused loops run exactly the
    unweighted code). ``M`` is scratch from :func:`_scratch`. Each row is read once for its
    margins and its gradient share: dense rows by fours with one output
    (:func:`_single_output_pass`), as blocks with softmax (:func:`_softmax_pass`).
    """
    M[n_out] = 1 / count
    inv_count = M[n_out]  # 1/count in the parameters' dtype: float32 stays float32 below
    zero = scale - scale
    if want_grad:
        g[:] = zero
    if dense and kind != SOFTMAX:
        return _single_output_pass(X, d, y, sample_weight, rows, first, count, w, kind, scale, fit_intercept, g,
                                   inv_count, want_loss, want_grad)
    if dense:
        return _softmax_pass(X, y, sample_weight, rows, first, count, w, n_out, scale, fit_intercept, g, inv_count,
                             want_loss, want_grad, M[n_out + 1 :]) * inv_count
    return _csr_pass(data, indices, indptr, d, y, sample_weight, rows, first, count, w, kind, n_out, scale,
                     fit_intercept, center, M, g, inv_count, want_loss, want_grad)


@inline
def _scratch(dense, kind, count, d, n_out, like):
    """The scratch ``M`` of a client's :func:`_client_pass` calls, in the dtype of ``like``: ``n_out + 1``
    values, then :func:`_csr_pass`'s intercepts and slopes for CSR rows, or for dense softmax rows the
    buffers of :func:`_softmax_pass` (allocated once per client rather than once per step: 0.12 us of
    a 2.8 us step)."""
    size = n_out + 1
    if not dense:
        size += 2 * n_out
    elif kind == SOFTMAX:
        chunk = min(count, CHUNK)
        size += chunk * (d + n_out + 2)
    return np.empty(size, dtype=like.dtype)


@kernel(fastmath=REDUCTION_MATH)
def linear_oracle_kernel(X, data, indices, indptr, dense, d, y, starts, ends, order, W, rows, kind, n_out, scale,
                         fit_intercept, sample_weight, loss_out, grad_out):
    """Per client (rows ``starts[i]:ends[i]`` or ``rows[i]``): ``M = scale * X_r @ coef.T + b``,
    ``loss_out[i] = mean(s_r * loss(M))``, ``grad_out[i] = [scale * R.T @ X_r, R.sum(0)] / m`` with
    ``R = s_r * dloss/dM`` (``s_r = 1`` when ``sample_weight`` is None); clients in ``order`` (see
    :func:`visited`)."""
    n = starts.shape[0]
    want_loss, want_grad = loss_out.shape[0] > 0, grad_out.shape[0] > 0
    for k in prange(n):
        i = visited(order, k)
        w = W[0] if W.shape[0] == 1 else W[i]
        first = starts[i]
        count = rows.shape[1] if rows.shape[1] > 0 else ends[i] - first
        M = _scratch(dense, kind, count, d, n_out, W)
        g = grad_out[i] if want_grad else M
        loss = _client_pass(X, data, indices, indptr, dense, d, y, sample_weight, rows[i], first, count, w, kind, n_out,
                            scale, fit_intercept, None, M, g, want_loss, want_grad)
        if want_loss:
            loss_out[i] = loss


@function
def _prefetch_next_rows(X, rows, client, following, step, count, d):
    """Start loading every cache line of the next minibatch's rows of ``X``: this client's next
    step, or at its last the first of client ``following`` (the one visited next; none if
    negative). Minibatch rows are random reads: the loads then overlap the current step's
    arithmetic (a softmax step on the digits took 4.4 us without, 3.3 us with)."""
    if rows.shape[2] == 0 or (step + 1 == rows.shape[0] and following < 0):
        return
    batch = rows[step + 1, client] if step + 1 < rows.shape[0] else rows[0, following]
    per_line = max(1, 64 // X.itemsize)
    for t in range(count):
        for j in range(0, d, per_line):
            prefetch(X, batch[t], j)


@function(fastmath=REDUCTION_MATH)
def _single_output_steps(X, d, y, rows, client, following, first, count, kind, scale, fit_intercept, shift, lr,
                         prox_kind, thetas, w, Z, P, g):
    """The local steps of client row ``client`` for dense rows and one output (least squares,
    logistic), with ``g`` for the gradient; ``following`` as in :func:`_prefetch_next_rows`.

    Compiled apart from :func:`local_steps_kernel`'s general path, and with the update written
    out here rather than in a helper: its loops then run as fast as a standalone loop (an inlined
    helper measured about 10 % slower). Soft-thresholding (l1) is fused with the update.
    """
    z, x = Z[client], P[client]
    g[0] = 1 / count
    inv_count = g[0]  # 1/count in the parameters' dtype: float32 stays float32
    zero = scale - scale
    for step in range(rows.shape[0]):
        _prefetch_next_rows(X, rows, client, following, step, count, d)
        g[:] = zero
        _single_output_pass(X, d, y, None, rows[step, client], first, count, x, kind, scale, fit_intercept, g,
                            inv_count, False, True)
        if prox_kind == SOFT:
            tau, factor = thetas[step, 0], thetas[step, 1]
            for j in range(z.shape[0]):
                v = z[j] - lr * (g[j] + shift[j])
                z[j] = v
                x[j] = factor * _soft(v, tau)
        else:
            for j in range(z.shape[0]):
                z[j] -= lr * (g[j] + shift[j])
            prox_row(prox_kind, thetas[step], w, Z, client, P)


@function(fastmath=REDUCTION_MATH)
def _softmax_steps(X, y, rows, client, following, first, count, k, scale, fit_intercept, shift, lr, prox_kind, thetas,
                   w, Z, P, g, M):
    """The local steps of client row ``client`` for dense rows of a softmax model with ``k``
    classes (``following`` as in :func:`_prefetch_next_rows`), with ``g`` for the gradient and
    ``M`` from :func:`_scratch`: :func:`_softmax_pass` with its buffers' views made once per
    client rather than once per step, and soft-thresholding fused with the update, as in
    :func:`_single_output_steps`. A step on the digits (32 rows, 64 features, 10
    classes, one thread) was 1.15-1.37x faster than through :func:`_client_pass` (2.6-2.8 against
    1.9-2.3 us, each process timing both, with the helpers still reference-counted), with bitwise
    the same result; it takes 1.8-1.9 us now."""
    z, x = Z[client], P[client]
    d, p = X.shape[1], z.shape[0]
    chunk = min(count, CHUNK)
    M[k] = 1 / count
    inv_count = M[k]  # 1/count in the parameters' dtype: float32 stays float32
    zero = scale - scale
    A, S, work = _softmax_buffers(M[k + 1 :], chunk, d, k)
    full = S.reshape(k, chunk)  # the scores of a whole chunk, a row per class
    coef, intercepts = x[: k * d].reshape(k, d), x[k * d :]  # views of P[i]: each step updates them in place
    grad, grad_intercepts = g[: k * d].reshape(k, d), g[k * d :]
    for step in range(rows.shape[0]):
        _prefetch_next_rows(X, rows, client, following, step, count, d)
        g[:] = zero
        for start in range(0, count, chunk):
            m = min(chunk, count - start)
            _softmax_chunk(X, y, None, rows[step, client], first, start, scale, coef, intercepts, A[:m],
                           full if m == chunk else S[: k * m].reshape(k, m), work, grad, grad_intercepts, inv_count,
                           False, True, fit_intercept, zero)
        if prox_kind == SOFT:
            tau, factor = thetas[step, 0], thetas[step, 1]
            for j in range(p):
                v = z[j] - lr * (g[j] + shift[j])
                z[j] = v
                x[j] = factor * _soft(v, tau)
        else:
            for j in range(p):
                z[j] -= lr * (g[j] + shift[j])
            prox_row(prox_kind, thetas[step], w, Z, client, P)


@kernel(fastmath=REDUCTION_MATH)
def local_steps_kernel(X, data, indices, indptr, dense, d, y, starts, ends, order, rows, kind, n_out, scale,
                       fit_intercept, center, D, lr, prox_kind, thetas, w, Z, P):
    """All of a round's local steps, client by client: for ``l < Q``, ``g = grad f_i(P[i]; rows[l, i])``,
    ``Z[i] -= lr_i * (g + D[i])``, ``P[i] = prox_l(Z[i])`` (separable prox of code ``prox_kind``
    with parameters ``thetas[l, i]``; IDENTITY copies). ``D`` may be empty (no shift). ``lr`` is
    ``(1,)`` or ``(n,)``, ``thetas`` ``(Q, 1, k)`` or ``(Q, n, k)``: see :func:`_row_value`.
    No sample weights (weighted problems step through :func:`linear_oracle_kernel`). ``center``:
    see :func:`_csr_pass` (CSR rows only; None for none). Clients in ``order`` (see :func:`visited`)."""
    n, p = Z.shape
    for k in prange(n):
        i = visited(order, k)
        first = starts[i]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[i] - first
        shift = D[i] if D.shape[0] > 0 else np.zeros(p, dtype=Z.dtype)
        rate, theta = _row_value(lr, i), _row_thetas(thetas, i)
        g = np.empty(p, dtype=Z.dtype)
        following = visited(order, k + 1) if k + 1 < n else -1
        if dense and kind != SOFTMAX:
            _single_output_steps(X, d, y, rows, i, following, first, count, kind, scale, fit_intercept, shift, rate,
                                 prox_kind, theta, w, Z, P, g)
            continue
        M = _scratch(dense, kind, count, d, n_out, Z)
        if dense:
            _softmax_steps(X, y, rows, i, following, first, count, n_out, scale, fit_intercept, shift, rate, prox_kind,
                           theta, w, Z, P, g, M)
            continue
        z = Z[i]  # CSR rows
        for step in range(rows.shape[0]):
            _client_pass(X, data, indices, indptr, dense, d, y, None, rows[step, i], first, count, P[i], kind,
                         n_out, scale, fit_intercept, center, M, g, False, True)
            for j in range(p):
                z[j] -= rate * (g[j] + shift[j])
            prox_row(prox_kind, theta[step], w, Z, i, P)


@inline
def _node_parameters(node, gammas, one_minus_gammas, alphas, betas, theta):
    """Node ``node``'s ``(gamma, 1 - gamma, alpha, beta, prox parameters)`` of a tracking kernel's
    arrays, which hold one value (row) or one per node."""
    return (_row_value(gammas, node), _row_value(one_minus_gammas, node), _row_value(alphas, node),
            _row_value(betas, node), _row_value(theta, node))


@function(fastmath=REDUCTION_MATH)
def _momentum_step(nesterov, gamma, one_minus_gamma, alpha, mu, nu, tracker, x, soft, theta):
    """DEPOSITUM's momentum of one node, then ``x -= alpha nu``: Polyak ``nu = gamma nu + (1 - gamma) y``,
    or Nesterov ``mu = gamma mu + (1 - gamma) y``, ``nu = gamma mu + (1 - gamma) y``. With ``soft``,
    also ``x = theta[1] * soft(x, theta[0])`` in the same loop (l1; other proxes follow apart)."""
    if soft and not nesterov:  # the whole adapt step in one pass
        tau, scale = theta[0], theta[1]
        for j in range(x.shape[0]):
            nu[j] = (nu[j] - tracker[j]) * gamma + tracker[j]
            x[j] = scale * _soft(x[j] - nu[j] * alpha, tau)
        return
    if nesterov:
        for j in range(x.shape[0]):
            mu[j] = (mu[j] - tracker[j]) * gamma + tracker[j]
            nu[j] = mu[j] * gamma + tracker[j] * one_minus_gamma
    else:
        for j in range(x.shape[0]):
            nu[j] = (nu[j] - tracker[j]) * gamma + tracker[j]
    if soft:
        tau, scale = theta[0], theta[1]
        for j in range(x.shape[0]):
            x[j] = scale * _soft(x[j] - nu[j] * alpha, tau)
    else:
        for j in range(x.shape[0]):
            x[j] -= nu[j] * alpha


@inline
def _adapt(nesterov, gamma, one_minus_gamma, alpha, prox_kind, theta, w, node, P, NU, MU, Y):
    """DEPOSITUM's adapt step of node ``node``: its momentum and ``x -= alpha nu`` (:func:`_momentum_step`),
    then ``x = prox(x)`` in place (soft-thresholding inside :func:`_momentum_step`'s loop)."""
    nu, soft = NU[node], prox_kind == SOFT
    _momentum_step(nesterov, gamma, one_minus_gamma, alpha, MU[node] if nesterov else nu, nu, Y[node], P[node], soft,
                   theta)
    if not soft:
        prox_row(prox_kind, theta, w, P, node, P)


@function(fastmath=REDUCTION_MATH)
def _track(g, factor, tracking, beta, tracker, last):
    """Gradient tracking of one node with its fresh gradient ``factor * g``: ``y += beta (g_new - g)``,
    or ``y = g_new`` for the ablation without tracking; ``last`` becomes ``g_new``."""
    for j in range(g.shape[0]):
        fresh = g[j] * factor
        if tracking:
            tracker[j] += (fresh - last[j]) * beta
        else:
            tracker[j] = fresh
        last[j] = fresh


@kernel(fastmath=REDUCTION_MATH)
def tracking_steps_kernel(X, data, indices, indptr, dense, d, y, starts, ends, order, rows, kind, n_out, scale,
                          fit_intercept, center, node_scale, gammas, one_minus_gammas, alphas, betas, nesterov,
                          tracking, adapt_first, adapt_after, prox_kind, theta, w, P, NU, MU, Y, G):
    """DEPOSITUM's iterations without gossip, node by node (see ``tracking_steps`` in :mod:`fedopt.kernels`);
    ``gammas``, ``one_minus_gammas``, ``alphas``, ``betas`` hold one value, or one per node; ``theta``
    one row of prox parameters, or one per node; ``adapt_first`` and ``adapt_after`` split an
    iteration around a gossip. No sample weights; ``center`` as in :func:`local_steps_kernel`. Nodes
    in ``order`` (see :func:`visited`)."""
    n, p = P.shape
    for k in prange(n):
        node = visited(order, k)
        first = starts[node]
        count = rows.shape[2] if rows.shape[2] > 0 else ends[node] - first
        gamma, one_minus_gamma, alpha, beta, prox_theta = _node_parameters(node, gammas, one_minus_gammas, alphas,
                                                                           betas, theta)
        M = _scratch(dense, kind, count, d, n_out, P)
        g = np.empty(p, dtype=P.dtype)
        x, tracker, last = P[node], Y[node], G[node]
        factor = node_scale[node]
        for step in range(rows.shape[0] + adapt_after):
            if step > 0 or adapt_first:
                _adapt(nesterov, gamma, one_minus_gamma, alpha, prox_kind, prox_theta, w, node, P, NU, MU, Y)
            if step == rows.shape[0]:
                break
            _client_pass(X, data, indices, indptr, dense, d, y, None, rows[step, node], first, count, x, kind,
                         n_out, scale, fit_intercept, center, M, g, False, True)
            _track(g, factor, tracking, beta, tracker, last)
