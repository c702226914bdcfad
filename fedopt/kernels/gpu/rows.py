"""Numba-CUDA kernels for the row-wise operators: one thread block per row (per row and group for
the group lasso), with float64 shared-memory tree reductions.

The launchers have the signatures of :mod:`fedopt.kernels.reference` plus ``block``, the threads
per block: a power of two, by default the row length (the mean group length for the group lasso)
rounded up to a power of two between 32 and 256. They take any array Numba-CUDA launches on: CuPy
arrays on a device, launched on the stream their ``__cuda_array_interface__`` names, and NumPy
arrays under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``). This module never imports CuPy.
"""

from __future__ import annotations

import math
import warnings

from numba import cuda, float64

from fedopt.kernels import SHIFT_RATIO, SQUARES_MAX, SQUARES_MIN

#: The most threads per block that the launchers choose by themselves (``block=None``).
MAX_AUTO_BLOCK = 256


@cuda.jit(device=True)
def _block_reduce(buf, value, largest):
    """Sum of ``value`` over the threads of the block, or with ``largest`` its largest value (NaN
    ignored), returned to every thread (``buf``: one slot per thread)."""
    t = cuda.threadIdx.x
    buf[t] = value
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            other = buf[t + half]
            if not largest:
                buf[t] += other
            elif other > buf[t]:
                buf[t] = other
        cuda.syncthreads()
        half //= 2
    total = buf[0]
    cuda.syncthreads()  # everyone has read buf[0] before the buffer is written again
    return total


@cuda.jit(device=True)
def _block_sum(buf, value):
    """Sum of ``value`` over the threads of the block, returned to every thread."""
    return _block_reduce(buf, value, False)


@cuda.jit(device=True)
def _rescaled_norm(buf, squares, largest, scaled_squares):
    """``(norm / unit, unit)`` for a block's row (or group) whose sum of squares ``squares`` is outside
    ``SQUARES_MIN .. SQUARES_MAX``: ``unit`` is ``largest`` (its largest magnitude) and ``norm / unit``
    the root of ``scaled_squares`` (each thread's squares of the entries divided by ``largest``)
    summed over the block; the plain root and 1 where ``largest`` is 0, inf or NaN (see
    ``SQUARES_MIN`` in :mod:`fedopt.kernels`). The norm itself may overflow (6 entries of 1e308)."""
    if 0.0 < largest < math.inf:
        return math.sqrt(_block_sum(buf, scaled_squares)), largest
    return math.sqrt(squares), 1.0


@cuda.jit(device=True)
def _block_sum2(buf, a, b):
    """Sums of ``a`` and of ``b`` over the block in one tree (``buf``: two slots per thread)."""
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    buf[t] = a
    buf[nt + t] = b
    cuda.syncthreads()
    half = nt // 2
    while half > 0:
        if t < half:
            buf[t] += buf[t + half]
            buf[nt + t] += buf[nt + t + half]
        cuda.syncthreads()
        half //= 2
    sum_a = buf[0]
    sum_b = buf[nt]
    cuda.syncthreads()
    return sum_a, sum_b


@cuda.jit
def _l2_ball_kernel(z, center, radius, out):
    """``out[r] = c + (z[r] - c) * min(1, radius / norm(z[r] - c))``; block ``r`` does row ``r``."""
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    p = z.shape[1]
    shifted = center.shape[0] > 0
    buf = cuda.shared.array(0, float64)
    acc = 0.0  # of float64 squares: float32 squares of entries below 1e-19 are subnormal
    for j in range(t, p, nt):
        d = float64(z[row, j] - center[j] if shifted else z[row, j])
        acc += d * d
    squares = _block_sum(buf, acc)
    norm, unit = math.sqrt(squares), 1.0
    if not (SQUARES_MIN <= squares <= SQUARES_MAX):  # the same for the whole block: see SQUARES_MIN
        largest = 0.0
        for j in range(t, p, nt):
            largest = max(largest, abs(z[row, j] - center[j] if shifted else z[row, j]))
        largest = _block_reduce(buf, largest, True)
        divisor = largest if 0.0 < largest < math.inf else 1.0
        acc = 0.0
        for j in range(t, p, nt):
            d = float64(z[row, j] - center[j] if shifted else z[row, j]) / divisor
            acc += d * d
        norm, unit = _rescaled_norm(buf, squares, largest, acc)
    bound = radius / unit  # compared and divided in units of the largest magnitude
    factor = bound / norm if norm > bound else 1.0
    if math.isnan(norm):
        factor = norm
    for j in range(t, p, nt):
        c = center[j] if shifted else 0.0
        out[row, j] = c + (z[row, j] - c) * factor


