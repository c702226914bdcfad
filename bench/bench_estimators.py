"""Estimator fits: penalties other than l1 on the fused local steps, and the duality gap of float32 features.

The estimators leave the intercepts unpenalized, so logistic regression regularizes with
``Masked(base, mask)`` (the least-squares ones fit the intercept in closed form: the diabetes
cases time the unmasked kinds). With an l2 part (``penalty="l2"`` or ``"elasticnet"``) the prox
shrinks the masked coordinates only (kernel ``SOFT_MASKED``); MCP and SCAD (``penalty="mcp"`` or
``"scad"``) weight ``lam`` by the mask (``MCP_WEIGHTED``, ``SCAD_WEIGHTED``). Their local steps
then run in the fused kernels like the l1 penalty's. Measured in one process, in turns: each
fit's time per round (its time over ``n_iter_``, the stopping checks every ``eval_every`` rounds
included), and ``x l1``, its ratio to the same data fitted with the l1 penalty in the untimed
setup. Before those kinds, the fits stepped array-wise (BENCHMARKS.md).

``test_gap_of_float32_features`` times the duality gap the logistic fits check every
``eval_every`` rounds, on MNIST-shaped float32 features (60 000 x 784, 10 classes), in turns with
the same gap on a float64 copy (``x f64``): the float32 products convert a chunk of rows at a time
to float64, where NumPy's mixed-dtype product copied all of ``X`` per product (1.88-1.99x the float64
gap's time before).

``test_regressor_fit_to_tol`` times whole default fits of the least-squares estimators to their
``tol`` (rounds in ``n_iter_``), in turns with scikit-learn's coordinate descent on the same data
(``x sklearn``, a peer's time, not an equal accuracy: ours stops at a gap of ``1e-7``, theirs at
``1e-4`` of its yardstick). They fit the intercept in closed form; before, it was
a model coordinate whose curvature set the step size (2 560 rounds on the diabetes data).

``test_sparse_against_dense_fit`` fits one-hot features shaped like a9a (5 000 x 123, 11 %
nonzero) as CSR and as a dense array, in turns: both are centered (CSR implicitly, by the
problem's ``center``), so both take the same rounds, each in the fused kernel of its storage.

Nothing is asserted on timings. Run from the repository root::

    .venv/bin/python -m pytest bench/bench_estimators.py --benchmark-enable --benchmark-only -q -s
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_diabetes, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ElasticNet, Lasso

from fedopt._backend import cpu_model, host_cpu_name
from fedopt.estimators import (
    FederatedElasticNet,
    FederatedLasso,
    FederatedLogisticRegression,
    FederatedSparseRegressor,
)
from fedopt.estimators._gap import logistic_gap

ROUNDS = 300


def _digits():
    X, y = load_digits(return_X_y=True)
    return X / 16, y, y % 7  # 7 clients of mixed labels


def _diabetes():
    """The least-squares estimators fit the intercept in closed form: these cases time the unmasked kinds."""
    X, y = load_diabetes(return_X_y=True)
    return X, y, (y > y.mean()).astype(int) + 2 * (X[:, 0] > 0)  # 4 clients


CASES = {  # name: (data, the estimator with an l2 part, the same with l1 only)
    "digits-logistic-l2": (_digits, lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="l2", **kw),
                           lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="l1", **kw)),
    "digits-logistic-elasticnet": (
        _digits, lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="elasticnet", **kw),
        lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="l1", **kw)),
    "digits-logistic-mcp": (_digits, lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="mcp", **kw),
                            lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="l1", **kw)),
    "digits-logistic-scad": (_digits,
                             lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="scad", **kw),
                             lambda **kw: FederatedLogisticRegression(alpha=1 / 1797, penalty="l1", **kw)),
    "diabetes-elasticnet": (_diabetes, lambda **kw: FederatedElasticNet(alpha=0.01, l1_ratio=0.5, **kw),
                            lambda **kw: FederatedLasso(alpha=0.01, **kw)),
    "diabetes-mcp": (_diabetes, lambda **kw: FederatedSparseRegressor(alpha=0.5, penalty="mcp", **kw),
                     lambda **kw: FederatedLasso(alpha=0.5, **kw)),
    "diabetes-scad": (_diabetes, lambda **kw: FederatedSparseRegressor(alpha=0.5, penalty="scad", **kw),
                      lambda **kw: FederatedLasso(alpha=0.5, **kw)),
}


def _per_round(make, X, y, clients) -> tuple[float, int]:
    """``(seconds per round, rounds)`` of one fit of ``ROUNDS`` rounds at most (it stops earlier at a
    zero gap, and then carries its set-up over fewer rounds)."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = make(max_rounds=ROUNDS, tol=0.0).fit(X, y, clients=clients)
    return (time.perf_counter() - start) / fitted.n_iter_, fitted.n_iter_


