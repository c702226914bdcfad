"""Separable prox operators and the fused normal-map step, as Numba kernels.

Work is split into (row, block of columns) tasks so that one wide vector and many narrow client
rows both spread over the threads. Inside a block, each ``kind`` has its own simple loop, so the
branch on ``kind`` is taken once per block rather than once per element.
"""

from __future__ import annotations

import math

from numba import prange

from fedopt.kernels import CLIP, CLIP_VECTOR, IDENTITY, MCP, SCAD, SOFT, SOFT_WEIGHTED
from fedopt.kernels.cpu._jit import inline, kernel

#: Columns per task: 4096 float64 fill 32 KiB, so a normal-map block is still in cache when the
#: prox reads it back.
BLOCK = 4096


@inline
def _soft(v, tau):
    """``sign(v) * max(|v| - tau, 0)`` as selects (vectorizable); NaN stays NaN."""
    shrunk = v - math.copysign(tau, v)
    return shrunk if (abs(v) > tau) | (v != v) else v * 0  # `|`, not `or`: no branch


@inline
def _prox_block(kind, theta, w, src, i, j0, j1, dst):
    """``dst[i, j0:j1] = prox(src[i, j0:j1])`` for the separable prox of code ``kind``.

    ``theta`` has the dtype of ``src``, so float32 data is processed in float32. Every case is
    written as selects without early exits, which the compiler turns into SIMD blends; the
    comparisons are arranged so that a NaN input falls through to a NaN output. The loops run
    over slices from index 0: an index from ``range(j0, j1)`` may be negative as far as the
    compiler knows, and the wraparound select that Numba then adds kept the loops scalar (10x
    slower on AVX-512).
    """
    x = src[i, j0:j1]
    y = dst[i, j0:j1]
    if kind == IDENTITY:
        for j in range(x.shape[0]):
            y[j] = x[j]
    elif kind == SOFT:
        tau, scale = theta[0], theta[1]
        for j in range(x.shape[0]):
            y[j] = scale * _soft(x[j], tau)
    elif kind == SOFT_WEIGHTED:
        tau, scale = theta[0], theta[1]
        weights = w[0, j0:j1]
        for j in range(x.shape[0]):
            y[j] = scale * _soft(x[j], tau * weights[j])
    elif kind == CLIP:
        lo, hi = theta[0], theta[1]
        for j in range(x.shape[0]):
            v = x[j]
            v = lo if v < lo else v
            y[j] = hi if v > hi else v
    elif kind == CLIP_VECTOR:
        lower, upper = w[0, j0:j1], w[1, j0:j1]
        for j in range(x.shape[0]):
            v = x[j]
            v = lower[j] if v < lower[j] else v
            y[j] = upper[j] if v > upper[j] else v
    elif kind == MCP:
        tau, knee, inv = theta[0], theta[1], theta[2]
        for j in range(x.shape[0]):
            v = x[j]
            a = abs(v)
            firm = (v - math.copysign(tau, v)) * inv
            firm = v if a > knee else firm
            y[j] = v * 0 if a <= tau else firm
    elif kind == SCAD:
        tau, knee1, knee2, shift, inv = theta[0], theta[1], theta[2], theta[3], theta[4]
        for j in range(x.shape[0]):
            v = x[j]
            a = abs(v)
            middle = (v - math.copysign(shift, v)) * inv
            middle = v if a > knee2 else middle
            y[j] = _soft(v, tau) if a <= knee1 else middle


@kernel
def prox_elementwise_kernel(z, kind, theta, w, out):
    """``out = prox(z)`` for a separable prox (e.g. SOFT: ``out = theta[1] * sign(z) * max(|z| - theta[0], 0)``)."""
    n, p = z.shape
    blocks = (p + BLOCK - 1) // BLOCK
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        _prox_block(kind, theta, w, z, i, j0, min(j0 + BLOCK, p), out)


@kernel
def normal_map_kernel(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out):
    """``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)``; ``x_out = prox(z_out)``, block by block."""
    n, p = z.shape
    has_c = c.shape[0] > 0
    blocks = (p + BLOCK - 1) // BLOCK
    for task in prange(n * blocks):
        i = task // blocks
        j0 = (task - i * blocks) * BLOCK
        j1 = min(j0 + BLOCK, p)
        zi, gi, zo = z[i, j0:j1], g[i, j0:j1], z_out[i, j0:j1]  # slices from 0: see _prox_block
        zr, xr = z_ref[j0:j1], x_ref[j0:j1]
        if has_c:
            ci = c[i, j0:j1]
            for j in range(zi.shape[0]):
                zo[j] = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma + ci[j])
        else:
            for j in range(zi.shape[0]):
                zo[j] = zi[j] - eta * (gi[j] + (zr[j] - xr[j]) * inv_gamma)
        _prox_block(kind, theta, w, z_out, i, j0, j1, x_out)
