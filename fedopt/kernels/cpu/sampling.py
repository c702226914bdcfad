"""Minibatch row indices from uniform draws, written over the draws' own memory."""

from __future__ import annotations

import numpy as np

from fedopt.kernels.cpu._jit import function


@function
def _rows_in_place(u, rows, sizes, starts):
    """``rows[s, i, j] = starts[i] + int(u[s, i, j] * sizes[i])``; ``rows`` may share ``u``'s memory
    (each element is read before the same element is written)."""
    for s in range(u.shape[0]):
        for i in range(u.shape[1]):
            size, start = sizes[i], starts[i]
            for j in range(u.shape[2]):
                rows[s, i, j] = start + np.int64(u[s, i, j] * size)


def minibatch_rows(u, sizes, starts):
    """:func:`fedopt.kernels.reference.minibatch_rows` in one pass, returned as an int64 view of
    ``u`` (float64, C-contiguous; its values are overwritten)."""
    n, b = u.shape[-2:]
    rows = u.view(np.int64)
    _rows_in_place(u.reshape(-1, n, b), rows.reshape(-1, n, b), sizes, starts)
    return rows
