"""NumPy reference of every kernel: the readable ground truth and the oracle of the parity tests.

Signatures and conventions are those of :mod:`fedopt.kernels`. Clarity comes first here; speed
is the business of :mod:`fedopt.kernels.cpu` and :mod:`fedopt.kernels.gpu`.
"""

from __future__ import annotations

import numpy as np

from fedopt.kernels import (
    CLIP,
    CLIP_VECTOR,
    IDENTITY,
    LEAST_SQUARES,
    LOGISTIC,
    MCP,
    MCP_WEIGHTED,
    SCAD,
    SCAD_WEIGHTED,
    SOFT,
    SOFT_MASKED,
    SOFT_WEIGHTED,
    client_bounds,
)


def _soft(v, tau):
    """``sign(v) * max(|v| - tau, 0)``, NaN-propagating."""
    return np.sign(v) * np.maximum(np.abs(v) - tau, 0)


def _elementwise(v, kind, theta, w):
    """The separable prox of code ``kind`` applied to ``v`` (any shape broadcasting with ``w[k]``)."""
    a = np.abs(v)
    if kind == IDENTITY:
        return v.copy()
    if kind == SOFT:
        tau, scale = theta[0], theta[1]
        return scale * _soft(v, tau)
    if kind == SOFT_WEIGHTED:
        tau, scale = theta[0], theta[1]
        return scale * _soft(v, tau * w[0])
    if kind == CLIP:
        return np.clip(v, theta[0], theta[1])
    if kind == CLIP_VECTOR:
        return np.clip(v, w[0], w[1])
    if kind in (MCP, MCP_WEIGHTED):
        lam = w[0] if kind == MCP_WEIGHTED else 1.0  # every threshold scales with lam
        tau, knee, inv = theta[0] * lam, theta[1] * lam, theta[2]
        firm = np.sign(v) * (a - tau) * inv
        return np.where(a <= tau, 0.0, np.where(a <= knee, firm, v))
    if kind in (SCAD, SCAD_WEIGHTED):
        lam = w[0] if kind == SCAD_WEIGHTED else 1.0
        tau, knee1, knee2, shift, inv = theta[0] * lam, theta[1] * lam, theta[2] * lam, theta[3] * lam, theta[4]
        middle = np.sign(v) * (a - shift) * inv
        return np.where(a <= knee1, _soft(v, tau), np.where(a <= knee2, middle, v))
    if kind == SOFT_MASKED:
        tau, scale = theta[0], theta[1]
        x = _soft(v, tau * w[0])
        return np.where(w[1] != 0, scale * x, x)
    raise ValueError(f"unknown prox kind {kind}")


def prox_elementwise(z, kind, theta, w, out):
    """Separable prox, e.g. ``out[:] = sign(z) * maximum(abs(z) - theta[0], 0) * theta[1]`` for SOFT."""
    out[...] = _elementwise(z, kind, theta, w)
    return out


def row_scales(v):
    """Each row's largest magnitude of ``v`` (2-D), kept ``(n, 1)`` in float64, or 1 where that is 0,
    inf or NaN: dividing a row by it before squaring keeps a norm from overflow and underflow."""
    v = v.astype(np.float64, copy=False)
    largest = np.max(np.abs(v), axis=1, keepdims=True) if v.shape[1] else np.zeros((v.shape[0], 1))
    return np.where(np.isfinite(largest) & (largest > 0), largest, 1.0)


def row_norms(v):
    """``||v_i||`` of every row of ``v`` (2-D), kept ``(n, 1)``, without overflow or underflow: each
    row is divided by :func:`row_scales` first (a row with entries of 1e200 has the norm 1e200,
    one with entries of 1e-170 a norm of about 1e-170, not inf and 0). Rows with inf or NaN, and
    zero rows, take the plain norm. In float64, as the kernels sum squares: the norm of a float32 row
    may exceed float32's range."""
    v = v.astype(np.float64, copy=False)
    scale = row_scales(v)
    return scale * np.linalg.norm(v / scale, axis=1, keepdims=True)


def prox_group(z, starts, order, tau, scale, out):
    """Block soft-thresholding: ``x_g = scale * max(0, 1 - tau[g] / ||z_g||) * z_g`` per group."""
    perm = order if len(order) else np.arange(z.shape[1])
    result = np.empty_like(z)
    for g in range(len(starts) - 1):
        idx = perm[starts[g] : starts[g + 1]]
        block = z[:, idx]
        norm = row_norms(block)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.maximum(1.0 - tau[g] / norm, 0.0)
        factor = np.where(norm == 0, 0.0, factor)  # 0/0: the block is 0 and stays 0
        result[:, idx] = scale * factor * block
    out[...] = result
    return out


