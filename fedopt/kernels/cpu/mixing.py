"""Gossip over neighbour lists: ``out = W @ V`` for a sparse mixing matrix ``W`` in CSR form."""

from __future__ import annotations

from numba import prange

from fedopt.kernels.cpu._jit import kernel


@kernel
def _mix_sparse_kernel(indptr, indices, weights, V, out):
    # out[i] = sum_k weights[k] * V[indices[k]] over k in indptr[i]:indptr[i+1], one node per task
    p = V.shape[1]
    for i in prange(len(indptr) - 1):
        row = out[i]
        for j in range(p):
            row[j] = 0
        for k in range(indptr[i], indptr[i + 1]):
            w = weights[k]
            source = V[indices[k]]
            for j in range(p):
                row[j] += w * source[j]


def mix_sparse(indptr, indices, weights, V, out):
    """``out = W @ V`` with ``W`` given by CSR ``(indptr, indices, weights)``; ``out`` must not be ``V``."""
    weights = weights.astype(V.dtype, copy=False)
    _mix_sparse_kernel(len(indices) * V.shape[1], indptr, indices, weights, V, out)
    return out
