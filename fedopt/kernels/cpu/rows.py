"""Non-separable prox operators (group lasso, l2 ball, simplex, l1 ball) as Numba kernels."""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels.cpu._jit import REDUCTION_MATH, inline, kernel
from fedopt.kernels.cpu.elementwise import BLOCK

#: Elements per (row, chunk) task of the simplex and l1-ball projections (see :func:`_chunk_thresholds`).
SIMPLEX_CHUNK = 1 << 16


@kernel(fastmath=REDUCTION_MATH)
def prox_group_kernel(z, starts, order, tau, scale, out):
    """Per (row, group): ``out[i, G] = scale * max(0, 1 - tau[g] / ||z[i, G]||) * z[i, G]``, ``G = order[starts[g]:starts[g+1]]``."""
    n = z.shape[0]
    n_groups = starts.shape[0] - 1
    permuted = order.shape[0] > 0
    for task in prange(n * n_groups):
        i = task // n_groups
        g = task - i * n_groups
        zi, oi = z[i], out[i]
        k0, k1 = starts[g], starts[g + 1]
        squares = 0.0
        if permuted:
            for k in range(k0, k1):
                squares += zi[order[k]] * zi[order[k]]
        else:
            for k in range(k0, k1):
                squares += zi[k] * zi[k]
        norm = math.sqrt(squares)
        # NaN norm keeps NaN; a zero block (norm <= tau) is zeroed, never divided by 0.
        factor = 0.0 if norm <= tau[g] else scale * (1.0 - tau[g] / norm)
        if permuted:
            for k in range(k0, k1):
                oi[order[k]] = factor * zi[order[k]]
        else:
            for k in range(k0, k1):
                oi[k] = factor * zi[k]


@kernel(fastmath=REDUCTION_MATH)
def _row_squared_distances(z, center, partial):
    """``partial[i, b] = sum((z[i, block b] - center[block b])**2)``; ``center`` may be empty (origin)."""
    n, p = z.shape
    blocks = partial.shape[1]
    has_center = center.shape[0] > 0
    for task in prange(n * blocks):
        i = task // blocks
        b = task - i * blocks
        zi = z[i]
        total = 0.0
        if has_center:
            for j in range(b * BLOCK, min((b + 1) * BLOCK, p)):
                total += (zi[j] - center[j]) * (zi[j] - center[j])
        else:
            for j in range(b * BLOCK, min((b + 1) * BLOCK, p)):
                total += zi[j] * zi[j]
        partial[i, b] = total


@kernel
def _scale_rows_about(z, center, factor, out):
    """``out[i] = center + (z[i] - center) * factor[i]``; ``center`` may be empty (origin)."""
    n, p = z.shape
    blocks = (p + BLOCK - 1) // BLOCK
    has_center = center.shape[0] > 0
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        f = factor[i]
        if has_center:
            for j in range(j0, min(j0 + BLOCK, p)):
                out[i, j] = center[j] + (z[i, j] - center[j]) * f
        else:
            for j in range(j0, min(j0 + BLOCK, p)):
                out[i, j] = z[i, j] * f


