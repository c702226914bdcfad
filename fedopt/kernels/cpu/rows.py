"""Non-separable prox operators (group lasso, l2 ball, simplex, l1 ball) as Numba kernels."""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels import SHIFT_RATIO, SQUARES_MAX, SQUARES_MIN
from fedopt.kernels.cpu._jit import REDUCTION_MATH, function, inline, kernel
from fedopt.kernels.cpu.elementwise import BLOCK
from fedopt.kernels.reference import l2_ball_factors, simplex_row

#: Rows of up to this many entries are one task each in the l2-ball, simplex and l1-ball
#: projections (a row then stays in cache between its passes); longer rows are split into
#: chunks of this many entries for parallel passes.
ROW_CHUNK = 1 << 16


# Group bounds are cast to unsigned so that indexing skips Numba's negative-index wrap-around,
# which would keep the compiler from vectorizing the short loops over one group.


@inline
def _group_squares(z, i, starts, order, g0, g1, squares):
    """``squares[g - g0] = sum(z[i, order[starts[g]:starts[g+1]]] ** 2)`` for ``g0 <= g < g1``, squared
    and summed in float64 (float32 squares of entries below 1e-19 are subnormal); True when a sum is outside
    ``SQUARES_MIN .. SQUARES_MAX`` (see :func:`_rescue_factors`)."""
    suspect = False
    for g in range(g0, g1):
        total = 0.0
        k0, k1 = np.uint64(starts[g]), np.uint64(starts[g + 1])
        if order.shape[0] > 0:
            for k in range(k0, k1):
                v = np.float64(z[i, np.uint64(order[k])])
                total += v * v
        else:
            for k in range(k0, k1):
                v = np.float64(z[i, k])
                total += v * v
        squares[g - g0] = total
        suspect |= not (SQUARES_MIN <= total <= SQUARES_MAX)
    return suspect


@inline
def _shrink_factors(squares, tau, scale):
    """``squares[m] <- scale * max(0, 1 - tau[m] / sqrt(squares[m]))`` in place; NaN stays NaN."""
    for m in range(squares.shape[0]):
        norm = math.sqrt(squares[m])
        # A zero group (norm <= tau) is zeroed, never divided by 0; a NaN norm fails the test.
        squares[m] = 0.0 if norm <= tau[m] else scale * (1.0 - tau[m] / norm)


@function
def _rescue_factors(z, i, starts, order, g0, tau, scale, factors):
    """:func:`_shrink_factors` again for the groups ``g0 + m`` whose sum of squares is outside
    ``SQUARES_MIN .. SQUARES_MAX``, from their norms with the entries divided by the largest
    magnitude first (the plain norm where that is 0, inf or NaN)."""
    zi = z[i]
    for m in range(factors.shape[0]):
        k0, k1 = np.uint64(starts[g0 + m]), np.uint64(starts[g0 + m + 1])
        largest, total = 0.0, 0.0
        for k in range(k0, k1):
            a = np.float64(abs(zi[np.uint64(order[k])] if order.shape[0] > 0 else zi[k]))
            largest = a if a > largest else largest
            total += a * a
        if SQUARES_MIN <= total <= SQUARES_MAX:
            continue
        norm = math.sqrt(total)
        if 0.0 < largest < math.inf:
            total = 0.0
            for k in range(k0, k1):
                a = (zi[np.uint64(order[k])] if order.shape[0] > 0 else zi[k]) / largest
                total += a * a
            norm = largest * math.sqrt(total)
        factors[m] = 0.0 if norm <= tau[m] else scale * (1.0 - tau[m] / norm)


@inline
def _scale_groups(z, i, starts, order, g0, factors, out):
    """``out[i, G] = factors[g - g0] * z[i, G]`` for the groups ``G`` of ``factors``."""
    for g in range(g0, g0 + factors.shape[0]):
        f = factors[g - g0]
        k0, k1 = np.uint64(starts[g]), np.uint64(starts[g + 1])
        if order.shape[0] > 0:
            for k in range(k0, k1):
                j = np.uint64(order[k])
                out[i, j] = f * z[i, j]
        else:
            for k in range(k0, k1):
                out[i, k] = f * z[i, k]


