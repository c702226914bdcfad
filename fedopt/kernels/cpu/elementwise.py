"""Separable prox operators and the fused normal-map step, as Numba kernels.

Work is split into tiles of about BLOCK elements (a block of columns of one row, or several
short rows) so that one wide vector and many narrow client rows both spread over the threads.
The kernels flatten their rows, pick their tiles and cast their parameters themselves: in the
Python wrapper these took 0.2-0.7 us of a 0.9-1.4 us call on 1 000 elements.
Inside a tile, each ``kind`` has its own simple loop, so the branch on ``kind`` is taken once per
tile rather than once per row or element.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from fedopt.kernels import (
    CLIP,
    CLIP_VECTOR,
    IDENTITY,
    MCP,
    MCP_WEIGHTED,
    SCAD,
    SCAD_WEIGHTED,
    SOFT,
    SOFT_MASKED,
    SOFT_WEIGHTED,
)
from fedopt.kernels.cpu._jit import function, inline, kernel

#: Elements per task: 128 KiB of float64, so a normal-map tile is still in the L2 cache when the
#: prox reads it back, and large enough that the cost of entering a tile (about 50 ns, see
#: :func:`_prox_tile`) stays near 1 % (4096 left float32 at 1e5 elements 1.4x slower than a
#: plain loop).
BLOCK = 16384
#: The smallest tile when a call is split for balance between threads.
MIN_BLOCK = 2048


@inline
def _soft(v, tau):
    """``sign(v) * max(|v| - tau, 0)`` as a select (vectorizable); NaN stays NaN.

    ``not (|v| <= tau)`` is one unordered comparison that holds for NaN, so a NaN takes the
    ``v - ...`` side without a separate NaN test. The zero is ``tau - tau``, in the data's dtype:
    a literal 0 would turn float32 arithmetic into float64 (2.7x slower).
    """
    return v - math.copysign(tau, v) if not (abs(v) <= tau) else tau - tau


@inline
def _row(a, i, j0, j1):
    """``a[i, j0:j1]``, as the plain row view ``a[i]`` when that is the whole row: a slice's bounds
    are checked and clipped, about 10 instructions an array and row (the normal-map step on 100
    rows of 10 took 2.3 us with slices and 1.6 us with row views, float64). For the loops of a
    helper compiled on its own (:func:`_step_rows`): inlined into the prox kernel's loops of every
    kind, the select kept most of them scalar (6x slower on 1e4 elements)."""
    return a[i] if j0 == 0 and j1 == a.shape[1] else a[i, j0:j1]


@inline
def _views(src, dst, i, j0, j1, in_place):
    """``(src[i, j0:j1], dst[i, j0:j1])``; with ``in_place`` (a constant where it is inlined) the
    destination's view twice, so that the loop reads and writes one pointer."""
    y = dst[i, j0:j1]
    return (y if in_place else src[i, j0:j1]), y


@inline
def _out_row(source, out, i, j0, j1, in_place):
    """Row ``i`` of ``out`` (:func:`_row`), or with ``in_place`` (a constant where it is inlined) the
    ``source`` view itself, so that the loop reads and writes one pointer."""
    return source if in_place else _row(out, i, j0, j1)


@inline
def _prox_tile(kind, theta, w, src, i0, i1, j0, j1, dst):
    """:func:`_prox_tiles_of`, in place (``src`` is ``dst``) on one view per row: two views of one
    buffer fail the compiler's overlap check and kept the loops scalar (DEPOSITUM's in-place
    ``x = prox(x - alpha nu)``: 1.6 against 0.9 us on 2 410 float64 elements)."""
    if src.ctypes.data == dst.ctypes.data:
        _prox_tiles_of(kind, theta, w, dst, i0, i1, j0, j1, dst, True)
    else:
        _prox_tiles_of(kind, theta, w, src, i0, i1, j0, j1, dst, False)