@cuda.jit
def _group_kernel(z, starts, order, tau, scale, out):
    """``out[r, idx] = scale * max(0, 1 - tau[g] / norm(z[r, idx])) * z[r, idx]``, ``idx`` the group ``g``
    of block ``r * n_groups + g``."""
    n_groups = starts.shape[0] - 1
    row = cuda.blockIdx.x // n_groups
    g = cuda.blockIdx.x % n_groups
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    permuted = order.shape[0] > 0
    buf = cuda.shared.array(0, float64)
    acc = 0.0  # of float64 squares: float32 squares of entries below 1e-19 are subnormal
    for k in range(starts[g] + t, starts[g + 1], nt):
        v = float64(z[row, order[k] if permuted else k])
        acc += v * v
    squares = _block_sum(buf, acc)
    norm = math.sqrt(squares)
    if not (SQUARES_MIN <= squares <= SQUARES_MAX):  # the same for the whole block: see SQUARES_MIN
        largest = 0.0
        for k in range(starts[g] + t, starts[g + 1], nt):
            largest = max(largest, abs(z[row, order[k] if permuted else k]))
        largest = _block_reduce(buf, largest, True)
        divisor = largest if 0.0 < largest < math.inf else 1.0
        acc = 0.0
        for k in range(starts[g] + t, starts[g + 1], nt):
            v = float64(z[row, order[k] if permuted else k]) / divisor
            acc += v * v
        norm, unit = _rescaled_norm(buf, squares, largest, acc)
        norm *= unit
    if norm == 0.0:
        factor = 0.0
    else:
        factor = 1.0 - tau[g] / norm
        if factor < 0.0:  # false for NaN: a NaN group stays NaN
            factor = 0.0
    factor *= scale
    for k in range(starts[g] + t, starts[g + 1], nt):
        j = order[k] if permuted else k
        out[row, j] = factor * z[row, j]


@cuda.jit(device=True)
def _shifted(z, row, j, l1, shift, low):
    """``max(y - shift, low)`` with ``y = z[row, j]``, or ``|z[row, j]|`` when ``l1``."""
    return max((abs(z[row, j]) if l1 else z[row, j]) - shift, low)


@cuda.jit
def _michelot_kernel(z, radius, l1, out):
    """Projection of row ``r`` (block ``r``) on the simplex of ``radius``, or on the l1 ball when ``l1``:
    ``out = max(y - theta, 0)`` with ``y = z``, or ``sign(z) * max(|z| - theta, 0)`` with ``y = |z|``.

    ``theta`` is found by Michelot's method: with ``A`` the active set (all coordinates at first),
    ``theta = (sum(y[A]) - radius) / len(A)``, then ``A = {y > theta}``, until ``A`` stops shrinking.
    A row whose largest ``y`` dwarfs the radius (``SHIFT_RATIO``), or whose sum overflows, is
    projected as ``y - max(y)``, the entries more than ``2 radius`` below ``max(y)`` (never
    active) raised to that: the threshold then keeps the radius's digits.
    """
    row = cuda.blockIdx.x
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    p = z.shape[1]
    buf = cuda.shared.array(0, float64)
    acc, top, bad = 0.0, -math.inf, 0.0
    for j in range(t, p, nt):
        v = abs(z[row, j]) if l1 else z[row, j]
        acc += v
        top = max(top, v)
        bad += 0.0 if math.isfinite(v) else 1.0
    total, bad = _block_sum2(buf, acc, bad)
    top = _block_reduce(buf, top, True)
    # The branches below depend on block-wide values only, so every thread takes the same one.
    if bad > 0.0:
        for j in range(t, p, nt):
            out[row, j] = math.nan
    elif l1 and total <= radius:
        for j in range(t, p, nt):
            out[row, j] = z[row, j]
    else:
        shift, low = 0.0, -math.inf  # y itself
        if abs(top) > SHIFT_RATIO * radius or math.isinf(total):
            shift, low = top, -2.0 * radius
            acc = 0.0
            for j in range(t, p, nt):
                acc += _shifted(z, row, j, l1, shift, low)
            total = _block_sum(buf, acc)
        count = float(p)
        theta = (total - radius) / count
        while True:
            s = 0.0
            k = 0.0
            for j in range(t, p, nt):
                v = _shifted(z, row, j, l1, shift, low)
                if v > theta:
                    s += v
                    k += 1.0
            s, k = _block_sum2(buf, s, k)
            # k == 0 only when radius <= 0: theta is then max(v) and the projection is 0.
            if k >= count or k == 0.0:
                break
            count = k
            theta = (s - radius) / k
        for j in range(t, p, nt):
            x = max(_shifted(z, row, j, l1, shift, low) - theta, 0.0)
            out[row, j] = -x if l1 and z[row, j] < 0 else x