def l2_ball_factors(v, radius):
    """``min(1, radius / ||v_i||)`` for every row of ``v`` (2-D), kept ``(n, 1)``, NaN for a NaN norm.
    Each row and the radius are divided by :func:`row_scales` first: that keeps the squares from
    overflow and underflow as in :func:`row_norms`, and a finite row whose norm itself overflows
    (6 entries of 1e308) still gets its factor, where ``radius / inf`` sent it to the center."""
    v = v.astype(np.float64, copy=False)
    scale = row_scales(v)
    norm = np.linalg.norm(v / scale, axis=1, keepdims=True)  # ||v_i|| / scale
    bound = radius / scale
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norm > bound, bound / norm, 1.0)
    return np.where(np.isnan(norm), np.nan, factor)


def project_l2_ball(z, center, radius, out):
    """``out = c + (z - c) * min(1, radius / ||z - c||)`` per row (``c = 0`` when ``center`` is empty)."""
    c = center if len(center) else 0.0
    diff = z - c
    factor = l2_ball_factors(diff, radius)
    with np.errstate(invalid="ignore"):  # inf * 0 for a row with an infinite entry: NaN, as wanted
        out[...] = c + diff * factor
    return out


def simplex_row(v, radius):
    """Sort-based projection of one vector on ``{x >= 0, sum x = radius}`` (Held, Wolfe, Crowder);
    NaN for a vector with NaN or inf.

    It works on ``v - max(v)`` (the projection does not change when every entry moves by the same
    amount), so that the threshold keeps the radius's digits however large the entries (see
    ``SHIFT_RATIO`` in :mod:`fedopt.kernels`); entries more than ``2 radius`` below the largest, never
    active, are raised to that, so that no shifted sum overflows.
    """
    if not np.all(np.isfinite(v)):
        return np.full_like(v, np.nan)
    if len(v) == 0:
        return v.copy()
    with np.errstate(over="ignore"):  # v - max(v) beyond float64's range: clipped below
        shifted = np.maximum(v.astype(np.float64) - np.max(v), -2.0 * radius)
    u = np.sort(shifted)[::-1]
    cumulative = np.cumsum(u)
    j = np.arange(1, len(v) + 1)
    active = u - (cumulative - radius) / j > 0
    k = j[active][-1] if active.any() else 1  # the largest entry is always active (rounding aside)
    theta = (cumulative[k - 1] - radius) / k
    return np.maximum(shifted - theta, 0).astype(v.dtype)


def project_simplex(z, radius, out):
    """Projection of each row on the simplex ``{x >= 0, sum(x) = radius}``."""
    out[...] = np.stack([simplex_row(row, radius) for row in z]) if len(z) else z
    return out


def project_l1_ball(z, radius, out):
    """``z`` if ``||z||_1 <= radius`` else ``sign(z) * simplex(|z|, radius)``, per row."""
    rows = []
    for row in z:
        with np.errstate(over="ignore"):  # a sum beyond float64's range is outside the ball all the same
            inside = np.abs(row).sum() <= radius
        if inside:
            rows.append(row.copy())
        else:
            rows.append(np.sign(row) * simplex_row(np.abs(row), radius))
    out[...] = np.stack(rows) if rows else z
    return out


