"""Non-separable prox operators (group lasso, l2 ball, simplex, l1 ball) as Numba kernels."""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels.cpu._jit import REDUCTION_MATH, inline, kernel
from fedopt.kernels.cpu.elementwise import BLOCK

#: Elements per (row, chunk) task of the simplex and l1-ball projections (see :func:`_chunk_thresholds`).
SIMPLEX_CHUNK = 1 << 16


# Group bounds are cast to unsigned so that indexing skips Numba's negative-index wrap-around,
# which would keep the compiler from vectorizing the short loops over one group.


@inline
def _group_squares(zi, starts, order, g0, g1, squares):
    """``squares[g - g0] = sum(zi[order[starts[g]:starts[g+1]]] ** 2)`` for ``g0 <= g < g1``, summed in float64."""
    for g in range(g0, g1):
        total = 0.0
        k0, k1 = np.uint64(starts[g]), np.uint64(starts[g + 1])
        if order.shape[0] > 0:
            for k in range(k0, k1):
                v = zi[np.uint64(order[k])]
                total += v * v
        else:
            for k in range(k0, k1):
                total += zi[k] * zi[k]
        squares[g - g0] = total


@inline
def _shrink_factors(squares, tau, scale):
    """``squares[m] <- scale * max(0, 1 - tau[m] / sqrt(squares[m]))`` in place; NaN stays NaN."""
    for m in range(squares.shape[0]):
        norm = math.sqrt(squares[m])
        # A zero group (norm <= tau) is zeroed, never divided by 0; a NaN norm fails the test.
        squares[m] = 0.0 if norm <= tau[m] else scale * (1.0 - tau[m] / norm)


@inline
def _scale_groups(zi, starts, order, g0, factors, oi):
    """``oi[G] = factors[g - g0] * zi[G]`` for the groups ``G`` of ``factors``."""
    for g in range(g0, g0 + factors.shape[0]):
        f = factors[g - g0]
        k0, k1 = np.uint64(starts[g]), np.uint64(starts[g + 1])
        if order.shape[0] > 0:
            for k in range(k0, k1):
                j = np.uint64(order[k])
                oi[j] = f * zi[j]
        else:
            for k in range(k0, k1):
                oi[k] = f * zi[k]