@pytest.mark.parametrize("name", list(CASES))
def test_fit_per_round_against_l1(benchmark, name):
    load, with_l2, l1_only = CASES[name]
    X, y, clients = load()
    for make in (with_l2, l1_only):  # compile
        _per_round(make, X, y, clients)
    l1_s, l2_s = [], []

    def l1_fit():  # the untimed setup: the l1 fit, timed here
        l1_s.append(_per_round(l1_only, X, y, clients))

    benchmark.pedantic(lambda: l2_s.append(_per_round(with_l2, X, y, clients)), setup=l1_fit, rounds=5,
                       iterations=1)
    (seconds, rounds), (l1_seconds, l1_rounds) = min(l2_s), min(l1_s)
    ratio = seconds / l1_seconds
    benchmark.extra_info.update(per_round_s=seconds, l1_per_round_s=l1_seconds, x_l1=ratio, rounds=rounds,
                                l1_rounds=l1_rounds, cpu_model=cpu_model(), host_cpu=host_cpu_name())
    print(f"\n{name}: {seconds * 1e3:.3f} ms a round ({rounds} rounds), l1 {l1_seconds * 1e3:.3f} ms ({l1_rounds}): "
          f"x l1 {ratio:.2f} ({cpu_model()}, {host_cpu_name()})")
    assert np.isfinite(ratio)


def test_gap_of_float32_features(benchmark):
    rng = np.random.default_rng(0)
    n, d, k = 60_000, 784, 10
    labels = rng.integers(0, k, n)
    X = rng.uniform(0, 0.8, (n, d)).astype(np.float32)
    X[np.arange(n), labels] = 1.0
    X64 = X.astype(np.float64)
    coef, shares = 1e-3 * rng.standard_normal((k, d)), np.full(n, 1 / n)

    def gap(features):
        start = time.perf_counter()
        value = logistic_gap(features, labels, coef, np.zeros(k), 1e-4, 0.0, True, shares)
        return value, time.perf_counter() - start

    float32, float64 = [], []
    benchmark.pedantic(lambda: float32.append(gap(X)), setup=lambda: float64.append(gap(X64)), rounds=5, iterations=1,
                       warmup_rounds=1)
    best32, best64 = min(s for _, s in float32), min(s for _, s in float64)
    benchmark.extra_info.update(float32_s=best32, float64_s=best64, x_float64=best32 / best64, cpu_model=cpu_model(),
                                host_cpu=host_cpu_name())
    print(f"\nlogistic gap, 60 000 x 784 float32: {best32 * 1e3:.0f} ms, float64 copy {best64 * 1e3:.0f} ms: "
          f"x f64 {best32 / best64:.2f} ({cpu_model()}, {host_cpu_name()})")
    assert float32[-1][0] == pytest.approx(float64[-1][0], rel=1e-12)


FITS = {  # name: (data, our estimator, scikit-learn's)
    "diabetes-lasso": (lambda: load_diabetes(return_X_y=True), lambda: FederatedLasso(0.1, n_clients=4, random_state=0),
                       lambda: Lasso(0.1)),
    "diabetes-50-rows-lasso": (lambda: tuple(a[:50] for a in load_diabetes(return_X_y=True)),
                               lambda: FederatedLasso(0.1, n_clients=4, random_state=0), lambda: Lasso(0.1)),
    "diabetes-elasticnet": (lambda: load_diabetes(return_X_y=True),
                            lambda: FederatedElasticNet(0.01, n_clients=4, random_state=0), lambda: ElasticNet(0.01)),
}


