"""Numba CPU kernels: fused single passes, ``prange`` over (row, block) tasks where it pays.

Same functions and signatures as :mod:`fedopt.kernels.reference`; see :mod:`fedopt.kernels` for
the conventions. Each kernel is compiled on first use, for float32 and float64 C-contiguous
arrays, and cached on disk unless ``FEDOPT_NUMBA_CACHE=0``.
"""

from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from fedopt.kernels import KERNEL_NAMES, client_bounds
from fedopt.kernels.cpu import _jit
from fedopt.kernels.cpu import elementwise as _elementwise
from fedopt.kernels.cpu import mlp as _mlp
from fedopt.kernels.cpu import models as _models
from fedopt.kernels.cpu import rows as _rows
from fedopt.kernels.cpu.mixing import mix_sparse

# re-exported: KERNEL_NAMES lists them
from fedopt.kernels.cpu.rows import project_l1_ball, project_l2_ball, project_simplex  # noqa: F401

# LAPACK does the SVD: the batched NumPy call is already the fast path (no hand-written SVD).
from fedopt.kernels.reference import prox_nuclear  # noqa: F401

__all__ = [*KERNEL_NAMES, "local_steps_linear", "local_steps_mlp", "mix_sparse", "tracking_steps",
           "tracking_steps_mlp", "one_blas_thread"]

def prox_elementwise(z, kind, theta, w, out):
    """Separable prox of code ``kind``, e.g. SOFT: ``out = theta[1] * sign(z) * max(|z| - theta[0], 0)``."""
    if z.size < _jit.PARALLEL_MIN_WORK:  # the serial variant without _jit.threads: 0.05 us of a 0.4 us call
        _elementwise.prox_elementwise_kernel.serial(z, kind, theta, w, out, 1)
    else:
        n_threads = _jit.thread_count()
        _elementwise.prox_elementwise_kernel.on(n_threads, z, kind, theta, w, out, n_threads)
    return out


def prox_group(z, starts, order, tau, scale, out):
    """Block soft-thresholding ``out_g = scale * max(0, 1 - tau[g] / ||z_g||) * z_g`` for every group."""
    _rows.prox_group_kernel(z.size, z, starts, order, tau, scale, out)
    return out


def normal_map_step(z, g, c, z_ref, x_ref, eta, inv_gamma, kind, theta, w, z_out, x_out):
    """``z_out = z - eta * (g + (z_ref - x_ref) * inv_gamma + c)``; ``x_out = prox(z_out)``, in one pass."""
    n_threads = 1 if z.size < _jit.PARALLEL_MIN_WORK else _jit.thread_count()  # as in prox_elementwise
    # the kernel casts eta and inv_gamma: floats here compile one variant
    _elementwise.normal_map_kernel.on(n_threads, z, g, c, z_ref, x_ref, float(eta), float(inv_gamma), kind, theta, w,
                                      z_out, x_out, n_threads)
    return z_out, x_out


def _model_arrays(X, W):
    """``(X, data, indices, indptr, dense, d)``: the dense array or the CSR parts, with placeholders for the other."""
    if hasattr(X, "indptr"):  # scipy.sparse CSR
        return np.empty((0, 0), W.dtype), X.data, X.indices, X.indptr, False, X.shape[1]
    return X, np.empty(0, W.dtype), np.empty(0, np.int32), np.empty(1, np.int32), True, X.shape[1]


#: The linear oracles' parallel variant pays from about 16 000 row elements (with a client's own
#: fixed cost counted as 100 elements) when there are 8 clients or more: its fork and join cost
#: about 6 us. Fewer clients leave the threads unbalanced on small passes, so they keep the
#: element-wise kernels' threshold (measured on 2 cores, serial against parallel per shape).
_ROW_WORK_SCALE = 4  # 4 * 16 384 = PARALLEL_MIN_WORK
_PER_CLIENT_WORK = 100
_MIN_BALANCED_CLIENTS = 8


_IN_ROW_ORDER = np.empty(0, np.int64)


def _clients(offsets):
    """``(starts, ends, order)`` of client bounds (see :func:`fedopt.kernels.client_bounds`): the
    kernels visit the clients in ``order``, or in row order when it is empty."""
    starts, ends = client_bounds(offsets)
    return starts, ends, offsets[2] if offsets.ndim == 2 and len(offsets) == 3 else _IN_ROW_ORDER