@kernel(fastmath=REDUCTION_MATH)
def prox_group_kernel(z, starts, order, tau, scale, out):
    """Per (row, group): ``out[i, G] = scale * max(0, 1 - tau[g] / ||z[i, G]||) * z[i, G]``, with
    ``G = order[starts[g]:starts[g+1]]``.

    A task is a row and a run of consecutive groups of about BLOCK coordinates in all. The
    norms of its groups are gathered first, so that the square roots and divisions (the bulk of
    the work with small groups) run in one vectorized loop, then the groups are scaled.
    """
    n, p = z.shape
    n_groups = starts.shape[0] - 1
    per_task = max(1, BLOCK * n_groups // max(p, 1))
    tasks = (n_groups + per_task - 1) // per_task
    for task in prange(n * tasks):
        i = task // tasks
        g0 = (task - i * tasks) * per_task
        factors = np.empty(min(per_task, n_groups - g0))
        _group_squares(z[i], starts, order, g0, g0 + factors.shape[0], factors)
        _shrink_factors(factors, tau[g0 : g0 + factors.shape[0]], scale)
        _scale_groups(z[i], starts, order, g0, factors, out[i])


@kernel(fastmath=REDUCTION_MATH)
def _row_squared_distances(z, center, partial):
    """``partial[i, b] = sum((z[i, block b] - center[block b])**2)``; ``center`` may be empty (origin)."""
    n, p = z.shape
    blocks = partial.shape[1]
    has_center = center.shape[0] > 0
    for task in prange(n * blocks):
        i = task // blocks
        b = task - i * blocks
        j0, j1 = b * BLOCK, min((b + 1) * BLOCK, p)
        zi = z[i, j0:j1]  # slices from 0: see fedopt.kernels.cpu.elementwise._prox_block
        total = 0.0
        if has_center:
            ci = center[j0:j1]
            for j in range(zi.shape[0]):
                total += (zi[j] - ci[j]) * (zi[j] - ci[j])
        else:
            for j in range(zi.shape[0]):
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
        j1 = min(j0 + BLOCK, p)
        f = factor[i]
        zi, oi = z[i, j0:j1], out[i, j0:j1]
        if has_center:
            ci = center[j0:j1]
            for j in range(zi.shape[0]):
                oi[j] = ci[j] + (zi[j] - ci[j]) * f
        else:
            for j in range(zi.shape[0]):
                oi[j] = zi[j] * f


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
        zc = z[i, c * SIMPLEX_CHUNK : min((c + 1) * SIMPLEX_CHUNK, p)]  # a slice from 0: vectorizes
        total = 0.0
        top = -math.inf
        for j in range(zc.shape[0]):
            y = abs(zc[j]) if use_abs else zc[j]
            total += y
            top = y if y > top else top
        sums[i, c] = total
        maxima[i, c] = top


@kernel(fastmath=REDUCTION_MATH)
def _split_chunks(z, use_abs, lo, hi, buf, counts, sums, above_counts, above_sums, totals):
    """Per chunk of ``y = z`` (or ``|z|``): candidates ``lo[i] < y <= hi[i]`` kept, ``y > hi[i]`` only counted.

    NumPy, per chunk: ``c = y[(y > lo) & (y <= hi)]``; ``buf`` slice ``= c[:capacity]``, ``counts = len(c)``,
    ``sums = c.sum()``, ``above_counts = (y > hi).sum()``, ``above_sums = y[y > hi].sum()``,
    ``totals = y.sum()``. Entries above ``hi`` are many and in random order, so they are summed
    with arithmetic instead of a branch; the candidates take one rarely taken branch, on a single
    comparison (two would become two mispredicted branches), widened by a few ulps so that
    rounding loses none of them, and checked exactly inside.
    """
    n, p = z.shape
    chunks = counts.shape[1]
    for task in prange(n * chunks):
        i = task // chunks
        c = task - i * chunks
        t_lo, t_hi = lo[i], hi[i]
        mid = 0.5 * t_lo + 0.5 * t_hi
        reach = 0.5 * t_hi - 0.5 * t_lo + 1e-15 * (abs(t_lo) + abs(t_hi))
        bi = buf[i]
        capacity = buf.shape[1] // chunks
        b0 = c * SIMPLEX_CHUNK
        zc = z[i, b0 : min(b0 + SIMPLEX_CHUNK, p)]  # a slice from 0: vectorizes
        kept = 0
        total, kept_sum, n_above, above_sum = 0.0, 0.0, 0.0, 0.0
        for j in range(zc.shape[0]):
            y = abs(zc[j]) if use_abs else zc[j]
            total += y
            above = np.float64(y > t_hi)
            n_above += above
            above_sum += y * above
            if abs(y - mid) <= reach and t_lo < y <= t_hi:
                    if kept < capacity:
                        bi[c * capacity + kept] = y
                    kept += 1
                    kept_sum += y
        counts[i, c] = kept
        sums[i, c] = kept_sum
        above_counts[i, c] = n_above
        above_sums[i, c] = above_sum
        totals[i, c] = total


@kernel
def _keep_above(z, use_abs, gather, taus, buf, counts, sums):
    """Keep the entries above ``taus[i]`` at the start of each chunk's slice of ``buf``, with their count and sum.

    Each chunk has ``buf.shape[1] // chunks`` slots (all its entries when gathering). ``gather``
    reads the entries from ``z`` (first pass); otherwise the kept entries of ``buf`` are filtered
    again, in place.
    """
    n, p = z.shape
    chunks = counts.shape[1]
    for task in prange(n * chunks):
        i = task // chunks
        c = task - i * chunks
        tau = taus[i]
        b0 = c * (buf.shape[1] // chunks)
        kept = 0
        total = 0.0
        if gather:
            zi = z[i]
            for j in range(c * SIMPLEX_CHUNK, min((c + 1) * SIMPLEX_CHUNK, p)):
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


#: Entries sampled from each long row to bracket its threshold (see :func:`_sample_bracket`).
SAMPLE = 1 << 14
#: Slots per chunk for the entries inside the bracket (a few % of them for a sample of SAMPLE);
#: a row whose chunk overflows its slots takes the safe path.
BRACKET_SLOTS = SIMPLEX_CHUNK // 8


def _sample_bracket(z, radius, use_abs):
    """Per-row bounds ``lo <= tau <= hi`` that likely hold, from a strided sample of ``y = z`` (or ``|z|``).

    The sample's own threshold (for the radius scaled to its size) estimates ``tau``; the bounds
    are the sample's order statistics some standard deviations of its active count away on
    either side. They are only likely, so the caller checks them.
    """
    n, p = z.shape
    stride = max(32, p // SAMPLE)  # at least 32: sorting the sample must stay cheap next to the pass
    y = (np.abs(z[:, ::stride]) if use_abs else z[:, ::stride]).astype(np.float64)
    y = -np.sort(-y, axis=1)  # descending; NaN rows end up NaN anyway (via their sums)
    m = y.shape[1]
    with np.errstate(invalid="ignore"):
        active = (y * np.arange(1, m + 1) > np.cumsum(y, axis=1) - radius * m / p).sum(axis=1)
    margin = (4 * np.sqrt(active) + 16).astype(np.int64)
    big = np.finfo(np.float64).max  # not inf: 0 * bound must stay 0 in the checks
    rows = np.arange(n)
    lo = np.where(active + margin < m, y[rows, np.minimum(active + margin, m - 1)], -big)
    hi = np.where(active - 1 - margin >= 0, y[rows, np.maximum(active - 1 - margin, 0)], big)
    return lo, hi


def _michelot(z, radius, use_abs, buf, counts, sums, base_count, base_sum):
    """Michelot's (Newton's) iteration over the candidates kept in ``buf``, from a lower bound of ``tau``.

    ``tau_{k+1} = (base_sum + sum(y > tau_k) - radius) / (base_count + count(y > tau_k))``, where
    ``base_*`` accounts for entries known to be active; it rises monotonically to the threshold,
    and entries at or below ``tau_k`` are dropped for good, so each pass scans fewer candidates.
    """
    size = counts.sum(axis=1)
    while True:
        tau = (base_sum + sums.sum(axis=1) - radius) / (base_count + size)
        _keep_above(int(size.sum()), z, use_abs, False, tau, buf, counts, sums)
        new_size = counts.sum(axis=1)
        if np.array_equal(new_size, size):
            return tau
        size = new_size


def _safe_thresholds(z, radius, use_abs):
    """Thresholds of long rows from ``max(max(y) - radius, (sum(y) - radius) / p)``, always a lower bound."""
    n, p = z.shape
    chunks = (p + SIMPLEX_CHUNK - 1) // SIMPLEX_CHUNK
    sums, maxima = np.empty((n, chunks)), np.empty((n, chunks))
    _chunk_sums(z.size, z, use_abs, sums, maxima)
    start = np.maximum(maxima.max(axis=1) - radius, (sums.sum(axis=1) - radius) / p)
    counts = np.empty((n, chunks), dtype=np.int64)
    buf = np.empty((n, chunks * SIMPLEX_CHUNK))
    _keep_above(z.size, z, use_abs, True, start, buf, counts, sums)
    return _michelot(z, radius, use_abs, buf, counts, sums, 0, 0.0)


def _newton_thresholds(z, radius, use_abs):
    """Simplex thresholds of long rows by Michelot's method over parallel chunks, in one pass over ``z``.

    A sample brackets ``tau`` in ``[lo, hi]``; one pass keeps the few entries in that range (up
    to BRACKET_SLOTS per chunk) and sums those above ``hi`` (all active). Where the bracket holds
    (``f(lo) >= 0 >= f(hi)`` with ``f(t) = sum((y - t)+) - radius``) and the slots sufficed,
    Newton passes over the kept entries finish from ``lo``; other rows start again from a safe
    lower bound. Returns ``(tau, row_totals)``.
    """
    n, p = z.shape
    chunks = (p + SIMPLEX_CHUNK - 1) // SIMPLEX_CHUNK
    lo, hi = _sample_bracket(z, radius, use_abs)
    counts, above_counts = np.empty((n, chunks), dtype=np.int64), np.empty((n, chunks))
    sums, above_sums, totals = np.empty((n, chunks)), np.empty((n, chunks)), np.empty((n, chunks))
    # Small, so that few fresh pages are touched (zeroing a large scratch array costs a pass).
    buf = np.empty((n, chunks * BRACKET_SLOTS), z.dtype)
    _split_chunks(z.size, z, use_abs, lo, hi, buf, counts, sums, above_counts, above_sums, totals)
    row_totals = totals.sum(axis=1)
    base_count, base_sum = above_counts.sum(axis=1), above_sums.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        holds = (base_sum - base_count * hi <= radius) & (
            base_sum + sums.sum(axis=1) - (base_count + counts.sum(axis=1)) * lo >= radius
        )
        holds &= (counts <= BRACKET_SLOTS).all(axis=1)
        np.minimum(counts, BRACKET_SLOTS, out=counts)
        tau = _michelot(z, radius, use_abs, buf, counts, sums, base_count, base_sum)
        missed = ~holds & np.isfinite(row_totals)
        if missed.any():
            tau[missed] = _safe_thresholds(np.ascontiguousarray(z[missed]), radius, use_abs)
    return tau, row_totals


@kernel
def _shrink_rows(z, taus, use_abs, out):
    """``out = max(z - tau, 0)`` (simplex) or ``sign(z) * max(|z| - tau, 0)`` (l1 ball), NaN rows for NaN tau."""
    n, p = z.shape
    blocks = (p + BLOCK - 1) // BLOCK
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        zi, oi = z[i, j0 : min(j0 + BLOCK, p)], out[i, j0 : min(j0 + BLOCK, p)]  # slices from 0: vectorize
        tau = taus[i]
        if math.isnan(tau):
            for j in range(zi.shape[0]):
                oi[j] = math.nan
        elif use_abs:
            for j in range(zi.shape[0]):
                v = zi[j]
                oi[j] = math.copysign(abs(v) - tau, v) if abs(v) > tau else 0.0
        else:
            for j in range(zi.shape[0]):
                v = zi[j]
                oi[j] = v - tau if v > tau else 0.0


def _simplex_thresholds(z, radius, use_abs):
    """Per-row threshold ``tau`` of the simplex projection of ``z`` (or ``|z|``); NaN for non-finite rows.

    Rows of up to SIMPLEX_CHUNK entries use Condat's one-pass method; longer rows use parallel
    Newton passes, whose cost does not grow with the radius as Condat's does.
    """
    n, p = z.shape
    radius = float(radius)
    if p <= SIMPLEX_CHUNK:
        tau, row_totals, buf = np.empty(n), np.empty(n), np.empty((n, p))
        _condat_rows(z.size if n > 1 else 0, z, use_abs, radius, buf, tau, row_totals)
    else:
        tau, row_totals = _newton_thresholds(z, radius, use_abs)
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
