"""A minibatch as a small dense block in cache: its rows gathered, register-blocked products, the
softmax residual. Shared by the softmax model (:mod:`fedopt.kernels.cpu.models`) and the MLP
(:mod:`fedopt.kernels.cpu.mlp`).

The products of a minibatch are too small for BLAS, whose fixed cost per call is about 1 us:
``(8, 64) @ (64, 32)`` takes 0.40 us as the loops below and 1.2 us through BLAS (one Zen 5 core).
"""

from __future__ import annotations

import math

import numpy as np

from fedopt.kernels.cpu._jit import REDUCTION_MATH, float64_from_bits, function, inline

#: Rows per pass of a full local gradient: bounds the buffers (a client may hold all the data).
CHUNK = 256


@inline
def visited(order, k):
    """The client a kernel's ``k``-th ``prange`` iteration handles: ``order[k]``, or ``k`` when
    ``order`` is empty (int64 either way: the parallel variant's loop index is unsigned)."""
    return order[k] if order.shape[0] > 0 else np.int64(k)


@inline
def row_of(rows, first, t):
    """Global index of a client's ``t``-th row: ``rows[t]``, or ``first + t`` when ``rows`` is empty (all rows)."""
    return rows[t] if rows.shape[0] > 0 else first + t


@function(fastmath=REDUCTION_MATH)
def times_transpose(A, B, C, zero):
    """``C = A B^T`` for ``A (m, n)``, ``B (r, n)``, ``C (m, r)``: blocks of four rows of ``A``
    against four rows of ``B``, so that every element loaded serves four sums (against two rows
    of ``B``: 0.99 against 0.59 us for ``(32, 64) @ (64, 10)``, 0.62 against 0.40 us for
    ``(8, 64) @ (64, 32)``, one Zen 5 core)."""
    m, r = A.shape[0], B.shape[0]
    blocked = m - m % 4
    for t in range(0, blocked, 4):
        u = 0
        while u + 3 < r:
            _four_by_four(A, B, C, t, u, zero)
            u += 4
        for v in range(u, r):  # the last rows of B, one at a time
            _four_rows_one_column(A, B[v], C, t, v, zero)
    for t in range(blocked, m):  # the last rows of A, one at a time
        a = A[t]
        for u in range(r):
            b = B[u]
            s = zero
            for j in range(a.shape[0]):
                s += a[j] * b[j]
            C[t, u] = s


@inline
def _four_by_four(A, B, C, t, u, zero):
    """``C[t:t+4, u:u+4]`` of ``C = A B^T``: sixteen sums in one pass over eight rows."""
    a0, a1, a2, a3 = A[t], A[t + 1], A[t + 2], A[t + 3]
    b0, b1, b2, b3 = B[u], B[u + 1], B[u + 2], B[u + 3]
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
    for j in range(a0.shape[0]):
        x0, x1, x2, x3 = a0[j], a1[j], a2[j], a3[j]
        y0, y1, y2, y3 = b0[j], b1[j], b2[j], b3[j]
        s00 += x0 * y0
        s01 += x0 * y1
        s02 += x0 * y2
        s03 += x0 * y3
        s10 += x1 * y0
        s11 += x1 * y1
        s12 += x1 * y2
        s13 += x1 * y3
        s20 += x2 * y0
        s21 += x2 * y1
        s22 += x2 * y2
        s23 += x2 * y3
        s30 += x3 * y0
        s31 += x3 * y1
        s32 += x3 * y2
        s33 += x3 * y3
    C[t, u], C[t, u + 1], C[t, u + 2], C[t, u + 3] = s00, s01, s02, s03
    C[t + 1, u], C[t + 1, u + 1], C[t + 1, u + 2], C[t + 1, u + 3] = s10, s11, s12, s13
    C[t + 2, u], C[t + 2, u + 1], C[t + 2, u + 2], C[t + 2, u + 3] = s20, s21, s22, s23
    C[t + 3, u], C[t + 3, u + 1], C[t + 3, u + 2], C[t + 3, u + 3] = s30, s31, s32, s33