def _rows_read(offsets, rows):
    """Rows a call reads: its minibatch rows, or every client's rows at each step when ``rows`` is
    ``(..., n, 0)`` (rows shared by several clients counted once per client)."""
    if rows.shape[-1]:
        return rows.size
    starts, ends = client_bounds(offsets)
    return math.prod(rows.shape[:-2]) * int((ends - starts).sum())  # math.prod: np.prod's 2.8 us is most of it


def _per_row(value, dtype, n):
    """A scalar or a per-row vector as the 1-D ``dtype`` array the kernels index: ``(1,)`` or ``(n,)``."""
    values = np.asarray(value, dtype).reshape(-1)
    if values.shape[0] not in (1, n):
        raise ValueError(f"expected a scalar or {n} values, one per row; got shape {np.shape(value)}")
    return values


def _per_row_thetas(thetas, dtype, n):
    """Prox parameters ``(Q, k)`` (shared) or ``(Q, n, k)`` as a ``dtype`` array ``(Q, 1, k)`` or ``(Q, n, k)``."""
    thetas = thetas.astype(dtype)
    if thetas.ndim == 3 and thetas.shape[1] != n:
        raise ValueError(f"thetas of shape {thetas.shape} must be (Q, k) or (Q, {n}, k)")
    return thetas[:, None] if thetas.ndim == 2 else thetas


def _work(X, n_rows, n_out, n_clients):
    """The work figure of a pass over ``n_rows`` rows that picks the serial or the parallel kernel."""
    per_row = X.nnz / max(1, X.shape[0]) if hasattr(X, "indptr") else X.shape[1]
    work = int(n_rows * n_out * max(1.0, per_row) + _PER_CLIENT_WORK * n_clients)
    return work * _ROW_WORK_SCALE if n_clients >= _MIN_BALANCED_CLIENTS else work


def linear_oracle(X, y, offsets, W, rows, kind, n_out, scale, fit_intercept, sample_weight, loss_out, grad_out):
    """Loss and gradient of a linear model per client, one fused pass per row (dense or CSR ``X``);
    ``sample_weight`` (empty: none) multiplies each row's loss and residuals."""
    scale = W.dtype.type(scale)
    starts, ends, order = _clients(offsets)
    work = _work(X, _rows_read(offsets, rows), n_out, len(starts))
    _models.linear_oracle_kernel(work, *_model_arrays(X, W), y, starts, ends, order, W, rows, kind, n_out, scale,
                                 fit_intercept, _sample_weight(sample_weight, W.dtype), loss_out, grad_out)
    return loss_out, grad_out


def _sample_weight(sample_weight, dtype):
    """The kernels' per-row weights in ``dtype``, or None for none: Numba then compiles the
    unweighted variant, without a branch per row."""
    return sample_weight.astype(dtype, copy=False) if len(sample_weight) else None


def _dense_centered(X, center) -> bool:
    """Whether the fused linear kernels decline: they center CSR rows only (see ``_csr_pass``), and a
    dense ``X`` with a ``center`` steps array-wise."""
    return center is not None and not hasattr(X, "indptr")


def local_steps_linear(X, y, offsets, rows, kind, n_out, scale, fit_intercept, D, lr, prox_kind, thetas, w, Z, P,
                       center=None):
    """A round's local steps in one call: per client and step ``Z -= lr * (grad(P) + D); P = prox(Z)``.

    ``lr`` is a scalar or one value per client, ``thetas`` ``(Q, k)`` or ``(Q, n, k)`` (per client).
    ``center`` (``d`` feature means) steps on the rows ``X - center`` of CSR ``X``; None, with
    nothing done, for dense ``X`` (the caller steps array-wise).
    """
    dtype = Z.dtype
    if _dense_centered(X, center):
        return None
    work = _work(X, _rows_read(offsets, rows), n_out, Z.shape[0])
    _models.local_steps_kernel(work, *_model_arrays(X, Z), y, *_clients(offsets), rows, kind, n_out,
                               dtype.type(scale), fit_intercept, center, D, _per_row(lr, dtype, len(Z)), prox_kind,
                               _per_row_thetas(thetas, dtype, len(Z)), w, Z, P)
    return Z, P


