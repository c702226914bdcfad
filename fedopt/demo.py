"""``fedopt demo``: what ``make demo`` runs, on data that ships with scikit-learn.

:func:`sweep_demo` (``fedopt demo``, ``make demo``) runs the built-in ``speedup_demo`` experiment,
FedNMap's linear speedup in the number of clients n and of local steps Q on the bundled digits,
into ``results/demo.db``, then reports it: tables over seeds, the slopes of log final
stationarity against log n and log Q with their confidence intervals, and PNG figures in
``results/demo_report/``. A second ``make demo`` finds every run stored and only reports; it runs
again the runs stored as failed.

:func:`main` (``fedopt demo --quick``) is the short tour:

1. FedNMap and the baselines of its paper train a softmax classifier with an elastic net on
   scikit-learn's bundled digits, split among 20 clients by sorted labels (the papers'
   heterogeneity), with the FedNMap paper's settings; a table compares their stationarity,
   objective, test accuracy, sparsity and time.
2. A known answer: FedNMap with full gradients on a federated Lasso (the diabetes data split
   among clients by sorted target) reaches scikit-learn's ``Lasso`` on the pooled data.
3. The prox kernels and the fused normal-map step are timed against a same-process memory copy
   and against the plain NumPy expression of the same operator.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np

import fedopt
from fedopt import regularizers as R
from fedopt._backend import get_backend

METHODS = ("fednmap", "zhang", "fedcanon", "fedavg")


def _federated_section(backend, rounds=100):
    dataset = fedopt.datasets.load_digits(n_clients=20, partition="sorted", seed=0)
    problem = fedopt.problems.Softmax(dataset, fit_intercept=True, backend=backend)
    reg = R.ElasticNet(l1=1e-3, l2=2e-2)  # the paper's nu1 = 1e-3, nu2 = 1e-2 (l2 = 2 nu2)
    print(f"{dataset!r}\nsoftmax regression + elastic net, {rounds} rounds, Q = 10, eta_a = 1/Q, eta_s = 1, "
          "batch 32; ||F_nat||^2 with gamma = 4 for every method\n")
    print(f"    {'method':10s} {'||F_nat||^2':>12s} {'objective':>10s} {'test acc':>9s} {'nonzeros':>9s} {'time':>7s}")
    x0 = problem.init(0)
    for name in METHODS:
        options = {"local_steps": 10, "lr_local": 0.1, "lr_server": 1.0, "batch_size": 32, "seed": 0, "x0": x0,
                   "metric_gamma": 4.0, **({"gamma": 4.0} if name == "fednmap" else {})}
        fedopt.run(name, problem, reg, rounds=1, **options)  # untimed: the method's kernels load (or compile) first
        result = fedopt.run(name, problem, reg, rounds=rounds, eval_every=rounds, **options)
        last = result.history.last()
        print(f"    {name:10s} {last['stationarity']:12.2e} {last['objective']:10.5f} {last['test_accuracy']:9.3f} "
              f"{last['nnz']:5d}/{problem.n_params:<3d} {last['seconds']:6.2f}s")


def _lasso_section(backend, alpha=0.05):
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Lasso

    A, b = load_diabetes(return_X_y=True)
    A = (A - A.mean(0)) / A.std(0)
    b = (b - b.mean()) / b.std()
    dataset = fedopt.datasets.partition(A, b, n_clients=8, scheme="sorted")
    problem = fedopt.problems.LeastSquares(dataset, weights="samples", backend=backend)
    step = 1 / problem.smoothness().max()
    result = fedopt.run("fednmap", problem, R.L1(alpha), rounds=500, local_steps=5, lr_local=step / 5, gamma=step,
                        batch_size=None, eval_every=500)
    ref = Lasso(alpha=alpha, fit_intercept=False, tol=1e-14, max_iter=100_000).fit(A, b).coef_
    print(f"\nfederated Lasso (alpha={alpha}) on the diabetes data, 8 clients split by sorted target, full gradients:")
    print(f"    FedNMap vs scikit-learn Lasso on the pooled data: max |x - x_sklearn| = "
          f"{np.abs(result.x - ref).max():.1e}, support {np.flatnonzero(result.x).tolist()} vs "
          f"{np.flatnonzero(ref).tolist()}")


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
        ("l1 prox", 2, lambda: R.L1(0.1).prox(z, 0.5, out=out, backend=bk),
         lambda: np.subtract(z, np.clip(z, -0.05, 0.05), out=out)),
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


def _import_report_modules():
    """Import what the report needs (0.45 s), so that the report does not wait for it."""
    import contextlib

    with contextlib.suppress(ImportError):  # the report says what is missing
        import matplotlib.backends.backend_agg
        import matplotlib.figure
        import matplotlib.ticker  # noqa: F401
    import scipy.special  # noqa: F401


def sweep_demo(store="results/demo.db", workers=None, backend="auto") -> int:
    """Run the ``speedup_demo`` sweep into ``store`` and report it; returns a process exit code."""
    from pathlib import Path

    from fedopt import sweep

    exp = sweep.load_experiment("speedup_demo")
    if backend != "auto":
        exp = exp.override({"backend": backend}, origin="--backend")
    store = Path(store)
    out = store.with_name(store.stem + "_report")
    specs = exp.expand()
    print(f"fedopt demo: {exp.title}\n{len({s.key for s in specs})} distinct runs (FedNMap, softmax + elastic net, "
          f"digits split by sorted labels, {len(exp.seeds)} seeds), stored in {store}\n", flush=True)
    sweep.validate(specs)  # an unusable backend or value stops here, before the store is touched
    start = time.perf_counter()
    threading.Thread(target=_import_report_modules, daemon=True).start()  # while the workers run the sweep
    with sweep.Store(store) as db:
        # a stored run is known without its backend: failed runs (a backend that went missing) are run again
        summary = sweep.run_sweep(exp, db, executor="local", workers=workers, retry_failed=True)
        print(summary, "\n", flush=True)
        if summary.interrupted:
            return 143 if summary.signal == "SIGTERM" else 130
        result = sweep.report(db, out=out, experiment=exp.name, sweep=summary.sweep)
    if not summary.ok:
        bad = ", ".join(f"{summary.counts[s]} {s}" for s in ("failed", "missing") if summary.counts.get(s))
        print(f"\ndemo incomplete: {bad} of {summary.total} runs; `fedopt store show {store} {summary.sweep[:12]}` "
              "lists the errors; `fedopt demo` runs them again", file=sys.stderr)
        return 1
    print(f"\ndemo finished in {time.perf_counter() - start:.0f}s. Tables: {out / exp.name / 'summary.csv'}; "
          f"figures: {out / exp.name}/*.png" + ("" if result["figures"] else " (install matplotlib for them)"))
    print("The paper's slopes are -1.436 (log n) and -1.181 (log Q), with an MLP on MNIST; the built-in "
          "experiments fednmap_fig3 and fednmap_fig4 are the full-size versions (`fedopt list`).")
    return 0


def main(backend: str = "auto") -> None:
    name = get_backend(backend).name
    print(f"fedopt demo on backend {name!r}\n")
    _federated_section(name)
    _lasso_section(name)
    _kernels_section(backend)
