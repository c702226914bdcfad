"""NumPy reference of every kernel: the readable ground truth and the oracle of the parity tests.

Signatures and conventions are those of :mod:`fedopt.kernels`. Clarity comes first here; speed
is the business of :mod:`fedopt.kernels.cpu` and :mod:`fedopt.kernels.gpu`.
"""

from __future__ import annotations

import numpy as np

from fedopt.kernels import CLIP, CLIP_VECTOR, IDENTITY, MCP, SCAD, SOFT, SOFT_WEIGHTED


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
    if kind == MCP:
        tau, knee, inv = theta[0], theta[1], theta[2]
        firm = np.sign(v) * (a - tau) * inv
        return np.where(a <= tau, 0.0, np.where(a <= knee, firm, v))
    if kind == SCAD:
        tau, knee1, knee2, shift, inv = theta[0], theta[1], theta[2], theta[3], theta[4]
        middle = np.sign(v) * (a - shift) * inv
        return np.where(a <= knee1, _soft(v, tau), np.where(a <= knee2, middle, v))
    raise ValueError(f"unknown prox kind {kind}")


def prox_elementwise(z, kind, theta, w, out):
    """Separable prox, e.g. ``out[:] = sign(z) * maximum(abs(z) - theta[0], 0) * theta[1]`` for SOFT."""
    out[...] = _elementwise(z, kind, theta, w)
    return out


def prox_group(z, starts, order, tau, scale, out):
    """Block soft-thresholding: ``x_g = scale * max(0, 1 - tau[g] / ||z_g||) * z_g`` per group."""
    perm = order if len(order) else np.arange(z.shape[1])
    result = np.empty_like(z)
    for g in range(len(starts) - 1):
        idx = perm[starts[g] : starts[g + 1]]
        block = z[:, idx]
        norm = np.linalg.norm(block, axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            factor = np.maximum(1.0 - tau[g] / norm, 0.0)
        factor = np.where(norm == 0, 0.0, factor)  # 0/0: the block is 0 and stays 0
        result[:, idx] = scale * factor * block
    out[...] = result
    return out


def project_l2_ball(z, center, radius, out):
    """``out = c + (z - c) * min(1, radius / ||z - c||)`` per row (``c = 0`` when ``center`` is empty)."""
    c = center if len(center) else 0.0
    diff = z - c
    norm = np.linalg.norm(diff, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norm > radius, radius / norm, 1.0)
    factor = np.where(np.isnan(norm), np.nan, factor)
    with np.errstate(invalid="ignore"):  # inf * 0 for a row with an infinite entry: NaN, as wanted
        out[...] = c + diff * factor
    return out


def _simplex_row(v, radius):
    """Sort-based projection of one vector on ``{x >= 0, sum x = radius}`` (Held, Wolfe, Crowder)."""
    if not np.all(np.isfinite(v)):
        return np.full_like(v, np.nan)
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u, dtype=np.float64)
    j = np.arange(1, len(v) + 1)
    active = u - (cumulative - radius) / j > 0
    k = j[active][-1] if active.any() else 1  # the largest entry is always active (rounding aside)
    theta = (cumulative[k - 1] - radius) / k
    return np.maximum(v - theta, 0)


def project_simplex(z, radius, out):
    """Projection of each row on the simplex ``{x >= 0, sum(x) = radius}``."""
    out[...] = np.stack([_simplex_row(row, radius) for row in z]) if len(z) else z
    return out


def project_l1_ball(z, radius, out):
    """``z`` if ``||z||_1 <= radius`` else ``sign(z) * simplex(|z|, radius)``, per row."""
    rows = []
    for row in z:
        if np.abs(row).sum() <= radius:
            rows.append(row.copy())
        else:
            rows.append(np.sign(row) * _simplex_row(np.abs(row), radius))
    out[...] = np.stack(rows) if rows else z
    return out


def prox_nuclear(z, n_rows, tau, out):
    """``U diag(max(s - tau, 0)) V^T`` of each row reshaped to ``(n_rows, p // n_rows)``."""
    matrices = z.reshape(z.shape[0], n_rows, -1)
    u, s, vt = np.linalg.svd(matrices, full_matrices=False)
    shrunk = np.maximum(s - tau, 0)
    out[...] = ((u * shrunk[:, None, :]) @ vt).reshape(z.shape)
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