def project_l2_ball(z, center, radius, out):
    """``out = c + (z - c) * min(1, radius / ||z - c||)`` per row: a norm pass, then a scale pass."""
    n, p = z.shape
    partial = np.empty((n, (p + BLOCK - 1) // BLOCK))
    _row_squared_distances(z.size, z, center, partial)
    norms = np.sqrt(partial.sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > radius, radius / norms, 1.0)
    factor[np.isnan(norms)] = np.nan
    _scale_rows_about(z.size, z, center, factor, out)
    return out


@inline
def _condat_threshold(y, j0, j1, use_abs, radius, buf, b0):
    """Threshold of the simplex projection of ``y[j0:j1]`` (or of ``|y[j0:j1]|``), by Condat's method.

    Returns ``(tau, k, total)``: the projection is ``max(y - tau, 0)``, ``buf[b0:b0 + k]`` holds
    the active entries ``y > tau`` and ``total`` is ``sum(y[j0:j1])`` (NaN or inf when an entry is).
    One pass keeps a candidate list whose ``rho = (sum - radius) / size`` never exceeds ``tau``,
    so any entry at or below ``rho`` can be dropped for good; lists set aside on the way are
    re-scanned once, then the list is pruned until stable. The lists live in ``buf``: the ones
    set aside in ``[b0, lo)``, the current one in ``[lo, hi)``.
    (L. Condat, "Fast projection onto the simplex and the l1 ball", Math. Program., 2016.)
    """
    first = abs(y[j0]) if use_abs else y[j0]
    total = first
    lo, hi = b0, b0 + 1
    buf[lo] = first
    rho = first - radius
    for j in range(j0 + 1, j1):
        v = abs(y[j]) if use_abs else y[j]
        total += v
        if v > rho:
            rho += (v - rho) / (hi - lo + 1)
            if rho <= v - radius:  # v alone beats the list: set the list aside, start anew
                lo = hi
                rho = v - radius
            buf[hi] = v
            hi += 1
    # Re-scan the entries set aside, moving those above rho into the list (downwards from lo).
    for k in range(lo - 1, b0 - 1, -1):
        v = buf[k]
        if v > rho:
            lo -= 1
            buf[k] = buf[lo]
            buf[lo] = v
            rho += (v - rho) / (hi - lo)
    # Prune entries at or below rho until none is left to drop.
    changed = True
    while changed:
        changed = False
        kept = lo
        for k in range(lo, hi):
            v = buf[k]
            remaining = hi - lo - (k - kept)
            # The largest entry is always active; only rounding (v - radius == v) could drop it.
            if v > rho or remaining == 1:
                buf[kept] = v
                kept += 1
            else:
                rho += (rho - v) / (remaining - 1)
                changed = True
        hi = kept
    # tau from an exact sum over the final active set, moved to the front of buf.
    active = 0.0
    for k in range(lo, hi):
        active += buf[k]
        buf[b0 + k - lo] = buf[k]
    count = hi - lo
    return (active - radius) / count, count, total


@kernel
def _condat_rows(z, use_abs, radius, buf, taus, totals):
    """Condat's threshold of every row (rows of at most SIMPLEX_CHUNK entries), in parallel over rows."""
    n, p = z.shape
    for i in prange(n):
        taus[i], _, totals[i] = _condat_threshold(z[i], 0, p, use_abs, radius, buf[i], 0)


@kernel(fastmath=REDUCTION_MATH)
def _chunk_sums(z, use_abs, sums, maxima):
    """``sums[i, c]`` and ``maxima[i, c]`` of ``y = z`` (or ``|z|``) over chunk ``c`` of row ``i``."""
    n, p = z.shape
    chunks = sums.shape[1]
    for task in prange(n * chunks):
        i = task // chunks
        c = task - i * chunks
        zi = z[i]
        total = 0.0
        top = -math.inf
        for j in range(c * SIMPLEX_CHUNK, min((c + 1) * SIMPLEX_CHUNK, p)):
            y = abs(zi[j]) if use_abs else zi[j]
            total += y
            top = y if y > top else top
        sums[i, c] = total
        maxima[i, c] = top


@kernel
def _keep_above(z, use_abs, gather, taus, buf, counts, sums):
    """Keep the entries above ``taus[i]`` at the start of each chunk's slice of ``buf``, with their count and sum.

    ``gather`` reads the entries from ``z`` (first pass); otherwise the kept entries of ``buf`` are
    filtered again, in place.
    """
    n, p = z.shape
    chunks = counts.shape[1]
    for task in prange(n * chunks):
        i = task // chunks
        c = task - i * chunks
        tau = taus[i]
        b0 = c * SIMPLEX_CHUNK
        kept = 0
        total = 0.0
        if gather:
            zi = z[i]
            for j in range(b0, min(b0 + SIMPLEX_CHUNK, p)):
                y = abs(zi[j]) if use_abs else zi[j]
                if y > tau:
                    buf[i, b0 + kept] = y
                    kept += 1
                    total += y
        else:
            for m in range(counts[i, c]):
                y = buf[i, b0 + m]
                if y > tau:
                    buf[i, b0 + kept] = y
                    kept += 1
                    total += y
        counts[i, c] = kept
        sums[i, c] = total


def _newton_thresholds(z, radius, use_abs, buf):
    """Simplex thresholds of long rows by Michelot's (Newton's) method over parallel chunks.

    ``tau_{k+1} = (sum(y > tau_k) - radius) / count(y > tau_k)`` rises monotonically to the
    threshold from any lower bound; entries at or below ``tau_k`` are dropped for good, so each
    pass scans fewer candidates. Starts from ``max(max(y) - radius, (sum(y) - radius) / p)``.
    Returns ``(tau, row_totals)``.
    """
    n, p = z.shape
    chunks = (p + SIMPLEX_CHUNK - 1) // SIMPLEX_CHUNK
    sums, maxima = np.empty((n, chunks)), np.empty((n, chunks))
    _chunk_sums(z.size, z, use_abs, sums, maxima)
    row_totals = sums.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.maximum(maxima.max(axis=1) - radius, (row_totals - radius) / p)
        counts = np.empty((n, chunks), dtype=np.int64)
        _keep_above(z.size, z, use_abs, True, tau, buf, counts, sums)
        size = counts.sum(axis=1)
        while True:
            tau = (sums.sum(axis=1) - radius) / size
            _keep_above(int(size.sum()), z, use_abs, False, tau, buf, counts, sums)
            new_size = counts.sum(axis=1)
            if np.array_equal(new_size, size):
                return tau, row_totals
            size = new_size


@kernel
def _shrink_rows(z, taus, use_abs, out):
    """``out = max(z - tau, 0)`` (simplex) or ``sign(z) * max(|z| - tau, 0)`` (l1 ball), NaN rows for NaN tau."""
    n, p = z.shape
    blocks = (p + BLOCK - 1) // BLOCK
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        tau = taus[i]
        if math.isnan(tau):
            for j in range(j0, min(j0 + BLOCK, p)):
                out[i, j] = math.nan
        elif use_abs:
            for j in range(j0, min(j0 + BLOCK, p)):
                v = z[i, j]
                out[i, j] = math.copysign(abs(v) - tau, v) if abs(v) > tau else 0.0
        else:
            for j in range(j0, min(j0 + BLOCK, p)):
                v = z[i, j]
                out[i, j] = v - tau if v > tau else 0.0


def _simplex_thresholds(z, radius, use_abs):
    """Per-row threshold ``tau`` of the simplex projection of ``z`` (or ``|z|``); NaN for non-finite rows.

    Rows of up to SIMPLEX_CHUNK entries use Condat's one-pass method; longer rows use parallel
    Newton passes, whose cost does not grow with the radius as Condat's does.
    """
    n, p = z.shape
    buf = np.empty((n, p))  # pages are touched only where candidates are written
    radius = float(radius)
    if p <= SIMPLEX_CHUNK:
        tau, row_totals = np.empty(n), np.empty(n)
        _condat_rows(z.size if n > 1 else 0, z, use_abs, radius, buf, tau, row_totals)
    else:
        tau, row_totals = _newton_thresholds(z, radius, use_abs, buf)
    if use_abs:
        tau[row_totals <= radius] = 0.0  # already inside the l1 ball: the projection is the identity
    tau[~np.isfinite(row_totals)] = np.nan
    return tau


def project_simplex(z, radius, out):
    """``out = max(z - tau, 0)`` per row, with ``tau`` such that each row sums to ``radius``."""
    _shrink_rows(z.size, z, _simplex_thresholds(z, radius, False), False, out)
    return out


def project_l1_ball(z, radius, out):
    """``out = z`` if ``||z||_1 <= radius`` else ``sign(z) * simplex(|z|, radius)``, per row."""
    _shrink_rows(z.size, z, _simplex_thresholds(z, radius, True), True, out)
    return out