@kernel(fastmath=REDUCTION_MATH)
def prox_group_kernel(z, starts, order, tau, scale, out):
    """Per (row, group): ``out[i, G] = scale * max(0, 1 - tau[g] / ||z[i, G]||) * z[i, G]``, with
    ``G = order[starts[g]:starts[g+1]]``.

    A task is a run of consecutive groups of about BLOCK coordinates in all, in one row or, for
    rows shorter than BLOCK, in as many whole rows. The norms of its groups are gathered first,
    so that the square roots and divisions (the bulk of the work with small groups) run in one
    vectorized loop, then the groups are scaled.
    """
    n, p = z.shape
    n_groups = starts.shape[0] - 1
    per_task = max(1, BLOCK * n_groups // max(p, 1))
    group_tiles = (n_groups + per_task - 1) // per_task
    rows_per_tile = max(1, BLOCK // max(p, 1))
    row_tiles = (n + rows_per_tile - 1) // rows_per_tile
    for task in prange(row_tiles * group_tiles):
        r = task // group_tiles
        g0 = (task - r * group_tiles) * per_task
        factors = np.empty(min(per_task, n_groups - g0))
        taus = tau[g0 : g0 + factors.shape[0]]
        for i in range(r * rows_per_tile, min((r + 1) * rows_per_tile, n)):  # no views z[i]: see _l2_ball_rows
            suspect = _group_squares(z, i, starts, order, g0, g0 + factors.shape[0], factors)
            _shrink_factors(factors, taus, scale)
            if suspect:
                _rescue_factors(z, i, starts, order, g0, taus, scale, factors)
            _scale_groups(z, i, starts, order, g0, factors, out)


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
        zi = z[i, j0:j1]  # slices from 0: see fedopt.kernels.cpu.elementwise._prox_tile
        total = 0.0  # of float64 squares: float32 squares of entries below 1e-19 are subnormal
        if has_center:
            ci = center[j0:j1]
            for j in range(zi.shape[0]):
                d = np.float64(zi[j] - ci[j])
                total += d * d
        else:
            for j in range(zi.shape[0]):
                d = np.float64(zi[j])
                total += d * d
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


@inline
def _ball_factor(norm, radius):
    """``min(1, radius / norm)``; NaN for a NaN norm."""
    return 1.0 if norm <= radius else radius / norm


@function
def _rescaled_ball_factor(z, i, center, squares, radius):
    """:func:`_ball_factor` of ``||z[i] - center||`` (``center`` may be empty: the origin) with the
    differences and the radius divided by the largest magnitude first, so that neither the squares
    nor the norm itself (6 entries of 1e308) overflow; from ``sqrt(squares)``, the plain norm, where
    the largest magnitude is 0, inf or NaN."""
    zi = z[i]
    has_center = center.shape[0] > 0
    largest = 0.0
    for j in range(zi.shape[0]):
        a = abs(zi[j] - center[j] if has_center else zi[j])
        largest = a if a > largest else largest
    if not (0.0 < largest < math.inf):
        return _ball_factor(math.sqrt(squares), radius)
    total = 0.0
    for j in range(zi.shape[0]):
        a = (zi[j] - center[j] if has_center else zi[j]) / largest
        total += a * a
    return _ball_factor(math.sqrt(total), radius / largest)


@kernel(fastmath=REDUCTION_MATH)
def _l2_ball_rows(z, center, radius, out):
    """Rows of at most ROW_CHUNK entries, one per task: the norm, then the scaling (the row is still in cache).

    Rows are indexed ``z[i, j]``, not through views ``z[i]``: a view that lives across a call (here
    to :func:`_rescaled_ball_factor`) is reference-counted, two atomic operations a row, which made 100
    rows of 10 take 4.7x a plain loop's time on an Intel Xeon (Emerald Rapids)."""
    n, p = z.shape
    has_center = center.shape[0] > 0
    for i in prange(n):
        total = 0.0  # of float64 squares: float32 squares of entries below 1e-19 are subnormal
        if has_center:
            for j in range(p):
                d = np.float64(z[i, j] - center[j])
                total += d * d
        else:
            for j in range(p):
                d = np.float64(z[i, j])
                total += d * d
        if SQUARES_MIN <= total <= SQUARES_MAX:
            factor = _ball_factor(math.sqrt(total), radius)
        else:
            factor = _rescaled_ball_factor(z, i, center, total, radius)
        if has_center:
            for j in range(p):
                out[i, j] = center[j] + (z[i, j] - center[j]) * factor
        else:
            for j in range(p):
                out[i, j] = z[i, j] * factor


def project_l2_ball(z, center, radius, out):
    """``out = c + (z - c) * min(1, radius / ||z - c||)`` per row: a norm pass, then a scale pass.

    The path depends on the row length only, so a row gets the same result in any batch of rows.
    """
    n, p = z.shape
    if p <= ROW_CHUNK:
        _l2_ball_rows(z.size, z, center, float(radius), out)
        return out
    partial = np.empty((n, (p + BLOCK - 1) // BLOCK))
    _row_squared_distances(z.size, z, center, partial)
    squares = partial.sum(axis=1)
    norms = np.sqrt(squares)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norms > radius, radius / norms, 1.0)
    factor[np.isnan(norms)] = np.nan
    suspect = ~((squares >= SQUARES_MIN) & (squares <= SQUARES_MAX))  # see SQUARES_MIN
    if suspect.any():
        factor[suspect] = l2_ball_factors(z[suspect] - (center if len(center) else 0.0), radius)[:, 0]
    _scale_rows_about(z.size, z, center, factor, out)
    return out


@inline
def _filter_above(values, tau, buf):
    """``buf[:k] =`` the ``k`` entries ``v > tau`` of ``values`` (which may be ``buf`` itself).

    Returns ``(k, their sum)``.
    """
    count, total = 0, 0.0
    for j in range(values.shape[0]):
        v = values[j]
        buf[count] = v  # written always, kept by advancing the count: no branch to mispredict
        keep = v > tau
        count += keep
        total += v if keep else 0.0
    return count, total


@function
def _michelot_threshold(y, use_abs, radius, buf):
    """Threshold of the simplex projection of ``y`` (or ``|y|``) by Michelot's method: ``(tau, sum(y))``.

    ``tau_{k+1} = (sum(v > tau_k) - radius) / count(v > tau_k)`` rises monotonically to the
    threshold from the lower bound ``max(max(y) - radius, (sum(y) - radius) / p)``; each pass
    keeps only the entries above the current ``tau`` in ``buf``, so the passes shrink fast. The
    pass that sums ``y`` already drops the entries below its running maximum minus the radius.
    Unlike Condat's one-pass method, whose candidate list grows with the radius (15 ns an
    entry for an l1 ball that keeps a fifth of a row), the cost stays a few passes. Returns
    ``(tau, sum(y), max(y))``; ``tau`` is NaN for a row with NaN or inf.
    """
    p = y.shape[0]
    total, top, count = 0.0, -math.inf, 0
    for j in range(p):
        v = abs(y[j]) if use_abs else y[j]
        total += v
        top = v if v > top else top
        buf[count] = v  # written always, kept by advancing the count: no branch to mispredict
        count += v > top - radius
    if not math.isfinite(total):
        return math.nan, total, top
    tau = max(top - radius, (total - radius) / p)
    first = True
    while True:
        kept, kept_sum = _filter_above(buf[:count], tau, buf)
        if kept == 0 or (kept == count and not first):  # no change: tau is the threshold of this set
            return tau, total, top  # (no entry left happens only when radius is below the rounding of max(y))
        tau = (kept_sum - radius) / kept
        count, first = kept, False


@kernel(fastmath=REDUCTION_MATH)
def _chunk_sums(z, use_abs, sums, maxima):
    """``sums[i, c]`` and ``maxima[i, c]`` of ``y = z`` (or ``|z|``) over chunk ``c`` of row ``i``."""
    n, p = z.shape
    chunks = sums.shape[1]
    for task in prange(n * chunks):
        i = task // chunks
        c = task - i * chunks
        zc = z[i, c * ROW_CHUNK : min((c + 1) * ROW_CHUNK, p)]  # a slice from 0: vectorizes
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
        b0 = c * ROW_CHUNK
        zc = z[i, b0 : min(b0 + ROW_CHUNK, p)]  # a slice from 0: vectorizes
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
            for j in range(c * ROW_CHUNK, min((c + 1) * ROW_CHUNK, p)):
                y = abs(zi[j]) if use_abs else zi[j]
                if y > tau:
                    buf[i, b0 + kept] = y
                    kept += 1
                    total += y
        else:
            kept, total = _filter_above(buf[i, b0 : b0 + counts[i, c]], tau, buf[i, b0:])
        counts[i, c] = kept
        sums[i, c] = total


#: Entries sampled from each long row to bracket its threshold (see :func:`_sample_bracket`).
SAMPLE = 1 << 14
#: Slots per chunk for the entries inside the bracket (a few % of them for a sample of SAMPLE);
#: a row whose chunk overflows its slots takes the safe path.
BRACKET_SLOTS = ROW_CHUNK // 8


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
    with np.errstate(invalid="ignore", over="ignore"):  # huge entries: a bracket that fails its check
        active = (y * np.arange(1, m + 1) > np.cumsum(y, axis=1) - radius * m / p).sum(axis=1)
    margin = (4 * np.sqrt(active) + 16).astype(np.int64)
    big = np.finfo(np.float64).max  # not inf: 0 * bound must stay 0 in the checks
    rows = np.arange(n)
    lo = np.where(active + margin < m, y[rows, np.minimum(active + margin, m - 1)], -big)
    hi = np.where(active - 1 - margin >= 0, y[rows, np.maximum(active - 1 - margin, 0)], big)
    return lo, hi


def _michelot(z, radius, use_abs, buf, counts, sums, base_count, base_sum, tau):
    """Michelot's (Newton's) iteration over the candidates kept in ``buf`` (those above ``tau``, a
    lower bound of the threshold).

    ``tau_{k+1} = (base_sum + sum(y > tau_k) - radius) / (base_count + count(y > tau_k))``, where
    ``base_*`` accounts for entries known to be active; it rises monotonically to the threshold,
    and entries at or below ``tau_k`` are dropped for good, so each pass scans fewer candidates.
    Where no entry is left (a radius below the rounding of ``max(y)``: 1e16 - 1 is 1e16) or the sum
    overflows, ``tau_k`` stays: still a finite lower bound, where 0 / 0 gave NaN and -radius / 0 -inf.
    """
    size = counts.sum(axis=1)
    while True:
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            step = (base_sum + sums.sum(axis=1) - radius) / (base_count + size)
        tau = np.where(np.isfinite(step), step, tau)
        _keep_above(int(size.sum()), z, use_abs, False, tau, buf, counts, sums)
        new_size = counts.sum(axis=1)
        if np.array_equal(new_size, size):
            return tau
        size = new_size


def _safe_thresholds(z, radius, use_abs):
    """Thresholds of long rows from ``max(max(y) - radius, (sum(y) - radius) / p)``, always a lower bound."""
    n, p = z.shape
    chunks = (p + ROW_CHUNK - 1) // ROW_CHUNK
    sums, maxima = np.empty((n, chunks)), np.empty((n, chunks))
    _chunk_sums(z.size, z, use_abs, sums, maxima)
    start = np.maximum(maxima.max(axis=1) - radius, (sums.sum(axis=1) - radius) / p)
    counts = np.empty((n, chunks), dtype=np.int64)
    buf = np.empty((n, chunks * ROW_CHUNK))
    _keep_above(z.size, z, use_abs, True, start, buf, counts, sums)
    return _michelot(z, radius, use_abs, buf, counts, sums, 0, 0.0, start)


def _newton_thresholds(z, radius, use_abs):
    """Simplex thresholds of long rows by Michelot's method over parallel chunks, in one pass over ``z``.

    A sample brackets ``tau`` in ``[lo, hi]``; one pass keeps the few entries in that range (up
    to BRACKET_SLOTS per chunk) and sums those above ``hi`` (all active). Where the bracket holds
    (``f(lo) >= 0 >= f(hi)`` with ``f(t) = sum((y - t)+) - radius``) and the slots sufficed,
    Newton passes over the kept entries finish from ``lo``; other rows start again from a safe
    lower bound. Returns ``(tau, row_totals)``.
    """
    n, p = z.shape
    chunks = (p + ROW_CHUNK - 1) // ROW_CHUNK
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
        tau = _michelot(z, radius, use_abs, buf, counts, sums, base_count, base_sum, lo)
        missed = ~holds & np.isfinite(row_totals)
        if missed.any():
            tau[missed] = _safe_thresholds(np.ascontiguousarray(z[missed]), radius, use_abs)
    return tau, row_totals


@inline
def _shrink(zi, tau, use_abs, oi):
    """``oi = max(zi - tau, 0)`` (simplex) or ``sign(zi) * max(|zi| - tau, 0)`` (l1 ball); NaN for NaN tau."""
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


@kernel
def _shrink_rows(z, taus, use_abs, out):
    """:func:`_shrink` of each row at its ``taus[i]``, by blocks of a row."""
    n, p = z.shape
    blocks = (p + BLOCK - 1) // BLOCK
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        j1 = min(j0 + BLOCK, p)
        _shrink(z[i, j0:j1], taus[i], use_abs, out[i, j0:j1])  # slices from 0: vectorize


@function
def _shifted_projection(z, use_abs, radius, top, buf, out):
    """``out`` = the projection of the row ``z`` computed on ``y - top``, ``y = z`` (or ``|z|``) and
    ``top = max(y)``, for a row whose ``top`` dwarfs the radius (see ``SHIFT_RATIO``); NaN for a row
    with NaN or inf. Entries more than ``2 radius`` below ``top``, never active, are raised to that,
    so that no shifted sum overflows. ``buf`` takes the shifted row, which Michelot's passes then
    filter in place."""
    finite = True
    for j in range(z.shape[0]):
        y = abs(z[j]) if use_abs else z[j]
        finite &= math.isfinite(y)
        buf[j] = max(y - top, -2.0 * radius)
    tau = _michelot_threshold(buf, False, radius, buf)[0] if finite else math.nan
    for j in range(z.shape[0]):
        x = max(max((abs(z[j]) if use_abs else z[j]) - top, -2.0 * radius) - tau, 0.0)
        out[j] = math.copysign(x, z[j]) if use_abs else x  # NaN for a NaN tau


@kernel
def _simplex_rows(z, use_abs, radius, out):
    """Rows of at most ROW_CHUNK entries, one per task: Michelot's threshold, then the shrink."""
    n, p = z.shape
    for i in prange(n):
        buf = np.empty(p)
        tau, total, top = _michelot_threshold(z[i], use_abs, radius, buf)
        if use_abs and total <= radius:  # already inside the l1 ball: the projection is the identity
            _shrink(z[i], 0.0, use_abs, out[i])
        elif abs(top) > SHIFT_RATIO * radius or math.isinf(total):  # inf: entries of inf, or a sum that overflowed
            _shifted_projection(z[i], use_abs, radius, top, buf, out[i])
        else:
            _shrink(z[i], tau, use_abs, out[i])


def _project_simplex_rows(z, radius, use_abs, out):
    """Simplex projection of each row of ``z`` (or of ``|z|``, signs restored: the l1 ball).

    Rows of up to ROW_CHUNK entries are one task each; longer rows are split into chunks
    for parallel passes. The path depends on the row length only.
    """
    n, p = z.shape
    radius = float(radius)
    if p <= ROW_CHUNK:
        _simplex_rows(z.size if n > 1 else 0, z, use_abs, radius, out)
        return out
    tau, row_totals = _newton_thresholds(z, radius, use_abs)
    if use_abs:
        tau[row_totals <= radius] = 0.0  # already inside the l1 ball: the projection is the identity
    tau[~np.isfinite(row_totals)] = np.nan
    # Rows whose largest entry dwarfs the radius (SHIFT_RATIO; tau lies within the radius below it), or
    # whose sum overflowed, again on the shifted row: rare, so by the reference's sort. Computed before
    # the shrink, which may overwrite z (out is z in place).
    rescued = {i: np.copysign(simplex_row(np.abs(z[i]), radius), z[i]) if use_abs else simplex_row(z[i], radius)
               for i in np.flatnonzero((np.abs(tau) > SHIFT_RATIO * radius) | np.isinf(row_totals))}
    _shrink_rows(z.size, z, tau, use_abs, out)
    for i, x in rescued.items():
        out[i] = x
    return out


def project_simplex(z, radius, out):
    """``out = max(z - tau, 0)`` per row, with ``tau`` such that each row sums to ``radius``."""
    return _project_simplex_rows(z, radius, False, out)


def project_l1_ball(z, radius, out):
    """``out = z`` if ``||z||_1 <= radius`` else ``sign(z) * simplex(|z|, radius)``, per row."""
    return _project_simplex_rows(z, radius, True, out)