def tracking_steps(X, y, offsets, rows, kind, n_out, scale, fit_intercept, node_scale, gamma, alpha, beta, nesterov,
                   tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False, center=None):
    """DEPOSITUM's local iterations (momentum, prox step, gradient, tracking) of every node in one call.

    ``gamma``, ``alpha`` and ``beta`` are scalars or one value per node; ``adapt_first`` and
    ``adapt_after`` as in :mod:`fedopt.kernels`; ``center`` as in :func:`local_steps_linear`
    (None, with nothing done, for dense ``X``).
    """
    if _dense_centered(X, center):
        return None
    _models.tracking_steps_kernel(_work(X, _rows_read(offsets, rows), n_out, len(P)), *_model_arrays(X, P), y,
                                  *_clients(offsets), rows, kind, n_out, P.dtype.type(scale), fit_intercept, center,
                                  *_node_parameters(node_scale, gamma, alpha, beta, P), nesterov, tracking,
                                  bool(adapt_first), bool(adapt_after), prox_kind, _node_thetas(theta, P), w, P, NU,
                                  MU, Y, G)
    return P, NU, MU, Y, G


def _node_parameters(node_scale, gamma, alpha, beta, P):
    """``(node_scale, gamma, 1 - gamma, alpha, beta)`` of the tracking kernels in the dtype of the
    state ``P`` (float32 stays float32), each ``(1,)`` or one value per node."""
    dtype, n, gamma = P.dtype, len(P), np.asarray(gamma)
    return (node_scale.astype(dtype), _per_row(gamma, dtype, n), _per_row(1 - gamma, dtype, n),
            _per_row(alpha, dtype, n), _per_row(beta, dtype, n))


def _node_thetas(theta, P):
    """Prox parameters ``(k,)`` or ``(n, k)`` as the rows the tracking kernels index."""
    return np.atleast_2d(theta.astype(P.dtype))


def mlp_oracle(X, y, offsets, W, rows, n_hidden, n_out, kind, scale, sample_weight, loss_out, grad_out):
    """Loss and gradient of the one-hidden-layer MLP per client: one task per client, BLAS per layer;
    ``sample_weight`` (empty: none) multiplies each row's loss and output residual."""
    with one_blas_thread():
        _mlp.mlp_oracle_kernel(_rows_read(offsets, rows) * X.shape[1] * n_hidden, X, y, *_clients(offsets), W,
                               rows, n_hidden, n_out, kind, W.dtype.type(scale),
                               _sample_weight(sample_weight, W.dtype), loss_out, grad_out)
    return loss_out, grad_out


def local_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, D, lr, prox_kind, thetas, w, Z, P):
    """A round's local steps of the MLP in one call: per client and step ``Z -= lr * (grad(P) + D); P = prox(Z)``.

    ``lr`` and ``thetas`` as in :func:`local_steps_linear`.
    """
    dtype = Z.dtype
    with one_blas_thread():
        _mlp.local_steps_mlp_kernel(_rows_read(offsets, rows) * X.shape[1] * n_hidden, X, y, *_clients(offsets),
                                    rows, n_hidden, n_out, kind, dtype.type(scale), D, _per_row(lr, dtype, len(Z)),
                                    prox_kind, _per_row_thetas(thetas, dtype, len(Z)), w, Z, P)
    return Z, P


def tracking_steps_mlp(X, y, offsets, rows, n_hidden, n_out, kind, scale, node_scale, gamma, alpha, beta, nesterov,
                       tracking, prox_kind, theta, w, P, NU, MU, Y, G, adapt_first=True, adapt_after=False):
    """DEPOSITUM's local iterations of every node for the MLP in one call: :func:`tracking_steps`
    with the model of :func:`mlp_oracle`."""
    with one_blas_thread():
        _mlp.tracking_steps_mlp_kernel(_rows_read(offsets, rows) * X.shape[1] * n_hidden, X, y,
                                       *_clients(offsets), rows, n_hidden, n_out, kind, P.dtype.type(scale),
                                       *_node_parameters(node_scale, gamma, alpha, beta, P), nesterov, tracking,
                                       bool(adapt_first), bool(adapt_after), prox_kind, _node_thetas(theta, P), w, P,
                                       NU, MU, Y, G)
    return P, NU, MU, Y, G


def one_blas_thread():
    """BLAS held to one thread while Numba's threads run: BLAS's own threads would compete with
    Numba's for the cores, inside a kernel that calls BLAS (the MNIST-shape MLP gradient measured
    1.7x slower) and after any BLAS call, whose idle threads spin on the cores for a while (a
    FedNMap round at the sweep shape took 0.48 against 0.16 ms after an evaluation's product)."""
    if _jit.thread_count() == 1:
        return contextlib.nullcontext()
    return _blas_controller().limit(limits=1, user_api="blas")


@functools.cache
def _blas_controller():
    import scipy.linalg.cython_blas  # noqa: F401  (the BLAS behind Numba's np.dot: loaded before the look-up)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