def prox_nuclear(z, n_rows, tau, out):
    """``U diag(max(s - tau, 0)) V^T`` of each row reshaped to ``(n_rows, p // n_rows)``; NaN for a row
    with NaN or inf (LAPACK refuses them, or never returns: a 3 x 3 matrix with -inf).

    Each matrix is divided by its largest magnitude ``c`` and thresholded at ``tau / c``, then scaled
    back: finite entries near the dtype's largest value (2e38 in float32) would overflow in the SVD.
    """
    matrices = z.reshape(z.shape[0], n_rows, z.shape[1] // n_rows)
    result = np.full(matrices.shape, np.nan, z.dtype)
    finite = np.isfinite(z).all(axis=1)
    if finite.any():
        c = row_scales(z[finite]).astype(z.dtype)[:, :, None]  # exact: an entry's magnitude (or 1)
        u, s, vt = np.linalg.svd(matrices[finite] / c, full_matrices=False)
        with np.errstate(over="ignore"):  # tau / c beyond the dtype's range: every value is shrunk to 0
            shrunk = np.maximum(s - (tau / c[:, 0]).astype(z.dtype), 0)
        result[finite] = ((u * shrunk[:, None, :]) @ vt) * c
    out[...] = result.reshape(z.shape)
    return out


def normal_map_step(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out):
    """``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)``; ``x_out = prox(z_out)``."""
    direction = g + (z_ref - x_ref) * inv_gamma
    if c.size:
        direction = direction + c
    z_new = z - eta * direction
    z_out[...] = z_new
    x_out[...] = _elementwise(z_new, kind, theta, w)
    return z_out, x_out


# ------------------------------------------------------------------------------ model oracles
def _client_rows(offsets, rows, i):
    """Rows of client ``i``: its minibatch ``rows[i]``, or all its rows when ``rows`` has no columns."""
    starts, ends = client_bounds(offsets)
    return rows[i] if rows.shape[1] else np.arange(starts[i], ends[i])


def _n_clients(offsets):
    """The number of clients of ``offsets`` (either form of :func:`fedopt.kernels.client_bounds`)."""
    return len(client_bounds(offsets)[0])


def _per_row(value, dtype):
    """A scalar as it is; a per-row vector as a ``dtype`` column ``(n, 1)``, so row ``i`` gets ``value[i]``."""
    return value if np.ndim(value) == 0 else np.asarray(value, dtype)[:, None]


def _prox_rows(Z, kind, theta, w):
    """``prox(Z)`` at ``theta`` of shape ``(k,)`` (every row) or ``(n, k)`` (row ``i`` at ``theta[i]``)."""
    if np.ndim(theta) == 1:
        return _elementwise(Z, kind, theta, w)
    out = np.empty_like(Z)
    for i in range(len(Z)):
        out[i] = _elementwise(Z[i], kind, theta[i], w)
    return out


def loss_residual(M, y, kind):
    """Per-sample losses and their derivatives ``dloss/dM`` for margins ``M`` of shape ``(..., n_out)``.

    LEAST_SQUARES ``(M - y)^2 / 2``; LOGISTIC ``log(1 + exp(-y M))`` with ``y = +-1``; SOFTMAX
    ``logsumexp(M) - M[y]`` with ``y`` the class code. Written for any array module, so the
    batched kernels share it.
    """
    xp = array_module(M)
    if kind == LEAST_SQUARES:
        r = M[..., 0] - y
        return 0.5 * r * r, r[..., None]
    if kind == LOGISTIC:
        t = -y * M[..., 0]
        return xp.logaddexp(0, t), (-y * sigmoid(t))[..., None]
    top = M.max(axis=-1, keepdims=True)
    E = xp.exp(M - top)
    S = E.sum(axis=-1, keepdims=True)
    onehot = y[..., None].astype(xp.int64) == xp.arange(M.shape[-1])
    return (xp.log(S) + top)[..., 0] - (M * onehot).sum(axis=-1), E / S - onehot


def sigmoid(x):
    """``1 / (1 + exp(-x))`` without overflow, for any array module."""
    xp = array_module(x)
    return xp.exp(-xp.logaddexp(0, -x))


def array_module(a):
    """NumPy for NumPy arrays (and SciPy sparse matrices), CuPy for CuPy arrays; CuPy is
    imported only when one of its arrays is passed in."""
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def linear_oracle(X, y, offsets, W, rows, kind, n_out, scale, fit_intercept, sample_weight, loss_out, grad_out):
    """Mean loss and gradient of a linear model on each client's rows.

    Client ``i`` owns rows ``offsets[i]:offsets[i+1]`` (or ``offsets[0, i]:offsets[1, i]``, see
    :func:`fedopt.kernels.client_bounds`) of ``X`` (dense of any storage dtype, or CSR) and uses
    ``rows[i]`` (global row indices; all of its rows when ``rows`` is ``(n, 0)``). Its parameters
    ``W[i]`` (``W[0]`` for all clients when ``W`` has one row) are the ``(n_out, d)`` coefficients
    in C order followed, with ``fit_intercept``, by ``n_out`` intercepts. Margins are
    ``M = scale * X_r @ coef.T + intercept``. Writes ``loss_out[i] = mean(loss(M))`` and
    ``grad_out[i]``; either may be empty to skip it. ``sample_weight`` (indexed by global row like
    ``y``; length 0 for none) multiplies each sample's loss and residual: ``mean(s_r * loss(M))``.
    """
    d = X.shape[1]
    for i in range(_n_clients(offsets)):
        r = _client_rows(offsets, rows, i)
        w = W[i if len(W) > 1 else 0]
        coef = w[: n_out * d].reshape(n_out, d)
        X_r = X[r]
        M = scale * (X_r @ coef.T) + (w[n_out * d :] if fit_intercept else 0)
        loss, R = loss_residual(M, y[r], kind)
        if len(sample_weight):
            loss, R = loss * sample_weight[r], R * sample_weight[r, None]
        if len(loss_out):
            loss_out[i] = loss.mean()
        if len(grad_out):
            grad_out[i, : n_out * d] = (scale / len(r)) * (X_r.T @ R).T.ravel()
            if fit_intercept:
                grad_out[i, n_out * d :] = R.mean(axis=0)
    return loss_out, grad_out


def mlp_oracle(X, y, offsets, W, rows, n_hidden, n_out, kind, scale, sample_weight, loss_out, grad_out):
    """Mean loss and gradient of a one-hidden-layer sigmoid network per client.

    ``W[i]`` is ``[W1 (h, d), b1 (h), W2 (k, h), b2 (k)]``, each in C order, ``k = n_out``:
    ``H = sigmoid(scale * X_r @ W1.T + b1)``, ``O = H @ W2.T + b2``. The loss of ``kind`` is
    SOFTMAX ``logsumexp(O) - O[y]`` (``y`` the class code) or LEAST_SQUARES ``(O - y)^2 / 2``
    (``k = 1``, ``y`` the target), see :func:`loss_residual`; backpropagation of its residual
    ``dO`` gives ``dA = (dO @ W2) * H * (1 - H)``. Rows, ``sample_weight`` (each sample's loss and
    ``dO`` times its weight; length 0 for none), ``loss_out`` and ``grad_out`` as in
    :func:`linear_oracle`.
    """
    d, h, k = X.shape[1], n_hidden, n_out
    for i in range(_n_clients(offsets)):
        r = _client_rows(offsets, rows, i)
        w = W[i if len(W) > 1 else 0]
        W1, b1 = w[: h * d].reshape(h, d), w[h * d : h * d + h]
        W2, b2 = w[h * d + h : h * d + h + k * h].reshape(k, h), w[h * d + h + k * h :]
        X_r = scale * X[r].astype(W.dtype)
        H = sigmoid(X_r @ W1.T + b1)
        loss, dO = loss_residual(H @ W2.T + b2, y[r], kind)
        if len(sample_weight):
            loss, dO = loss * sample_weight[r], dO * sample_weight[r, None]
        dO /= len(r)
        dA = (dO @ W2) * H * (1 - H)
        if len(loss_out):
            loss_out[i] = loss.mean()
        if len(grad_out):
            grad_out[i] = np.concatenate([(dA.T @ X_r).ravel(), dA.sum(0), (dO.T @ H).ravel(), dO.sum(0)])
    return loss_out, grad_out


def _centered(X, center):
    """The rows ``X - center`` as a dense copy (clear rather than lean: the numba kernels center CSR
    rows without one), or ``X`` itself for no ``center``."""
    return X if center is None else (X.toarray() if hasattr(X, "toarray") else X) - center


def local_steps_linear(X, y, offsets, rows, kind, n_out, scale, fit_intercept, D, lr, prox_kind, thetas, w, Z, P,
                       center=None):
    """The local steps of a round for a linear model (the fused path's reference; see :mod:`fedopt.kernels`).

    For each step ``l``: ``G = grad f_i(P[i]; rows[l, i])`` for every client,
    ``Z -= lr * (G + D)`` (``D`` may be empty) and ``P = prox_l(Z)``, the separable prox of code
    ``prox_kind`` with parameters ``thetas[l]`` (IDENTITY copies ``Z``). ``lr`` is a scalar or one
    value per row; ``thetas`` is ``(Q, k)`` or ``(Q, n, k)`` (row ``i`` at ``thetas[l, i]``).
    ``center`` (``d`` feature means, or None) steps on the rows ``X - center``: see :func:`_centered`.
    """
    X = _centered(X, center)
    G = np.empty_like(Z)
    lr = _per_row(lr, Z.dtype)
    for step in range(rows.shape[0]):
        linear_oracle(X, y, offsets, P, rows[step], kind, n_out, scale, fit_intercept, np.empty(0, Z.dtype),
                      np.empty(0, Z.dtype), G)
        Z -= lr * (G + D) if D.size else lr * G
        P[...] = _prox_rows(Z, prox_kind, thetas[step], w)
    return Z, P


def local_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, D, lr, prox_kind, thetas, w, Z, P):
    """:func:`local_steps_linear` for the MLP of :func:`mlp_oracle`."""
    G = np.empty_like(Z)
    lr = _per_row(lr, Z.dtype)
    for step in range(rows.shape[0]):
        mlp_oracle(X, y, offsets, P, rows[step], n_hidden, n_out, kind, scale, np.empty(0, Z.dtype),
                   np.empty(0, Z.dtype), G)
        Z -= lr * (G + D) if D.size else lr * G
        P[...] = _prox_rows(Z, prox_kind, thetas[step], w)
    return Z, P