@inline
def _prox_tiles_of(kind, theta, w, src, i0, i1, j0, j1, dst, in_place):
    """``dst[i0:i1, j0:j1] = prox(src[i0:i1, j0:j1])`` for the separable prox of code ``kind``.

    ``theta`` has the dtype of ``src``, so float32 data is processed in float32. Every case is
    written as selects without early exits, which the compiler turns into SIMD blends; the
    comparisons are arranged so that a NaN input falls through to a NaN output. The loops run
    over slices from index 0: an index from ``range(j0, j1)`` may be negative as far as the
    compiler knows, and the wraparound select that Numba then adds kept the loops scalar (10x
    slower on AVX-512). Entering this function costs about 50 ns in a kernel compiled with
    reference counts: in a body this large Numba's counting of the array arguments (atomic
    operations) is not pruned away. So the branch on ``kind`` is taken once per tile, not once
    per row (100 rows of 10 one at a time took 5x a plain loop).
    """
    if kind == SOFT:
        tau, scale = theta[0], theta[1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                y[j] = scale * _soft(x[j], tau)
    elif kind == SOFT_WEIGHTED:
        tau, scale = theta[0], theta[1]
        weights = w[0, j0:j1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                y[j] = scale * _soft(x[j], tau * weights[j])
    elif kind == SOFT_MASKED:
        tau, scale = theta[0], theta[1]
        weights, mask = w[0, j0:j1], w[1, j0:j1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = _soft(x[j], tau * weights[j])
                y[j] = scale * v if mask[j] != 0 else v
    elif kind == CLIP:
        lo, hi = theta[0], theta[1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                v = lo if v < lo else v
                y[j] = hi if v > hi else v
    elif kind == CLIP_VECTOR:
        lower, upper = w[0, j0:j1], w[1, j0:j1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                v = lower[j] if v < lower[j] else v
                y[j] = upper[j] if v > upper[j] else v
    elif kind == MCP:
        tau, knee, inv = theta[0], theta[1], theta[2]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                a = abs(v)
                firm = (v - math.copysign(tau, v)) * inv
                firm = v if a > knee else firm
                y[j] = tau - tau if a <= tau else firm  # a 0 in the data's dtype, see _soft
    elif kind == SCAD:
        tau, knee1, knee2, shift, inv = theta[0], theta[1], theta[2], theta[3], theta[4]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                a = abs(v)
                middle = (v - math.copysign(shift, v)) * inv
                middle = v if a > knee2 else middle
                y[j] = _soft(v, tau) if a <= knee1 else middle
    elif kind == MCP_WEIGHTED:  # MCP with lam (every threshold) scaled by w[0, j]
        tau, knee, inv = theta[0], theta[1], theta[2]
        lam = w[0, j0:j1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                a = abs(v)
                t = tau * lam[j]
                firm = (v - math.copysign(t, v)) * inv
                firm = v if a > knee * lam[j] else firm
                y[j] = t - t if a <= t else firm
    elif kind == SCAD_WEIGHTED:
        tau, knee1, knee2, shift, inv = theta[0], theta[1], theta[2], theta[3], theta[4]
        lam = w[0, j0:j1]
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                v = x[j]
                a = abs(v)
                middle = (v - math.copysign(shift * lam[j], v)) * inv
                middle = v if a > knee2 * lam[j] else middle
                y[j] = _soft(v, tau * lam[j]) if a <= knee1 * lam[j] else middle
    elif kind == IDENTITY:
        for i in range(i0, i1):
            x, y = _views(src, dst, i, j0, j1, in_place)
            for j in range(x.shape[0]):
                y[j] = x[j]


@function
def prox_rows(kind, theta, w, src, i0, i1, j0, j1, dst):
    """:func:`_prox_tile` compiled once, apart from the kernels that call it (a tile of the kernels
    below, a client's row in the local-steps kernels): inlined, its seven loops made each caller,
    and each of a kernel's serial and parallel variants, take seconds longer to compile."""
    _prox_tile(kind, theta, w, src, i0, i1, j0, j1, dst)


@inline
def prox_row(kind, theta, w, src, i, dst):
    """``dst[i] = prox(src[i])`` with ``theta`` one row of prox parameters (an array): :func:`prox_rows`
    called with the argument types of the kernels below (parameters as a tuple in the data's
    dtype, int64 bounds), so that the local-steps and tracking kernels share its compiled
    signatures (nine before, about 5 s of compile each)."""
    i0 = np.int64(i)
    prox_rows(kind, _in_dtype_of(src, theta), w, src, i0, i0 + 1, np.int64(0), np.int64(src.shape[1]), dst)


@inline
def _tiles(n, p, columns):
    """``(row_tiles, column_tiles, rows_per_tile)``: tiles of one row and ``columns`` columns, or of
    several whole rows of fewer columns, so that every task has about ``columns`` elements."""
    rows_per_tile = max(1, columns // max(p, 1))
    return (n + rows_per_tile - 1) // rows_per_tile, (p + columns - 1) // columns, rows_per_tile


@inline
def tile_columns(n, p, threads):
    """Elements per tile of a call on ``n`` rows of ``p`` on ``threads`` threads: BLOCK, or fewer
    when that would leave fewer than four tiles a thread (two threads splitting 7 tiles of 1e5
    float64 elements 4 to 3 took 9.7 us, 1.4x an even split's 7.1 us). Tiles of whole rows come
    in a multiple of ``threads``: the normal-map step on 100 rows of 1 000 took 30.0 us in 9 tiles
    of 12 rows and takes 26.5 us in 10 of 10 (float64; 15.0 and 12.8 us in float32)."""
    if threads <= 1:
        return BLOCK
    columns = min(BLOCK, max(MIN_BLOCK, -(-(n * p) // (4 * threads))))
    if p < columns:
        tiles = -(-n // (columns // p))
        tiles = threads * -(-tiles // threads)
        columns = -(-n // tiles) * p
    return columns


@inline
def _in_dtype_of(z, theta):
    """The prox parameters ``theta`` (at most five, one row) in the dtype of ``z``, as a tuple, so that
    float32 data is processed in float32 (the scalars of the normal-map step are cast with
    ``z.dtype.type``) and the kernels allocate nothing: a kernel without Numba's reference counts
    is called 0.08 us faster (see :class:`~fedopt.kernels.cpu._jit.Kernel`)."""
    cast, k = z.dtype.type, theta.shape[0]
    return (cast(theta[0]) if k > 0 else cast(0), cast(theta[1]) if k > 1 else cast(0),
            cast(theta[2]) if k > 2 else cast(0), cast(theta[3]) if k > 3 else cast(0),
            cast(theta[4]) if k > 4 else cast(0))


@inline
def _tile(task, n, p, column_tiles, rows_per_tile, columns):
    """``(i0, i1, j0, j1)`` of tile number ``task``."""
    r = task // column_tiles
    j0 = (task - r * column_tiles) * columns
    i0 = r * rows_per_tile
    return i0, min(i0 + rows_per_tile, n), j0, min(j0 + columns, p)


@kernel(allocates=False)
def prox_elementwise_kernel(z, kind, theta, w, out, threads):
    """``out = prox(z)`` for a separable prox (e.g. SOFT: ``out = theta[1] * sign(z) * max(|z| - theta[0], 0)``),
    in tiles of :func:`tile_columns` elements for ``threads`` threads. Without per-column
    parameters the C-contiguous rows are one long row (no short-row tails)."""
    if kind in (IDENTITY, SOFT, CLIP, MCP, SCAD):  # no per-column parameters
        z, out = z.reshape(1, z.size), out.reshape(1, out.size)
    n, p = z.shape
    columns = tile_columns(n, p, threads)
    params = _in_dtype_of(z, theta)
    row_tiles, column_tiles, rows_per_tile = _tiles(n, p, columns)
    for task in prange(row_tiles * column_tiles):
        i0, i1, j0, j1 = _tile(task, n, p, column_tiles, rows_per_tile, columns)
        prox_rows(kind, params, w, z, i0, i1, j0, j1, out)


@function
def _step_rows(z, g, c, z_ref, x_ref, eta, inv_gamma, i0, i1, j0, j1, z_out, soft, theta, x_out):
    """:func:`_step_rows_of`, in place (``z_out`` is ``z``, as the local loop runs it) on one view
    per row, as :func:`_prox_tile`: 3.5 against 1.8 us on 2 410 float64 elements with two views."""
    if z.ctypes.data == z_out.ctypes.data:
        _step_rows_of(z, g, c, z_ref, x_ref, eta, inv_gamma, i0, i1, j0, j1, z, soft, theta, x_out, True)
    else:
        _step_rows_of(z, g, c, z_ref, x_ref, eta, inv_gamma, i0, i1, j0, j1, z_out, soft, theta, x_out, False)


@inline
def _step_rows_of(z, g, c, z_ref, x_ref, eta, inv_gamma, i0, i1, j0, j1, z_out, soft, theta, x_out, in_place):
    """``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)`` on ``[i0:i1, j0:j1]`` (``c`` may be
    empty); with ``soft``, also ``x_out = theta[1] * soft(z_out, theta[0])`` in the same pass.

    The tests on ``c`` and ``soft`` sit outside the row loops: a test inside made every short row
    4x slower (100 rows of 10: 5.0 against 1.3 us).
    """
    zr, xr = z_ref[j0:j1], x_ref[j0:j1]  # slices from 0: see _prox_tile
    tau, scale = theta[0], theta[1]
    if c.shape[0] > 0 and soft:
        for i in range(i0, i1):
            zi, gi, ci = _row(z, i, j0, j1), _row(g, i, j0, j1), _row(c, i, j0, j1)
            zo, xo = _out_row(zi, z_out, i, j0, j1, in_place), _row(x_out, i, j0, j1)
            for j in range(zi.shape[0]):
                v = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma + ci[j])
                zo[j] = v
                xo[j] = scale * _soft(v, tau)
    elif soft:
        for i in range(i0, i1):
            zi, gi, xo = _row(z, i, j0, j1), _row(g, i, j0, j1), _row(x_out, i, j0, j1)
            zo = _out_row(zi, z_out, i, j0, j1, in_place)
            for j in range(zi.shape[0]):
                v = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma)
                zo[j] = v
                xo[j] = scale * _soft(v, tau)
    elif c.shape[0] > 0:
        for i in range(i0, i1):
            zi, gi, ci = _row(z, i, j0, j1), _row(g, i, j0, j1), _row(c, i, j0, j1)
            zo = _out_row(zi, z_out, i, j0, j1, in_place)
            for j in range(zi.shape[0]):
                zo[j] = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma + ci[j])
    else:
        for i in range(i0, i1):
            zi, gi = _row(z, i, j0, j1), _row(g, i, j0, j1)
            zo = _out_row(zi, z_out, i, j0, j1, in_place)
            for j in range(zi.shape[0]):
                zo[j] = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma)


@kernel(allocates=False)
def normal_map_kernel(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out, threads):
    """``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)``; ``x_out = prox(z_out)``, tile by tile
    (:func:`tile_columns` elements each for ``threads`` threads); soft-thresholding (l1) in the same pass."""
    n, p = z.shape
    columns = tile_columns(n, p, threads)
    params = _in_dtype_of(z, theta)
    step, inverse = z.dtype.type(eta), z.dtype.type(inv_gamma)
    soft = kind == SOFT
    row_tiles, column_tiles, rows_per_tile = _tiles(n, p, columns)
    for task in prange(row_tiles * column_tiles):
        i0, i1, j0, j1 = _tile(task, n, p, column_tiles, rows_per_tile, columns)
        _step_rows(z, g, c, z_ref, x_ref, step, inverse, i0, i1, j0, j1, z_out, soft, params, x_out)
        if not soft:
            prox_rows(kind, params, w, z_out, i0, i1, j0, j1, x_out)