@inline
def _four_rows_one_column(A, b, C, t, v, zero):
    """``C[t:t+4, v]`` of ``C = A B^T``, with ``b = B[v]``."""
    a0, a1, a2, a3 = A[t], A[t + 1], A[t + 2], A[t + 3]
    s0 = s1 = s2 = s3 = zero
    for j in range(a0.shape[0]):
        y = b[j]
        s0 += a0[j] * y
        s1 += a1[j] * y
        s2 += a2[j] * y
        s3 += a3[j] * y
    C[t, v], C[t + 1, v], C[t + 2, v], C[t + 3, v] = s0, s1, s2, s3


@function(fastmath=REDUCTION_MATH)
def add_transpose_times(S, A, G):
    """``G += S^T A`` for ``S (m, r)``, ``A (m, n)``, ``G (r, n)``: two rows of ``G`` at a time,
    each updated once per eight rows of ``A``."""
    m, r = S.shape
    for u in range(0, r - 1, 2):
        g, f = G[u], G[u + 1]
        blocked = m - m % 8
        for t in range(0, blocked, 8):
            _add_eight_rows(S, A, t, u, g, f)
        for t in range(blocked, m):
            v, w, a = S[t, u], S[t, u + 1], A[t]
            for j in range(a.shape[0]):
                g[j] += v * a[j]
                f[j] += w * a[j]
    if r % 2:  # the last row of G
        g = G[r - 1]
        for t in range(m):
            v, a = S[t, r - 1], A[t]
            for j in range(a.shape[0]):
                g[j] += v * a[j]


@inline
def _add_eight_rows(S, A, t, u, g, f):
    """``g += S[t:t+8, u] A[t:t+8]`` and ``f += S[t:t+8, u+1] A[t:t+8]`` in one pass over ``g, f``."""
    a0, a1, a2, a3, a4, a5, a6, a7 = A[t], A[t + 1], A[t + 2], A[t + 3], A[t + 4], A[t + 5], A[t + 6], A[t + 7]
    v0, v1, v2, v3 = S[t, u], S[t + 1, u], S[t + 2, u], S[t + 3, u]
    v4, v5, v6, v7 = S[t + 4, u], S[t + 5, u], S[t + 6, u], S[t + 7, u]
    w0, w1, w2, w3 = S[t, u + 1], S[t + 1, u + 1], S[t + 2, u + 1], S[t + 3, u + 1]
    w4, w5, w6, w7 = S[t + 4, u + 1], S[t + 5, u + 1], S[t + 6, u + 1], S[t + 7, u + 1]
    for j in range(g.shape[0]):
        x0, x1, x2, x3, x4, x5, x6, x7 = a0[j], a1[j], a2[j], a3[j], a4[j], a5[j], a6[j], a7[j]
        g[j] += (v0 * x0 + v1 * x1 + v2 * x2 + v3 * x3) + (v4 * x4 + v5 * x5 + v6 * x6 + v7 * x7)
        f[j] += (w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3) + (w4 * x4 + w5 * x5 + w6 * x6 + w7 * x7)


@function(fastmath=REDUCTION_MATH)
def gather(X, rows, first, start, scale, a):
    """``a[t] = scale * X[row]`` for the pass's rows ``start .. start + len(a) - 1`` of the client."""
    for t in range(a.shape[0]):
        r = row_of(rows, first, start + t)
        for c in range(a.shape[1]):
            a[t, c] = scale * X[r, c]


@function(fastmath=REDUCTION_MATH)
def softmax_residual(y, sample_weight, rows, first, start, b2, inv_count, want_loss, scores, work):
    """Summed cross-entropy of the scores ``scores + b2[:, None]`` (0 unless ``want_loss``; ``b2``
    may be empty: no intercepts) of the pass's rows ``start ..``; ``scores`` becomes
    ``dloss/dO / count``, both times the rows' ``sample_weight`` unless it is None (then the
    weighted lines are compiled out). ``work`` holds at least twice as many values as there are rows.

    ``scores`` is ``(classes, rows)``, a row per class, so that every pass below runs along the
    rows, in vectors (the rows of a ``(rows, classes)`` block are too short for vectors: ten
    classes). The loss of a row is its largest score minus its label's, plus the log of its sum
    of exps. Each pass over the classes does all it can (intercept and maximum; shift, exp and
    sum): a pass's loop over 32 rows costs about as much to start as to run.
    """
    k, m = scores.shape
    top, total = work[:m], work[m : 2 * m]
    biased = b2.shape[0] > 0
    for c in range(k):
        row = scores[c]
        for t in range(m):
            v = row[t] + b2[c] if biased else row[t]
            row[t] = v
            top[t] = v if c == 0 or v > top[t] else top[t]  # a NaN score leaves its row NaN below
    loss = 0.0
    if want_loss:  # the loss's first part: the largest score minus the label's
        for t in range(m):
            r = row_of(rows, first, start + t)
            label = scores[int(y[r]), t] - top[t]
            loss -= label if sample_weight is None else sample_weight[r] * label
    _shifted_exp(scores, top, total)
    for t in range(m):
        r = row_of(rows, first, start + t)
        weight = inv_count if sample_weight is None else sample_weight[r] * inv_count
        if want_loss:  # the second part: the log of the sum of exps
            loss += np.log(total[t]) if sample_weight is None else sample_weight[r] * np.log(total[t])
        scores[int(y[r]), t] -= total[t]  # scaled below to weight * (p_label - 1)
        total[t] = weight / total[t]
    for c in range(k):
        row = scores[c]
        for t in range(m):
            row[t] *= total[t]
    return loss