@pytest.mark.parametrize("name", list(FITS))
def test_regressor_fit_to_tol(benchmark, name):
    load, ours, theirs = FITS[name]
    X, y = load()

    def fit(make):
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            fitted = make().fit(X, y)
        return fitted, not caught, time.perf_counter() - start

    fit(ours)  # compile
    our_s, their_s = [], []
    benchmark.pedantic(lambda: our_s.append(fit(ours)), setup=lambda: their_s.append(fit(theirs)), rounds=5,
                       iterations=1)
    fitted, converged, _ = our_s[-1]
    best, peer = min(s for *_, s in our_s), min(s for *_, s in their_s)
    benchmark.extra_info.update(seconds=best, sklearn_s=peer, x_sklearn=best / peer, rounds=fitted.n_iter_,
                                converged=converged, cpu_model=cpu_model(), host_cpu=host_cpu_name())
    print(f"\n{name}: {fitted.n_iter_} rounds{'' if converged else ' (NOT converged)'}, {best * 1e3:.1f} ms, "
          f"scikit-learn {peer * 1e3:.2f} ms: x sklearn {best / peer:.1f} ({cpu_model()}, {host_cpu_name()})")
    assert fitted.n_iter_ > 0


def _one_hot_a9a_shaped(n=5_000, seed=0):
    """Binary one-hot features of 14 categorical columns (123 in all, as a9a's) and labels of a
    logistic model with an intercept of -1; also a real-valued target of the same margins."""
    rng = np.random.default_rng(seed)
    levels = [8, 16, 7, 14, 6, 5, 2, 10, 12, 9, 11, 7, 9, 7]
    starts = np.cumsum([0, *levels[:-1]])
    columns = np.stack([start + rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 0.7)))
                        for start, k in zip(starts, levels, strict=True)], axis=1)
    X = sp.csr_matrix((np.ones(columns.size), (np.repeat(np.arange(n), len(levels)), columns.ravel())),
                      shape=(n, sum(levels)))
    margins = X @ rng.standard_normal(X.shape[1]) - 1.0
    return X, (rng.random(n) < 1 / (1 + np.exp(-margins))).astype(int), margins


@pytest.mark.parametrize("estimator", ["lasso", "logistic"])
def test_sparse_against_dense_fit(benchmark, estimator):
    X, labels, margins = _one_hot_a9a_shaped()
    make, y = ((lambda: FederatedLasso(1e-3, random_state=0), margins) if estimator == "lasso" else
               (lambda: FederatedLogisticRegression(1e-3, random_state=0), labels))
    dense = X.toarray()

    def fit(features):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fitted = make().fit(features, y)
        return fitted.n_iter_, time.perf_counter() - start

    fit(X), fit(dense)  # compile
    sparse_fits, dense_fits = [], []
    benchmark.pedantic(lambda: sparse_fits.append(fit(X)), setup=lambda: dense_fits.append(fit(dense)), rounds=2,
                       iterations=1)
    (sparse_rounds, _), (dense_rounds, _) = sparse_fits[-1], dense_fits[-1]
    sparse_s, dense_s = min(s for _, s in sparse_fits), min(s for _, s in dense_fits)
    benchmark.extra_info.update(sparse_rounds=sparse_rounds, dense_rounds=dense_rounds, sparse_s=sparse_s,
                                dense_s=dense_s, cpu_model=cpu_model(), host_cpu=host_cpu_name())
    print(f"\n{estimator} on a9a-shaped one-hot features: CSR {sparse_rounds} rounds {sparse_s:.2f} s, dense "
          f"{dense_rounds} rounds {dense_s:.2f} s ({cpu_model()}, {host_cpu_name()})")
    assert sparse_rounds > 0 and dense_rounds > 0
