"""Merit functions of a monotone VI (specs/lippax.md, Sec. 1.4): what the history of a VI run records.

All are computed on the host in float64 with the exact (noise-free, averaged) operator. ``c`` is
the run's start point and ``D`` the problem's :attr:`~fedopt.problems.vi.VIProblem.radius`.

* ``gap``: the restricted gap ``Gap_D(x) = sup_{||z - c|| <= D} <V(z), x - z>`` (1.4 a), exact for
  an affine ``V = M z + h`` without a regularizer: a concave trust-region problem solved through
  the eigendecomposition of ``(M + M^T) / 2``; NaN for other problems.
* ``gap_bound``: ``||V(x) + s|| (D + ||x - c||)`` with ``s`` the least-norm subgradient of phi at
  x (1.4 b): an upper bound of the (composite) restricted gap for any monotone V, because
  ``<V(z), x - z> <= <V(x), x - z>`` and ``phi(x) - phi(z) <= <s, x - z>``. ``s`` comes from the
  Yosida approximation ``(x - prox_{e phi}(x - e V(x))) / e - V(x)`` with a tiny ``e``, which
  tends to the least-norm element of ``V(x) + dphi(x)`` and equals it for piecewise-linear proxes.
* ``duality_gap``: ``max_{y in By} f(x, y) - min_{u in Bx} f(u, y)`` over the product of the
  balls of radius D around the blocks of c (1.4 c), for saddle problems without a regularizer:
  closed-form trust-region solves for quadratic f, the point of the sphere against the gradient
  for f linear in each block (``problem.block_curvature`` 0); otherwise accelerated projected
  gradient from x with the step ``1 / problem.block_curvature`` (an estimate from below when it
  stops at its step limit of 500). It bounds the weak gap over ``Bx x By``, which contains the joint ball.
* ``distance``: ``||x - z*||^2`` (1.4 e) with the problem's solution for the run's regularizer.
"""

from __future__ import annotations

import math

import numpy as np


def max_concave_quadratic(g, eigenvalues, eigenvectors, radius) -> float:
    """``max_{||w|| <= radius} g^T w - w^T S w`` for a PSD ``S = Q diag(lam) Q^T`` (a trust-region problem).

    ``w(nu) = Q (Q^T g / (2 (lam + nu)))``: ``nu = 0`` when that point lies in the ball (and
    exists), else the ``nu > 0`` with ``||w(nu)|| = radius``, found by bisection on a log scale.
    """
    gq = eigenvectors.T @ g
    lam = np.where(eigenvalues > 1e-12 * max(1.0, float(np.abs(eigenvalues).max(initial=0))), eigenvalues, 0.0)
    norm_g = float(np.linalg.norm(gq))
    if norm_g == 0:
        return 0.0

    def point(nu):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gq == 0, 0.0, gq / (2 * (lam + nu)))

    def value(w):
        return float(gq @ w - lam @ (w * w))

    free = point(0.0)
    if np.all(np.isfinite(free)) and np.linalg.norm(free) <= radius:
        return value(free)
    high = norm_g / (2 * radius)  # ||w(high)|| <= ||gq|| / (2 high) = radius
    low = high * 1e-18
    for _ in range(200):
        mid = math.sqrt(low * high)
        if np.linalg.norm(point(mid)) > radius:
            low = mid
        else:
            high = mid
        if high <= low * (1 + 1e-15):
            break
    return value(point(high))


def _spectrum(problem, key, matrix):
    """The eigendecomposition of the symmetric ``matrix``, cached on the problem."""
    cache = problem.__dict__.setdefault("_spectra", {})
    if key not in cache:
        cache[key] = np.linalg.eigh((matrix + matrix.T) / 2)
    return cache[key]


def restricted_gap(problem, x, center, radius) -> float:
    """``Gap_D(x)`` of an affine operator (exact), or NaN when V is not affine."""
    if not problem.is_affine:
        return math.nan
    M, h = problem.affine_parts()
    lam, Q = _spectrum(problem, "symmetric_part", M)
    anchor = M @ center + h
    g = M.T @ (x - center) - anchor
    return float(anchor @ (x - center)) + max_concave_quadratic(g, lam, Q, radius)


def least_norm_residual(problem, regularizer, x) -> np.ndarray:
    """The least-norm element of ``V(x) + dphi(x)`` (``V(x)`` without a regularizer), float64."""
    v = problem.host_operator(x)
    if regularizer is None or regularizer.name == "zero":
        return v
    step = 1e-6 / max(1.0, float(np.linalg.norm(v)))
    return (x - regularizer.prox(x - step * v, step, backend="numpy")) / step