def _threads(length, block):
    """``block`` once checked, or the smallest power of two >= ``length`` clamped to [32, MAX_AUTO_BLOCK]."""
    if block is None:
        return min(MAX_AUTO_BLOCK, max(32, 1 << (int(length) - 1).bit_length()))
    if not 1 <= block <= 1024 or block & (block - 1):
        raise ValueError(f"block={block} must be a power of two between 1 and 1024")
    return block


def _stream_of(a):
    """The stream that the producer of ``a`` (CuPy) works on, so that the launch is ordered after its work.

    0 (Numba's default, the legacy stream) for host arrays and for CUDA array interface stream 1,
    which is the legacy stream too.
    """
    interface = getattr(a, "__cuda_array_interface__", None)
    ptr = interface.get("stream") if interface else None
    return cuda.external_stream(ptr) if ptr not in (None, 1) else 0


def _launch(kernel, blocks, threads, buffers, *args):
    """``kernel[blocks, threads](*args)`` on the stream of ``args[0]``; ``buffers`` float64 shared slots a thread."""
    if blocks == 0:
        return
    with warnings.catch_warnings():
        # One block per row is the design; a launch for a few clients is not a mistake.
        warnings.filterwarnings("ignore", message=r"Grid size \d+ will likely result in GPU under-utilization")
        configured = kernel[blocks, threads, _stream_of(args[0]), buffers * threads * 8]
    configured(*args)


def project_l2_ball(z, center, radius, out, block=None):
    """Projection of each row on ``{x : ||x - c|| <= radius}``; ``c = 0`` when ``center`` is empty.

    NumPy: ``out[:] = c + (z - c) * minimum(1, radius / norm(z - c, axis=1, keepdims=True))``.
    """
    _launch(_l2_ball_kernel, z.shape[0], _threads(z.shape[1], block), 1, z, center, float(radius), out)
    return out


def prox_group(z, starts, order, tau, scale, out, block=None):
    """Block soft-thresholding of the groups ``order[starts[g]:starts[g + 1]]`` (``order`` empty: identity).

    NumPy, per group ``idx``: ``out[:, idx] = scale * maximum(0, 1 - tau[g] / norm(z[:, idx], axis=1,
    keepdims=True)) * z[:, idx]`` (0 for a zero group). The groups must cover every coordinate once:
    coordinates outside every group are left as they are in ``out``.
    """
    n_groups = len(starts) - 1
    if n_groups < 1:
        return out
    threads = _threads(-(-z.shape[1] // n_groups), block)
    _launch(_group_kernel, z.shape[0] * n_groups, threads, 1, z, starts, order, tau, float(scale), out)
    return out


def project_simplex(z, radius, out, block=None):
    """Projection of each row on ``{x >= 0, sum(x) = radius}``; a row with a non-finite entry becomes NaN.

    NumPy: ``out[:] = maximum(z - theta, 0)`` with the row's ``theta`` such that ``out`` sums to ``radius``.
    """
    _launch(_michelot_kernel, z.shape[0], _threads(z.shape[1], block), 2, z, float(radius), False, out)
    return out


def project_l1_ball(z, radius, out, block=None):
    """Projection of each row on ``{||x||_1 <= radius}``; a row with a non-finite entry becomes NaN.

    NumPy: ``out[:] = z`` where ``abs(z).sum(1) <= radius``, else ``sign(z) * simplex(abs(z), radius)``.
    """
    _launch(_michelot_kernel, z.shape[0], _threads(z.shape[1], block), 2, z, float(radius), True, out)
    return out
