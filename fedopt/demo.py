"""``fedopt demo``: what works today, on data that ships with scikit-learn.

1. Proximal gradient with fedopt's prox kernels solves sparse and constrained regressions on
   scikit-learn's bundled diabetes data, checked against scikit-learn's ``Lasso`` and SciPy's
   ``nnls``; MCP shows a weakly convex penalty reaching a stationary point.
2. The prox kernels and the fused normal-map step are timed against a same-process memory copy
   and against the plain NumPy expression of the same operator.
"""

from __future__ import annotations

import time

import numpy as np

from fedopt import regularizers as R
from fedopt._backend import get_backend


def proximal_gradient(A, b, reg, iterations=3000, backend="numba"):
    """FISTA on ``(1 / (2 m)) ||A x - b||^2 + phi(x)`` (restarted when the objective rises)."""
    m = len(b)
    step = m / np.linalg.norm(A, 2) ** 2
    if reg.weak_convexity:
        step = min(step, 0.9 / reg.weak_convexity)
    x = y = np.zeros(A.shape[1])
    t = 1.0
    for _ in range(iterations):
        x_new = reg.prox(y - step * A.T @ (A @ y - b) / m, step, backend=backend)
        t_new = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y = x_new + (t - 1) / t_new * (x_new - x)
        if objective(A, b, reg, x_new) > objective(A, b, reg, x):  # adaptive restart
            y, t_new = x_new, 1.0
        x, t = x_new, t_new
    return x


def objective(A, b, reg, x):
    return 0.5 * np.mean((A @ x - b) ** 2) + reg.value(x)


def stationarity(A, b, reg, x, gamma=1.0):
    """``||F_nat(x)||^2 = ||(x - prox_{gamma phi}(x - gamma grad f(x))) / gamma||^2``."""
    grad = A.T @ (A @ x - b) / len(b)
    return float(np.sum(((x - reg.prox(x - gamma * grad, gamma, backend="numpy")) / gamma) ** 2))


def _solvers_section(backend):
    from scipy.optimize import nnls
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Lasso

    A, b = load_diabetes(return_X_y=True)
    A = (A - A.mean(0)) / A.std(0)
    b = (b - b.mean()) / b.std()
    print(f"diabetes data: {A.shape[0]} samples, {A.shape[1]} features (standardised)\n")

    alpha = 0.05
    x = proximal_gradient(A, b, R.L1(alpha), backend=backend)
    ref = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(A, b).coef_
    f, f_ref = objective(A, b, R.L1(alpha), x), objective(A, b, R.L1(alpha), ref)
    print(f"Lasso (alpha={alpha})      fedopt L1 prox: objective {f:.10f}   scikit-learn Lasso: {f_ref:.10f}")
    print(f"    relative gap {abs(f - f_ref) / f_ref:.1e}, support {np.flatnonzero(x).tolist()} vs {np.flatnonzero(ref).tolist()}")

    x = proximal_gradient(A, b, R.NonNegative(), backend=backend)
    ref = nnls(A, b)[0]
    print(f"nonnegative least squares  max |x - scipy nnls| = {np.abs(x - ref).max():.1e}")

    reg = R.MCP(lam=0.1, gamma=3.0)
    x = proximal_gradient(A, b, reg, backend=backend)
    print(
        f"MCP (lam=0.1, gamma=3)     {np.count_nonzero(x)} nonzeros, objective {objective(A, b, reg, x):.6f}, "
        f"||F_nat||^2 = {stationarity(A, b, reg, x):.1e}"
    )


def _best_time(func, repeat=7):
    func()
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return best


def _kernels_section(backend, p=2_000_000):
    bk = get_backend(backend)
    if bk.name == "gpu":
        print(f"\nkernel timings are reported by `make bench` on the gpu backend; skipped here (p={p:.0e})")
        return
    rng = np.random.default_rng(0)
    z = rng.standard_normal(p)
    out, scratch = np.empty_like(z), np.empty_like(z)
    copy = _best_time(lambda: np.copyto(out, z))
    copy_rate = 2 * z.nbytes / copy
    g, z_ref, x_ref = (rng.standard_normal(p) for _ in range(3))

    def numpy_normal_map():  # the same step written with NumPy's in-place operations
        np.subtract(z_ref, x_ref, out=scratch)
        np.multiply(scratch, 0.5, out=scratch)
        np.add(scratch, g, out=scratch)
        np.multiply(scratch, 0.1, out=scratch)
        np.subtract(z, scratch, out=scratch)
        np.subtract(scratch, np.clip(scratch, -0.05, 0.05), out=out)

    cases = [
        ("l1 prox", 2, lambda: R.L1(0.1).prox(z, 0.5, out=out, backend=bk), lambda: np.subtract(z, np.clip(z, -0.05, 0.05), out=out)),
        ("mcp prox", 2, lambda: R.MCP(0.1, 3.0).prox(z, 0.5, out=out, backend=bk), None),
        ("simplex projection", 3, lambda: R.Simplex(1.0).prox(z, 1.0, out=out, backend=bk), None),
        (
            "fused normal-map step",
            6,
            lambda: R.L1(0.1).normal_map_step(z, g, z_ref, x_ref, 0.1, 0.5, z_out=scratch, x_out=out, backend=bk),
            numpy_normal_map,
        ),
    ]
    print(f"\nkernels on backend {bk.name!r}, p = {p:.0e} float64; memory copy {copy_rate / 1e9:.1f} GB/s")
    print(f"    {'operator':24s} {'time':>9s} {'GB/s':>7s} {'of copy':>8s} {'vs NumPy':>9s}")
    for name, passes, run, numpy_run in cases:
        seconds = _best_time(run)
        rate = passes * z.nbytes / seconds
        speedup = f"{_best_time(numpy_run) / seconds:8.1f}x" if numpy_run else f"{'':9s}"
        print(f"    {name:24s} {seconds * 1e3:7.2f}ms {rate / 1e9:7.1f} {rate / copy_rate:7.0%} {speedup}")


def main(backend: str = "auto") -> None:
    name = get_backend(backend).name
    print(f"fedopt demo on backend {name!r}\n")
    _solvers_section("numpy" if name == "numpy" else "numba")
    _kernels_section(backend)