def gap_bound(problem, regularizer, x, center, radius) -> float:
    """``||V(x) + s|| (D + ||x - c||)``: an upper bound of the (composite) restricted gap."""
    return float(np.linalg.norm(least_norm_residual(problem, regularizer, x)) * (radius + np.linalg.norm(x - center)))


def duality_gap(problem, x, center, radius, steps: int = 500) -> float:
    """The restricted duality gap of a saddle problem over the product of two balls of ``radius``; NaN otherwise."""
    n = problem.n_x
    if n is None:
        return math.nan
    xs, ys, cx, cy = x[:n], x[n:], center[:n], center[n:]
    if problem.is_affine:
        a = problem.host
        lam_p, vec_p = _spectrum(problem, "P", a["P"])
        lam_q, vec_q = _spectrum(problem, "Q", a["Q"])
        best_y = problem.saddle_value(xs, cy) + max_concave_quadratic(a["A"].T @ xs - a["Q"] @ cy - a["c"],
                                                                      lam_q / 2, vec_q, radius)
        best_x = problem.saddle_value(cx, ys) - max_concave_quadratic(-(a["P"] @ cx + a["A"] @ ys + a["b"]),
                                                                      lam_p / 2, vec_p, radius)
        return best_y - best_x

    def project(w, c):
        gap = np.linalg.norm(w - c)
        return w if gap <= radius else c + (w - c) * (radius / gap)

    def against(g, c):  # the minimiser of g^T w over the ball around c
        norm = np.linalg.norm(g)
        return c if norm == 0 else c - g * (radius / norm)

    if problem.block_curvature == 0:  # f is linear in each block
        u = against(problem.host_operator(np.concatenate([cx, ys]))[:n], cx)
        w = against(problem.host_operator(np.concatenate([xs, cy]))[n:], cy)
        return problem.saddle_value(xs, w) - problem.saddle_value(u, ys)
    step = 1 / problem.block_curvature

    # min over u of f(u, ys) and max over w of f(xs, w): accelerated projected gradient (FISTA) from (xs, ys)
    u = u_prev = project(xs, cx)
    w = w_prev = project(ys, cy)
    for k in range(1, steps + 1):
        a, b = u + (k - 1) / (k + 2) * (u - u_prev), w + (k - 1) / (k + 2) * (w - w_prev)
        u_prev, w_prev = u, w
        u = project(a - step * problem.host_operator(np.concatenate([a, ys]))[:n], cx)
        w = project(b - step * problem.host_operator(np.concatenate([xs, b]))[n:], cy)
        if max(np.linalg.norm(u - u_prev), np.linalg.norm(w - w_prev)) <= 1e-13 * (1 + np.linalg.norm(x)):
            break
    return problem.saddle_value(xs, w) - problem.saddle_value(u, ys)


def evaluate(problem, regularizer, x, last, center, gamma: float) -> dict:
    """The VI columns of a history row at the reported point ``x`` and the last averaged iterate ``last``.

    Returns ``stationarity`` (``||F_nat(x)||^2`` of the operator with prox parameter ``gamma``),
    ``objective`` (``gap`` where it is exact, else ``gap_bound``: a finite merit value for the
    divergence checks), ``gap``, ``gap_bound``, ``duality_gap``, ``distance`` and
    ``distance_last`` (``||last - z*||^2``), and the columns a model always has (``normal_map``
    and ``test_accuracy`` NaN, ``nnz``, ``hoyer``).
    """
    from fedopt.metrics import hoyer

    host = lambda a: np.asarray(problem.backend.to_numpy(a), dtype=np.float64)  # noqa: E731
    x, last, center = host(x), host(last), host(center)
    zero = regularizer is None or regularizer.name == "zero"
    radius = problem.radius
    solution = problem.solution(regularizer)
    v = problem.host_operator(x)
    residual = (x - (x - gamma * v if zero else regularizer.prox(x - gamma * v, gamma, backend="numpy"))) / gamma
    gap = restricted_gap(problem, x, center, radius) if zero else math.nan
    bound = gap_bound(problem, regularizer, x, center, radius)
    return {
        "stationarity": float(residual @ residual),
        "normal_map": math.nan,
        "objective": gap if math.isfinite(gap) else bound,
        "test_accuracy": math.nan,
        "nnz": int(np.count_nonzero(x)),
        "hoyer": hoyer(x),
        "gap": gap,
        "gap_bound": bound,
        "duality_gap": duality_gap(problem, x, center, radius) if zero else math.nan,
        "distance": float(np.sum((x - solution) ** 2)),
        "distance_last": float(np.sum((last - solution) ** 2)),
    }