def tracking_steps(X, y, offsets, rows, kind, n_out, scale, fit_intercept, node_scale, gamma, alpha, beta, nesterov,
                   tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False, center=None):
    """DEPOSITUM's iterations without gossip for a linear model, ``rows`` of shape ``(T, n, b)``.

    For each iteration: ``nu = gamma nu + (1 - gamma) y`` (Nesterov: ``mu`` first, then
    ``nu = gamma mu + (1 - gamma) y``); ``P = prox(P - alpha nu)`` (separable, parameters
    ``theta``); ``g_new = node_scale[i] grad f_i(P[i])``; with ``tracking`` ``y += beta (g_new - G)``,
    else ``y = g_new`` (the ablation's momentum reads g); ``G = g_new``. ``MU`` is ``(0, 0)`` without Nesterov.
    ``gamma``, ``alpha`` and ``beta`` are scalars or one value per node; ``theta`` is ``(k,)`` or ``(n, k)``.
    Without ``adapt_first`` the first iteration starts at its gradient; ``adapt_after`` ends the call
    with the momentum and prox of one more iteration (a gossip of ``P`` then goes between the two calls).
    ``center`` as in :func:`local_steps_linear`.
    """
    X = _centered(X, center)

    def gradient(W, step_rows, out):
        linear_oracle(X, y, offsets, W, step_rows, kind, n_out, scale, fit_intercept, np.empty(0, W.dtype),
                      np.empty(0, W.dtype), out)

    return _tracking_iterations(gradient, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta,
                                w, P, NU, MU, Y, G, adapt_first, adapt_after)


