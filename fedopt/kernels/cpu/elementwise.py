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
    """``sign(v) * max(|v| - tau, 0)``; NaN stays NaN (a comparison with NaN is false)."""
    if -tau <= v <= tau:
        return 0.0
    return v - math.copysign(tau, v)


@inline
def _prox_block(kind, theta, w, src, i, j0, j1, dst):
    """``dst[i, j0:j1] = prox(src[i, j0:j1])`` for the separable prox of code ``kind``."""
    if kind == IDENTITY:
        for j in range(j0, j1):
            dst[i, j] = src[i, j]
    elif kind == SOFT:
        tau, scale = theta[0], theta[1]
        for j in range(j0, j1):
            dst[i, j] = scale * _soft(src[i, j], tau)
    elif kind == SOFT_WEIGHTED:
        tau, scale = theta[0], theta[1]
        for j in range(j0, j1):
            dst[i, j] = scale * _soft(src[i, j], tau * w[0, j])
    elif kind == CLIP:
        lo, hi = theta[0], theta[1]
        for j in range(j0, j1):
            v = src[i, j]
            dst[i, j] = lo if v < lo else (hi if v > hi else v)
    elif kind == CLIP_VECTOR:
        for j in range(j0, j1):
            v, lo, hi = src[i, j], w[0, j], w[1, j]
            dst[i, j] = lo if v < lo else (hi if v > hi else v)
    elif kind == MCP:
        tau, knee, inv = theta[0], theta[1], theta[2]
        for j in range(j0, j1):
            v = src[i, j]
            a = abs(v)
            if a <= tau:
                dst[i, j] = 0.0
            elif a <= knee:
                dst[i, j] = (v - math.copysign(tau, v)) * inv
            else:
                dst[i, j] = v
    elif kind == SCAD:
        tau, knee1, knee2, shift, inv = theta[0], theta[1], theta[2], theta[3], theta[4]
        for j in range(j0, j1):
            v = src[i, j]
            a = abs(v)
            if a <= knee1:
                dst[i, j] = _soft(v, tau)
            elif a <= knee2:
                dst[i, j] = (v - math.copysign(shift, v)) * inv
            else:
                dst[i, j] = v


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
        if has_c:
            for j in range(j0, j1):
                z_out[i, j] = z[i, j] - eta * (g[i, j] + (z_ref[j] - x_ref[j]) * inv_gamma + c[i, j])
        else:
            for j in range(j0, j1):
                z_out[i, j] = z[i, j] - eta * (g[i, j] + (z_ref[j] - x_ref[j]) * inv_gamma)
        _prox_block(kind, theta, w, z_out, i, j0, j1, x_out)
