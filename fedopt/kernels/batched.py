"""Batched-product kernels for the model oracles, written once for NumPy and CuPy arrays.

A minibatch step gathers every client's rows into ``(n, b, d)`` and does each layer as one
batched matrix product (``matmul`` on 3-D arrays: BLAS on the CPU, cuBLAS strided-batched GEMM
on the GPU). Full-data passes run one pair of products per client on its contiguous row block,
because clients may hold different numbers of rows. Signatures are those of
:mod:`fedopt.kernels.reference`; the GPU backend uses both (on the CPU, per-client tasks that keep
each client's rows in cache are faster: :mod:`fedopt.kernels.cpu.mlp`).
"""

from __future__ import annotations

import itertools

from fedopt.kernels import client_bounds
from fedopt.kernels.reference import array_module, loss_residual


def _blocks(X, y, offsets, rows, dtype, scale):
    """``(client indices, X block (c, m, d) in dtype, y block (c, m))`` pairs: one batch, or one per client."""
    xp = array_module(X)
    if rows.shape[1]:
        index = xp.asarray(rows)
        yield slice(None), _features(X[index], dtype, scale), y[index]
    else:
        starts, ends = client_bounds(offsets)
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            yield slice(i, i + 1), _features(X[s:e][None], dtype, scale), y[s:e][None]


def _features(X_block, dtype, scale):
    X_block = X_block if X_block.dtype == dtype else X_block.astype(dtype)
    return X_block * dtype.type(scale) if scale != 1 else X_block


def _sigmoid_inplace(xp, A):
    """``A <- 1 / (1 + exp(-A)) = (1 + tanh(A / 2)) / 2``: one transcendental per entry, no overflow."""
    A *= 0.5
    xp.tanh(A, out=A)
    A *= 0.5
    A += 0.5


def _params(W, clients):
    """The rows of ``W`` for these clients, kept 2-D; one shared row broadcasts to all."""
    return W if W.shape[0] == 1 else W[clients]


def _row_blocks(values, offsets, rows):
    """A per-row array (``y``, ``sample_weight``) in the blocks of :func:`_blocks`: ``(c, m)`` each."""
    if rows.shape[1]:
        yield values[array_module(values).asarray(rows)]
    else:
        for s, e in zip(*(bound.tolist() for bound in client_bounds(offsets)), strict=True):
            yield values[s:e][None]


def linear_oracle(X, y, offsets, W, rows, kind, n_out, scale, fit_intercept, sample_weight, loss_out, grad_out):
    """Batched :func:`fedopt.kernels.reference.linear_oracle`: ``M = X_b @ coef^T`` per client as one ``matmul``."""
    d = X.shape[1]
    # one weight block per data block, or None for each (endless: zip stops with the data)
    weights = _row_blocks(sample_weight, offsets, rows) if len(sample_weight) else itertools.repeat(None)
    for (clients, Xb, yb), sb in zip(_blocks(X, y, offsets, rows, W.dtype, scale), weights, strict=False):
        w = _params(W, clients)
        coef = w[:, : n_out * d].reshape(-1, n_out, d)
        M = Xb @ coef.transpose(0, 2, 1)
        if fit_intercept:
            M += w[:, None, n_out * d :]
        loss, R = loss_residual(M, yb, kind)
        if sb is not None:
            loss, R = loss * sb, R * sb[..., None]
        if len(loss_out):
            loss_out[clients] = loss.mean(axis=1)
        if len(grad_out):
            m = Xb.shape[1]
            grad_out[clients, : n_out * d] = ((R.transpose(0, 2, 1) @ Xb) / m).reshape(-1, n_out * d)
            if fit_intercept:
                grad_out[clients, n_out * d :] = R.mean(axis=1)
    return loss_out, grad_out


def mlp_oracle(X, y, offsets, W, rows, n_hidden, n_out, kind, scale, sample_weight, loss_out, grad_out):
    """Batched :func:`fedopt.kernels.reference.mlp_oracle`: each layer, forward and backward, is one ``matmul``."""
    d, h, k = X.shape[1], n_hidden, n_out
    xp = array_module(W)
    weights = _row_blocks(sample_weight, offsets, rows) if len(sample_weight) else itertools.repeat(None)
    for (clients, Xb, yb), sb in zip(_blocks(X, y, offsets, rows, W.dtype, scale), weights, strict=False):
        w = _params(W, clients)
        W1, b1 = w[:, : h * d].reshape(-1, h, d), w[:, None, h * d : h * d + h]
        W2, b2 = w[:, h * d + h : h * d + h + k * h].reshape(-1, k, h), w[:, None, h * d + h + k * h :]
        H = Xb @ W1.transpose(0, 2, 1)
        H += b1
        _sigmoid_inplace(xp, H)
        loss, dO = loss_residual(H @ W2.transpose(0, 2, 1) + b2, yb, kind)
        if sb is not None:
            loss, dO = loss * sb, dO * sb[..., None]
        dO /= Xb.shape[1]
        if len(loss_out):
            loss_out[clients] = loss.mean(axis=1)
        if len(grad_out):
            dA = dO @ W2
            dA *= H * (1 - H)
            c = grad_out[clients]  # a view: a slice of rows
            # the largest product goes straight into the gradient (no 80 MB temporary per call)
            xp.matmul(dA.transpose(0, 2, 1), Xb, out=c[:, : h * d].reshape(-1, h, d))
            c[:, h * d : h * d + h] = dA.sum(axis=1)
            c[:, h * d + h : h * d + h + k * h] = (dO.transpose(0, 2, 1) @ H).reshape(-1, k * h)
            c[:, h * d + h + k * h :] = dO.sum(axis=1)
    return loss_out, grad_out