def tracking_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, node_scale, gamma, alpha, beta, nesterov,
                       tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False):
    """:func:`tracking_steps` for the MLP of :func:`mlp_oracle`."""

    def gradient(W, step_rows, out):
        mlp_oracle(X, y, offsets, W, step_rows, n_hidden, n_out, kind, scale, np.empty(0, W.dtype),
                   np.empty(0, W.dtype), out)

    return _tracking_iterations(gradient, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta,
                                w, P, NU, MU, Y, G, adapt_first, adapt_after)


def _tracking_iterations(gradient, rows, node_scale, gamma, alpha, beta, nesterov, tracking, prox_kind, theta, w,
                         P, NU, MU, Y, G, adapt_first, adapt_after):
    """The iterations of :func:`tracking_steps` with the model's ``gradient(W, rows, out)``."""
    G_new = np.empty_like(P)
    gamma, alpha, beta = (_per_row(v, P.dtype) for v in (gamma, alpha, beta))
    for step in range(rows.shape[0] + adapt_after):
        if step > 0 or adapt_first:
            if nesterov:
                MU[...] = (MU - Y) * gamma + Y
                NU[...] = MU * gamma + Y * (1 - gamma)
            else:
                NU[...] = (NU - Y) * gamma + Y
            P[...] = _prox_rows(P - NU * alpha, prox_kind, theta, w)
        if step == rows.shape[0]:
            break
        gradient(P, rows[step], G_new)
        G_new *= node_scale[:, None].astype(P.dtype)
        Y[...] = Y + (G_new - G) * beta if tracking else G_new
        G[...] = G_new
    return P, NU, MU, Y, G


def minibatch_rows(u, sizes, starts):
    """Global row indices ``starts[i] + floor(u[..., i, j] * sizes[i])`` of uniform draws ``u`` in
    ``[0, 1)`` of shape ``(..., n, b)``: client ``i``'s rows are ``starts[i] .. starts[i] + sizes[i] - 1``."""
    rows = (u * sizes[:, None]).astype(np.int64)
    rows += starts[:, None]
    return rows


def mix_sparse(indptr, indices, weights, V, out):
    """One gossip ``out = W @ V`` over neighbour lists: ``W`` in CSR form ``(indptr, indices, weights)``.

    Row ``i`` is ``sum_k weights[k] * V[indices[k]]`` for ``k`` in ``indptr[i]:indptr[i+1]``; every
    row has at least one entry (a mixing matrix's rows sum to 1). ``out`` must not be ``V``.
    """
    out[...] = np.add.reduceat(weights.astype(V.dtype)[:, None] * V[indices], indptr[:-1], axis=0)
    return out