#: ``exp(x) = 2^n exp(r)`` with ``n = round(x / ln 2)``, ``r = x - n ln 2``: ln 2 in two parts (the
#: first with trailing zero bits, so ``n * LN2_HIGH`` is exact), and Taylor terms up to ``r^12``
#: (for ``|r| <= ln(2) / 2`` the next term is below 2e-16 relative).
LOG2_E = 1.4426950408889634
LN2_HIGH = 6.93147180369123816490e-01
LN2_LOW = 1.90821492927058770002e-10
LOG_MAX = 709.782712893384  # log of the largest float64
EXP_TAYLOR = tuple(1 / math.factorial(i) for i in range(12, -1, -1))
#: The exp's only fast-math flag: products and sums fuse into FMAs (one rounding instead of two,
#: and half the instructions); re-associating the two-part range reduction would lose its precision.
EXP_MATH = {"contract"}


@function(fastmath=EXP_MATH)
def exp_in_place(values):
    """``values = exp(values)`` in float64 arithmetic, to a relative error below 5e-16 (about two
    ulp); results below ``exp(-708)`` (about 3e-308) flush to 0. Written as selects without library
    calls, so the loop vectorizes: 320 exps take 0.14 us against 1.2 us for ``np.exp`` one value at
    a time, and 0.27 us with the Taylor terms' products and sums apart rather than fused (Zen 5)."""
    for i in range(values.shape[0]):
        values[i] = _exp(values[i])


@inline
def _exp(value):
    """:func:`exp_in_place` of one value (for callers compiled with no fast-math flag beyond :data:`EXP_MATH`)."""
    x = np.float64(value)
    n = math.floor(x * LOG2_E + 0.5)
    n = n if n > -1021.0 else -1021.0  # a NaN x takes -1021 here and stays NaN in r
    n = n if n < 1024.0 else 1024.0
    r = (x - n * LN2_HIGH) - n * LN2_LOW
    p = EXP_TAYLOR[0]
    for coefficient in EXP_TAYLOR[1:]:
        p = p * r + coefficient
    e = (p * float64_from_bits((np.int64(n) + 1022) << 52)) * 2.0  # 2^(n-1) * 2: n = 1024 fits
    e = 0.0 if x < -708.0 else e
    return np.inf if x > LOG_MAX else e


@function(fastmath=EXP_MATH)
def _shifted_exp(scores, top, total):
    """``scores[c] = exp(scores[c] - top)`` and ``total = scores.sum(0)`` (added in class order)."""
    for c in range(scores.shape[0]):
        row = scores[c]
        for t in range(row.shape[0]):
            row[t] = _exp(row[t] - top[t])
            total[t] = row[t] if c == 0 else total[t] + row[t]  # the exp in the scores' dtype


@function(fastmath=REDUCTION_MATH)
def times(A, B, C):
    """``C = A B`` for ``A (m, k)``, ``B (k, n)``, ``C (m, n)``: each row of ``C`` as ``k`` scaled
    rows of ``B`` added up (``k`` is small: the outputs)."""
    for t in range(A.shape[0]):
        row = C[t]
        v, b = A[t, 0], B[0]
        for j in range(row.shape[0]):
            row[j] = v * b[j]
        for c in range(1, A.shape[1]):
            v, b = A[t, c], B[c]
            for j in range(row.shape[0]):
                row[j] += v * b[j]
