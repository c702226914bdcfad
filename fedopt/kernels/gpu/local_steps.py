"""A round's local steps of a single-output linear model as one Numba-CUDA kernel.

One thread block per client (``grid = n``) runs all ``Q`` local steps of that client:

* thread ``t`` of ``NT`` owns the coordinates ``j = t + k NT`` (``k < KD``, ``j < p``) and keeps
  their ``z``, ``x = prox(z)`` and gradient in shared memory (slot ``k NT + t``: no bank
  conflicts, and registers stay free for the tile) for the whole round, so ``Z`` and ``P`` are
  read and written once (``D`` is read at each step's update);
* a step streams the client's minibatch in tiles of ``T`` rows: each thread loads its columns of
  the ``T`` rows into registers (consecutive threads read consecutive columns: coalesced), forms
  its ``T`` partial dot products with ``x``, the block sums them (shared memory, below), threads
  ``u < T`` turn the margins into residuals ``r_u = dloss/dm``, and every thread adds
  ``scale / m * r_u * X[row_u, j]`` to its gradient from the registers: each sampled row is read
  from global memory once per step;
* the step ends with the fused update ``z -= lr_i (g + D[i])`` and the separable prox
  ``x = prox_l(z)`` at the client's ``thetas[l, i]`` on the owned coordinates.

Block sums are written without warp shuffles (the CUDA simulator has none): the ``T x NT``
partial sums go to shared memory and are folded ``FAN`` at a time, each thread adding ``FAN``
values of one row, until at most ``FAN`` remain per row, which thread ``u`` adds while computing
the residual of row ``u``. With ``NT = 256`` that is three barriers per tile of ``T`` rows.

Shared memory per block: ``8 T NT (1 + 1/FAN)`` bytes for the sums and ``KD NT (8 + 2 s)`` for
the state (``s`` the parameters' itemsize): 33 KB for float64 at ``NT = 256, KD = 4, T = 4``.
Launch bounds cap the registers so that MIN_BLOCKS_PER_SM blocks share a multiprocessor.

Gradients, margins and the prox are computed in float64; ``z`` and ``x`` are held in the
parameters' dtype, so float32 state is rounded after every step as stored arrays would be.

The launcher declines (returns None) what it does not cover: CSR features, and SOFTMAX (its
``n_out`` classes would multiply the registers per thread). This module never imports CuPy; it
launches on the stream that ``Z``'s ``__cuda_array_interface__`` names.
"""

from __future__ import annotations

import functools
import math
import warnings

import numba
import numpy as np
from numba import cuda, float32, float64

