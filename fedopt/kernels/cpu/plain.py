"""The plainest Numba loop of each kernel family: the yardstick ``fedopt bench`` holds the kernels to.

Each operation is written the way one would write it first: one loop over the elements (or the
rows, or the groups), ``prange`` on the outer loop, no blocking, no kind dispatch, no tuning.
Every loop is compiled twice, with ``parallel=True`` and serially, and the benchmark takes the
better of the two (the fork and join of a parallel loop dominate below about 1e5 elements).
The algorithms never call these; :func:`fedopt.bench.plain_prox` picks the loop of a regularizer.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from fedopt._backend import numba_cache_enabled
from fedopt.kernels.cpu._jit import renamed_copy


def _both(func):
    """``(parallel, serial)`` compilations of ``func`` (the serial one runs ``prange`` as ``range``),
    each cached in its own file."""
    cache = numba_cache_enabled()
    return numba.njit(parallel=True, cache=cache)(renamed_copy(func, "_parallel")), numba.njit(cache=cache)(func)


# ---- separable proxes over the flat array (C-contiguous, so rows x columns is one vector) -----
def _soft(z, tau, scale, out):
    for i in prange(z.size):
        v = z[i]
        out[i] = scale * (v - math.copysign(tau, v)) if abs(v) > tau else 0.0


def _clip(z, lo, hi, out):
    for i in prange(z.size):
        out[i] = min(max(z[i], lo), hi)


def _firm(z, tau, knee, inv, out):
    for i in prange(z.size):
        v = z[i]
        a = abs(v)
        out[i] = 0.0 if a <= tau else (v if a > knee else (v - math.copysign(tau, v)) * inv)


def _scad(z, tau, knee1, knee2, shift, inv, out):
    for i in prange(z.size):
        v = z[i]
        a = abs(v)
        if a <= tau:
            out[i] = 0.0
        elif a <= knee1:
            out[i] = v - math.copysign(tau, v)
        elif a <= knee2:
            out[i] = (v - math.copysign(shift, v)) * inv
        else:
            out[i] = v


def _soft_weighted(z, taus, out):
    n, p = z.shape
    for i in prange(n):
        for j in range(p):
            v = z[i, j]
            out[i, j] = v - math.copysign(taus[j], v) if abs(v) > taus[j] else 0.0


soft = _both(_soft)
clip = _both(_clip)
firm = _both(_firm)
scad = _both(_scad)
soft_weighted = _both(_soft_weighted)


# ---- the normal-map step with soft thresholding ------------------------------------------------
def _normal_map_soft_rows(z, g, c, z_ref, x_ref, eta, inv_gamma, tau, z_out, x_out):
    # z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c); x_out = soft(z_out, tau): one row per task
    n, p = z.shape
    for i in prange(n):
        for j in range(p):
            v = z[i, j] - eta * (g[i, j] + (z_ref[j] - x_ref[j]) * inv_gamma + c[i, j])
            z_out[i, j] = v
            x_out[i, j] = v - math.copysign(tau, v) if abs(v) > tau else 0.0


def _normal_map_soft_columns(z, g, c, z_ref, x_ref, eta, inv_gamma, tau, z_out, x_out):
    # the same, with the columns in the parallel loop (a single long row)
    n, p = z.shape
    for j in prange(p):
        shift = (z_ref[j] - x_ref[j]) * inv_gamma
        for i in range(n):
            v = z[i, j] - eta * (g[i, j] + shift + c[i, j])
            z_out[i, j] = v
            x_out[i, j] = v - math.copysign(tau, v) if abs(v) > tau else 0.0


normal_map_soft_rows = _both(_normal_map_soft_rows)
normal_map_soft_columns = _both(_normal_map_soft_columns)


# ---- row proxes --------------------------------------------------------------------------------
def _group_soft(z, size, tau, out):
    # contiguous groups of `size` in the flat array: out_G = max(0, 1 - tau / ||z_G||) z_G
    for g in prange(z.size // size):
        total = 0.0
        for k in range(g * size, (g + 1) * size):
            total += z[k] * z[k]
        norm = math.sqrt(total)
        factor = 0.0 if norm <= tau else 1.0 - tau / norm
        for k in range(g * size, (g + 1) * size):
            out[k] = factor * z[k]


def _l2_ball_rows(z, radius, out):
    # one row per task: its norm, then its scaling
    n, p = z.shape
    for i in prange(n):
        total = 0.0
        for j in range(p):
            total += z[i, j] * z[i, j]
        norm = math.sqrt(total)
        factor = radius / norm if norm > radius else 1.0
        for j in range(p):
            out[i, j] = z[i, j] * factor


def _l2_ball_columns(z, radius, out):
    # each row's norm as a parallel reduction, then a parallel scaling (a few long rows)
    n, p = z.shape
    for i in range(n):
        total = 0.0
        for j in prange(p):
            total += z[i, j] * z[i, j]
        norm = math.sqrt(total)
        factor = radius / norm if norm > radius else 1.0
        for j in prange(p):
            out[i, j] = z[i, j] * factor


def _simplex_sort(z, radius, use_abs, out):
    # per row: sort descending, the largest k with y_k > (sum_{m<=k} y_m - radius) / k sets tau
    n, p = z.shape
    for i in prange(n):
        y = np.abs(z[i]) if use_abs else z[i].copy()
        if use_abs and y.sum() <= radius:
            out[i] = z[i]
            continue
        s = -np.sort(-y)
        total, tau = 0.0, 0.0
        for k in range(p):
            total += s[k]
            candidate = (total - radius) / (k + 1)
            if s[k] > candidate:
                tau = candidate
        for j in range(p):
            shrunk = max(y[j] - tau, 0.0)
            out[i, j] = math.copysign(shrunk, z[i, j]) if use_abs else shrunk


def _simplex_michelot(z, radius, use_abs, out):
    # per row: Michelot's iteration tau <- (sum_{y > tau} y - radius) / #{y > tau} from
    # (sum(y) - radius) / p; each pass a parallel reduction over the row
    n, p = z.shape
    for i in range(n):
        total = 0.0
        for j in prange(p):
            total += abs(z[i, j]) if use_abs else z[i, j]
        if use_abs and total <= radius:
            for j in prange(p):
                out[i, j] = z[i, j]
            continue
        tau = (total - radius) / p
        count, previous = p, p + 1
        while count != previous:
            previous = count
            above, count = 0.0, 0
            for j in prange(p):
                y = abs(z[i, j]) if use_abs else z[i, j]
                if y > tau:
                    above += y
                    count += 1
            tau = (above - radius) / count
        for j in prange(p):
            y = abs(z[i, j]) if use_abs else z[i, j]
            shrunk = max(y - tau, 0.0)
            out[i, j] = math.copysign(shrunk, z[i, j]) if use_abs else shrunk


group_soft = _both(_group_soft)
l2_ball_rows = _both(_l2_ball_rows)
l2_ball_columns = _both(_l2_ball_columns)
simplex_sort = _both(_simplex_sort)
simplex_michelot = _both(_simplex_michelot)


# ---- gossip ------------------------------------------------------------------------------------
def _mix_csr(indptr, indices, weights, V, out):
    # out[i] = sum_k weights[k] * V[indices[k]], one node per task
    n, p = out.shape
    for i in prange(n):
        for j in range(p):
            total = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                total += weights[k] * V[indices[k], j]
            out[i, j] = total


mix_csr = _both(_mix_csr)