from fedopt.kernels import (
    CLIP,
    CLIP_VECTOR,
    KIND_NAMES,
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
from fedopt.kernels.gpu.rows import _stream_of

#: Values one thread adds per stage of a block sum (a power of two).
FAN = 16
#: Rows per tile by default: ``T`` rows' columns sit in registers, ``T KD`` values per thread.
DEFAULT_TILE = 4
#: The most threads per block chosen by default; the default gives each thread about 4 coordinates.
MAX_AUTO_BLOCK = 256
#: The static shared memory a block may use (CUDA's limit without opting in to more); wider models
#: than this allows (d above about 1 500 in float64) take the step-by-step path.
MAX_SHARED_BYTES = 48 * 1024
#: Blocks the register budget must leave room for on one multiprocessor (launch bounds): 2 caps a
#: 256-thread block at 128 registers a thread; the unrolled loops would otherwise take ~150-200.
MIN_BLOCKS_PER_SM = 2


# ------------------------------------------------------------------------------ device functions
@cuda.jit(device=True)
def _sign(v):
    """``np.sign``: -1, 0 or 1, and NaN for NaN."""
    return 1.0 if v > 0.0 else (-1.0 if v < 0.0 else v)


@cuda.jit(device=True)
def _soft(v, tau):
    """``sign(v) * max(|v| - tau, 0)``; ``m < 0`` is false for a NaN ``m``, which then propagates."""
    m = abs(v) - tau
    return _sign(v) * (0.0 if m < 0.0 else m)


@cuda.jit(device=True)
def _clip(v, lo, hi):
    """``min(max(v, lo), hi)`` keeping NaN, as ``np.clip``."""
    c = lo if v < lo else v
    return hi if c > hi else c


@cuda.jit(device=True)
def _prox(kind, v, t0, t1, t2, t3, t4, w, j):
    """The separable prox of code ``kind`` at ``v`` (coordinate ``j``), as ``reference._elementwise``.

    ``t0..t4`` is the step's ``theta`` padded with zeros; ``w`` the per-coordinate rows.
    """
    a = abs(v)
    if kind == SOFT:
        return t1 * _soft(v, t0)
    if kind == SOFT_WEIGHTED:
        return t1 * _soft(v, t0 * w[0, j])
    if kind == CLIP:
        return _clip(v, t0, t1)
    if kind == CLIP_VECTOR:
        return _clip(v, float64(w[0, j]), float64(w[1, j]))
    if kind in (MCP, MCP_WEIGHTED):  # theta = (tau, knee, inv); lam weighted by w[0, j]
        lam = float64(w[0, j]) if kind == MCP_WEIGHTED else 1.0
        return 0.0 if a <= t0 * lam else (_sign(v) * (a - t0 * lam) * t2 if a <= t1 * lam else v)
    if kind in (SCAD, SCAD_WEIGHTED):  # theta = (tau, knee1, knee2, shift, inv)
        lam = float64(w[0, j]) if kind == SCAD_WEIGHTED else 1.0
        return _soft(v, t0 * lam) if a <= t1 * lam else (_sign(v) * (a - t3 * lam) * t4 if a <= t2 * lam else v)
    if kind == SOFT_MASKED:
        x = _soft(v, t0 * w[0, j])
        return t1 * x if w[1, j] != 0 else x
    return v  # IDENTITY


@cuda.jit(device=True)
def _residual(kind, margin, target):
    """``dloss/dmargin``: ``m - y`` (LEAST_SQUARES) or ``-y sigmoid(-y m)`` (LOGISTIC), without overflow."""
    if kind == LEAST_SQUARES:
        return margin - target
    t = -target * margin
    e = math.exp(-abs(t))
    return -target * ((1.0 if t >= 0.0 else e) / (1.0 + e))


@cuda.jit(device=True)
def _theta(thetas, step, row, m):
    """``thetas[step, row, m]``, or 0 past the parameters' end (kinds with fewer parameters)."""
    return float64(thetas[step, row, m]) if m < thetas.shape[2] else 0.0


# ------------------------------------------------------------------------------ the kernel
def _bounds(threads):
    """``cuda.jit`` options capping the registers so that MIN_BLOCKS_PER_SM blocks fit on a
    multiprocessor (none on the CUDA simulator, whose ``jit`` takes no launch bounds)."""
    return {} if numba.config.ENABLE_CUDASIM else {"launch_bounds": (threads, MIN_BLOCKS_PER_SM)}


@functools.cache
def _build(threads: int, tile: int, per_thread: int, single: bool):
    """The kernel for ``threads`` per block, ``tile`` rows per tile, ``per_thread`` coordinates per
    thread and float32 (``single``) or float64 state; the sizes are compile-time constants, so the
    loops over a tile's rows and a thread's coordinates unroll and the tile sits in registers."""
    NT, T, KD = threads, tile, per_thread
    real = float32 if single else float64
    STAGED = T * NT + T * (NT // FAN)  # partial sums, then the first folded stage (ping-pong)
    TKD = T * KD  # array shapes must be literal constants: products are taken here
    OWNED = KD * NT  # slot k * NT + t holds thread t's k-th coordinate

    @cuda.jit(device=True)
    def block_sums(buf, t):
        """Fold the ``T x NT`` partial sums in ``buf`` until at most FAN remain per row.

        Returns ``(offset, width)``: row ``u``'s remaining values are ``buf[offset + u width + k]``.
        Ends with a barrier, so every thread may read them.
        """
        src, dst, width = 0, T * NT, NT
        while width > FAN:
            narrow = width // FAN
            for q in range(t, T * narrow, NT):
                u, s = q // narrow, q % narrow
                acc = 0.0
                for k in range(FAN):
                    acc += buf[src + u * width + s + k * narrow]
                buf[dst + u * narrow + s] = acc
            cuda.syncthreads()
            src, dst, width = dst, src, narrow
        return src, width

    @cuda.jit(**_bounds(NT))
    def kernel(X, y, starts, ends, rows, kind, scale, fit_intercept, D, lr, prox_kind, thetas, w, Z, P, alias):
        """Client ``i = blockIdx.x`` (rows ``starts[i]:ends[i]``): for each step ``l``,
        ``g = grad f_i(x; rows[l, i])``, ``z -= lr_i (g + D[i])``, ``x = prox_l(z)`` at ``thetas[l, i]``;
        finally ``Z[i] = z``, ``P[i] = x``. ``lr`` is ``(1,)`` or ``(n,)`` and ``thetas`` ``(Q, 1, k)``
        or ``(Q, n, k)``: one for every client, or one each."""
        i = cuda.blockIdx.x
        t = cuda.threadIdx.x
        d = X.shape[1]
        p = Z.shape[1]
        shifted = D.shape[0] > 0
        sampled = rows.shape[2] > 0
        first = starts[i]
        count = rows.shape[2] if sampled else ends[i] - first
        rate = lr[0] if lr.shape[0] == 1 else lr[i]
        row = 0 if thetas.shape[1] == 1 else i
        inv_count = 1.0 / count if count > 0 else math.nan  # the mean of no rows
        buf = cuda.shared.array(STAGED, float64)
        res = cuda.shared.array(T, float64)  # the tile's residuals times 1/m
        bias = cuda.shared.array(1, float64)  # the intercept, x[d]
        z = cuda.shared.array(OWNED, real)
        x = cuda.shared.array(OWNED, real)
        g = cuda.shared.array(OWNED, float64)
        tile = cuda.local.array(TKD, float64)  # this thread's columns of the tile's rows

        bias[0] = 0.0
        cuda.syncthreads()
        for k in range(KD):
            j = t + k * NT
            if j < p:
                z[k * NT + t] = Z[i, j]
                x[k * NT + t] = P[i, j]
                if fit_intercept and j == d:
                    bias[0] = x[k * NT + t]
        cuda.syncthreads()

        for step in range(rows.shape[0]):
            for k in range(KD):
                g[k * NT + t] = 0.0
            rsum = 0.0  # sum of the residuals / m: the intercept's gradient
            for start in range(0, count, T):
                # partial margins of the tile's rows over this thread's columns
                for u in range(T):
                    valid = start + u < count
                    r = (rows[step, i, start + u] if sampled else first + start + u) if valid else 0
                    acc = 0.0
                    for k in range(KD):
                        j = t + k * NT
                        v = 0.0
                        if valid and j < d:  # slots past the features hold no x: never read them
                            v = float64(X[r, j])
                            acc += v * x[k * NT + t]
                        tile[u * KD + k] = v
                    buf[u * NT + t] = acc
                cuda.syncthreads()
                offset, width = block_sums(buf, t)
                if t < T:
                    e = 0.0
                    if start + t < count:
                        dot = 0.0
                        for k in range(width):
                            dot += buf[offset + t * width + k]
                        r = rows[step, i, start + t] if sampled else first + start + t
                        e = _residual(kind, dot * scale + bias[0], float64(y[r])) * inv_count
                    res[t] = e
                cuda.syncthreads()
                for u in range(T):
                    e = res[u]
                    rsum += e
                    a = e * scale
                    for k in range(KD):
                        g[k * NT + t] += a * tile[u * KD + k]  # 0 past the last column
            t0, t1, t2 = _theta(thetas, step, row, 0), _theta(thetas, step, row, 1), _theta(thetas, step, row, 2)
            t3, t4 = _theta(thetas, step, row, 3), _theta(thetas, step, row, 4)
            for k in range(KD):
                j = t + k * NT
                if j < p:
                    grad = rsum if j == d else g[k * NT + t]  # j == d only with an intercept
                    if shifted:
                        grad += D[i, j]
                    z[k * NT + t] = float64(z[k * NT + t]) - rate * grad
                    x[k * NT + t] = _prox(prox_kind, float64(z[k * NT + t]), t0, t1, t2, t3, t4, w, j)
                    if alias:  # P is Z: the stored z is overwritten by prox(z)
                        z[k * NT + t] = x[k * NT + t]
                    if fit_intercept and j == d:
                        bias[0] = x[k * NT + t]
            cuda.syncthreads()  # the new intercept is seen by every thread

        for k in range(KD):
            j = t + k * NT
            if j < p:
                Z[i, j] = z[k * NT + t]
                P[i, j] = x[k * NT + t]

    return kernel


# ------------------------------------------------------------------------------ the launcher
def _threads(p, block):
    """``block`` once checked, or the power of two in [32, MAX_AUTO_BLOCK] giving about 4 coordinates a thread."""
    if block is None:
        return min(MAX_AUTO_BLOCK, max(32, 1 << (max(1, -(-int(p) // 4)) - 1).bit_length()))
    if not 32 <= block <= 1024 or block & (block - 1):
        raise ValueError(f"block={block} must be a power of two between 32 and 1024")
    return block


def _on_device(a, stream, dtype):
    """A C-contiguous ``dtype`` device copy of the host (NumPy) array ``a``, made on ``stream``;
    a device array as it is."""
    if not isinstance(a, np.ndarray):
        return a
    return cuda.to_device(np.ascontiguousarray(a, dtype), stream=stream)


def _pointer(a):
    """The address of ``a``'s data, to tell whether two arrays are one (the simulator's device
    arrays wrap a NumPy array ``_ary``)."""
    interface = getattr(a, "__cuda_array_interface__", None) or getattr(a, "_ary", a).__array_interface__
    return interface["data"][0]


def _shared_bytes(threads, tile, per_thread, itemsize):
    """Shared memory of :func:`_build`'s kernel: the staged sums, and ``z, x, g`` for the owned coordinates."""
    return 8 * (tile * threads + tile * (threads // FAN) + tile + 1) + per_thread * threads * (8 + 2 * itemsize)


def _dense(X):
    """Whether ``X`` is a dense 2-D array (not a CSR matrix)."""
    return getattr(X, "ndim", 0) == 2 and not hasattr(X, "indptr")


def local_steps_linear(X, y, offsets, rows, kind, n_out, scale, fit_intercept, D, lr, prox_kind, thetas, w, Z, P,
                       center=None, block=None, tile=None):
    """A round's local steps of every client in one launch, as :func:`fedopt.kernels.reference.local_steps_linear`.

    NumPy, per step ``l``: ``G = grad f_i(P[i]; rows[l, i])``, ``Z -= lr * (G + D)``,
    ``P[:] = prox_l(Z)``. ``X`` is dense (float32, float64 or uint8 scaled by ``scale``),
    ``kind`` LEAST_SQUARES or LOGISTIC; ``offsets`` is monotone ``(n + 1,)`` or client bounds
    ``(2, n)`` (see :func:`fedopt.kernels.client_bounds`); ``lr`` is a scalar or one value per
    client, ``thetas`` ``(Q, k)`` or ``(Q, n, k)`` (per client). ``rows`` (``(Q, n, b)`` or
    ``(Q, n, 0)``), ``offsets``, ``lr`` and ``thetas`` may be host arrays, copied to the device on
    ``Z``'s stream. ``block`` is the threads per block (a power of two, default about ``p / 4``
    clamped to [32, 256]), ``tile`` the rows per tile (default 4).

    Returns ``(Z, P)``, or None, with nothing done, for CSR features, SOFTMAX, a ``center``, or a model whose
    state does not fit in :data:`MAX_SHARED_BYTES` (the caller then takes its step-by-step path).
    """
    if not _dense(X) or kind not in (LEAST_SQUARES, LOGISTIC) or n_out != 1 or center is not None:
        return None
    if prox_kind not in KIND_NAMES:
        raise ValueError(f"unknown prox kind {prox_kind}")
    tile = DEFAULT_TILE if tile is None else int(tile)
    if tile < 1:
        raise ValueError(f"tile={tile} must be >= 1")
    n, p = Z.shape
    threads = _threads(p, block)
    if tile > threads:  # a tile's residuals take one thread per row
        raise ValueError(f"tile={tile} must be at most the block's {threads} threads")
    per_thread = -(-p // threads)
    if _shared_bytes(threads, tile, per_thread, np.dtype(Z.dtype).itemsize) > MAX_SHARED_BYTES:
        return None
    real = np.dtype(Z.dtype).type  # scale and lr rounded as NumPy does for float32 arrays
    if np.isscalar(lr) or isinstance(lr, np.ndarray):  # on the host: rounded to Z's dtype, as a vector
        lr = np.asarray(lr, real).astype(np.float64).reshape(-1)
    if thetas.ndim == 2:  # shared by every client: (Q, 1, k)
        thetas = thetas.reshape(thetas.shape[0], 1, thetas.shape[1])
    if lr.shape[0] not in (1, n) or thetas.shape[1] not in (1, n):
        raise ValueError(f"lr {lr.shape} and thetas {thetas.shape} must be shared or hold one entry per client ({n})")
    if n == 0 or rows.shape[0] == 0:
        return Z, P
    stream = _stream_of(Z)
    single = np.dtype(Z.dtype) == np.float32
    kernel = _build(threads, tile, per_thread, single)
    starts, ends = (_on_device(a, stream, np.int64) for a in client_bounds(offsets))
    rows = _on_device(rows, stream, np.int64)
    lr, thetas = _on_device(lr, stream, np.float64), _on_device(thetas, stream, np.float64)
    with warnings.catch_warnings():
        # One block per client is the design; a launch for a few clients is not a mistake.
        warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization")
        kernel[n, threads, stream](X, y, starts, ends, rows, int(kind), float(real(scale)), bool(fit_intercept), D,
                                   lr, int(prox_kind), thetas, w, Z, P, _pointer(P) == _pointer(Z))
    return Z, P
